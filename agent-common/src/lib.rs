//! The contract between sockwatch's kernel programs and its agent.
//!
//! Everything here is `#[repr(C)]` with explicit padding, so the byte layout is the same on
//! both sides; the compile-time asserts at the bottom pin it.
#![no_std]

/// Longest path an event carries. `sun_path` is 108 bytes; unlink and rename paths may be
/// longer and are then cut (see [`flags::PATH_TRUNCATED`]).
pub const PATH_CAP: usize = 256;
/// `sizeof(sockaddr_un.sun_path)`.
pub const SUN_PATH_LEN: usize = 108;
/// Length of `task_struct.comm`.
pub const COMM_LEN: usize = 16;

/// Map names and capacities, shared so the loader never guesses.
pub mod maps {
    pub const EVENTS: &str = "EVENTS";
    pub const EVENTS_BYTES: u32 = 1 << 22;
    pub const COUNTERS: &str = "COUNTERS";
    /// Arguments kept between a hook's entry and its exit, per thread and hook.
    pub const PENDING: &str = "PENDING";
    pub const PENDING_CAPACITY: u32 = 16_384;
    /// Live sockets: bound to a file, keyed by the file's [`super::FileId`].
    pub const LIVE: &str = "LIVE";
    pub const LIVE_CAPACITY: u32 = 65_536;
    /// Hashes of the base names of live sockets' files: the tracepoint tier's filter.
    pub const LIVE_NAMES: &str = "LIVE_NAMES";
    /// Processes that hold (or descend from a holder of) a live socket: fork/exit filter.
    pub const TRACKED: &str = "TRACKED";
    pub const TRACKED_CAPACITY: u32 = 65_536;
    /// Watched directories by identity, and by (parent identity, name hash) so a watched
    /// directory that is deleted and re-created is picked up in the kernel at once.
    pub const WATCHED_DIRS: &str = "WATCHED_DIRS";
    pub const WATCHED_NAMES: &str = "WATCHED_NAMES";
    pub const WATCHED_CAPACITY: u32 = 1_024;
    /// Loading thread -> the verifier's count for its last program (measurement only).
    pub const VERIFIER_INSNS: &str = "VERIFIER_INSNS";
}

/// Load-time globals (set with `EbpfLoader::override_global`).
pub mod globals {
    /// The agent's own tgid: its activity is never reported.
    pub const AGENT_TGID: &str = "AGENT_TGID";
    /// Unconsumed ring-buffer bytes past which a submit wakes the reader.
    pub const WAKEUP_BYTES: &str = "WAKEUP_BYTES";
    /// 1: every directory is watched; 0: only `WATCHED_DIRS` and what is below them.
    pub const WATCH_ALL: &str = "WATCH_ALL";
    /// `vfs_unlink`'s parameter count in this kernel's BTF (3, or 4 with an idmap first).
    pub const VFS_UNLINK_ARGS: &str = "VFS_UNLINK_ARGS";
    /// `vfs_rename`'s parameter count (1: `struct renamedata *`; 6 before).
    pub const VFS_RENAME_ARGS: &str = "VFS_RENAME_ARGS";
}

/// How many directory levels above a socket file are checked against the watch list.
pub const WATCH_DEPTH: usize = 8;
/// How many descriptors the owner check walks in the acting task's fd table (with `bpf_loop`).
pub const FD_SCAN_MAX: u32 = 65_536;
/// The same walk on kernels without `bpf_loop` (before 5.17): a constant-bounded loop, so
/// the verifier walks every step; a holder whose descriptor sits above this is not seen.
pub const FD_SCAN_BOUNDED: u32 = 128;
/// Bytes at the end of a file's base name that [`name_hash`] covers: the kernel hashes an
/// unlinked path's tail in one bounded backward pass, up to its last `/`.
pub const NAME_HASH_TAIL: usize = 32;

/// What happened. Ids are never reused: a retired kind keeps its number.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "user",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum EventKind {
    /// A socket was bound to a path. `file`, `sock_ino`, `path`.
    Bind = 1,
    /// A bound socket started listening. `file`, `sock_ino`, `aux` = backlog.
    Listen = 2,
    /// A file was unlinked. `file` (exact tiers), `path`; `owner` and `LIVE`/`LISTENING`/
    /// `HOLDS_FD` flags when it was a live socket's file.
    Unlink = 3,
    /// A rename displaced a socket file. `file` = displaced inode, `path` = target.
    Rename = 4,
    /// A connect (or sendto) by path failed. `ret` = -errno, `path`; exact tiers add the
    /// target's `file`, `sock_ino`, `nlink` and `TARGET_BOUND`/`LISTENING` flags.
    Connect = 5,
    /// A bound socket was released (its last reference closed). `file`, `sock_ino`.
    Release = 6,
    /// A tracked process forked. `aux` = child tgid.
    Fork = 7,
    /// A tracked process exited.
    Exit = 8,
}

