//! The types the scan's steps share: the snapshot gathered, the system it is checked against,
//! the options and the report.
use std::{
    io,
    path::{Path, PathBuf},
};

use serde::Serialize;
use sockwatch_common::FileId;

use super::{findings::Findings, walk};
use crate::host::{
    diag::{self, DiagSocket},
    mounts::MountInfo,
    procfd::{self, Holder},
    procfs,
    stat::Stat,
};

/// What the analysis needs from the system, so it can be tested with a fake one.
pub trait System {
    /// `stat` (following symlinks, as `connect` does) of `path` as process `view` sees it: its
    /// root and mount namespace for an absolute path, its cwd for a relative one. `None`: as
    /// the agent sees it.
    fn stat(&self, view: Option<u32>, path: &Path) -> io::Result<Stat>;
    /// Name and cgroup of a process; None if it is gone.
    fn holder(&self, tgid: u32) -> Option<Holder>;
    /// Where descriptor `fd` of process `tgid` points (its `/proc` link target); None if
    /// it is closed or unreadable.
    fn fd_target(&self, tgid: u32, fd: u32) -> Option<Vec<u8>>;
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
    /// As passed to `bind` (absolute, or relative to the binder's cwd then); a bind through
    /// a descriptor (`/proc/self/fd/N/name`) as the absolute path it stood for, once found.
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
    /// The directory the file was found in (device and inode, as the kernel names an
    /// event's `dir`) and its absolute path there: what relative removals are resolved by.
    pub dir: Option<(FileId, String)>,
    /// Its path lies outside every watched path (in a holder's view): `run` does not adopt
    /// it from a scan. Never set when nothing is watched.
    pub outside_watch: bool,
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

/// Everything [`analyze`](super::analyze) looks at, gathered by [`scan`](super::scan).
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
            proc_root: PathBuf::from(procfs::DEFAULT_PROC_ROOT),
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
    /// Risks: live socket files bind-mounted into a mount namespace.
    pub socket_file_mounts: usize,
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

/// The result of [`scan`](super::scan).
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
    /// Incomplete only because these processes could not be read (their namespaces or
    /// descriptors): a socket absent from `sockets` that none of them holds does not exist.
    /// `None` when complete, or when absence proves nothing (a namespace unread, a limit cut).
    pub unreadable: Option<Vec<u32>>,
}
