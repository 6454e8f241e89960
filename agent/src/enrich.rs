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
use aya::maps::{HashMap, MapData};

use crate::event::{OwnerInfo, SockEvent};

/// `BPF_NOEXIST`: create only.
const BPF_NOEXIST: u64 = 1;

/// The kernel's table of live sockets, and its base-name index (the tracepoint tier's
/// filter), as userspace reads and seeds them.
pub struct LiveTable {
    pub(crate) live: HashMap<MapData, FileId, LiveSock>,
    pub(crate) names: HashMap<MapData, u64, u64>,
}

impl LiveTable {
    pub fn get(&self, id: &FileId) -> Option<LiveSock> {
        self.live.get(id, 0).ok()
    }

    /// Entries in the table (walks it: for scrapes, not for the event path).
    pub fn len(&self) -> usize {
        self.live.keys().count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds a socket the kernel has not seen bound (it was bound before the agent started,
    /// or its bind event was lost); an entry the kernel made is never overwritten. Returns
    /// whether it was added.
    pub fn seed(&mut self, file: FileId, entry: LiveSock) -> Result<bool, aya::maps::MapError> {
        if self.get(&file).is_some() {
            return Ok(false);
        }
        match self.live.insert(file, entry, BPF_NOEXIST) {
            Ok(()) => {}
            // The kernel got there first.
            Err(aya::maps::MapError::SyscallError(e))
                if e.io_error.raw_os_error() == Some(libc::EEXIST) =>
            {
                return Ok(false);
            }
            Err(e) => return Err(e),
        }
        let n = self.names.get(&entry.name_hash, 0).unwrap_or(0);
        self.names.insert(entry.name_hash, n + 1, 0)?;
        Ok(true)
    }
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
pub fn connect_target(ev: &mut SockEvent, live: impl Fn(&FileId) -> Option<LiveSock>) {
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
        ev.owner = Some(OwnerInfo {
            tgid: l.owner.tgid,
            cgroup_id: l.owner.cgroup_id,
            bind_ns: l.owner.bind_ns,
        });
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
