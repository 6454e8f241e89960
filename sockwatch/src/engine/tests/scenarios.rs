//! One test per scenario of the brief (S1–S14), event by event, asserting exact verdicts.
use super::*;
use crate::engine::{
    CloseReason, DecidedBy, OrphanCause, OrphanInfo, Relation, StaleKind,
    model::{Fidelity, ScanSnapshot},
};

const F1: u64 = 10;
const F2: u64 = 20;
const F3: u64 = 30;

/// Which tier saw an unlink: the kernel's decision with the inode, or the engine's on a path.
const KERNEL: (DecidedBy, Fidelity) = (DecidedBy::Kernel, Fidelity::Exact);
const ENGINE: (DecidedBy, Fidelity) = (DecidedBy::Engine, Fidelity::PathOnly);

/// A foreign unlink of a listening socket bound at `path`: `sock` is (file, sock_ino, bound_ns).
fn foreign_unlink(
    ts_ns: u64,
    (actor, victim, relation): (Proc, Proc, Relation),
    path: &str,
    (file, sock_ino, victim_bound_ns): (FileId, u64, u64),
    (decided_by, fidelity): (DecidedBy, Fidelity),
) -> Verdict {
    Verdict::ForeignUnlink {
        ts_ns,
        actor,
        victim,
        relation,
        path: path.into(),
        victim_path: Some(path.into()),
        file,
        sock_ino,
        listening: true,
        victim_bound_ns,
        decided_by,
        fidelity,
        stale_owner: false,
    }
}

/// `v`, a foreign unlink, by a stale owner.
fn by_stale_owner(mut v: Verdict) -> Verdict {
    if let Verdict::ForeignUnlink { stale_owner, .. } = &mut v {
        *stale_owner = true;
    }
    v
}

fn opened(
    ts_ns: u64,
    cause: OrphanCause,
    owner: Proc,
    removed_by: Option<Proc>,
    path: &str,
    file: FileId,
    sock_ino: u64,
) -> Verdict {
    Verdict::OrphanOpened {
        ts_ns,
        since_ns: ts_ns,
        since_exact: true,
        cause,
        owner,
        removed_by,
        successor: None,
        path: Some(path.into()),
        file,
        sock_ino,
    }
}

fn closed(
    ts_ns: u64,
    since_ns: u64,
    reason: CloseReason,
    owner: Proc,
    path: &str,
    file: FileId,
    sock_ino: u64,
) -> Verdict {
    Verdict::OrphanClosed {
        ts_ns,
        since_ns,
        duration_ns: ts_ns - since_ns,
        reason,
        owner,
        path: Some(path.into()),
        file,
        sock_ino,
    }
}

