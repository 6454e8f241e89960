//! Paths served again, by outcome: the owner re-binding (S24), a successor of the same
//! workload renaming its socket over the old one (S23, S5), another workload (a hijack).
use super::*;
use crate::engine::{
    CloseReason, DecidedBy, HandOver, OrphanCause, Relation, ServedBy, Verdict, model::Fidelity,
};

const F1: u64 = 10;
const F2: u64 = 20;
const NEW: &str = "/run/multus/multus.sock.200.tmp";

fn host_proc(tgid: u32, comm: &str, exe: &str) -> Proc {
    Proc {
        tgid,
        pid: tgid,
        comm: comm.into(),
        cgroup_id: 1,
        workload: None,
        exe: Some(exe.into()),
        runtime: None,
    }
}

/// `who` renames its socket F2 (bound at [`NEW`]) over A's live F1 at P, as HAProxy's
/// reload does; `exact` says which tier saw it.
fn rename_over(who: &Proc, exact: bool) -> Input {
    Input::Rename(inputs::Rename {
        ts_ns: 3000,
        proc: who.clone(),
        moved: Some(fid(F2)),
        from: Some(NEW.into()),
        to: P.into(),
        exchange: false,
        replaced: exact.then_some(fid(F1)),
        fidelity: if exact {
            Fidelity::Exact
        } else {
            Fidelity::PathOnly
        },
        live: if exact {
            live(a().tgid, 11, false).map(|mut l| {
                // The `.bak` link HAProxy made first: two names before the rename.
                l.links = Some(2);
                l
            })
        } else {
            None
        },
    })
}

/// A listens on P (F1), `next` on [`NEW`] (F2).
fn two_listeners(e: &mut Engine, next: &Proc) {
    quiet(
        e,
        &[
            bind(1000, &a(), fid(F1), 11, P),
            listen(1001, &a(), fid(F1), 11),
            bind(2000, next, fid(F2), 22, NEW),
            listen(2001, next, fid(F2), 22),
        ],
    );
}

fn orphan(cause: OrphanCause, remover: &Proc, successor: &Proc) -> Verdict {
    Verdict::OrphanOpened {
        ts_ns: 3000,
        since_ns: 3000,
        since_exact: true,
        cause,
        owner: a(),
        removed_by: Some(remover.clone()),
        successor: Some(successor.clone()),
        path: Some(P.into()),
        file: fid(F1),
        sock_ino: 11,
    }
}

/// S23 (and S5 by the same workload): B, of A's daemonset, renames its socket over A's: a
/// takeover served throughout, A's listener a `taken_over` orphan; no `replaced`, no
/// `moved`; P leads to B's socket. On the exact tiers HAProxy's later removal of its `.bak`
/// name of A's file is quiet.
#[test]
fn s23_a_rename_hand_over_by_the_same_workload_is_a_takeover() {
    for exact in [true, false] {
        let mut e = windowed();
        two_listeners(&mut e, &b());
        let (decided_by, fidelity) = if exact {
            (DecidedBy::Kernel, Fidelity::Exact)
        } else {
            (DecidedBy::Engine, Fidelity::PathOnly)
        };
        assert_eq!(
            e.apply(&rename_over(&b(), exact)),
            vec![
                Verdict::Takeover {
                    ts_ns: 3000,
                    remover: b(),
                    predecessor: a(),
                    successor: b(),
                    relation: Relation::SameWorkloadOtherPod,
                    successor_relation: Relation::SameProcess,
                    served_by: ServedBy::Workload,
                    how: HandOver::Rename,
                    path: P.into(),
                    old_file: fid(F1),
                    new_file: fid(F2),
                    old_sock_ino: 11,
                    new_sock_ino: 22,
                    gap_ns: 0,
                    decided_by,
                    fidelity,
                },
                orphan(OrphanCause::TakenOver, &b(), &b()),
            ],
            "exact: {exact}"
        );
        assert_eq!(e.socket_by_path(P)[0].file, fid(F2));
        if exact {
            let bak = unlink_exact(3001, &b(), "/run/multus/multus.sock.200.bak", fid(F1), {
                live(a().tgid, 11, false)
            });
            quiet(&mut e, &[bak]);
            assert_eq!(e.stats().quiet.link_removed, 1);
        }
        assert_eq!(
            e.apply(&release(4000, &a(), fid(F1), 11))[0],
            Verdict::OrphanClosed {
                ts_ns: 4000,
                since_ns: 3000,
                duration_ns: 1000,
                reason: CloseReason::Released,
                owner: a(),
                path: Some(P.into()),
                file: fid(F1),
                sock_ino: 11,
            }
        );
        assert!(e.flush().is_empty());
    }
}