impl EventKind {
    pub const ALL: [EventKind; 8] = [
        EventKind::Bind,
        EventKind::Listen,
        EventKind::Unlink,
        EventKind::Rename,
        EventKind::Connect,
        EventKind::Release,
        EventKind::Fork,
        EventKind::Exit,
    ];

    pub fn from_u32(v: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|k| *k as u32 == v)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Bind => "bind",
            Self::Listen => "listen",
            Self::Unlink => "unlink",
            Self::Rename => "rename",
            Self::Connect => "connect",
            Self::Release => "release",
            Self::Fork => "fork",
            Self::Exit => "exit",
        }
    }
}

/// How a hook is attached. Ids are never reused; the preference order is the probe table's.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    feature = "user",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum Tier {
    Lsm = 1,
    Fentry = 2,
    Kprobe = 3,
    Tracepoint = 4,
    /// BTF-typed tracepoints (`tp_btf`): tracepoint stability with typed arguments.
    TpBtf = 5,
}

impl Tier {
    pub const ALL: [Tier; 5] = [
        Tier::Lsm,
        Tier::Fentry,
        Tier::Kprobe,
        Tier::Tracepoint,
        Tier::TpBtf,
    ];

    pub fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|t| *t as u8 == v)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Lsm => "lsm",
            Self::Fentry => "fentry",
            Self::Kprobe => "kprobe",
            Self::Tracepoint => "tracepoint",
            Self::TpBtf => "tp_btf",
        }
    }
}

/// What an event can be trusted for.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "user",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum Fidelity {
    /// The kernel saw the inode at the moment of the operation.
    Exact = 1,
    /// Only the path as the caller gave it (tracepoint tier): resolve it against the
    /// caller's cwd and root; inode, liveness and owner come from userspace state.
    PathOnly = 2,
}

impl Fidelity {
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            1 => Some(Self::Exact),
            2 => Some(Self::PathOnly),
            _ => None,
        }
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
}

/// Which helpers a kernel program may call. Every program that needs `bpf_loop` (5.17) or
/// `bpf_task_pt_regs` (5.15) has a `Bounded` twin named `<name>_b` for older kernels; the
/// loader attaches the one this kernel's helpers allow.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flavor {
    /// `bpf_loop` walks of whole fd tables; the syscall's path from its registers.
    Helpers = 0,
    /// Constant-bounded walks of the first [`FD_SCAN_BOUNDED`] descriptors; no syscall path.
    Bounded = 1,
}

impl Flavor {
    pub fn name(self) -> &'static str {
        match self {
            Self::Helpers => "helpers",
            Self::Bounded => "bounded",
        }
    }
}

/// Indices into the per-CPU `COUNTERS` array: every loss and failure the kernel side sees.
/// Submitted and lost events are counted per [`EventKind`] after these (see [`slots`]).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// A map update failed (map full): state or an event may be lost.
    MapFull = 0,
    /// A kernel or user memory read failed while building an event.
    ReadFailed = 1,
    /// Successful connects by path: counted, not reported.
    ConnectOk = 2,
    /// Entry/exit pairs whose entry half was missing (attached mid-call, or map full).
    Unpaired = 3,
    /// An fd-table walk (owner check at unlink, releases at exit) cut at [`FD_SCAN_BOUNDED`]
    /// descriptors on a kernel without `bpf_loop`: what lies beyond is left to the sweeps.
    FdWalkPartial = 4,
}

impl Counter {
    pub const ALL: [Counter; 5] = [
        Counter::MapFull,
        Counter::ReadFailed,
        Counter::ConnectOk,
        Counter::Unpaired,
        Counter::FdWalkPartial,
    ];
    pub const COUNT: u32 = Self::ALL.len() as u32;

    pub fn name(self) -> &'static str {
        match self {
            Self::MapFull => "map_full",
            Self::ReadFailed => "read_failed",
            Self::ConnectOk => "connect_ok",
            Self::Unpaired => "unpaired",
            Self::FdWalkPartial => "fd_walk_partial",
        }
    }
}

/// Layout of the `COUNTERS` array: [`Counter`]s, then per event kind the records submitted,
/// then per event kind the records lost to a full ring buffer.
pub mod slots {
    use super::{Counter, EventKind};

    /// Room per group; kind ids stay below it.
    pub const KINDS: u32 = 16;
    pub const LEN: u32 = Counter::COUNT + 2 * KINDS;

    pub const fn emitted(kind: EventKind) -> u32 {
        Counter::COUNT + kind as u32
    }

    pub const fn lost(kind: EventKind) -> u32 {
        Counter::COUNT + KINDS + kind as u32
    }
}

/// Identity of a file: device (userspace `st_dev` encoding) and 64-bit inode.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

