//! Kernel events to engine inputs: the one place that knows both vocabularies.
use sockwatch_common::EventKind;

use crate::{
    engine::{
        Fidelity, FileId, GuardDecision, GuardPolicy, Input, LiveAtUnlink, Proc, RemovalOp, inputs,
    },
    events::{EventLine, KernelEvent},
};

/// The engine input for one kernel event; its strings move into the input, uncopied.
pub fn to_input(line: EventLine) -> Input {
    let EventLine {
        event: mut ev,
        workload,
        moved,
        exe,
        runtime,
        seen_in: _,
    } = line;
    let ts_ns = ev.ts_ns;
    let (path, from_path) = (std::mem::take(&mut ev.path), ev.from_path.take());
    let proc = Proc {
        workload,
        exe,
        runtime,
        ..actor(&mut ev)
    };
    let file = FileId {
        dev: ev.dev,
        ino: ev.ino,
    };
    let fidelity = ev.fidelity;
    let exact = fidelity == Fidelity::Exact;
    let live = kernel_decision(&ev);
    let seen = |yes: bool| (exact && yes).then_some(file);
    match ev.kind {
        EventKind::Bind => Input::Bind(inputs::Bind {
            ts_ns,
            proc,
            file,
            sock_ino: ev.sock_ino,
            path,
        }),
        EventKind::Listen | EventKind::Release | EventKind::Receive => {
            socket_input(ev.kind, ts_ns, proc, file, ev.sock_ino)
        }
        EventKind::Unlink | EventKind::Rename if ev.flags.denied => {
            denied_input(&ev, proc, path, file)
        }
        EventKind::Unlink => Input::Unlink(inputs::Unlink {
            ts_ns,
            proc,
            path,
            file: seen(ev.ino != 0),
            fidelity,
            live,
        }),
        EventKind::Rename => Input::Rename(inputs::Rename {
            ts_ns,
            proc,
            moved: ev.from.or(moved),
            from: from_path,
            to: path,
            exchange: ev.flags.exchange,
            replaced: seen(ev.ino != 0),
            fidelity,
            live,
        }),
        EventKind::Connect => connect_input(&ev, proc, path, file),
        EventKind::Fork => Input::Fork(inputs::Fork {
            ts_ns,
            parent: proc,
            child_tgid: ev.child_tgid.unwrap_or(0),
        }),
        EventKind::Exit => Input::Exit(inputs::Exit {
            ts_ns,
            tgid: ev.tgid,
        }),
    }
}

/// A socket's listen, close or receipt (SCM_RIGHTS): the same facts for each.
fn socket_input(kind: EventKind, ts_ns: u64, proc: Proc, file: FileId, sock_ino: u64) -> Input {
    match kind {
        EventKind::Listen => Input::Listen(inputs::Socket {
            ts_ns,
            proc,
            file,
            sock_ino,
        }),
        EventKind::Release => Input::Release(inputs::Socket {
            ts_ns,
            proc,
            file,
            sock_ino,
        }),
        _ => Input::FdReceived(inputs::Socket {
            ts_ns,
            proc,
            file,
            sock_ino,
        }),
    }
}

/// The acting process as the kernel named it (its command name moved out of `ev`).
fn actor(ev: &mut KernelEvent) -> Proc {
    Proc {
        tgid: ev.tgid,
        pid: ev.pid,
        comm: std::mem::take(&mut ev.comm),
        cgroup_id: ev.cgroup_id,
        workload: None,
        exe: None,
        runtime: None,
    }
}

/// What the kernel decided about the live socket an unlink or rename removed. Only a
/// positive kernel answer is trusted: a socket bound before the agent started may be
/// missing from the kernel's table until the startup scan seeds it.
fn kernel_decision(ev: &KernelEvent) -> Option<LiveAtUnlink> {
    (ev.fidelity == Fidelity::Exact && ev.flags.live).then(|| LiveAtUnlink {
        owner_tgid: ev.owner.map_or(0, |o| o.tgid),
        sock_ino: ev.sock_ino,
        listening: ev.flags.listening,
        unlinker_holds_fd: (!ev.flags.owners_partial).then_some(ev.flags.holds_fd),
        links: (ev.nlink > 0).then_some(ev.nlink),
    })
}

/// The guard's audit of a removal it would have refused (`would_deny`), for the engine
/// before the removal itself; `None` for every other event.
pub fn would_deny_input(line: &EventLine) -> Option<Input> {
    let ev = &line.event;
    if !ev.flags.would_deny || !matches!(ev.kind, EventKind::Unlink | EventKind::Rename) {
        return None;
    }
    let proc = Proc {
        tgid: ev.tgid,
        pid: ev.pid,
        comm: ev.comm.clone(),
        cgroup_id: ev.cgroup_id,
        workload: line.workload.clone(),
        exe: line.exe.clone(),
        runtime: line.runtime,
    };
    let file = FileId {
        dev: ev.dev,
        ino: ev.ino,
    };
    let mut input = denied_input(ev, proc, ev.path.clone(), file);
    if let Input::Denied(inputs::Denied { decision, .. }) = &mut input {
        *decision = GuardDecision::WouldDeny;
    }
    Some(input)
}

