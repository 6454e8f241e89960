//! The reconciliation scan: the kernel's current view of path-bound UNIX sockets, without eBPF.
//!
//! Sources: every UNIX socket from `NETLINK_SOCK_DIAG` ([`diag`]), who holds each one from
//! `/proc/*/fd` ([`procfd`]), every mount namespace's mounts from `/proc/*/mountinfo`
//! ([`mounts`]), and the socket files under the watched paths ([`walk`]). Paths are resolved
//! the way each holder sees them, through `/proc/PID/root/<path>`, so mount namespaces are
//! respected; files are compared by identity (device, inode), never by path string (S13).
//!
//! Findings:
//! - orphaned listener: a listening socket whose path no longer leads to its file — unlinked,
//!   or replaced by another file (S1, S5, S10);
//! - stale socket file: a socket file no socket serves: connects to it are refused (S4);
//! - stale bind mount: a socket file bind-mounted somewhere whose source was deleted (S3).
//!
//! Network namespaces: sock_diag answers per namespace. The scan dumps the agent's own and,
//! with CAP_SYS_ADMIN, every other namespace a process is in (one `setns` per namespace in a
//! worker thread). Namespaces it cannot enter are named in the warnings; their sockets are
//! missing, so files they serve could be mistaken for stale: the report is then not complete.
//!
//! Scope: with watched paths, findings are limited to paths at or below them — decided by the
//! identity of the path's ancestor directories in the holder's own view, so a pod's
//! `/run/multus` matches the host's `/var/run/multus`; a bind mount is in scope when its mount
//! point is, or when its source lies in a watched directory's filesystem below it. The exit
//! status of `sockwatch scan` then reflects only what the operator asked about.
//!
//! Known limits:
//! - `UNIX_DIAG_VFS` carries only the low 32 bits of the file's inode number. A file still
//!   reachable by path gets its full 64-bit identity from `stat`; an unlinked one keeps the 32
//!   bits ([`ScannedSocket::ino_low32`], compare with [`ScannedSocket::same_file`]).
//! - A socket file renamed (not replaced) to a path the scan never looks at reads as
//!   "unlinked": userspace cannot find an inode's new name. Renames within the watched paths,
//!   or onto another socket's path (S5), are recognised.
//! - A holder that received a listener over SCM_RIGHTS in another mount namespace resolves
//!   the bound path in its own view; the path counts as linked if any holder's view reaches
//!   the file.
//! - Threads with their own fd table (`clone` without `CLONE_FILES`) and chrooted holders are
//!   not looked at separately.
//! - Without root: other users' fds, namespaces and `/proc/PID/root` are unreadable; the
//!   report says so ([`ScanReport::warnings`], [`ScanReport::complete`]).
//!
//! [`analyze`] holds the logic; it sees the system only through the [`System`] trait, so it is
//! tested without root. [`scan`] gathers a [`Snapshot`] from the real system and analyzes it.
mod analyze;
mod collect;
pub mod diag;
pub mod mounts;
pub mod procfd;
pub mod report;
pub mod walk;

use std::{
    fs, io,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

pub use agent_common::FileId;
pub use analyze::{Analysis, analyze};
pub use collect::{ProcSystem, scan};
use diag::DiagSocket;
use mounts::MountInfo;
pub use procfd::Holder;
use serde::Serialize;

/// The parts of `stat(2)` the scan uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub nlink: u64,
}

impl Stat {
    pub fn from_metadata(m: &fs::Metadata) -> Self {
        Self {
            dev: m.dev(),
            ino: m.ino(),
            mode: m.mode(),
            nlink: m.nlink(),
        }
    }

    pub fn is_socket(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFSOCK
    }

    pub fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }

    pub fn id(&self) -> FileId {
        FileId {
            dev: self.dev,
            ino: self.ino,
        }
    }
}

/// What the analysis needs from the system, so it can be tested with a fake one.
pub trait System {
    /// `stat` (following symlinks, as `connect` does) of `path` as process `view` sees it: its
    /// root and mount namespace for an absolute path, its cwd for a relative one. `None`: as
    /// the agent sees it.
    fn stat(&self, view: Option<u32>, path: &Path) -> io::Result<Stat>;
    /// Name and cgroup of a process; None if it is gone.
    fn holder(&self, tgid: u32) -> Option<Holder>;
}

