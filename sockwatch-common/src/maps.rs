//! Map names, capacities and load-time globals, shared so the loader never guesses, and the
//! values the maps hold.
use crate::ids::{FileId, Owner};

/// The ring buffer of [`crate::Event`] records.
pub const EVENTS: &str = "EVENTS";
/// Its size in bytes.
pub const EVENTS_BYTES: u32 = 1 << 22;
/// The per-CPU counter array (see [`crate::slots`]).
pub const COUNTERS: &str = "COUNTERS";
/// Arguments kept between a hook's entry and its exit, per thread and hook.
pub const PENDING: &str = "PENDING";
/// Entries `PENDING` holds.
pub const PENDING_CAPACITY: u32 = 16_384;
/// Live sockets: bound to a file, keyed by the file's [`FileId`].
pub const LIVE: &str = "LIVE";
/// Entries `LIVE` holds.
pub const LIVE_CAPACITY: u32 = 65_536;
/// Hashes of the base names of live sockets' files: the tracepoint tier's filter.
pub const LIVE_NAMES: &str = "LIVE_NAMES";
/// Hashes of the base names of the files of sockets released lately (LRU): the tracepoint
/// tier's filter also passes their removal, a daemon's cleanup after its close.
pub const RELEASED_NAMES: &str = "RELEASED_NAMES";
/// Entries `RELEASED_NAMES` holds: the latest releases, the oldest forgotten first.
pub const RELEASED_NAMES_CAPACITY: u32 = 4_096;
/// A slot filter in front of a hash table whose lookups of new keys miss the cache (65,536
/// buckets): one u16 per [`FILTER_SLOTS`] slot of a key, non-zero when some key the table
/// holds may fall there, memory-mapped by userspace. Each byte of a slot is a generation: the
/// kernel and userspace mark both on every key they add, and each sweep clears one generation
/// and marks in it the keys the table holds, the other one in turn, so keys removed since
/// stop passing. A single load reads both: at every instant one of them holds every key.
///
/// `NAME_FILTER` stands before `LIVE_NAMES` and `RELEASED_NAMES` ([`name_filter_slot`]): the
/// tracepoint tier's unlink and rename filters.
pub const NAME_FILTER: &str = "NAME_FILTER";
/// The same before `TRACKED` ([`tracked_filter_slot`]): every exit, fork and tracepoint-tier
/// close asks it about a process.
pub const TRACKED_FILTER: &str = "TRACKED_FILTER";
/// Slots of a filter.
pub const FILTER_SLOTS: usize = 16_384;
/// A slot marked in both generations.
pub const FILTER_MARKED: u16 = 0x0101;

const _: () = assert!(FILTER_SLOTS.is_power_of_two());

/// The slot of `NAME_FILTER` a name hash marks.
pub const fn name_filter_slot(name_hash: u64) -> usize {
    // The high half: the tables hash the key again, the filter takes the bits as they are.
    (name_hash >> 32) as usize & (FILTER_SLOTS - 1)
}

/// The slot of `TRACKED_FILTER` a process marks: process ids are handed out in sequence, so
/// their low bits spread the processes of a moment over the slots.
pub const fn tracked_filter_slot(tgid: u32) -> usize {
    tgid as usize & (FILTER_SLOTS - 1)
}

