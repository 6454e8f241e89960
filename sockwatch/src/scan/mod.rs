//! The reconciliation scan: the kernel's current view of path-bound UNIX sockets, without eBPF.
//!
//! Sources, read through [`crate::host`]: every UNIX socket from `NETLINK_SOCK_DIAG` (`diag`),
//! who holds each one from `/proc/*/fd` (`procfd`), every mount namespace's mounts from
//! `/proc/*/mountinfo` (`mounts`), and the socket files under the watched paths ([`walk`]). Paths are resolved
//! the way each holder sees them, through `/proc/PID/root/<path>`, so mount namespaces are
//! respected; files are compared by identity (device, inode), never by path string (S13).
//!
//! Findings:
//! - orphaned listener: a listening socket whose path no longer leads to its file — unlinked,
//!   or replaced by another file (S1, S5, S10);
//! - stale socket file: a socket file no socket serves: connects to it are refused (S4);
//! - stale bind mount: a socket file bind-mounted somewhere whose source was deleted (S3);
//! - risk, socket file mount: a live socket file bind-mounted somewhere: it becomes a stale
//!   bind mount at its daemon's next restart (seed 000). Not counted as wrong (exit 0).
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
//! Binds through a descriptor (`/proc/self/fd/N/name`, conmon's) are resolved through the
//! holder's own descriptor N when it still leads to the socket's file (by identity), or found
//! by the walk; otherwise their state is unknown, never an orphan.
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
mod findings;
mod model;
pub mod report;
pub mod walk;

pub use crate::host::procfd::Holder;
pub use crate::host::stat::{FileType, OnDisk, Stat};
pub use analyze::{Analysis, analyze};
pub use collect::{ProcSystem, scan};
pub use findings::{
    Findings, OrphanCause, OrphanedListener, SOCKET_FILE_MOUNT_FIX, SocketFileMount,
    StaleBindMount, StaleCause, StaleSocketFile,
};
pub use model::{
    Counts, Limits, MountTable, ScanError, ScanOptions, ScanReport, ScannedSocket, Snapshot,
    System, Watched,
};
pub use sockwatch_common::FileId;

#[cfg(test)]
mod tests;
