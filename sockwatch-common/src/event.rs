//! The ring-buffer record and the vocabulary it carries: what happened, and how sure it is.

/// Longest path an event carries. `sun_path` is 108 bytes; unlink and rename paths may be
/// longer and are then cut (see [`flags::PATH_TRUNCATED`]).
pub const PATH_CAP: usize = 256;
/// `sizeof(sockaddr_un.sun_path)`.
pub const SUN_PATH_LEN: usize = 108;
/// Length of `task_struct.comm`.
pub const COMM_LEN: usize = 16;

use crate::ids::{FileId, Owner};

named_enum! {
    serde;
    /// What happened (and which hook saw it). Ids are never reused: a retired kind keeps its
    /// number.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum EventKind: u32 {
        /// A socket was bound to a path. `file`, `sock_ino`, `path`.
        Bind = 1 => "bind",
        /// A bound socket started listening. `file`, `sock_ino`, `aux` = backlog.
        Listen = 2 => "listen",
        /// A file was unlinked. `file` (exact tiers), `path`; `owner` and `LIVE`/`LISTENING`/
        /// `HOLDS_FD` flags when it was a live socket's file.
        Unlink = 3 => "unlink",
        /// A rename displaced or moved a socket file, or swapped one (`EXCHANGE`). `file` =
        /// the socket file at the new name before (displaced; for an exchange, whatever file
        /// was swapped away), `path` = the new name; `from` = the file moved (`FROM_LIVE` when a live socket's); the old name
        /// follows in `path` (`FROM_PATH`) for an exchange, and on the tracepoint tier.
        Rename = 4 => "rename",
        /// A connect (or sendto) by path failed. `ret` = -errno, `path`, `aux` = the client's
        /// mount namespace id (0 when unknown); where the kernel saw the target's lookup
        /// (`TARGET_SEEN`) it adds the target's `file`, `sock_ino`, `nlink` and
        /// `TARGET_BOUND`/`LISTENING` flags.
        Connect = 5 => "connect",
        /// A bound socket was released (its last reference closed). `file`, `sock_ino`.
        Release = 6 => "release",
        /// A tracked process forked. `aux` = child tgid.
        Fork = 7 => "fork",
        /// A tracked process exited.
        Exit = 8 => "exit",
        /// A live socket's descriptor was received by SCM_RIGHTS (the acting process is the
        /// receiver). `file`, `sock_ino`; `owner` = the owner the kernel table recorded before.
        Receive = 9 => "receive",
    }
}

named_enum! {
    serde;
    /// What an event can be trusted for.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub enum Fidelity: u8 {
        /// The kernel saw the inode at the moment of the operation.
        #[default]
        Exact = 1 => "exact",
        /// Only the path as the caller gave it (tracepoint tier): resolve it against the
        /// caller's cwd and root; inode, liveness and owner come from userspace state.
        PathOnly = 2 => "path_only",
    }
}

/// Bits of [`Event::flags`].
pub mod flags {
    /// The path did not fit in [`super::PATH_CAP`] bytes and was cut.
    pub const PATH_TRUNCATED: u16 = 1 << 0;
    /// Unlink/rename: the file was bound by a live socket at that moment.
    pub const LIVE: u16 = 1 << 1;
    /// The socket concerned (live owner, or connect target) was listening.
    pub const LISTENING: u16 = 1 << 2;
    /// Unlink/rename: the acting task held a descriptor of that live socket (owner set).
    pub const HOLDS_FD: u16 = 1 << 3;
    /// Connect: a socket was bound to the inode the path resolved to.
    pub const TARGET_BOUND: u16 = 1 << 4;
    /// Connect: datagram socket (`connect` or `sendto`).
    pub const DGRAM: u16 = 1 << 5;
    /// Connect: it was a `sendto`/`sendmsg` with an address, not a `connect`.
    pub const SENDTO: u16 = 1 << 6;
    /// Unlink/rename/connect: the path is relative to the caller's cwd or `dirfd`.
    pub const PATH_RELATIVE: u16 = 1 << 7;
    /// Unlink/rename (LSM tier): reported before the operation; its result is not known.
    pub const RESULT_UNKNOWN: u16 = 1 << 8;
    /// Rename: `RENAME_EXCHANGE` — the target was swapped, not removed.
    pub const EXCHANGE: u16 = 1 << 9;
    /// Connect: the kernel saw the lookup of the target, so `TARGET_BOUND` is its answer
    /// (unset where that lookup is inlined or unreadable: the agent resolves the path).
    pub const TARGET_SEEN: u16 = 1 << 10;
    /// Rename: the file moved (`from`) was a live socket's file.
    pub const FROM_LIVE: u16 = 1 << 11;
    /// Rename: `path` holds the new name in its first [`super::RENAME_FROM_AT`] bytes and
    /// the old name after them, NUL-terminated; `aux` is the old name's length and
    /// `from_dir` its directory (exact tiers: the file's name in it; tracepoint tier: the
    /// directory a relative name starts from).
    pub const FROM_PATH: u16 = 1 << 12;
    /// Unlink/rename (LSM tier): the guard refused it with `EPERM`; `aux` holds the
    /// [`crate::GuardPolicy`] that did, and nothing was removed.
    pub const DENIED: u16 = 1 << 13;
    /// Unlink/rename: the owner check saw only part of the acting task's descriptors, so
    /// `HOLDS_FD` unset says nothing.
    pub const OWNERS_PARTIAL: u16 = 1 << 14;
    /// Unlink/rename (LSM tier): the guard, in audit mode, would have refused it; `aux`
    /// holds the [`crate::GuardPolicy`] that would have, and the removal went ahead.
    pub const WOULD_DENY: u16 = 1 << 15;
}

