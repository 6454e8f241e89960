//! Userspace completion of events the kernel could not fully resolve.
//!
//! A refused connect carries the path, but on kernels where `unix_find_other` is inlined
//! (and on the tracepoint tier) not the inode it resolved to. The client's own view of that
//! path — its mount namespace, bind mounts included — is `/proc/<tgid>/task/<tid>/root/<path>`
//! (or `cwd` for a relative path; a thread may have its own, after `unshare`): `stat` there
//! gives the inode and its link count, and the
//! kernel's live table says whether a socket is bound to it. A client that has already
//! exited (an exec probe) is stood in for by any live process of the mount namespace the
//! kernel recorded ([`MntnsIndex`]): `/proc/<pid>/root/<path>` shows the same mounts. Only
//! absolute paths resolve that way; a relative one needs the client's own working directory.
//! A pinned stale inode stays pinned, so this is reliable for the persistent failure that
//! matters. Every such lookup runs under a deadline, and never into a FUSE or network
//! filesystem ([`lookup`]): the target is then left unresolved, as the kernel gave it.
#![deny(clippy::string_slice, clippy::indexing_slicing)]
use std::{
    fs::Metadata,
    io,
    os::unix::fs::{FileTypeExt, MetadataExt},
    path::PathBuf,
};

use sockwatch_common::{EventKind, FileId, LiveSock, flags};

use crate::{
    attribution::Attributor,
    events::{EventLine, KernelEvent, dirs::KnownDirs, mntns::MntnsIndex},
    host::lookup::{self, Lookup},
};

/// Looks a file up in the kernel's table of live sockets.
pub type LiveLookup<'a> = &'a dyn Fn(&FileId) -> Option<LiveSock>;

/// What userspace adds to kernel events: relative paths made absolute, the target of a
/// refused connect, and the acting process's container and pod.
#[derive(Default)]
pub struct Completer {
    dirs: KnownDirs,
    /// pid -> container and pod; absent when the events come from a log that carries it.
    attributor: Option<Attributor>,
    /// Mount namespace -> live processes, to resolve connects of clients already gone.
    namespaces: MntnsIndex,
}

impl Completer {
    /// Completion for live events: attributes every process.
    pub fn attributing() -> Self {
        Self {
            dirs: KnownDirs::default(),
            attributor: Some(Attributor::default()),
            namespaces: MntnsIndex::default(),
        }
    }

    /// Learns that directory `dir` is at absolute path `path` (from a scan).
    pub fn learn_dir(&mut self, dir: FileId, path: &str) {
        self.dirs.learn_dir(dir, path);
    }

    /// The one completion step; `live` looks a file up in the kernel's live table.
    pub fn complete(&mut self, mut ev: KernelEvent, live: Option<LiveLookup>) -> EventLine {
        if let Some(path) = self.dirs.resolve(&ev) {
            ev.path = path;
        }
        if let Some(path) = self.dirs.resolve_old_name(&ev) {
            ev.from_path = Some(path);
        }
        let mut moved = None;
        if let Some(live) = live {
            self.learn_namespace(&ev);
            connect_target(&mut ev, live, &mut self.namespaces);
            moved = moved_into_place(&mut ev);
        }
        if ev.kind == EventKind::Exit {
            self.namespaces.forget(ev.tgid);
        }
        let (mut workload, mut exe, mut runtime) = (None, None, None);
        if let Some(a) = self.attributor.as_mut() {
            workload = a.workload(ev.tgid);
            // A binder's program decides who serves a path again; a remover's runtime names
            // the cause of a stale owner's unlink (its binds read it already: cached).
            if matches!(
                ev.kind,
                EventKind::Bind | EventKind::Unlink | EventKind::Rename
            ) {
                let program = a.program(ev.tgid, &ev.comm);
                runtime = program.runtime;
                exe = program.exe.filter(|_| ev.kind == EventKind::Bind);
            }
            if ev.kind == EventKind::Exit {
                a.forget(ev.tgid);
            }
        }
        EventLine {
            event: ev,
            workload,
            moved,
            exe,
            runtime,
            seen_in: None,
        }
    }
}

impl Completer {
    /// A process that binds or listens is usually a long-lived member of its mount namespace.
    fn learn_namespace(&mut self, ev: &KernelEvent) {
        if matches!(ev.kind, EventKind::Bind | EventKind::Listen) {
            self.namespaces.learn_pid(ev.tgid);
        }
    }
}

/// The socket file a rename put at an absolute path: what the actor's view shows there.
fn moved_into_place(ev: &mut KernelEvent) -> Option<FileId> {
    if ev.kind != EventKind::Rename || !ev.path.starts_with('/') {
        return None;
    }
    let looked = lookup::in_view(
        Lookup::RenamedFile,
        thread_dir(ev.tgid, ev.pid),
        &ev.path,
        |p| std::fs::metadata(p),
    );
    ev.flags.lookup_failed = looked.is_err();
    let meta = looked.ok()?.ok()?;
    meta.file_type().is_socket().then(|| FileId {
        dev: meta.dev(),
        ino: meta.ino(),
    })
}