/// S1 up to the point where both listeners are orphaned; `kernel` picks the tier.
fn s1_prefix(e: &mut Engine, kernel: bool) {
    let (decided_by, fidelity) = if kernel { KERNEL } else { ENGINE };
    let un = |ts, p: &Proc, file, owner: &Proc, sock| {
        if kernel {
            unlink_exact(ts, p, P, fid(file), live(owner.tgid, sock, false))
        } else {
            unlink_path(ts, p, P)
        }
    };
    quiet(
        e,
        &[
            bind(1000, &a(), fid(F1), 11, P),
            listen(1001, &a(), fid(F1), 11),
        ],
    );
    // B's `rm -r` of the directory: one unlink per socket file.
    assert_eq!(
        e.apply(&un(2000, &b(), F1, &a(), 11)),
        vec![
            foreign_unlink(
                2000,
                (b(), a(), Relation::SameWorkloadOtherPod),
                P,
                (fid(F1), 11, 1000),
                (decided_by, fidelity)
            ),
            opened(2000, OrphanCause::Unlinked, a(), Some(b()), P, fid(F1), 11),
        ]
    );
    quiet(
        e,
        &[
            bind(2100, &b(), fid(F2), 22, P),
            listen(2101, &b(), fid(F2), 22),
        ],
    );
    // A's Go listener closes: unlink-on-close removes B's file, then the socket closes. A's
    // own listener at P lost its file to B: A is a stale owner.
    assert_eq!(
        e.apply(&un(3000, &a(), F2, &b(), 22)),
        vec![
            by_stale_owner(foreign_unlink(
                3000,
                (a(), b(), Relation::SameWorkloadOtherPod),
                P,
                (fid(F2), 22, 2100),
                (decided_by, fidelity)
            )),
            opened(3000, OrphanCause::Unlinked, b(), Some(a()), P, fid(F2), 22),
        ]
    );
    assert_eq!(e.orphans(3000).len(), 2);
    assert_eq!(
        e.apply(&release(3001, &a(), fid(F1), 11)),
        vec![closed(
            3001,
            2000,
            CloseReason::Released,
            a(),
            P,
            fid(F1),
            11
        )]
    );
    // A's socket file was removed (by B), so A's exit leaves no stale file behind.
    quiet(e, &[exit(3002, a().tgid)]);
    assert_eq!(
        e.orphans(4000),
        vec![OrphanInfo {
            file: fid(F2),
            sock_ino: 22,
            owner: b(),
            path: Some(P.into()),
            since_ns: 3000,
            since_exact: true,
            age_ns: 1000,
            cause: OrphanCause::Unlinked,
            removed_by: Some(a()),
            successor: None,
        }]
    );
    let s = e.stats();
    assert_eq!(
        (s.verdicts.foreign_unlink, s.verdicts.orphan_opened),
        (2, 2)
    );
    assert_eq!(s.quiet.owner_unlink, 0);
}

#[test]
fn s1_rolling_restart_kernel_tier_orphan_closed_when_b_exits() {
    let mut e = engine();
    s1_prefix(&mut e, true);
    // B exits: its exit may come before the socket's last close; either closes the orphan once.
    assert_eq!(
        e.apply(&exit(5000, b().tgid)),
        vec![closed(5000, 3000, CloseReason::Exited, b(), P, fid(F2), 22)]
    );
    quiet(&mut e, &[release(5001, &b(), fid(F2), 22)]);
    assert!(e.orphans(6000).is_empty());
}

#[test]
fn s1_rolling_restart_tracepoint_tier_orphan_closed_when_b_rebinds() {
    let mut e = engine();
    s1_prefix(&mut e, false);
    // B notices and binds P again (new inode): the orphan ends, B's new socket is fine.
    assert_eq!(
        e.apply(&bind(4000, &b(), fid(F3), 33, P)),
        vec![closed(
            4000,
            3000,
            CloseReason::Rebound,
            b(),
            P,
            fid(F2),
            22
        )]
    );
    quiet(
        &mut e,
        &[
            listen(4001, &b(), fid(F3), 33),
            release(4002, &b(), fid(F2), 22),
        ],
    );
    assert!(e.orphans(5000).is_empty());
    assert_eq!(e.socket_by_path(P)[0].file, fid(F3));
}

#[test]
fn s2_owner_unlinks_then_closes_is_quiet() {
    for kernel in [true, false] {
        let mut e = engine();
        let un = if kernel {
            unlink_exact(2000, &a(), P, fid(F1), live(a().tgid, 11, true))
        } else {
            unlink_path(2000, &a(), P)
        };
        quiet(
            &mut e,
            &[
                bind(1000, &a(), fid(F1), 11, P),
                listen(1001, &a(), fid(F1), 11),
                un,
                release(2001, &a(), fid(F1), 11),
                exit(2002, a().tgid),
            ],
        );
        let s = e.stats();
        assert_eq!(s.quiet.owner_unlink, 1, "kernel tier: {kernel}");
        assert_eq!(s.verdicts, Default::default());
        assert!(e.orphans(3000).is_empty());
    }
}

