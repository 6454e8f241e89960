//! The smaller pieces: serde shapes, relations, limits, history.
use super::*;
use crate::engine::{
    EngineError, GuardDecision, GuardPolicy, Guarded, Relation, RemovalOp, model::ScanSnapshot,
};

#[test]
fn inputs_and_verdicts_are_snake_case_tagged_json_lines() {
    let i = unlink_exact(5, &b(), P, fid(1), live(100, 11, false));
    let line = serde_json::to_string(&i).expect("serializes");
    assert!(line.starts_with(r#"{"kind":"unlink","ts_ns":5,"#), "{line}");
    assert!(line.contains(r#""fidelity":"exact""#), "{line}");
    assert_eq!(serde_json::from_str::<Input>(&line).expect("parses"), i);

    let s = Input::Scan(ScanSnapshot {
        ts_ns: 9,
        sockets: vec![scanned(1, fid(1), P, &[a()], true)],
        complete: true,
        unreadable: None,
    });
    let line = serde_json::to_string(&s).expect("serializes");
    assert!(line.starts_with(r#"{"kind":"scan","ts_ns":9,"#), "{line}");
    assert_eq!(serde_json::from_str::<Input>(&line).expect("parses"), s);

    // Optional fields may be left out of a hand-written log.
    let terse = r#"{"kind":"unlink","ts_ns":1,"proc":{"tgid":1,"pid":1,"comm":"rm","cgroup_id":0},"path":"/x"}"#;
    assert_eq!(
        serde_json::from_str::<Input>(terse).expect("parses"),
        Input::Unlink(inputs::Unlink {
            ts_ns: 1,
            proc: Proc {
                tgid: 1,
                pid: 1,
                comm: "rm".into(),
                cgroup_id: 0,
                workload: None,
                exe: None,
                runtime: None,
            },
            path: "/x".into(),
            file: None,
            fidelity: Fidelity::Exact,
            live: None,
        })
    );

    let mut e = engine();
    e.apply(&bind(1, &a(), fid(1), 11, P));
    e.apply(&listen(2, &a(), fid(1), 11));
    let out = e.apply(&i);
    let line = serde_json::to_string(&out[0]).expect("serializes");
    assert!(
        line.starts_with(r#"{"verdict":"foreign_unlink","#),
        "{line}"
    );
    assert!(
        line.contains(r#""relation":"same_workload_other_pod""#),
        "{line}"
    );
    assert!(line.contains(r#""decided_by":"kernel""#), "{line}");
    assert_eq!(out[0].name(), "foreign_unlink");
    assert_eq!(
        serde_json::from_str::<Verdict>(&line).expect("parses"),
        out[0]
    );
    let line = serde_json::to_string(&out[1]).expect("serializes");
    assert!(line.starts_with(r#"{"verdict":"orphan_opened","#), "{line}");
    assert!(line.contains(r#""cause":"unlinked""#), "{line}");
}

#[test]
fn relations_go_from_closest_to_farthest() {
    let sidecar = Proc {
        tgid: 150,
        cgroup_id: 1500,
        ..a()
    };
    let same_cgroup = Proc { tgid: 160, ..a() };
    let other_ns = Proc {
        workload: b().workload.map(|w| Workload {
            namespace: Some("other".into()),
            ..w
        }),
        ..b()
    };
    assert_eq!(Relation::between(&a(), &a()), Relation::SameProcess);
    assert_eq!(Relation::between(&same_cgroup, &a()), Relation::SameCgroup);
    assert_eq!(Relation::between(&sidecar, &a()), Relation::SamePod);
    assert_eq!(
        Relation::between(&b(), &a()),
        Relation::SameWorkloadOtherPod
    );
    assert_eq!(Relation::between(&host(), &a()), Relation::HostProcess);
    assert_eq!(Relation::between(&a(), &host()), Relation::HostProcess);
    assert_eq!(Relation::between(&c(), &a()), Relation::Other);
    assert_eq!(Relation::between(&other_ns, &a()), Relation::Other);
    assert_eq!(
        Relation::between(&a(), &Proc::unknown(9)),
        Relation::Unknown
    );
}

#[test]
fn zero_limits_are_refused() {
    let l = Limits::default();
    assert_eq!(
        Engine::new(Limits {
            max_sockets: 0,
            ..l
        })
        .err(),
        Some(EngineError::ZeroLimit("max_sockets"))
    );
    assert_eq!(
        Engine::new(Limits { max_procs: 0, ..l }).err(),
        Some(EngineError::ZeroLimit("max_procs"))
    );
    assert!(
        Engine::new(Limits {
            max_history_per_socket: 0,
            ..l
        })
        .is_ok()
    );
}

#[test]
fn history_keeps_the_latest_lines_and_counts_the_rest() {
    let mut e = Engine::new(Limits {
        max_history_per_socket: 2,
        ..Limits::default()
    })
    .expect("valid limits");
    e.apply(&bind(1, &a(), fid(1), 11, P));
    e.apply(&listen(2, &a(), fid(1), 11));
    // B moves A's socket file: a history line for B.
    e.apply(&Input::Rename(inputs::Rename {
        ts_ns: 3,
        proc: b(),
        moved: Some(fid(1)),
        from: None,
        to: "/run/other.sock".into(),
        exchange: false,
        replaced: None,
        fidelity: Fidelity::Exact,
        live: None,
    }));
    let events: Vec<_> = e
        .socket(fid(1))
        .expect("tracked")
        .history
        .iter()
        .map(|h| (h.ts_ns, h.tgid, h.event))
        .collect();
    use crate::engine::HistoryEvent::*;
    assert_eq!(events, vec![(2, 100, Listen), (3, 200, Moved)]);
    assert_eq!(e.stats().evictions.history, 1);
}

#[test]
fn sweeps_in_a_row_keep_one_history_line_and_the_bind() {
    let mut e = engine();
    e.apply(&bind(1, &a(), fid(1), 11, P));
    e.apply(&listen(2, &a(), fid(1), 11));
    for ts in 10..100 {
        e.apply(&scan(ts, vec![scanned(11, fid(1), P, &[a()], true)]));
    }
    e.apply(&unlink_path(200, &b(), P));
    e.apply(&scan(300, vec![scanned(11, fid(1), P, &[a()], false)]));
    let events: Vec<_> = e
        .socket(fid(1))
        .expect("tracked")
        .history
        .iter()
        .map(|h| (h.ts_ns, h.event))
        .collect();
    use crate::engine::HistoryEvent::*;
    assert_eq!(
        events,
        vec![
            (1, Bound),
            (2, Listen),
            (99, Scanned),
            (200, ForeignUnlink),
            (200, OrphanOpened),
            (300, Scanned)
        ]
    );
    assert_eq!(e.stats().evictions.history, 0);
}

#[test]
fn a_kernel_reported_owner_the_engine_never_saw_is_adopted() {
    let mut e = engine();
    // The bind was lost; the kernel still knows who listens on the file.
    let out = e.apply(&unlink_exact(10, &b(), P, fid(1), live(900, 90, false)));
    assert_eq!(out.len(), 2);
    assert!(matches!(
        &out[0],
        Verdict::ForeignUnlink { victim, relation: Relation::Unknown, sock_ino: 90, .. }
            if *victim == Proc::unknown(900)
    ));
    assert_eq!(e.orphans(20).len(), 1);
    // Its last close arrives: the orphan ends.
    assert!(matches!(
        e.apply(&release(30, &Proc::unknown(900), fid(1), 90))
            .as_slice(),
        [Verdict::OrphanClosed {
            duration_ns: 20,
            ..
        }]
    ));
}

#[test]
fn late_inputs_for_unknown_sockets_are_counted_not_invented() {
    let mut e = engine();
    quiet(
        &mut e,
        &[
            listen(1, &a(), fid(1), 11),
            release(2, &a(), fid(1), 11),
            unlink_path(4, &b(), P),
            connect(5, &c(), P, 111, None),
        ],
    );
    let s = e.stats();
    assert_eq!(s.sockets, 0);
    assert_eq!(
        (
            s.ignored.unknown_socket,
            s.ignored.unlink_unknown,
            s.ignored.connect_undecided
        ),
        (2, 1, 1)
    );
}

/// A scan is older than the events applied while it ran: a socket bound after it began is
/// not released for missing from it, one released after it began is not brought back, and an
/// orphan whose file was unlinked after it began is not closed as relinked.
#[test]
fn a_scan_does_not_undo_events_newer_than_itself() {
    let mut e = engine();
    e.apply(&bind(20, &a(), fid(1), 11, P));
    e.apply(&listen(21, &a(), fid(1), 11));
    let empty = Input::Scan(ScanSnapshot {
        ts_ns: 10,
        sockets: vec![],
        complete: true,
        unreadable: None,
    });
    assert!(e.apply(&empty).is_empty());
    assert!(
        e.socket(fid(1)).expect("known").released.is_none(),
        "bound after the scan began"
    );

    e.apply(&release(30, &a(), fid(1), 11));
    let stale_view = Input::Scan(ScanSnapshot {
        ts_ns: 25,
        sockets: vec![ScannedSocket {
            sock_ino: 11,
            file: Some(fid(1)),
            path: P.into(),
            listening: true,
            holders: vec![a()],
            file_linked: Some(true),
            outside_watch: false,
        }],
        complete: true,
        unreadable: None,
    });
    assert!(e.apply(&stale_view).is_empty());
    assert!(
        e.socket(fid(1)).expect("known").released.is_some(),
        "released after the scan began"
    );

    e.apply(&bind(40, &a(), fid(2), 22, P));
    e.apply(&listen(41, &a(), fid(2), 22));
    let orphaned = e.apply(&unlink_exact(
        50,
        &b(),
        P,
        fid(2),
        live(a().tgid, 22, false),
    ));
    let names: Vec<_> = orphaned.iter().map(Verdict::name).collect();
    assert_eq!(names, ["foreign_unlink", "orphan_opened"]);
    let read_before_the_unlink = scan(45, vec![scanned(22, fid(2), P, &[a()], true)]);
    assert!(e.apply(&read_before_the_unlink).is_empty());
    assert!(
        e.socket(fid(2)).expect("known").orphan.is_some(),
        "unlinked after the scan began"
    );
}

/// A scan incomplete only because some processes could not be read still proves a socket
/// gone when none of them is its binder or owner; one that is, or an unread namespace, does
/// not (the socket may live where only they are).
#[test]
fn an_incomplete_scan_releases_only_what_no_unreadable_process_may_hold() {
    let absent = |unreadable: Option<Vec<u32>>| {
        Input::Scan(ScanSnapshot {
            ts_ns: 100,
            sockets: vec![],
            complete: false,
            unreadable,
        })
    };
    for (unreadable, released) in [
        (None, false),
        (Some(vec![1]), true),
        (Some(vec![1, a().tgid]), false),
    ] {
        let mut e = engine();
        e.apply(&bind(20, &a(), fid(1), 11, P));
        e.apply(&listen(21, &a(), fid(1), 11));
        e.apply(&absent(unreadable.clone()));
        assert_eq!(
            e.socket(fid(1)).expect("known").released.is_some(),
            released,
            "unreadable {unreadable:?}"
        );
    }
}

/// A path-only exchange of two live listeners' files swaps the engine's path index: one
/// `moved` each, naming the other file, no `replaced`; the old path's unlink is B's.
#[test]
fn an_exchange_swaps_the_path_index_and_removes_nothing() {
    const Q: &str = "/run/b.sock";
    let mut e = engine();
    e.apply(&bind(1, &a(), fid(1), 11, P));
    e.apply(&listen(2, &a(), fid(1), 11));
    e.apply(&bind(3, &b(), fid(2), 22, Q));
    e.apply(&listen(4, &b(), fid(2), 22));
    let out = e.apply(&Input::Rename(inputs::Rename {
        ts_ns: 5,
        proc: c(),
        moved: None,
        from: Some(P.into()),
        to: Q.into(),
        exchange: true,
        replaced: None,
        fidelity: Fidelity::PathOnly,
        live: None,
    }));
    let moves: Vec<_> = out
        .iter()
        .map(|v| match v {
            Verdict::Moved {
                file,
                from,
                to,
                exchanged_with,
                foreign: true,
                ..
            } => (*file, from.as_deref(), to.as_deref(), *exchanged_with),
            other => panic!("only moves: {other:?}"),
        })
        .collect();
    assert_eq!(
        moves,
        vec![
            (fid(1), Some(P), Some(Q), Some(fid(2))),
            (fid(2), Some(Q), Some(P), Some(fid(1))),
        ]
    );
    let out = e.apply(&unlink_path(6, &c(), P));
    assert!(
        matches!(&out[..], [Verdict::ForeignUnlink { file, .. }, ..] if *file == fid(2)),
        "{out:?}"
    );
}

/// A scan's socket outside every watched path is not adopted: an orphan there is not the
/// operator's question. One the engine tracks already (bound under a watch, moved out) stays
/// reconciled: the scan still closes or orphans it.
#[test]
fn a_scan_adopts_no_socket_outside_the_watches_but_keeps_reconciling_tracked_ones() {
    let mut e = engine();
    let outside = |ino, file, linked| ScannedSocket {
        outside_watch: true,
        ..scanned(ino, file, "/elsewhere/x.sock", &[a()], linked)
    };
    quiet(&mut e, &[scan(10, vec![outside(11, fid(1), false)])]);
    assert!(e.socket(fid(1)).is_none());
    assert_eq!(e.stats().ignored.scan_outside_watch, 1);

    e.apply(&bind(20, &b(), fid(2), 22, P));
    e.apply(&listen(21, &b(), fid(2), 22));
    // The first sweep to find its file gone waits for the removal's event; the next decides.
    quiet(&mut e, &[scan(30, vec![outside(22, fid(2), false)])]);
    let out = e.apply(&scan(40, vec![outside(22, fid(2), false)]));
    assert!(
        matches!(out.as_slice(), [Verdict::OrphanOpened { .. }]),
        "{out:?}"
    );
    assert_eq!(e.stats().ignored.scan_outside_watch, 1);
}

/// Exited owners are forgotten once no decision can wait on them (the longest takeover
/// window): a steady churn of short-lived binders keeps the process table flat, not growing
/// to its bound; a process that exited recently is still known.
#[test]
fn exited_processes_are_forgotten_after_the_longest_takeover_window() {
    const S: u64 = 1_000_000_000;
    let mut e = engine();
    for i in 0..200u32 {
        let p = Proc {
            tgid: 1000 + i,
            pid: 1000 + i,
            ..a()
        };
        let t = u64::from(i) * S;
        let file = fid(u64::from(i) + 10);
        e.apply(&bind(
            t,
            &p,
            file,
            u64::from(i) + 100,
            &format!("/run/p{i}.sock"),
        ));
        e.apply(&release(t + 1, &p, file, u64::from(i) + 100));
        e.apply(&exit(t + 2, p.tgid));
    }
    let procs = e.stats().procs;
    let window = (crate::engine::EXITED_HORIZON_NS / S) as usize;
    assert!(
        (window..=window + 2).contains(&procs),
        "{procs} processes known, want the last {window} s of exits"
    );
    assert_eq!(e.stats().evictions.procs, 0, "expired, not evicted");
}

#[test]
fn a_refused_removal_names_the_owner_and_leaves_the_listener_linked() {
    let mut e = engine();
    e.apply(&bind(1, &a(), fid(1), 11, P));
    e.apply(&listen(2, &a(), fid(1), 11));
    let out = e.apply(&decided_for_c(GuardDecision::Denied));
    assert_eq!(out, vec![Verdict::UnlinkDenied(guarded_by_c(3))]);
    // Nothing was removed: the owner's later unlink is its own, no orphan and no verdict.
    let own = e.apply(&unlink_exact(4, &a(), P, fid(1), live(100, 11, true)));
    assert!(own.is_empty(), "{own:?}");
    assert_eq!(e.stats().verdicts.unlink_denied, 1);
}

/// The guard's input at 3 ns: c's unlink of a's listener at `P` under policy `foreign`.
fn decided_for_c(decision: GuardDecision) -> Input {
    Input::Denied(inputs::Denied {
        ts_ns: 3,
        proc: c(),
        path: P.into(),
        file: fid(1),
        operation: RemovalOp::Unlink,
        policy: GuardPolicy::Foreign,
        live: live(100, 11, false).expect("live"),
        decision,
    })
}

/// The guard's decision on c's unlink of a's listener at `P` (policy `foreign`).
fn guarded_by_c(ts_ns: u64) -> Guarded {
    Guarded {
        ts_ns,
        actor: c(),
        victim: a(),
        operation: RemovalOp::Unlink,
        policy: GuardPolicy::Foreign,
        path: P.into(),
        file: fid(1),
        sock_ino: 11,
    }
}

#[test]
fn an_audited_removal_is_reported_as_would_deny_and_then_happens() {
    let mut e = engine();
    e.apply(&bind(1, &a(), fid(1), 11, P));
    e.apply(&listen(2, &a(), fid(1), 11));
    assert_eq!(
        e.apply(&decided_for_c(GuardDecision::WouldDeny)),
        vec![Verdict::UnlinkWouldDeny(guarded_by_c(3))]
    );
    // The removal went ahead: it is the foreign unlink it would have been without the guard.
    let removal = e.apply(&unlink_exact(3, &c(), P, fid(1), live(100, 11, false)));
    let names: Vec<&str> = removal.iter().map(Verdict::name).collect();
    assert_eq!(names, ["foreign_unlink", "orphan_opened"], "{removal:?}");
    let counts = &e.stats().verdicts;
    assert_eq!((counts.unlink_would_deny, counts.unlink_denied), (1, 0));
}