/// A removal the guard refused: the kernel saw the listener it kept, so `live` is set.
fn denied_input(ev: &KernelEvent, proc: Proc, path: String, file: FileId) -> Input {
    let operation = match ev.kind {
        EventKind::Rename => RemovalOp::Rename,
        _ => RemovalOp::Unlink,
    };
    Input::Denied(inputs::Denied {
        ts_ns: ev.ts_ns,
        proc,
        path,
        file,
        operation,
        policy: ev.guard_policy.unwrap_or(GuardPolicy::StaleOwner),
        decision: GuardDecision::Denied,
        live: kernel_decision(ev).unwrap_or(LiveAtUnlink {
            owner_tgid: ev.owner.map_or(0, |o| o.tgid),
            sock_ino: ev.sock_ino,
            listening: true,
            unlinker_holds_fd: Some(false),
            links: None,
        }),
    })
}

/// A refused (or counted) connect: what the kernel, or userspace completion, saw of its
/// target.
fn connect_input(ev: &KernelEvent, proc: Proc, path: String, file: FileId) -> Input {
    let resolved = ev.ino != 0;
    let known = ev.flags.target_seen || ev.flags.resolved_in_userspace;
    Input::Connect(inputs::Connect {
        ts_ns: ev.ts_ns,
        proc,
        path,
        errno: -ev.ret,
        target: resolved.then_some(file),
        target_nlink: resolved.then_some(ev.nlink),
        target_bound: known.then_some(ev.flags.target_bound),
        target_listening: (known && ev.flags.target_bound).then_some(ev.flags.listening),
    })
}

#[cfg(test)]
mod tests {
    use sockwatch_common::Tier;

    use super::*;
    use sockwatch_common::Owner;

    /// `e` as the pump hands it on when userspace added nothing to it.
    fn bare(e: &KernelEvent) -> EventLine {
        EventLine {
            event: e.clone(),
            workload: None,
            moved: None,
            exe: None,
            runtime: None,
            seen_in: None,
        }
    }

    fn input(e: &KernelEvent) -> Input {
        to_input(bare(e))
    }

    fn ev(kind: EventKind) -> KernelEvent {
        KernelEvent {
            tier: Tier::Fentry,
            fidelity: Fidelity::Exact,
            ts_ns: 10,
            tgid: 412,
            pid: 413,
            comm: "multus".into(),
            cgroup_id: 7,
            dev: 0x801,
            ino: 1 << 40,
            sock_ino: 99,
            ..KernelEvent::sample(kind, "/run/multus/multus.sock")
        }
    }

    /// An exact unlink of the listening socket process 977 bound.
    fn live_listener_removed() -> KernelEvent {
        let mut e = ev(EventKind::Unlink);
        e.flags.live = true;
        e.flags.listening = true;
        e.owner = Some(Owner {
            _pad: 0,
            tgid: 977,
            cgroup_id: 8,
            bind_ns: 1,
        });
        e
    }

    #[test]
    fn exact_unlink_of_a_live_socket_carries_the_kernel_decision() {
        let mut e = live_listener_removed();
        e.nlink = 1;
        let Input::Unlink(inputs::Unlink {
            file,
            fidelity,
            live,
            proc,
            ..
        }) = input(&e)
        else {
            panic!("unlink")
        };
        assert_eq!(
            file,
            Some(FileId {
                dev: 0x801,
                ino: 1 << 40
            })
        );
        assert_eq!(fidelity, Fidelity::Exact);
        assert_eq!(proc.tgid, 412);
        assert_eq!(
            live,
            Some(LiveAtUnlink {
                owner_tgid: 977,
                sock_ino: 99,
                listening: true,
                unlinker_holds_fd: Some(false),
                links: Some(1),
            })
        );
    }

    #[test]
    fn a_refused_removal_is_a_denial_with_the_listener_it_kept() {
        let mut e = live_listener_removed();
        e.tier = Tier::Lsm;
        e.ret = -1;
        e.flags.denied = true;
        e.guard_policy = Some(GuardPolicy::StaleOwner);
        let Input::Denied(inputs::Denied {
            file,
            operation,
            policy,
            live,
            path,
            ..
        }) = input(&e)
        else {
            panic!("a denial, not {:?}", input(&e))
        };
        assert_eq!((file.dev, file.ino), (0x801, 1 << 40));
        assert_eq!(path, "/run/multus/multus.sock");
        assert_eq!(
            (operation, policy, live.owner_tgid, live.sock_ino),
            (RemovalOp::Unlink, GuardPolicy::StaleOwner, 977, 99)
        );
        e.kind = EventKind::Rename;
        assert!(matches!(
            input(&e),
            Input::Denied(inputs::Denied {
                operation: RemovalOp::Rename,
                ..
            })
        ));
    }