#[test]
fn s3_connect_through_a_bind_mount_to_an_unlinked_inode_is_stale() {
    let q = "/var/lib/client/multus.sock";
    let mut e = engine();
    quiet(
        &mut e,
        &[
            bind(1000, &a(), fid(F1), 11, P),
            listen(1001, &a(), fid(F1), 11),
            // C bind-mounts P onto Q (a mount: no input); A closes; its successor re-creates P.
            release(2000, &a(), fid(F1), 11),
            unlink_exact(2100, &b(), P, fid(F1), None),
            bind(2101, &b(), fid(F2), 22, P),
            listen(2102, &b(), fid(F2), 22),
            exit(2200, a().tgid),
        ],
    );
    assert_eq!(e.stats().quiet.stale_file_removed, 1);
    let stale = |ts_ns, decided_by| Verdict::StaleConnect {
        ts_ns,
        kind: StaleKind::UnlinkedPinned,
        actor: c(),
        path: q.into(),
        file: Some(fid(F1)),
        binder: Some(a()),
        removed_by: Some(b()),
        decided_by,
    };
    // The kernel tier sees the inode: nlink 0, nothing bound.
    assert_eq!(
        e.apply(&connect_seen(
            3000,
            &c(),
            q,
            111,
            fid(F1),
            (0, false, false)
        )),
        vec![stale(3000, DecidedBy::Kernel)]
    );
    // Without the kernel's view, the engine knows F1 was closed and unlinked.
    assert_eq!(
        e.apply(&connect(3001, &c(), q, 111, Some(fid(F1)))),
        vec![stale(3001, DecidedBy::Engine)]
    );
    // Through P, C reaches B's live socket.
    quiet(&mut e, &[connect(3002, &c(), P, 0, Some(fid(F2)))]);
}

#[test]
fn s4_binder_exits_without_unlinking_leaves_a_stale_file() {
    let stale_file = |ts_ns, released_ns| Verdict::StaleSocketFile {
        ts_ns,
        binder: a(),
        released_by: Some(a()),
        path: Some(P.into()),
        file: fid(F1),
        sock_ino: 11,
        bound_ns: 1000,
        released_ns,
    };
    let dead = |ts_ns, decided_by| Verdict::StaleConnect {
        ts_ns,
        kind: StaleKind::DeadListener,
        actor: c(),
        path: P.into(),
        file: Some(fid(F1)),
        binder: Some(a()),
        removed_by: None,
        decided_by,
    };
    // Release, then exit.
    let mut e = engine();
    quiet(
        &mut e,
        &[
            bind(1000, &a(), fid(F1), 11, P),
            listen(1001, &a(), fid(F1), 11),
            release(2000, &a(), fid(F1), 11),
        ],
    );
    assert_eq!(e.apply(&exit(2001, a().tgid)), vec![stale_file(2001, 2000)]);
    assert_eq!(
        e.apply(&connect_seen(
            3000,
            &c(),
            P,
            111,
            fid(F1),
            (1, false, false)
        )),
        vec![dead(3000, DecidedBy::Kernel)]
    );

    // Exit first (the kernel closes files after the exit tracepoint), path-only connect.
    let mut e = engine();
    quiet(
        &mut e,
        &[
            bind(1000, &a(), fid(F1), 11, P),
            listen(1001, &a(), fid(F1), 11),
        ],
    );
    assert_eq!(e.apply(&exit(2000, a().tgid)), vec![stale_file(2000, 2000)]);
    quiet(&mut e, &[release(2001, &a(), fid(F1), 11)]);
    assert_eq!(
        e.apply(&connect(3000, &c(), P, 111, None)),
        vec![dead(3000, DecidedBy::Engine)]
    );

    // Close, then unlink (the other order of a graceful shutdown): no stale file.
    let mut e = engine();
    quiet(
        &mut e,
        &[
            bind(1000, &a(), fid(F1), 11, P),
            listen(1001, &a(), fid(F1), 11),
            release(2000, &a(), fid(F1), 11),
            unlink_path(2001, &a(), P),
            exit(2002, a().tgid),
        ],
    );
    assert_eq!(e.stats().quiet.stale_file_removed, 1);
}

