//! Takeovers (S1, S22): a foreign removal waits for a bind at the same path; every way it
//! ends, event by event.
use super::*;
use crate::engine::{
    CloseReason, DecidedBy, HandOver, HistoryEvent, OrphanCause, Relation, ServedBy, Verdict,
    model::{Fidelity, Runtime, Workload},
};

const F1: u64 = 10;
const F2: u64 = 20;
const T0: u64 = 2_000;

/// A listens on P (file F1, socket 11) at 1000.
fn a_listens(e: &mut Engine) {
    quiet(
        e,
        &[
            bind(1000, &a(), fid(F1), 11, P),
            listen(1001, &a(), fid(F1), 11),
        ],
    );
}

/// `remover` removes A's live socket at T0, as the kernel tier sees it.
fn removes_a(remover: &Proc) -> Input {
    unlink_exact(T0, remover, P, fid(F1), live(a().tgid, 11, false))
}

fn takeover(successor: &Proc, successor_relation: Relation, at: u64) -> Verdict {
    Verdict::Takeover {
        ts_ns: T0,
        remover: b(),
        predecessor: a(),
        successor: successor.clone(),
        relation: Relation::SameWorkloadOtherPod,
        successor_relation,
        served_by: ServedBy::Workload,
        how: HandOver::Rebind,
        path: P.into(),
        old_file: fid(F1),
        new_file: fid(F2),
        old_sock_ino: 11,
        new_sock_ino: 22,
        gap_ns: at - T0,
        decided_by: DecidedBy::Kernel,
        fidelity: Fidelity::Exact,
    }
}

fn taken_over(successor: &Proc, at: u64) -> Verdict {
    Verdict::OrphanOpened {
        ts_ns: at,
        since_ns: T0,
        since_exact: true,
        cause: OrphanCause::TakenOver,
        owner: a(),
        removed_by: Some(b()),
        successor: Some(successor.clone()),
        path: Some(P.into()),
        file: fid(F1),
        sock_ino: 11,
    }
}

fn b_foreign_unlink() -> Verdict {
    Verdict::ForeignUnlink {
        ts_ns: T0,
        actor: b(),
        victim: a(),
        relation: Relation::SameWorkloadOtherPod,
        path: P.into(),
        victim_path: Some(P.into()),
        file: fid(F1),
        sock_ino: 11,
        listening: true,
        victim_bound_ns: 1000,
        decided_by: DecidedBy::Kernel,
        fidelity: Fidelity::Exact,
        stale_owner: false,
    }
}

/// A's listener orphaned by B's unlink, decided at `at`.
fn a_unlinked(at: u64) -> Verdict {
    Verdict::OrphanOpened {
        ts_ns: at,
        since_ns: T0,
        since_exact: true,
        cause: OrphanCause::Unlinked,
        owner: a(),
        removed_by: Some(b()),
        successor: None,
        path: Some(P.into()),
        file: fid(F1),
        sock_ino: 11,
    }
}

/// S22: B removes A's socket and listens at once; A shuts down without unlinking and exits.
#[test]
fn s22_takeover_by_the_remover_itself() {
    let mut e = windowed();
    a_listens(&mut e);
    quiet(&mut e, &[removes_a(&b())]);
    assert_eq!(e.stats().pending_removals, 1);
    assert_eq!(
        e.apply(&bind(T0 + 100, &b(), fid(F2), 22, P)),
        vec![
            takeover(&b(), Relation::SameProcess, T0 + 100),
            taken_over(&b(), T0 + 100)
        ]
    );
    quiet(&mut e, &[listen(T0 + 101, &b(), fid(F2), 22)]);
    let orphans = e.orphans(T0 + 500);
    assert_eq!(orphans.len(), 1);
    assert_eq!(
        (orphans[0].cause, orphans[0].successor.clone()),
        (OrphanCause::TakenOver, Some(b()))
    );
    // A's graceful shutdown: it closes its listener (no unlink) and exits.
    assert_eq!(
        e.apply(&release(T0 + 900, &a(), fid(F1), 11)),
        vec![Verdict::OrphanClosed {
            ts_ns: T0 + 900,
            since_ns: T0,
            duration_ns: 900,
            reason: CloseReason::Released,
            owner: a(),
            path: Some(P.into()),
            file: fid(F1),
            sock_ino: 11,
        }]
    );
    quiet(
        &mut e,
        &[
            exit(T0 + 901, a().tgid),
            Input::Tick(inputs::Tick {
                ts_ns: T0 + 10 * WINDOW,
            }),
        ],
    );
    let s = e.stats();
    assert_eq!(
        (
            s.verdicts.takeover,
            s.verdicts.foreign_unlink,
            s.pending_removals
        ),
        (1, 0, 0)
    );
    // `explain`: the removal sits in A's history where it happened, before the orphan.
    let events: Vec<HistoryEvent> = e
        .socket(fid(F1))
        .expect("tracked")
        .history
        .iter()
        .map(|h| h.event)
        .collect();
    assert_eq!(
        events,
        [
            HistoryEvent::Bound,
            HistoryEvent::Listen,
            HistoryEvent::TakenOver,
            HistoryEvent::OrphanOpened,
            HistoryEvent::OrphanClosed,
            HistoryEvent::Released,
        ]
    );
    let b_history = &e.socket(fid(F2)).expect("tracked").history;
    assert_eq!(b_history[1].event, HistoryEvent::TookOver);
}