/// Where a rename's old name starts in [`Event::path`] (see [`flags::FROM_PATH`]).
pub const RENAME_FROM_AT: usize = PATH_CAP / 2;

/// One record in the ring buffer. Fixed size, so the kernel side reserves it in one step.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Event {
    /// [`EventKind`] as u32.
    pub kind: u32,
    /// [`Tier`] as u8.
    pub tier: u8,
    /// [`Fidelity`] as u8.
    pub fidelity: u8,
    /// [`flags`] bits.
    pub flags: u16,
    /// `bpf_ktime_get_boot_ns()`: boot clock, counts suspend.
    pub ts_ns: u64,
    /// Acting process (thread-group id).
    pub tgid: u32,
    /// Acting thread.
    pub pid: u32,
    /// Its cgroup v2 id.
    pub cgroup_id: u64,
    /// Its `comm`, NUL-padded.
    pub comm: [u8; COMM_LEN],
    /// The socket file (see [`EventKind`] for which one).
    pub file: FileId,
    /// Inode of the socket itself in sockfs (`socket:[N]` in /proc/PID/fd): tells two sockets
    /// bound in turn to a reused file inode apart.
    pub sock_ino: u64,
    /// Syscall or hook result; negative errno on failure.
    pub ret: i32,
    /// Link count of `file` (connect target; unlinked file before removal).
    pub nlink: u32,
    /// Owner of the live socket concerned (unlink, rename, connect target).
    pub owner: Owner,
    /// Kind-specific: listen backlog, fork child tgid, connect client's mount namespace id
    /// (`task->nsproxy->mnt_ns->ns.inum`, as `/proc/PID/ns/mnt` names it).
    pub aux: u32,
    /// Bytes of `path` in use.
    pub path_len: u16,
    /// Explicit padding, always zero.
    pub _pad1: u16,
    /// The directory holding the file (bind, unlink, rename), or the one a relative path
    /// starts from (tracepoint tier); zero when unknown.
    pub dir: FileId,
    /// Rename (exact tiers): the file moved, when it is a live socket's file or an exchange's;
    /// zero otherwise.
    pub from: FileId,
    /// Rename with [`flags::FROM_PATH`]: the directory of the old name (see there).
    pub from_dir: FileId,
    /// The path as the tier saw it (see [`EventKind`]), not NUL-terminated when full.
    pub path: [u8; PATH_CAP],
}

impl Event {
    /// Bytes of one record.
    pub const SIZE: usize = core::mem::size_of::<Event>();

    /// The path bytes actually present.
    pub fn path_bytes(&self) -> &[u8] {
        let len = (self.path_len as usize).min(PATH_CAP);
        &self.path[..len]
    }
}

// Layout pins: a change here is a contract change on both sides.
const _: () = {
    use core::mem::{offset_of, size_of};

    use crate::LiveSock;
    assert!(size_of::<FileId>() == 16);
    assert!(size_of::<Owner>() == 24);
    assert!(size_of::<LiveSock>() == 48);
    assert!(size_of::<crate::maps::PendingKey>() == 16);
    assert!(size_of::<crate::maps::Pending>() == 96);
    assert!(size_of::<crate::guard::GuardAllowKey>() == 24);
    assert!(size_of::<crate::guard::OrphanKey>() == 16);
    assert!(size_of::<crate::guard::Orphan>() == 32);
    assert!(offset_of!(Event, kind) == 0);
    assert!(offset_of!(Event, tier) == 4);
    assert!(offset_of!(Event, fidelity) == 5);
    assert!(offset_of!(Event, flags) == 6);
    assert!(offset_of!(Event, ts_ns) == 8);
    assert!(offset_of!(Event, tgid) == 16);
    assert!(offset_of!(Event, pid) == 20);
    assert!(offset_of!(Event, cgroup_id) == 24);
    assert!(offset_of!(Event, comm) == 32);
    assert!(offset_of!(Event, file) == 48);
    assert!(offset_of!(Event, sock_ino) == 64);
    assert!(offset_of!(Event, ret) == 72);
    assert!(offset_of!(Event, nlink) == 76);
    assert!(offset_of!(Event, owner) == 80);
    assert!(offset_of!(Event, aux) == 104);
    assert!(offset_of!(Event, path_len) == 108);
    assert!(offset_of!(Event, dir) == 112);
    assert!(offset_of!(Event, from) == 128);
    assert!(offset_of!(Event, from_dir) == 144);
    assert!(offset_of!(Event, path) == 160);
    assert!(size_of::<Event>() == 160 + PATH_CAP);
    assert!(size_of::<Event>().is_multiple_of(8));
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for k in EventKind::ALL {
            assert_eq!(EventKind::from_repr(k as u32), Some(k));
        }
        assert_eq!(EventKind::from_repr(0), None);
        assert_eq!(Fidelity::from_repr(2), Some(Fidelity::PathOnly));
        assert_eq!(Fidelity::from_repr(0), None);
    }
}