/// The owner of a live socket as the kernel recorded it at bind time.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Owner {
    pub tgid: u32,
    pub _pad: u32,
    pub cgroup_id: u64,
    pub bind_ns: u64,
}

/// Value of the `LIVE` map. The key is the socket file's [`FileId`]: a bound socket pins its
/// file's inode, so the inode number cannot be reused while the entry is valid; `sock_ino`
/// is the discriminator that tells a stale entry (missed release) from the current socket.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveSock {
    pub sock_ino: u64,
    pub owner: Owner,
    /// [`name_hash`] of the file's base name (for `LIVE_NAMES` bookkeeping).
    pub name_hash: u64,
    /// [`flags::LISTENING`].
    pub flags: u16,
    pub _pad: [u16; 3],
}

/// Key of `WATCHED_NAMES`: a watched directory by its parent and name, so a directory that
/// replaces it (deleted and re-created) is recognised.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WatchedName {
    pub parent: FileId,
    pub name_hash: u64,
}

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
    pub tgid: u32,
    pub pid: u32,
    pub cgroup_id: u64,
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
    /// Kind-specific: listen backlog, fork child tgid.
    pub aux: u32,
    pub path_len: u16,
    pub _pad1: u16,
    /// The directory holding the file (bind, unlink, rename), or the one a relative path
    /// starts from (tracepoint tier); zero when unknown.
    pub dir: FileId,
    pub path: [u8; PATH_CAP],
}

impl Event {
    pub const SIZE: usize = core::mem::size_of::<Event>();

    /// The path bytes actually present.
    pub fn path_bytes(&self) -> &[u8] {
        let len = (self.path_len as usize).min(PATH_CAP);
        &self.path[..len]
    }
}

#[cfg(feature = "user")]
mod pod {
    use super::*;
    unsafe impl aya::Pod for Event {}
    unsafe impl aya::Pod for FileId {}
    unsafe impl aya::Pod for LiveSock {}
    unsafe impl aya::Pod for WatchedName {}
}

/// FNV-1a over the last [`NAME_HASH_TAIL`] bytes of a file's base name (up to the first NUL),
/// last byte first. The kernel side computes the same hash; the tracepoint tier filters
/// unlinks and renames with it.
pub const fn name_hash(name: &[u8]) -> u64 {
    let mut len = 0;
    while len < name.len() && name[len] != 0 {
        len += 1;
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < len && i < NAME_HASH_TAIL {
        h ^= name[len - 1 - i] as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    h
}

/// The kernel's `dev_t` (major << 20 | minor) in the encoding `stat(2)` returns as `st_dev`
/// (glibc's `makedev`), so events compare equal to userspace `stat` results.
pub const fn kernel_dev_to_user(kdev: u32) -> u64 {
    let major = (kdev >> 20) as u64;
    let minor = (kdev & 0xfffff) as u64;
    ((major & 0xfffff000) << 32)
        | ((major & 0xfff) << 8)
        | ((minor & 0xffffff00) << 12)
        | (minor & 0xff)
}

// Layout pins: a change here is a contract change on both sides.
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<FileId>() == 16);
    assert!(size_of::<Owner>() == 24);
    assert!(size_of::<LiveSock>() == 48);
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
    assert!(offset_of!(Event, path) == 128);
    assert!(size_of::<Event>() == 128 + PATH_CAP);
    assert!(size_of::<Event>().is_multiple_of(8));
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_encoding_matches_glibc_makedev() {
        // 8:1 (sda1) and an anonymous tmpfs device 0:52, and a large minor.
        assert_eq!(kernel_dev_to_user((8 << 20) | 1), 0x801);
        assert_eq!(kernel_dev_to_user(52), 52);
        assert_eq!(kernel_dev_to_user((259 << 20) | 0x12345), 0x1231_0345);
    }

    #[test]
    fn ids_round_trip() {
        for t in Tier::ALL {
            assert_eq!(Tier::from_u8(t as u8), Some(t));
        }
        assert_eq!(Tier::from_u8(0), None);
        for k in EventKind::ALL {
            assert_eq!(EventKind::from_u32(k as u32), Some(k));
        }
        assert_eq!(EventKind::from_u32(0), None);
        assert_eq!(Fidelity::from_u8(2), Some(Fidelity::PathOnly));
        assert_eq!(Fidelity::from_u8(0), None);
    }

    #[test]
    fn name_hash_stops_at_nul_and_covers_the_tail() {
        assert_eq!(name_hash(b"a.sock"), name_hash(b"a.sock\0junk"));
        assert_ne!(name_hash(b"a.sock"), name_hash(b"b.sock"));
        let mut long = [b'x'; 200];
        long[0] = b'y';
        assert_eq!(name_hash(&long), name_hash(&long[200 - NAME_HASH_TAIL..]));
        // Last byte first: FNV-1a of "kcos.a".
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in b"kcos.a" {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        assert_eq!(name_hash(b"a.sock"), h);
    }
}