/// One path-bound socket as the scan saw it: the snapshot a correlation engine starts from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScannedSocket {
    /// sockfs inode: `socket:[N]`.
    pub sock_ino: u64,
    /// The bound file. Full 64-bit inode when the file was found by path; otherwise the
    /// kernel's 32-bit `UNIX_DIAG_VFS` value, and [`Self::ino_low32`] is set.
    pub file: Option<FileId>,
    /// `file.ino` holds only the low 32 bits (see [`Self::same_file`]).
    pub ino_low32: bool,
    /// As passed to `bind` (absolute, or relative to the binder's cwd then).
    pub path: String,
    pub listening: bool,
    /// `SOCK_STREAM` 1, `SOCK_DGRAM` 2, `SOCK_SEQPACKET` 5.
    pub sock_type: u8,
    /// `sk_state` (10 = listen).
    pub state: u8,
    pub holders: Vec<Holder>,
    /// Does `path` still lead to `file` (or does the file live on under another scanned
    /// path, after a rename)? None: could not be checked (no readable holder).
    pub file_linked: Option<bool>,
}

impl ScannedSocket {
    /// Is `id` (a full `stat` or event identity) this socket's file? Compares the low 32 inode
    /// bits only when that is all the kernel gave.
    pub fn same_file(&self, id: FileId) -> bool {
        match self.file {
            Some(f) if self.ino_low32 => f.dev == id.dev && f.ino as u32 == id.ino as u32,
            Some(f) => f == id,
            None => false,
        }
    }
}

/// Serialize a [`FileId`] as `{"dev": .., "ino": ..}`.
mod file_id {
    use serde::{Serialize, Serializer};

    use super::FileId;

    #[derive(Serialize)]
    struct Repr {
        dev: u64,
        ino: u64,
    }

    pub fn serialize<S: Serializer>(f: &FileId, s: S) -> Result<S::Ok, S::Error> {
        Repr {
            dev: f.dev,
            ino: f.ino,
        }
        .serialize(s)
    }
}

/// Why a listener is orphaned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "how", rename_all = "snake_case")]
pub enum OrphanCause {
    /// Nothing is at the path any more (file or a parent directory removed), and the file was
    /// not seen under another scanned path (a rename elsewhere looks the same).
    Unlinked,
    /// Another file is at the path now.
    Replaced {
        #[serde(with = "file_id")]
        now: FileId,
    },
}

/// A listening socket that clients can no longer reach by its path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OrphanedListener {
    pub path: String,
    pub sock_ino: u64,
    #[serde(with = "file_id")]
    pub file: FileId,
    pub ino_low32: bool,
    pub cause: OrphanCause,
    /// Connections waiting to be accepted, and the backlog.
    pub pending: Option<u32>,
    pub backlog: Option<u32>,
    pub holders: Vec<Holder>,
}

/// Why a socket file is stale.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "why", rename_all = "snake_case")]
pub enum StaleCause {
    /// No socket is bound to the file (its binder closed it without unlinking: S4).
    NoSocket,
    /// Stream or seqpacket sockets carry the file (bound, or accepted from a closed
    /// listener) but none listens.
    NotListening { sock_inos: Vec<u64> },
}

/// A socket file whose connects are refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StaleSocketFile {
    pub path: String,
    #[serde(with = "file_id")]
    pub file: FileId,
    pub cause: StaleCause,
    /// Holders of the non-listening sockets, if any.
    pub holders: Vec<Holder>,
}

/// A socket file bind-mounted in some mount namespace whose source was deleted: that
/// namespace keeps the old inode, and connects there fail once nothing listens on it (S3).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StaleBindMount {
    /// Where it is mounted, in the namespace's own view.
    pub mount_point: String,
    /// The deleted source: its path inside its filesystem (mountinfo `root`).
    pub source: String,
    /// The source filesystem's device as mountinfo gives it, `major:minor`.
    pub source_dev: String,
    #[serde(with = "file_id")]
    pub file: FileId,
    pub nlink: u64,
    /// Mount namespace id (nsfs inode).
    pub mntns: u64,
    /// A socket still listening on (or receiving at) the pinned inode: connects through the
    /// mount still work, until it closes. None: connects are refused.
    pub served_by: Option<u64>,
    /// Processes in that mount namespace (at most 16 named; see `process_count`).
    pub processes: Vec<Holder>,
    pub process_count: usize,
}

/// Everything the scan found wrong.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Findings {
    pub orphaned_listeners: Vec<OrphanedListener>,
    pub stale_socket_files: Vec<StaleSocketFile>,
    pub stale_bind_mounts: Vec<StaleBindMount>,
}