/// The remover is a helper of the successor's cgroup (a start-up script's `rm`), or another
/// container of its pod: a takeover, naming the binder as successor.
#[test]
fn takeover_by_the_removers_cgroup_or_pod() {
    let helper_cgroup = Proc {
        tgid: 250,
        pid: 250,
        comm: "rm".into(),
        ..b()
    };
    let mut e = windowed();
    a_listens(&mut e);
    quiet(&mut e, &[removes_a(&b())]);
    assert_eq!(
        e.apply(&bind(T0 + 5, &helper_cgroup, fid(F2), 22, P)),
        vec![
            takeover(&helper_cgroup, Relation::SameCgroup, T0 + 5),
            taken_over(&helper_cgroup, T0 + 5)
        ]
    );
    let sidecar = Proc {
        tgid: 260,
        pid: 260,
        comm: "sidecar".into(),
        cgroup_id: 2002,
        workload: Some(Workload {
            container_id: Some("ctr-sidecar".into()),
            ..b().workload.expect("b runs in a pod")
        }),
        exe: None,
        runtime: None,
    };
    let mut e = windowed();
    a_listens(&mut e);
    quiet(&mut e, &[removes_a(&b())]);
    assert_eq!(
        e.apply(&bind(T0 + 5, &sidecar, fid(F2), 22, P))[0],
        takeover(&sidecar, Relation::SamePod, T0 + 5)
    );
    // A host process serving a pod's path is another workload: a hijack, whoever removed it.
    let in_root = |tgid| Proc {
        tgid,
        pid: tgid,
        comm: "host".into(),
        cgroup_id: 1,
        workload: None,
        exe: None,
        runtime: None,
    };
    let mut e = windowed();
    a_listens(&mut e);
    quiet(
        &mut e,
        &[unlink_exact(
            T0,
            &in_root(500),
            P,
            fid(F1),
            live(a().tgid, 11, false),
        )],
    );
    let out = e.apply(&bind(T0 + 5, &in_root(501), fid(F2), 22, P));
    assert_eq!(out[0].name(), "hijack", "{out:#?}");
    assert_eq!(e.stats().pending_removals, 0);
}

/// Nobody binds P again: the foreign unlink is reported with its own time once the window
/// has passed (by a tick or any later input), never before; a bind after it changes nothing.
#[test]
fn no_rebind_is_a_foreign_unlink_at_the_windows_end() {
    let deadline = T0 + WINDOW;
    let mut e = windowed();
    a_listens(&mut e);
    quiet(
        &mut e,
        &[
            removes_a(&b()),
            Input::Tick(inputs::Tick { ts_ns: T0 + 1 }),
            Input::Tick(inputs::Tick { ts_ns: deadline }),
        ],
    );
    assert_eq!(
        e.apply(&Input::Tick(inputs::Tick {
            ts_ns: deadline + 1
        })),
        vec![b_foreign_unlink(), a_unlinked(deadline)]
    );
    quiet(&mut e, &[bind(deadline + 2, &b(), fid(F2), 22, P)]);
    // Any later input ends the window as well, before it is applied.
    let mut e = windowed();
    a_listens(&mut e);
    quiet(&mut e, &[removes_a(&b())]);
    let later = connect(deadline + 50, &c(), "/elsewhere.sock", 2, None);
    assert_eq!(
        e.apply(&later),
        vec![b_foreign_unlink(), a_unlinked(deadline)]
    );
}

/// The remover exits within the window: it binds nothing more, decided at once.
#[test]
fn the_removers_exit_decides_at_once() {
    let mut e = windowed();
    a_listens(&mut e);
    quiet(&mut e, &[removes_a(&b()), exit(T0 + 10, c().tgid)]);
    assert_eq!(
        e.apply(&exit(T0 + 20, b().tgid)),
        vec![b_foreign_unlink(), a_unlinked(T0 + 20)]
    );
    assert_eq!(e.stats().pending_removals, 0);
}