#[test]
fn s6_forked_worker_unlinking_is_quiet() {
    for kernel in [true, false] {
        let mut e = engine();
        let w = worker_of_a();
        let un = if kernel {
            unlink_exact(2000, &w, P, fid(F1), live(a().tgid, 11, true))
        } else {
            unlink_path(2000, &w, P)
        };
        quiet(
            &mut e,
            &[
                bind(1000, &a(), fid(F1), 11, P),
                listen(1001, &a(), fid(F1), 11),
                fork(1500, &a(), w.tgid),
            ],
        );
        assert_eq!(e.owners(fid(F1)), vec![a(), w.clone()]);
        quiet(
            &mut e,
            &[
                un,
                exit(2001, w.tgid),
                release(2002, &a(), fid(F1), 11),
                exit(2003, a().tgid),
            ],
        );
        assert_eq!(e.stats().quiet.owner_unlink, 1, "kernel tier: {kernel}");
        assert_eq!(e.stats().verdicts, Default::default());
    }
}

/// S7/S16: A binds and listens, hands the listener to B by SCM_RIGHTS, exits.
fn handed_over_to_b(e: &mut Engine) {
    quiet(
        e,
        &[
            bind(1000, &a(), fid(F1), 11, P),
            listen(1001, &a(), fid(F1), 11),
            fd_received(1500, &b(), fid(F1), 11),
        ],
    );
    assert_eq!(e.owners(fid(F1)), vec![a(), b()]);
    // The sender's exit leaves the socket live: no stale_socket_file.
    quiet(e, &[exit(1600, a().tgid)]);
    assert_eq!(e.owners(fid(F1)), vec![b()]);
    assert!(
        e.socket(fid(F1))
            .is_some_and(crate::engine::SocketState::is_live)
    );
}

#[test]
fn s7_s16_the_receiver_of_a_handed_over_listener_unlinking_is_quiet() {
    for kernel in [true, false] {
        let mut e = engine();
        handed_over_to_b(&mut e);
        let un = if kernel {
            unlink_exact(2000, &b(), P, fid(F1), live(b().tgid, 11, true))
        } else {
            unlink_path(2000, &b(), P)
        };
        quiet(&mut e, &[un, exit(2001, b().tgid)]);
        assert_eq!(e.stats().quiet.owner_unlink, 1, "kernel tier: {kernel}");
        assert_eq!(e.stats().verdicts, Default::default());
    }
}

#[test]
fn s16_a_third_process_unlinking_a_handed_over_listener_names_the_receiver() {
    // The kernel's table names the receiver (receipt hook), or still the exited sender (a
    // fork's child, or a receipt the kernel did not see); the path-only tier names nobody.
    for (kernel_owner, (decided_by, fidelity)) in [
        (Some(b().tgid), KERNEL),
        (Some(a().tgid), KERNEL),
        (None, ENGINE),
    ] {
        let mut e = engine();
        handed_over_to_b(&mut e);
        let un = match kernel_owner {
            Some(owner) => unlink_exact(2000, &c(), P, fid(F1), live(owner, 11, false)),
            None => unlink_path(2000, &c(), P),
        };
        let sock = (fid(F1), 11, 1000);
        assert_eq!(
            e.apply(&un),
            vec![
                foreign_unlink(
                    2000,
                    (c(), b(), Relation::Other),
                    P,
                    sock,
                    (decided_by, fidelity)
                ),
                opened(2000, OrphanCause::Unlinked, b(), Some(c()), P, fid(F1), 11),
            ],
            "kernel owner {kernel_owner:?}"
        );
    }
}

