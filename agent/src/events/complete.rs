//! Userspace completion of events the kernel could not fully resolve.
//!
//! A refused connect carries the path, but on kernels where `unix_find_other` is inlined
//! (and on the tracepoint tier) not the inode it resolved to. The client's own view of that
//! path — its mount namespace, bind mounts included — is `/proc/<tgid>/task/<tid>/root/<path>`
//! (or `cwd` for a relative path; a thread may have its own, after `unshare`): `stat` there
//! gives the inode and its link count, and the
//! kernel's live table says whether a socket is bound to it. A pinned stale inode stays
//! pinned, so this is reliable for the persistent failure that matters.
use std::{
    os::unix::fs::{FileTypeExt, MetadataExt},
    path::PathBuf,
};

use agent_common::{EventKind, FileId, LiveSock, flags};

use crate::{
    attribution::Attributor,
    events::{EventLine, KernelEvent, dirs::KnownDirs},
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
}

impl Completer {
    /// Completion for live events: attributes every process.
    pub fn attributing() -> Self {
        Self {
            dirs: KnownDirs::default(),
            attributor: Some(Attributor::default()),
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
        let mut moved = None;
        if let Some(live) = live {
            connect_target(&mut ev, live);
            moved = moved_into_place(&ev);
        }
        let workload = self.attributor.as_mut().and_then(|a| {
            let w = a.workload(ev.tgid);
            if ev.kind == EventKind::Exit {
                a.forget(ev.tgid);
            }
            w
        });
        EventLine {
            event: ev,
            workload,
            moved,
        }
    }
}

/// The socket file a rename-over put at an absolute path: what the actor's view shows there.
fn moved_into_place(ev: &KernelEvent) -> Option<FileId> {
    if ev.kind != EventKind::Rename || ev.flags.exchange || !ev.path.starts_with('/') {
        return None;
    }
    let meta = std::fs::metadata(client_view(ev.tgid, ev.pid, &ev.path)).ok()?;
    meta.file_type().is_socket().then(|| FileId {
        dev: meta.dev(),
        ino: meta.ino(),
    })
}

/// Where the client thread would find `path`: through its own root or working directory.
pub fn client_view(tgid: u32, tid: u32, path: &str) -> PathBuf {
    let base = if path.starts_with('/') { "root" } else { "cwd" };
    PathBuf::from(format!(
        "/proc/{tgid}/task/{tid}/{base}/{}",
        path.trim_start_matches('/')
    ))
}

/// Fills in the target of a refused connect the kernel left unresolved.
pub fn connect_target(ev: &mut KernelEvent, live: LiveLookup) {
    if ev.kind != EventKind::Connect || ev.flags.target_bound || ev.ino != 0 {
        return;
    }
    let Ok(meta) = std::fs::metadata(client_view(ev.tgid, ev.pid, &ev.path)) else {
        return;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_view_follows_root_or_cwd() {
        assert_eq!(
            client_view(7, 8, "/run/x.sock"),
            PathBuf::from("/proc/7/task/8/root/run/x.sock")
        );
        assert_eq!(
            client_view(7, 7, "x.sock"),
            PathBuf::from("/proc/7/task/7/cwd/x.sock")
        );
    }
}
