//! Engine tests: one per scenario (S1–S14, `scenarios`), property tests (`props`), and the
//! smaller pieces (`units`). Fixtures and input builders live here.
mod claims;
mod handover;
mod props;
mod scenarios;
mod takeover;
mod units;

use super::{
    Engine, Limits, Verdict, inputs,
    model::{Fidelity, FileId, Input, LiveAtUnlink, Proc, ScanSnapshot, ScannedSocket, Workload},
};

pub const P: &str = "/run/multus/multus.sock";

pub fn fid(ino: u64) -> FileId {
    FileId { dev: 0x2a, ino }
}

fn pod(uid: &str, name: &str, workload: &str) -> Option<Workload> {
    Some(Workload {
        container_id: Some(format!("ctr-{uid}")),
        pod_uid: Some(uid.to_owned()),
        pod_name: Some(name.to_owned()),
        namespace: Some("kube-system".to_owned()),
        workload: Some(workload.to_owned()),
    })
}

/// Daemon A: the old multus pod.
pub fn a() -> Proc {
    Proc {
        tgid: 100,
        pid: 100,
        comm: "multus-daemon".into(),
        cgroup_id: 1001,
        workload: pod("uid-a", "multus-aaaaa", "multus"),
        exe: None,
        runtime: None,
    }
}

/// Daemon B: A's successor, same daemonset, another pod.
pub fn b() -> Proc {
    Proc {
        tgid: 200,
        pid: 200,
        comm: "multus-daemon".into(),
        cgroup_id: 2001,
        workload: pod("uid-b", "multus-bbbbb", "multus"),
        exe: None,
        runtime: None,
    }
}

/// A client in an unrelated workload.
pub fn c() -> Proc {
    Proc {
        tgid: 300,
        pid: 301,
        comm: "kubelet-plugin".into(),
        cgroup_id: 3001,
        workload: pod("uid-c", "client-ccccc", "client"),
        exe: None,
        runtime: None,
    }
}

/// A host process (no workload).
pub fn host() -> Proc {
    Proc {
        tgid: 400,
        pid: 400,
        comm: "rm".into(),
        cgroup_id: 1,
        workload: None,
        exe: None,
        runtime: None,
    }
}

/// A's forked worker, as the engine records it (the parent's details, the child's tgid).
pub fn worker_of_a() -> Proc {
    Proc {
        tgid: 101,
        pid: 101,
        ..a()
    }
}

/// An engine that reports every foreign removal at once (`takeover_window` 0): the tests of
/// ownership decisions. The takeover tests use [`windowed`].
pub fn engine() -> Engine {
    Engine::new(Limits::default())
        .expect("default limits are valid")
        .with_takeover_window(0)
}

/// The takeover window the tests use (the default's length).
pub const WINDOW: u64 = crate::engine::DEFAULT_TAKEOVER_WINDOW_NS;

/// An engine with the default takeover window.
pub fn windowed() -> Engine {
    Engine::new(Limits::default()).expect("default limits are valid")
}

pub fn bind(ts_ns: u64, p: &Proc, file: FileId, sock_ino: u64, path: &str) -> Input {
    Input::Bind(inputs::Bind {
        ts_ns,
        proc: p.clone(),
        file,
        sock_ino,
        path: path.into(),
    })
}

pub fn listen(ts_ns: u64, p: &Proc, file: FileId, sock_ino: u64) -> Input {
    Input::Listen(inputs::Socket {
        ts_ns,
        proc: p.clone(),
        file,
        sock_ino,
    })
}

pub fn release(ts_ns: u64, p: &Proc, file: FileId, sock_ino: u64) -> Input {
    Input::Release(inputs::Socket {
        ts_ns,
        proc: p.clone(),
        file,
        sock_ino,
    })
}

/// An unlink seen by the kernel tier, with its decision about the socket (if one is bound).
pub fn unlink_exact(
    ts_ns: u64,
    p: &Proc,
    path: &str,
    file: FileId,
    live: Option<LiveAtUnlink>,
) -> Input {
    Input::Unlink(inputs::Unlink {
        ts_ns,
        proc: p.clone(),
        path: path.into(),
        file: Some(file),
        fidelity: Fidelity::Exact,
        live,
    })
}

/// An unlink seen by the tracepoint tier: the path only.
pub fn unlink_path(ts_ns: u64, p: &Proc, path: &str) -> Input {
    Input::Unlink(inputs::Unlink {
        ts_ns,
        proc: p.clone(),
        path: path.into(),
        file: None,
        fidelity: Fidelity::PathOnly,
        live: None,
    })
}

pub fn live(owner_tgid: u32, sock_ino: u64, holds: bool) -> Option<LiveAtUnlink> {
    Some(LiveAtUnlink {
        owner_tgid,
        sock_ino,
        listening: true,
        unlinker_holds_fd: Some(holds),
        links: Some(1),
    })
}

pub fn connect(ts_ns: u64, p: &Proc, path: &str, errno: i32, target: Option<FileId>) -> Input {
    Input::Connect(inputs::Connect {
        ts_ns,
        proc: p.clone(),
        path: path.into(),
        errno,
        target,
        target_nlink: None,
        target_bound: None,
        target_listening: None,
    })
}

/// A connect with the kernel's view of the target inode.
pub fn connect_seen(
    ts_ns: u64,
    p: &Proc,
    path: &str,
    errno: i32,
    target: FileId,
    (nlink, bound, listening): (u32, bool, bool),
) -> Input {
    Input::Connect(inputs::Connect {
        ts_ns,
        proc: p.clone(),
        path: path.into(),
        errno,
        target: Some(target),
        target_nlink: Some(nlink),
        target_bound: Some(bound),
        target_listening: Some(listening),
    })
}

pub fn fork(ts_ns: u64, parent: &Proc, child_tgid: u32) -> Input {
    Input::Fork(inputs::Fork {
        ts_ns,
        parent: parent.clone(),
        child_tgid,
    })
}

pub fn exit(ts_ns: u64, tgid: u32) -> Input {
    Input::Exit(inputs::Exit { ts_ns, tgid })
}

pub fn fd_received(ts_ns: u64, p: &Proc, file: FileId, sock_ino: u64) -> Input {
    Input::FdReceived(inputs::Socket {
        ts_ns,
        proc: p.clone(),
        file,
        sock_ino,
    })
}

pub fn scanned(
    sock_ino: u64,
    file: FileId,
    path: &str,
    holders: &[Proc],
    linked: bool,
) -> ScannedSocket {
    ScannedSocket {
        sock_ino,
        file: Some(file),
        path: path.into(),
        listening: true,
        holders: holders.to_vec(),
        file_linked: Some(linked),
        outside_watch: false,
    }
}

pub fn scan(ts_ns: u64, sockets: Vec<ScannedSocket>) -> Input {
    Input::Scan(ScanSnapshot {
        ts_ns,
        sockets,
        complete: true,
        unreadable: None,
    })
}

/// Applies inputs that must cause no verdict.
pub fn quiet(e: &mut Engine, inputs: &[Input]) {
    for i in inputs {
        assert_eq!(
            e.apply(i),
            Vec::<Verdict>::new(),
            "expected no verdict for {i:?}"
        );
    }
}