#[test]
fn s16_socket_activation_the_exec_ed_child_is_the_victim() {
    // systemd style: the parent binds, forks a child that inherits the fd, and exits.
    let mut e = engine();
    let w = worker_of_a();
    quiet(
        &mut e,
        &[
            bind(1000, &a(), fid(F1), 11, P),
            listen(1001, &a(), fid(F1), 11),
            fork(1500, &a(), w.tgid),
            exit(1600, a().tgid),
        ],
    );
    let out = e.apply(&unlink_exact(
        2000,
        &c(),
        P,
        fid(F1),
        live(a().tgid, 11, false),
    ));
    let Some(Verdict::ForeignUnlink { victim, .. }) = out.first() else {
        panic!("foreign unlink: {out:?}")
    };
    assert_eq!(victim.tgid, w.tgid);
}

#[test]
fn a_receipt_of_an_unknown_or_replaced_socket_is_counted_and_ignored() {
    let mut e = engine();
    quiet(
        &mut e,
        &[
            fd_received(900, &b(), fid(F2), 22),
            bind(1000, &a(), fid(F1), 11, P),
            // An accepted connection shares its listener's file but is another socket.
            fd_received(1100, &b(), fid(F1), 12),
        ],
    );
    assert_eq!(e.stats().ignored.unknown_socket, 2);
    assert_eq!(e.owners(fid(F1)), vec![a()]);
}

#[test]
fn s8_refusal_by_a_bound_but_not_listening_socket_is_a_counted_connect_error() {
    let mut e = engine();
    quiet(
        &mut e,
        &[
            bind(1000, &b(), fid(F2), 22, P),
            connect_seen(1100, &c(), P, 111, fid(F2), (1, true, false)),
            connect(1101, &c(), P, 111, None),
            connect(1102, &c(), "/run/nothing.sock", 2, None),
        ],
    );
    let s = e.stats();
    assert_eq!(
        s.quiet.connect_error.into_iter().collect::<Vec<_>>(),
        vec![(2, 1), (111, 2)]
    );
    assert_eq!(s.verdicts, Default::default());
    // Once it listens, nothing about the earlier refusals changes.
    quiet(
        &mut e,
        &[
            listen(1200, &b(), fid(F2), 22),
            connect(1201, &c(), P, 0, Some(fid(F2))),
        ],
    );
}

#[test]
fn s9_abstract_and_unnamed_sockets_never_enter_the_table() {
    let mut e = engine();
    quiet(
        &mut e,
        &[
            bind(1000, &a(), fid(1), 1, ""),
            bind(1001, &a(), fid(2), 2, "@abstract"),
            bind(1002, &a(), fid(3), 3, "\0raw-abstract"),
            listen(1003, &a(), fid(2), 2),
            Input::Scan(ScanSnapshot {
                ts_ns: 1004,
                sockets: vec![scanned(4, fid(4), "@scan", &[a()], true)],
                complete: false,
                unreadable: None,
            }),
        ],
    );
    let s = e.stats();
    assert_eq!(s.sockets, 0);
    assert_eq!(s.ignored.not_path_bound, 4);
    assert_eq!(s.ignored.unknown_socket, 1);
}