/// The `/proc` directory of thread `tid` of process `tgid`: its own root, working directory
/// and mounts (a thread may have its own, after `unshare`).
fn thread_dir(tgid: u32, tid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{tgid}/task/{tid}"))
}

/// What a connect's `path` names as the process or thread of `proc_dir` (in mount namespace
/// `mntns`, when known) sees it, under the lookup deadline and never into a FUSE or network
/// filesystem.
fn target_in_view(proc_dir: PathBuf, mntns: Option<u32>, path: &str) -> Looked {
    let stat = |p: &std::path::Path| std::fs::metadata(p);
    let looked = match mntns {
        Some(ns) => lookup::in_namespace_view(Lookup::ConnectTarget, proc_dir, ns, path, stat),
        None => lookup::in_view(Lookup::ConnectTarget, proc_dir, path, stat),
    };
    looked.map(io::Result::ok)
}

/// Fills in the target of a refused connect the kernel left unresolved.
pub fn connect_target(ev: &mut KernelEvent, live: LiveLookup, namespaces: &mut MntnsIndex) {
    if ev.kind != EventKind::Connect || ev.flags.target_bound || ev.ino != 0 {
        return;
    }
    let meta = match target_meta(ev, namespaces) {
        Ok(Some(meta)) => meta,
        Ok(None) => return,
        Err(_) => {
            ev.flags.lookup_failed = true;
            return;
        }
    };
    if !meta.file_type().is_socket() {
        return;
    }
    ev.dev = meta.dev();
    ev.ino = meta.ino();
    ev.nlink = meta.nlink() as u32;
    ev.flags.resolved_in_userspace = true;
    if let Some(l) = live(&FileId {
        dev: ev.dev,
        ino: ev.ino,
    }) {
        ev.flags.target_bound = true;
        ev.flags.listening = l.flags & flags::LISTENING != 0;
        ev.sock_ino = l.sock_ino;
        ev.owner = Some(l.owner);
    }
}

/// A file's metadata, `None` when it cannot be read; or why the lookup gave no answer.
type Looked = Result<Option<Metadata>, lookup::Failure>;

/// What the connect's path names in the client's view, or (the client gone) in the view of
/// a live process of the client's mount namespace. A failed lookup ends the search: the
/// other views lead to the same filesystem.
fn target_meta(ev: &KernelEvent, namespaces: &mut MntnsIndex) -> Looked {
    let Some(ns) = ev.mntns else {
        return target_in_view(thread_dir(ev.tgid, ev.pid), None, &ev.path);
    };
    // The client's own view only while its thread is still in that namespace (pid reuse).
    if namespaces.thread_in(ns, ev.tgid, ev.pid) {
        let found = target_in_view(thread_dir(ev.tgid, ev.pid), Some(ns), &ev.path)?;
        if found.is_some() {
            namespaces.learn_pid(ev.tgid);
            return Ok(found);
        }
    }
    if !ev.path.starts_with('/') {
        return Ok(None);
    }
    for p in namespaces.members(ns, ev.ts_ns) {
        let view = PathBuf::from(format!("/proc/{p}"));
        if let Some(meta) = target_in_view(view, Some(ns), &ev.path)? {
            return Ok(Some(meta));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::host::procfs;

    /// A refused connect by a client that is gone (pid `u32::MAX` never exists).
    fn refused_by_gone_client(path: &str, mntns: u32) -> KernelEvent {
        serde_json::from_value(serde_json::json!({
            "kind": "connect", "tier": "tracepoint", "fidelity": "path_only", "ts_ns": 1,
            "tgid": u32::MAX, "pid": u32::MAX, "comm": "probe", "cgroup_id": 0, "dev": 0,
            "ino": 0, "sock_ino": 0, "nlink": 0, "path": path, "ret": -111, "mntns": mntns,
        }))
        .expect("a KernelEvent")
    }

    #[test]
    fn a_gone_clients_target_is_found_through_its_mount_namespace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("dead.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        drop(listener); // the file stays, nothing bound: a dead listener's file
        let meta = std::fs::metadata(&path).expect("stat");
        let mut namespaces = MntnsIndex::default();
        let ns = procfs::ns_id(Path::new("/proc"), std::process::id(), "mnt")
            .expect("own namespace")
            .expect("a mount namespace") as u32;
        let path = path.to_str().expect("utf-8");

        let mut ev = refused_by_gone_client(path, ns);
        connect_target(&mut ev, &|_| None, &mut namespaces);
        assert_eq!((ev.dev, ev.ino, ev.nlink), (meta.dev(), meta.ino(), 1));
        assert!(ev.flags.resolved_in_userspace && !ev.flags.target_bound);

        // Without a namespace, only the (gone) client's own view would do.
        let mut ev = refused_by_gone_client(path, ns);
        ev.mntns = None;
        connect_target(&mut ev, &|_| None, &mut namespaces);
        assert_eq!(ev.ino, 0);
    }
}