/// A daemon renaming a new socket of its own over its old one: served by its owner.
#[test]
fn a_daemons_own_rename_hand_over_is_served_by_its_owner() {
    let mut e = windowed();
    two_listeners(&mut e, &a());
    let out = e.apply(&rename_over(&a(), false));
    assert!(
        matches!(
            &out[..],
            [
                Verdict::Takeover {
                    served_by: ServedBy::Owner,
                    how: HandOver::Rename,
                    ..
                },
                Verdict::OrphanOpened {
                    cause: OrphanCause::TakenOver,
                    ..
                }
            ]
        ),
        "{out:#?}"
    );
}

/// Another workload's socket renamed over A's: a hijack naming all three, A's listener a
/// `hijacked` orphan.
#[test]
fn a_rename_over_by_another_workload_is_a_hijack() {
    let mut e = windowed();
    two_listeners(&mut e, &c());
    let out = e.apply(&rename_over(&c(), true));
    assert_eq!(
        out,
        vec![
            Verdict::Hijack {
                ts_ns: 3000,
                remover: c(),
                victim: a(),
                successor: c(),
                relation: Relation::Other,
                how: HandOver::Rename,
                path: P.into(),
                victim_path: Some(P.into()),
                old_file: fid(F1),
                new_file: fid(F2),
                old_sock_ino: 11,
                new_sock_ino: 22,
                gap_ns: 0,
                decided_by: DecidedBy::Kernel,
                fidelity: Fidelity::Exact,
            },
            orphan(OrphanCause::Hijacked, &c(), &c()),
        ]
    );
}

/// S24: kubelet empties `device-plugins/`; the plugin closes its server and binds its own
/// path again within the window: a takeover served by the owner, naming kubelet; nothing
/// alerts. A plugin that does not come back is the foreign unlink it looked like.
#[test]
fn s24_a_plugin_re_registering_after_kubelet_emptied_its_directory_is_served_by_its_owner() {
    let plugin_path = "/var/lib/kubelet/device-plugins/gpu.sock";
    let plugin = host_proc(500, "gpu-plugin", "/usr/bin/gpu-plugin");
    let kubelet = host_proc(600, "kubelet", "/usr/bin/kubelet");
    let mut e = windowed();
    quiet(
        &mut e,
        &[
            bind(1000, &plugin, fid(F1), 11, plugin_path),
            listen(1001, &plugin, fid(F1), 11),
            unlink_path(2000, &kubelet, plugin_path),
            release(2100, &plugin, fid(F1), 11),
        ],
    );
    // The file system handed the freed inode number to the new file: only the socket differs.
    let out = e.apply(&bind(2300, &plugin, fid(F1), 22, plugin_path));
    assert!(
        matches!(
            &out[..],
            [Verdict::Takeover {
                served_by: ServedBy::Owner,
                how: HandOver::Rebind,
                gap_ns: 300,
                remover,
                predecessor,
                successor,
                ..
            }] if *remover == kubelet && *predecessor == plugin && *successor == plugin
        ),
        "{out:#?}"
    );
    assert!(e.flush().is_empty());

    let mut e = windowed();
    quiet(
        &mut e,
        &[
            bind(1000, &plugin, fid(F1), 11, plugin_path),
            listen(1001, &plugin, fid(F1), 11),
            unlink_path(2000, &kubelet, plugin_path),
        ],
    );
    let names: Vec<&str> = e.flush().iter().map(Verdict::name).collect();
    assert_eq!(names, ["foreign_unlink", "orphan_opened"]);
}

/// An unrelated program removes a live listener's file and binds its own socket there
/// (socat's `unlink-early`): a hijack, warning, naming remover, victim and successor; the
/// same program's successor (a rolling restart) stays a takeover.
#[test]
fn a_stranger_that_removes_and_binds_is_a_hijack_not_a_takeover() {
    let python = |t| host_proc(t, "python3", "/usr/bin/python3.11");
    let socat = host_proc(700, "socat", "/usr/bin/socat");
    let path = "/run/app/app.sock";
    for (successor, want) in [(socat.clone(), "hijack"), (python(701), "takeover")] {
        let mut e = windowed();
        quiet(
            &mut e,
            &[
                bind(1000, &python(650), fid(F1), 11, path),
                listen(1001, &python(650), fid(F1), 11),
                unlink_path(2000, &successor, path),
            ],
        );
        let out = e.apply(&bind(2001, &successor, fid(F2), 22, path));
        assert_eq!(out[0].name(), want, "{out:#?}");
        if let Verdict::Hijack {
            remover,
            victim,
            successor: s,
            ..
        } = &out[0]
        {
            assert_eq!((remover, victim, s), (&socat, &python(650), &socat));
            assert!(matches!(
                out[1],
                Verdict::OrphanOpened {
                    cause: OrphanCause::Hijacked,
                    ..
                }
            ));
        }
    }
}