#[test]
fn s10_late_start_scan_learns_owners_and_reports_the_preexisting_orphan() {
    let x = Proc {
        tgid: 500,
        pid: 500,
        comm: "old-daemon".into(),
        cgroup_id: 5001,
        workload: None,
        exe: None,
        runtime: None,
    };
    let xp = "/run/x/x.sock";
    let snapshot = || {
        scan(
            100,
            vec![
                scanned(11, fid(F1), P, &[a()], true),
                scanned(55, fid(50), xp, std::slice::from_ref(&x), false),
            ],
        )
    };
    let mut e = engine();
    let pre = Verdict::OrphanOpened {
        ts_ns: 100,
        since_ns: 100,
        since_exact: false,
        cause: OrphanCause::Scan,
        owner: x.clone(),
        removed_by: None,
        successor: None,
        path: Some(xp.into()),
        file: fid(50),
        sock_ino: 55,
    };
    assert_eq!(e.apply(&snapshot()), vec![pre]);
    assert_eq!(e.orphans(150)[0].age_ns, 50);
    assert!(!e.orphans(150)[0].since_exact);
    // A later scan of the same state reports nothing new.
    quiet(&mut e, &[snapshot()]);
    assert_eq!(e.owners(fid(F1)), vec![a()]);
    // The scan made A the owner of P: B's removal is foreign, decided by the engine.
    let mut b_removes = engine();
    b_removes.apply(&snapshot());
    assert_eq!(
        b_removes.apply(&unlink_path(200, &b(), P)),
        vec![
            foreign_unlink(
                200,
                (b(), a(), Relation::SameWorkloadOtherPod),
                P,
                (fid(F1), 11, 100),
                ENGINE
            ),
            opened(200, OrphanCause::Unlinked, a(), Some(b()), P, fid(F1), 11),
        ]
    );
    // ... and A's own removal is quiet.
    quiet(&mut e, &[unlink_path(200, &a(), P)]);
    assert_eq!(e.stats().quiet.owner_unlink, 1);
    // A complete scan without the old orphan: it was closed.
    assert_eq!(
        e.apply(&scan(300, vec![])),
        vec![Verdict::OrphanClosed {
            ts_ns: 300,
            since_ns: 100,
            duration_ns: 200,
            reason: CloseReason::Released,
            owner: x,
            path: Some(xp.into()),
            file: fid(50),
            sock_ino: 55,
        }]
    );
    assert_eq!(e.stats().live_sockets, 0);
}

#[test]
fn s11_a_flood_keeps_state_bounded_and_a_scan_repairs_it() {
    let limits = Limits {
        max_sockets: 8,
        max_procs: 8,
        max_history_per_socket: 4,
        max_pending_removals: 4,
    };
    let mut e = Engine::new(limits)
        .expect("valid limits")
        .with_takeover_window(0);
    // One orphan that must survive the flood.
    e.apply(&bind(1, &a(), fid(F1), 11, P));
    e.apply(&listen(2, &a(), fid(F1), 11));
    assert_eq!(e.apply(&unlink_path(3, &b(), P)).len(), 2);
    const N: u64 = 2000;
    for i in 0..N {
        let ts = 10 + i * 10;
        let p = Proc {
            tgid: 10_000 + i as u32,
            pid: 10_000 + i as u32,
            comm: "flood".into(),
            cgroup_id: 7,
            workload: None,
            exe: None,
            runtime: None,
        };
        let path = format!("/tmp/flood/{i}.sock");
        for input in [
            bind(ts, &p, fid(1000 + i), 5000 + i, &path),
            listen(ts + 1, &p, fid(1000 + i), 5000 + i),
            fork(ts + 2, &p, 900_000 + i as u32),
            connect(ts + 3, &c(), &path, 0, Some(fid(1000 + i))),
            connect(ts + 4, &c(), "/tmp/flood/missing.sock", 2, None),
            unlink_path(ts + 5, &host(), "/tmp/unrelated/file"),
            exit(ts + 6, 900_000 + i as u32),
        ] {
            e.apply(&input);
            let s = e.stats();
            assert!(s.sockets <= 8 && s.procs <= 8, "bounds broken: {s:?}");
            assert!(s.owner_pairs <= 8 * 8);
            assert!(e.socket(fid(1000 + i)).is_none_or(|s| s.history.len() <= 4));
        }
    }
    let s = e.stats();
    // Every bind past the 8th pushed one entry out; the orphan was never among them.
    assert_eq!(s.evictions.sockets, N + 1 - 8);
    assert_eq!(s.evictions.orphans, 0);
    assert!(s.evictions.procs > 0);
    assert_eq!(s.ignored.unlink_unknown, N);
    assert_eq!(s.quiet.connect_error.get(&2), Some(&N));
    assert_eq!(e.orphans(100_000).len(), 1);
    // The periodic scan: only A's orphan and one daemon remain.
    let d = Proc {
        tgid: 77,
        pid: 77,
        comm: "daemon".into(),
        cgroup_id: 77,
        workload: None,
        exe: None,
        runtime: None,
    };
    let out = e.apply(&scan(
        100_000,
        vec![
            scanned(11, fid(F1), P, &[a()], false),
            scanned(77, fid(77), "/run/d.sock", std::slice::from_ref(&d), true),
        ],
    ));
    assert_eq!(out, vec![]);
    let s = e.stats();
    assert_eq!((s.live_sockets, s.open_orphans), (2, 1));
    assert_eq!(e.owners(fid(77)), vec![d]);
}