/// One u32: non-zero when neither removal hook runs on the tracepoint tier, whose filters
/// are the only readers of `LIVE_NAMES` and `RELEASED_NAMES`; binds and releases then keep
/// no names. Set by the loader once every hook is attached; zero (names kept) until then.
pub const NAMES_UNREAD: &str = "NAMES_UNREAD";
/// Processes that hold (or descend from a holder of) a live socket: fork/exit filter.
pub const TRACKED: &str = "TRACKED";
/// Entries `TRACKED` holds.
pub const TRACKED_CAPACITY: u32 = 65_536;
/// Watched directories by identity, and by (parent identity, name hash) so a watched
/// directory that is deleted and re-created is picked up in the kernel at once. Both hold the
/// watch's guard slot (1 + its index in the config), which a re-created directory inherits.
pub const WATCHED_DIRS: &str = "WATCHED_DIRS";
/// Watched directories by [`WatchedName`].
pub const WATCHED_NAMES: &str = "WATCHED_NAMES";
/// The parent directories in `WATCHED_NAMES`: a walk hashes a directory's name only when its
/// parent is one of them.
pub const WATCHED_PARENTS: &str = "WATCHED_PARENTS";
/// Entries each watch map holds.
pub const WATCHED_CAPACITY: u32 = 1_024;
/// Directories a watch walk found under no watched directory, by identity and inode
/// generation (the generation tells a directory from a later one given the same inode
/// number): the next bind or connect there costs one lookup, not a walk. An entry counts
/// only while its value is the current `UNWATCHED_EPOCH`.
pub const UNWATCHED_DIRS: &str = "UNWATCHED_DIRS";
/// Entries `UNWATCHED_DIRS` holds (LRU).
pub const UNWATCHED_DIRS_CAPACITY: u32 = 4_096;
/// One u64: zero while `UNWATCHED_DIRS` is off, else its epoch. Every rename's exit advances
/// it, since a directory moved under a watch makes its cached answer wrong. The loader turns
/// the cache on (1) only where the rename hook runs after the rename: on the LSM tier it
/// runs before it, and a kretprobe can be missed.
pub const UNWATCHED_EPOCH: &str = "UNWATCHED_EPOCH";
/// Guard mode's switch (one [`crate::GuardSwitch`]), its policy per watch slot, its
/// allow-list and its record of listeners whose file was removed (see [`crate::guard`]).
pub const GUARD_SWITCH: &str = "GUARD_SWITCH";
/// Policy per watch slot.
pub const GUARD_POLICIES: &str = "GUARD_POLICIES";
/// Who `foreign` lets through, per watch slot.
pub const GUARD_ALLOW: &str = "GUARD_ALLOW";
/// Listeners whose file was removed or replaced, by owner and place.
pub const ORPHANS: &str = "ORPHANS";
/// Loading thread -> the verifier's count for its last program (measurement only).
pub const VERIFIER_INSNS: &str = "VERIFIER_INSNS";

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

/// Value of the `LIVE` map. The key is the socket file's [`FileId`]: a bound socket pins its
/// file's inode, so the inode number cannot be reused while the entry is valid; `sock_ino`
/// is the discriminator that tells a stale entry (missed release) from the current socket.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveSock {
    /// The socket's own inode in sockfs.
    pub sock_ino: u64,
    /// Who bound it.
    pub owner: Owner,
    /// [`crate::name_hash`] of the file's base name (for `LIVE_NAMES` bookkeeping).
    pub name_hash: u64,
    /// [`crate::flags::LISTENING`].
    pub flags: u16,
    /// Explicit padding, always zero.
    pub _pad: [u16; 3],
}

/// Key of `PENDING`: the thread, and which entry/exit pair (a `Slot` of the kernel side).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PendingKey {
    /// `bpf_get_current_pid_tgid()` of the thread in the hook.
    pub pid_tgid: u64,
    /// The entry/exit pair.
    pub slot: u64,
}

/// Value of `PENDING`: a socket file as seen at an entry hook (for a connect's target, at the
/// target lookup's exit), or raw arguments for the exit hook. Only the kernel side reads its
/// contents; the agent's sweep reads [`Pending::stamp_ns`] to prune what no exit took.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pending {
    /// The first raw argument kept: a kernel or user pointer (socket, sockaddr, path), or
    /// the tracepoint tier's listen backlog.
    pub ptr: u64,
    /// The second: a descriptor or a backlog; for a connect's target,
    /// [`Pending::NOT_OURS`] or 0.
    pub arg: u64,
    /// The socket file.
    pub file: FileId,
    /// The directory holding `file`, or the start of a relative path.
    pub dir: FileId,
    /// The socket's own inode in sockfs.
    pub sock_ino: u64,
    /// Who bound it.
    pub owner: Owner,
    /// When the entry kept it (`bpf_ktime_get_ns`: `CLOCK_MONOTONIC`).
    pub stamp_ns: u64,
    /// The file's link count.
    pub nlink: u32,
    /// `crate::flags` bits decided at entry.
    pub flags: u16,
    /// Calls of the same hook by the same thread begun inside the one that kept this record
    /// and not yet ended (overlayfs's unlink and rename of the upper layer's file).
    pub nested: u16,
}

impl Pending {
    /// `arg` of a connect target that is neither live nor watched: its failures are not
    /// reported.
    pub const NOT_OURS: u64 = 1;

    /// A record of raw arguments only, for the exit to act on.
    #[inline(always)]
    pub fn args(ptr: u64, arg: u64) -> Self {
        Pending {
            ptr,
            arg,
            ..Default::default()
        }
    }
}

/// Key of `WATCHED_NAMES`: a watched directory by its parent and name, so a directory that
/// replaces it (deleted and re-created) is recognised.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WatchedName {
    /// The parent directory.
    pub parent: FileId,
    /// [`crate::name_hash`] of the directory's name.
    pub name_hash: u64,
}