    #[test]
    fn an_audited_removal_is_its_would_deny_then_the_removal() {
        let mut e = live_listener_removed();
        e.tier = Tier::Lsm;
        e.flags.would_deny = true;
        e.guard_policy = Some(GuardPolicy::StaleOwner);
        let line = bare(&e);
        let Some(Input::Denied(inputs::Denied {
            decision,
            policy,
            live,
            ..
        })) = would_deny_input(&line)
        else {
            panic!("an audit")
        };
        assert_eq!(
            (decision, policy, live.owner_tgid),
            (GuardDecision::WouldDeny, GuardPolicy::StaleOwner, 977)
        );
        assert!(matches!(input(&e), Input::Unlink(_)), "then the removal");
        e.flags.would_deny = false;
        assert!(would_deny_input(&bare(&e)).is_none());
    }

    #[test]
    fn a_partial_owner_check_leaves_ownership_to_the_engine() {
        let mut e = ev(EventKind::Unlink);
        e.flags.live = true;
        e.flags.owners_partial = true;
        let Input::Unlink(inputs::Unlink { live, .. }) = input(&e) else {
            panic!("unlink")
        };
        assert_eq!(live.map(|l| l.unlinker_holds_fd), Some(None));
    }

    #[test]
    fn path_only_unlink_leaves_the_decision_to_the_engine() {
        let mut e = ev(EventKind::Unlink);
        e.fidelity = Fidelity::PathOnly;
        e.dev = 0;
        e.ino = 0;
        let Input::Unlink(inputs::Unlink {
            file,
            fidelity,
            live,
            ..
        }) = input(&e)
        else {
            panic!("unlink")
        };
        assert_eq!((file, fidelity, live), (None, Fidelity::PathOnly, None));
    }

    #[test]
    fn a_rename_carries_the_file_moved_and_an_exchange_both_names() {
        let mut e = ev(EventKind::Rename);
        let moved = FileId { dev: 3, ino: 44 };
        e.from = Some(moved);
        e.from_path = Some("/run/old.sock".into());
        e.flags.exchange = true;
        let Input::Rename(inputs::Rename {
            moved: m,
            from,
            exchange,
            replaced,
            ..
        }) = input(&e)
        else {
            panic!("rename")
        };
        assert_eq!(m, Some(moved));
        assert_eq!(from.as_deref(), Some("/run/old.sock"));
        assert!(exchange && replaced.is_some());
    }

    #[test]
    fn refused_connects_say_what_is_known_of_the_target() {
        let mut e = ev(EventKind::Connect);
        e.ret = -111;
        e.nlink = 0;
        e.flags.target_seen = true;
        let Input::Connect(inputs::Connect {
            errno,
            target,
            target_nlink,
            target_bound,
            target_listening,
            ..
        }) = input(&e)
        else {
            panic!("connect")
        };
        assert_eq!(
            (errno, target_nlink, target_bound, target_listening),
            (111, Some(0), Some(false), None)
        );
        assert_eq!(
            target,
            Some(FileId {
                dev: 0x801,
                ino: 1 << 40
            })
        );
        // The lookup unseen (inlined, or the tracepoint tier), unresolved: nothing known.
        e.flags.target_seen = false;
        e.ino = 0;
        let Input::Connect(inputs::Connect {
            target,
            target_bound,
            ..
        }) = input(&e)
        else {
            panic!("connect")
        };
        assert_eq!((target, target_bound), (None, None));
    }

    #[test]
    fn a_received_socket_names_the_receiver_and_the_socket() {
        let Input::FdReceived(inputs::Socket {
            ts_ns,
            proc,
            file,
            sock_ino,
        }) = input(&ev(EventKind::Receive))
        else {
            panic!("fd received")
        };
        assert_eq!((ts_ns, proc.tgid, proc.pid, sock_ino), (10, 412, 413, 99));
        assert_eq!(proc.comm, "multus");
        assert_eq!(
            file,
            FileId {
                dev: 0x801,
                ino: 1 << 40
            }
        );
    }

    #[test]
    fn fork_and_exit() {
        let mut e = ev(EventKind::Fork);
        e.child_tgid = Some(500);
        assert!(
            matches!(input(&e), Input::Fork(inputs::Fork { child_tgid: 500, parent, .. }) if parent.tgid == 412)
        );
        assert_eq!(
            input(&ev(EventKind::Exit)),
            Input::Exit(inputs::Exit {
                ts_ns: 10,
                tgid: 412
            })
        );
    }
}