#[test]
fn s12_directory_recreated_sockets_keyed_by_file_id_keep_working() {
    let path = "/run/d/a.sock";
    let mut e = engine();
    quiet(
        &mut e,
        &[
            bind(1000, &a(), fid(F1), 11, path),
            listen(1001, &a(), fid(F1), 11),
        ],
    );
    // The directory is removed from the host (one unlink per socket file) and re-created.
    let out = e.apply(&unlink_exact(
        2000,
        &host(),
        path,
        fid(F1),
        live(a().tgid, 11, false),
    ));
    assert_eq!(out.len(), 2);
    assert!(matches!(
        &out[0],
        Verdict::ForeignUnlink {
            relation: Relation::HostProcess,
            file,
            ..
        } if *file == fid(F1)
    ));
    // A binds again in the new directory: a new inode, and its orphan ends.
    assert_eq!(
        e.apply(&bind(3000, &a(), fid(F3), 33, path)),
        vec![closed(
            3000,
            2000,
            CloseReason::Rebound,
            a(),
            path,
            fid(F1),
            11
        )]
    );
    quiet(&mut e, &[listen(3001, &a(), fid(F3), 33)]);
    assert_eq!(e.socket_by_path(path)[0].file, fid(F3));
    // A path-only removal now names the new file, not the old one.
    assert_eq!(
        e.apply(&unlink_path(4000, &host(), path)),
        vec![
            foreign_unlink(
                4000,
                (host(), a(), Relation::HostProcess),
                path,
                (fid(F3), 33, 3000),
                ENGINE
            ),
            opened(
                4000,
                OrphanCause::Unlinked,
                a(),
                Some(host()),
                path,
                fid(F3),
                33
            ),
        ]
    );
}

#[test]
fn s13_one_socket_seen_under_two_paths_is_one_socket() {
    let host_path = "/run/x.sock";
    let pod_path = "/host/run/x.sock";
    let mut e = engine();
    quiet(
        &mut e,
        &[
            bind(1000, &host(), fid(F1), 11, host_path),
            listen(1001, &host(), fid(F1), 11),
            connect(1100, &c(), pod_path, 0, Some(fid(F1))),
        ],
    );
    assert_eq!(e.stats().sockets, 1);
    assert_eq!(e.socket_by_path(pod_path)[0].file, fid(F1));
    assert_eq!(e.socket_by_path(host_path)[0].file, fid(F1));
    // The pod removes it under its own path, seen by path only: still the one socket.
    assert_eq!(
        e.apply(&unlink_path(2000, &c(), pod_path)),
        vec![
            Verdict::ForeignUnlink {
                ts_ns: 2000,
                actor: c(),
                victim: host(),
                relation: Relation::HostProcess,
                path: pod_path.into(),
                victim_path: Some(host_path.into()),
                file: fid(F1),
                sock_ino: 11,
                listening: true,
                victim_bound_ns: 1000,
                decided_by: DecidedBy::Engine,
                fidelity: Fidelity::PathOnly,
                stale_owner: false,
            },
            opened(
                2000,
                OrphanCause::Unlinked,
                host(),
                Some(c()),
                host_path,
                fid(F1),
                11
            ),
        ]
    );
    assert!(e.socket_by_path(pod_path).is_empty());
}