/// A bind elsewhere is no takeover; a bind at P by another workload is a hijack.
#[test]
fn a_bind_at_another_path_is_nothing_and_by_a_stranger_a_hijack() {
    let mut e = windowed();
    a_listens(&mut e);
    quiet(
        &mut e,
        &[
            removes_a(&b()),
            bind(T0 + 1, &b(), fid(30), 33, "/run/multus/other.sock"),
        ],
    );
    let out = e.apply(&bind(T0 + 2, &c(), fid(F2), 22, P));
    let names: Vec<&str> = out.iter().map(Verdict::name).collect();
    assert_eq!(names, ["hijack", "orphan_opened"], "{out:#?}");
    assert!(e.flush().is_empty());
}

/// S1 on the kernel tier: B's removal is a takeover; A's Go Close then unlinks B's socket:
/// the stale owner's foreign unlink is reported at once, and B's listener is orphaned.
#[test]
fn s1_stale_owner_unlink_is_immediate() {
    s1(true);
}

/// S1 on the tracepoint tier (paths only, ownership decided by the engine).
#[test]
fn s1_stale_owner_unlink_is_immediate_path_only() {
    s1(false);
}

fn s1(kernel: bool) {
    let un = |ts, p: &Proc, file, owner: &Proc, sock| {
        if kernel {
            unlink_exact(ts, p, P, fid(file), live(owner.tgid, sock, false))
        } else {
            unlink_path(ts, p, P)
        }
    };
    let mut e = windowed();
    a_listens(&mut e);
    quiet(&mut e, &[un(T0, &b(), F1, &a(), 11)]);
    let out = e.apply(&bind(T0 + 100, &b(), fid(F2), 22, P));
    assert_eq!(
        out.iter().map(Verdict::name).collect::<Vec<_>>(),
        ["takeover", "orphan_opened"]
    );
    quiet(&mut e, &[listen(T0 + 101, &b(), fid(F2), 22)]);
    let out = e.apply(&un(T0 + 500, &a(), F2, &b(), 22));
    let Verdict::ForeignUnlink {
        actor,
        victim,
        file,
        ts_ns,
        stale_owner,
        ..
    } = &out[0]
    else {
        panic!("{out:?}")
    };
    assert_eq!(
        (actor.tgid, victim.tgid, *file, *ts_ns, *stale_owner),
        (a().tgid, b().tgid, fid(F2), T0 + 500, true)
    );
    let Verdict::OrphanOpened {
        owner,
        cause,
        removed_by,
        ..
    } = &out[1]
    else {
        panic!("{out:?}")
    };
    assert_eq!(
        (owner.tgid, *cause, removed_by.as_ref().map(|p| p.tgid)),
        (b().tgid, OrphanCause::Unlinked, Some(a().tgid))
    );
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(e.stats().pending_removals, 0);
}

/// The queue is bounded: a removal past it pushes out the oldest, reported at once, counted.
#[test]
fn evicted_pending_removals_are_reported_and_counted() {
    let limits = Limits {
        max_pending_removals: 2,
        ..Limits::default()
    };
    let mut e = Engine::new(limits).expect("valid limits");
    let paths = ["/run/x/0.sock", "/run/x/1.sock", "/run/x/2.sock"];
    for (i, path) in (0u64..).zip(paths) {
        quiet(
            &mut e,
            &[
                bind(10 + i, &a(), fid(100 + i), 200 + i, path),
                listen(20 + i, &a(), fid(100 + i), 200 + i),
            ],
        );
    }
    let gone = |i: u64| {
        unlink_exact(
            T0 + i,
            &b(),
            paths[i as usize],
            fid(100 + i),
            live(a().tgid, 200 + i, false),
        )
    };
    quiet(&mut e, &[gone(0), gone(1)]);
    let out = e.apply(&gone(2));
    assert_eq!(
        out.iter().map(Verdict::name).collect::<Vec<_>>(),
        ["foreign_unlink", "orphan_opened"]
    );
    assert_eq!(out[0].path(), Some(paths[0]));
    let s = e.stats();
    assert_eq!((s.pending_removals, s.evictions.pending_removals), (2, 1));
    assert!(
        Engine::new(Limits {
            max_pending_removals: 0,
            ..Limits::default()
        })
        .is_err()
    );
}