impl Findings {
    pub fn len(&self) -> usize {
        self.orphaned_listeners.len() + self.stale_socket_files.len() + self.stale_bind_mounts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drop what a later dump shows was a race with the scan: an orphaned listener that has
    /// since closed (its owner unlinked and closed it: S2), a stale file that is now served
    /// (a bind between the dump and the walk).
    pub fn confirm(&mut self, later: &[DiagSocket]) {
        self.orphaned_listeners.retain(|o| {
            later
                .iter()
                .any(|s| s.sock_ino as u64 == o.sock_ino && s.listening())
        });
        self.stale_socket_files.retain(|f| {
            !later.iter().any(|s| {
                s.serves_file() && s.vfs.is_some_and(|v| v.matches(f.file.dev, f.file.ino))
            })
        });
    }
}

/// A watched path: by identity, and by place inside its filesystem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Watched {
    /// Canonical path in the agent's view.
    pub path: PathBuf,
    /// Identity of the directory (or socket file) itself.
    pub id: FileId,
    /// (major, minor, path inside the filesystem), from the agent's mountinfo: places the
    /// source of bind mounts made from it in other namespaces.
    pub fs: Option<(u32, u32, Vec<u8>)>,
}

/// One mount namespace's mounts, read through one of its processes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountTable {
    pub mntns: u64,
    pub pid: u32,
    pub mounts: Vec<MountInfo>,
}

/// Everything [`analyze`] looks at, gathered by [`scan`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// All UNIX sockets of every namespace read.
    pub sockets: Vec<DiagSocket>,
    pub processes: Vec<procfd::Process>,
    pub mount_tables: Vec<MountTable>,
    /// Socket files under the watched paths.
    pub watch_files: Vec<(PathBuf, Stat)>,
    /// Empty: the whole node is in scope.
    pub watched: Vec<Watched>,
    pub own_mntns: Option<u64>,
}

/// Bounds on one scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub proc: procfd::ProcLimits,
    pub walk: walk::WalkLimits,
    pub max_net_namespaces: usize,
    pub max_mount_namespaces: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            proc: Default::default(),
            walk: Default::default(),
            max_net_namespaces: 4096,
            max_mount_namespaces: 4096,
        }
    }
}

#[derive(Clone, Debug)]
pub struct ScanOptions {
    /// Directories (or socket files) to look for stale socket files in; when not empty, the
    /// findings are limited to them.
    pub watch: Vec<PathBuf>,
    pub limits: Limits,
    /// Normally `/proc`.
    pub proc_root: PathBuf,
}

impl Default for ScanOptions {
    fn default() -> Self {
        Self {
            watch: Vec::new(),
            limits: Limits::default(),
            proc_root: PathBuf::from("/proc"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error("cannot read --watch {}: {error}", path.display())]
    Watch { path: PathBuf, error: io::Error },
    #[error("--watch {}: not a directory or a socket file", path.display())]
    WatchKind { path: PathBuf },
    #[error("cannot list processes in {}: {error}", path.display())]
    Proc { path: PathBuf, error: io::Error },
    #[error("cannot dump the agent's own network namespace: {0}")]
    Diag(diag::DiagError),
}

impl From<diag::DiagError> for ScanError {
    fn from(e: diag::DiagError) -> Self {
        Self::Diag(e)
    }
}

/// Sizes of what was scanned, and what could not be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub orphaned_listeners: usize,
    pub stale_socket_files: usize,
    pub stale_bind_mounts: usize,
    /// Findings outside the watched paths, left out.
    pub outside_watch: usize,
    pub sockets: usize,
    pub path_sockets: usize,
    pub listeners: usize,
    /// Path-bound sockets whose file could not be checked (no readable holder).
    pub unresolved: usize,
    pub net_namespaces: usize,
    pub net_namespaces_unreadable: usize,
    pub mount_namespaces: usize,
    pub mount_namespaces_unreadable: usize,
    pub processes: usize,
    pub processes_vanished: usize,
    pub processes_fds_unreadable: usize,
    pub processes_ns_unreadable: usize,
    pub watch_socket_files: usize,
    pub watch_entries: usize,
}

/// The result of [`scan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanReport {
    /// Every path-bound socket.
    pub sockets: Vec<ScannedSocket>,
    pub findings: Findings,
    pub counts: Counts,
    /// What could not be read, one sentence each.
    pub warnings: Vec<String>,
    /// Every namespace, process and watched entry was read: a socket absent from `sockets`
    /// does not exist.
    pub complete: bool,
}

#[cfg(test)]
mod tests;
