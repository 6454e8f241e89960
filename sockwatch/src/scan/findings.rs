//! What the scan reports as wrong: orphaned listeners, stale socket files, stale bind mounts;
//! and as a risk: live socket files bind-mounted into a mount namespace.
use serde::Serialize;
use sockwatch_common::FileId;

use crate::engine::Workload;
use crate::host::{diag::DiagSocket, procfd::Holder};

/// What to do about a [`SocketFileMount`].
pub const SOCKET_FILE_MOUNT_FIX: &str = "mount the socket's directory (a hostPath of type \
    Directory, --volume /run/dir:...), not the socket file: a file mount keeps this inode, \
    and the daemon's next restart binds a new one";

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

/// A risk, not yet a failure: a live socket file (its source not deleted) bind-mounted in
/// some mount namespace. That namespace keeps this inode, so once the daemon restarts and
/// binds a new one its connects there are refused (S3, seed 000).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SocketFileMount {
    /// Where it is mounted (the target), in the namespace's own view.
    pub mount_point: String,
    /// The mounted file: its path inside its filesystem (mountinfo `root`).
    pub source: String,
    /// The source filesystem's device as mountinfo gives it, `major:minor`.
    pub source_dev: String,
    #[serde(with = "file_id")]
    pub file: FileId,
    /// Mount namespace id (nsfs inode).
    pub mntns: u64,
    /// The process whose mount table shows the mount (one that holds the namespace).
    pub pid: u32,
    /// The socket serving the file now, if any.
    pub served_by: Option<u64>,
    /// The pid's container and pod, where its cgroup names them.
    pub workload: Option<Workload>,
    /// Processes in that mount namespace (at most 16 named; see `process_count`).
    pub processes: Vec<Holder>,
    pub process_count: usize,
    pub fix: &'static str,
    /// Index of the watched path it lies under (in [`super::ScanOptions::watch`]).
    #[serde(skip)]
    pub watch: Option<usize>,
}

/// Everything the scan found wrong, and the risks it saw.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Findings {
    pub orphaned_listeners: Vec<OrphanedListener>,
    pub stale_socket_files: Vec<StaleSocketFile>,
    pub stale_bind_mounts: Vec<StaleBindMount>,
    /// Risks: not counted by [`Self::len`] (nothing fails yet).
    pub socket_file_mounts: Vec<SocketFileMount>,
}

impl Findings {
    /// What is wrong now; risks are not counted.
    pub fn len(&self) -> usize {
        self.orphaned_listeners.len() + self.stale_socket_files.len() + self.stale_bind_mounts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The findings about `path`: its listeners and files, and mounts of it or onto it.
    pub fn about(&self, path: &str) -> Findings {
        let mount = |source: &str, point: &str| source == path || point == path;
        Findings {
            orphaned_listeners: self
                .orphaned_listeners
                .iter()
                .filter(|o| o.path == path)
                .cloned()
                .collect(),
            stale_socket_files: self
                .stale_socket_files
                .iter()
                .filter(|f| f.path == path)
                .cloned()
                .collect(),
            stale_bind_mounts: self
                .stale_bind_mounts
                .iter()
                .filter(|m| mount(&m.source, &m.mount_point))
                .cloned()
                .collect(),
            socket_file_mounts: self
                .socket_file_mounts
                .iter()
                .filter(|m| mount(&m.source, &m.mount_point))
                .cloned()
                .collect(),
        }
    }

    /// Drop what a later dump shows was a race with the scan: an orphaned listener that has
    /// since closed (its owner unlinked and closed it: S2), a stale file that is now served
    /// (a bind between the dump and the walk).
    pub fn confirm(&mut self, later: &[DiagSocket]) {
        self.orphaned_listeners.retain(|o| {
            later
                .iter()
                .any(|s| u64::from(s.sock_ino) == o.sock_ino && s.listening())
        });
        self.stale_socket_files.retain(|f| {
            !later.iter().any(|s| {
                s.serves_file() && s.vfs.is_some_and(|v| v.matches(f.file.dev, f.file.ino))
            })
        });
    }
}