/// S22 with a sweep between B's unlink and its event (the record comes after the unlink, and
/// a sweep can read A's socket in between): the sweep finds A's file gone, but the event
/// decides, a takeover and no orphan alert.
#[test]
fn a_sweep_before_the_unlinks_event_leaves_the_takeover_to_it() {
    let mut e = windowed();
    a_listens(&mut e);
    quiet(
        &mut e,
        &[
            scan(T0 + 50, vec![scanned(11, fid(F1), P, &[a()], false)]),
            removes_a(&b()),
        ],
    );
    assert_eq!(
        e.apply(&bind(T0 + 100, &b(), fid(F2), 22, P)),
        vec![
            takeover(&b(), Relation::SameProcess, T0 + 100),
            taken_over(&b(), T0 + 100)
        ]
    );
    quiet(
        &mut e,
        &[scan(
            T0 + 5_000,
            vec![
                scanned(11, fid(F1), P, &[a()], false),
                scanned(22, fid(F2), P, &[b()], true),
            ],
        )],
    );
}

/// A listener whose file a sweep finds gone, and no event explains by the next sweep: an
/// orphan then, since the first sweep that found it.
#[test]
fn an_unexplained_lost_file_is_an_orphan_at_the_next_sweep() {
    let mut e = windowed();
    a_listens(&mut e);
    let lost = || vec![scanned(11, fid(F1), P, &[a()], false)];
    quiet(&mut e, &[scan(T0, lost())]);
    assert_eq!(
        e.apply(&scan(T0 + 5_000, lost())),
        vec![Verdict::OrphanOpened {
            ts_ns: T0 + 5_000,
            since_ns: T0,
            since_exact: false,
            cause: OrphanCause::Scan,
            owner: a(),
            removed_by: None,
            successor: None,
            path: Some(P.into()),
            file: fid(F1),
            sock_ino: 11,
        }]
    );
    quiet(&mut e, &[scan(T0 + 10_000, lost())]);
}

/// S6 on a filesystem that reuses a freed inode number at once: a sweep read A's listener
/// after its worker unlinked it and before A closed it; by the time the sweep is applied, A
/// has closed it and bound its next listener on the same file number. The sweep is older
/// than that bind: it neither closes the new listener nor brings the old one back as an
/// orphan.
#[test]
fn a_sweep_older_than_a_bind_on_a_reused_inode_leaves_the_new_listener_alone() {
    let mut e = engine();
    let w = worker_of_a();
    quiet(
        &mut e,
        &[
            bind(1000, &a(), fid(F1), 11, P),
            listen(1001, &a(), fid(F1), 11),
            fork(1500, &a(), w.tgid),
            unlink_exact(2000, &w, P, fid(F1), live(a().tgid, 11, true)),
            exit(2001, w.tgid),
            release(2100, &a(), fid(F1), 11),
            bind(2200, &a(), fid(F1), 33, P),
            listen(2201, &a(), fid(F1), 33),
            scan(1900, vec![scanned(11, fid(F1), P, &[a()], false)]),
        ],
    );
    let now = e.socket(fid(F1)).expect("the new listener is tracked");
    assert!(now.is_live() && now.is_linked(), "{now:?}");
    assert_eq!(now.sock_ino, 33);
    quiet(
        &mut e,
        &[scan(7000, vec![scanned(33, fid(F1), P, &[a()], true)])],
    );
    assert!(e.orphans(8000).is_empty());
}

/// A stale owner whose unlink came with no runtime (it exited before the agent read one) is
/// named by the runtime read at its bind; one read at the unlink is taken as it is.
#[test]
fn a_stale_owners_runtime_is_the_one_read_at_its_bind_when_its_unlink_has_none() {
    let go_a = Proc {
        runtime: Some(Runtime::Go),
        ..a()
    };
    for (unlinker, want) in [
        (a(), Some(Runtime::Go)),
        (
            Proc {
                runtime: Some(Runtime::Node),
                ..a()
            },
            Some(Runtime::Node),
        ),
    ] {
        let mut e = windowed();
        quiet(
            &mut e,
            &[
                bind(1000, &go_a, fid(F1), 11, P),
                listen(1001, &go_a, fid(F1), 11),
                removes_a(&b()),
            ],
        );
        e.apply(&bind(T0 + 100, &b(), fid(F2), 22, P));
        let out = e.apply(&unlink_path(T0 + 500, &unlinker, P));
        let Some(Verdict::ForeignUnlink {
            actor, stale_owner, ..
        }) = out.first()
        else {
            panic!("{out:?}")
        };
        assert_eq!((actor.runtime, *stale_owner), (want, true), "{out:?}");
    }
}