#[test]
fn s13_one_path_two_mount_namespaces_is_two_sockets() {
    let path = "/tmp/app.sock";
    let other = FileId { dev: 0x2b, ino: F1 };
    let mut e = engine();
    quiet(
        &mut e,
        &[
            bind(1000, &a(), fid(F1), 11, path),
            bind(1001, &c(), other, 12, path),
            // Path only, but C owns one of the two: its own, quiet.
            unlink_path(2000, &c(), path),
            bind(2001, &c(), FileId { dev: 0x2b, ino: F2 }, 13, path),
            // Path only, owns neither and near neither: cannot say which.
            unlink_path(3000, &host(), path),
        ],
    );
    let s = e.stats();
    assert_eq!(
        (s.sockets, s.quiet.owner_unlink, s.ignored.unlink_ambiguous),
        (3, 1, 1)
    );
    assert!(e.socket(fid(F1)).expect("tracked").is_linked());
}

#[test]
fn s14_64_bit_inodes_are_not_truncated() {
    let big = FileId {
        dev: 0x1_0000_0801,
        ino: (1 << 32) + 7,
    };
    let small = FileId {
        dev: 0x1_0000_0801,
        ino: 7,
    };
    let big_sock = (1 << 33) + 1;
    let mut e = engine();
    quiet(
        &mut e,
        &[
            bind(1000, &a(), small, 1, "/run/small.sock"),
            bind(1001, &a(), big, big_sock, "/run/big.sock"),
            listen(1002, &a(), big, big_sock),
        ],
    );
    assert_eq!(e.stats().sockets, 2);
    let out = e.apply(&unlink_exact(
        2000,
        &b(),
        "/run/big.sock",
        big,
        live(a().tgid, big_sock, false),
    ));
    assert!(matches!(
        &out[0],
        Verdict::ForeignUnlink { file, sock_ino, .. } if *file == big && *sock_ino == big_sock
    ));
    let json = serde_json::to_string(&out[0]).expect("serializes");
    assert!(json.contains(r#""ino":4294967303"#), "{json}");
    assert!(json.contains(r#""sock_ino":8589934593"#), "{json}");
    assert!(e.socket(small).expect("tracked").is_linked());
    assert!(!e.socket(big).expect("tracked").is_linked());
}

/// S20: P also has the name P2. A stranger removing P2 (two links before) orphans nothing and
/// says nothing; removing P (its last link) is the foreign unlink, and A's orphan.
#[test]
fn s20_removing_one_of_two_names_is_not_an_orphan() {
    let p2 = "/run/multus/second-name";
    let mut e = engine();
    let two_links = live(a().tgid, 11, false).map(|l| LiveAtUnlink {
        links: Some(2),
        ..l
    });
    quiet(
        &mut e,
        &[
            bind(1000, &a(), fid(F1), 11, P),
            listen(1001, &a(), fid(F1), 11),
            unlink_exact(2000, &c(), p2, fid(F1), two_links),
        ],
    );
    assert_eq!(e.stats().quiet.link_removed, 1);
    assert!(e.orphans(2500).is_empty());
    let out = e.apply(&unlink_exact(
        3000,
        &c(),
        P,
        fid(F1),
        live(a().tgid, 11, false),
    ));
    assert_eq!(
        out,
        vec![
            foreign_unlink(
                3000,
                (c(), a(), Relation::Other),
                P,
                (fid(F1), 11, 1000),
                KERNEL
            ),
            opened(3000, OrphanCause::Unlinked, a(), Some(c()), P, fid(F1), 11),
        ]
    );
}
