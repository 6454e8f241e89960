//! Every map and load-time global of the kernel side, in one place.
use aya_ebpf::{
    Global,
    bindings::BPF_F_MMAPABLE,
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use sockwatch_common::{
    FileId, LiveSock, PATH_CAP, WatchedName,
    guard::{self, GuardAllowKey, Orphan, OrphanKey},
    maps, slots,
};

use crate::{
    record::{Pending, PendingKey},
    shim::DirKey,
};

#[map(name = "EVENTS")]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(maps::EVENTS_BYTES, 0);

#[map(name = "COUNTERS")]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(slots::LEN, 0);

/// Per-CPU room for a path read from user memory (too big for the BPF stack).
#[map(name = "SCRATCH")]
pub static SCRATCH: PerCpuArray<[u8; PATH_CAP]> = PerCpuArray::with_max_entries(1, 0);

#[map(name = "PENDING")]
pub static PENDING: HashMap<PendingKey, Pending> =
    HashMap::with_max_entries(maps::PENDING_CAPACITY, 0);

#[map(name = "LIVE")]
pub static LIVE: HashMap<FileId, LiveSock> = HashMap::with_max_entries(maps::LIVE_CAPACITY, 0);

/// name hash -> how many live sockets have a file of that base name.
#[map(name = "LIVE_NAMES")]
pub static LIVE_NAMES: HashMap<u64, u64> = HashMap::with_max_entries(maps::LIVE_CAPACITY, 0);

/// name hash -> 1 for the files of sockets released lately (see `live::released`).
#[map(name = "RELEASED_NAMES")]
pub static RELEASED_NAMES: LruHashMap<u64, u8> =
    LruHashMap::with_max_entries(maps::RELEASED_NAMES_CAPACITY, 0);

/// See [`sockwatch_common::maps::NAME_FILTER`]; mapped by userspace (`BPF_F_MMAPABLE`).
#[map(name = "NAME_FILTER")]
pub static NAME_FILTER: SlotFilter = Array::with_max_entries(1, BPF_F_MMAPABLE);

/// See [`sockwatch_common::maps::TRACKED_FILTER`]; mapped by userspace.
#[map(name = "TRACKED_FILTER")]
pub static TRACKED_FILTER: SlotFilter = Array::with_max_entries(1, BPF_F_MMAPABLE);

/// One element: a slot filter's marks ([`sockwatch_common::maps::NAME_FILTER`]).
pub type SlotFilter = Array<[u16; maps::FILTER_SLOTS]>;

/// `NAMES_UNREAD[0]`: see [`sockwatch_common::maps::NAMES_UNREAD`].
#[map(name = "NAMES_UNREAD")]
pub static NAMES_UNREAD: Array<u32> = Array::with_max_entries(1, 0);

/// tgid -> 1 for processes that bound a live socket or descend from one.
#[map(name = "TRACKED")]
pub static TRACKED: HashMap<u32, u32> = HashMap::with_max_entries(maps::TRACKED_CAPACITY, 0);

#[map(name = "WATCHED_DIRS")]
pub static WATCHED_DIRS: HashMap<FileId, u32> =
    HashMap::with_max_entries(maps::WATCHED_CAPACITY, 0);

/// (parent directory, name hash) of each watched directory: a re-created directory of the
/// same name in the same parent is watched from its first bind on.
#[map(name = "WATCHED_NAMES")]
pub static WATCHED_NAMES: HashMap<WatchedName, u32> =
    HashMap::with_max_entries(maps::WATCHED_CAPACITY, 0);

/// The parent of each watched directory -> 1: see [`sockwatch_common::maps::WATCHED_PARENTS`].
#[map(name = "WATCHED_PARENTS")]
pub static WATCHED_PARENTS: HashMap<FileId, u8> =
    HashMap::with_max_entries(maps::WATCHED_CAPACITY, 0);

/// A directory found under no watch -> the epoch it was found in: see
/// [`sockwatch_common::maps::UNWATCHED_DIRS`].
#[map(name = "UNWATCHED_DIRS")]
pub static UNWATCHED_DIRS: LruHashMap<DirKey, u64> =
    LruHashMap::with_max_entries(maps::UNWATCHED_DIRS_CAPACITY, 0);

/// `UNWATCHED_EPOCH[0]`: see [`sockwatch_common::maps::UNWATCHED_EPOCH`].
#[map(name = "UNWATCHED_EPOCH")]
pub static UNWATCHED_EPOCH: Array<u64> = Array::with_max_entries(1, 0);

/// Guard mode's [`sockwatch_common::GuardSwitch`], written by the agent at any time.
#[map(name = "GUARD_SWITCH")]
pub static GUARD_SWITCH: Array<u32> = Array::with_max_entries(1, 0);

/// Watch slot -> its [`sockwatch_common::GuardPolicy`].
#[map(name = "GUARD_POLICIES")]
pub static GUARD_POLICIES: Array<u32> = Array::with_max_entries(guard::GUARD_SLOTS, 0);

#[map(name = "GUARD_ALLOW")]
pub static GUARD_ALLOW: HashMap<GuardAllowKey, u32> =
    HashMap::with_max_entries(guard::GUARD_ALLOW_CAPACITY, 0);

/// (owner, place) -> its listener whose file was removed or replaced.
#[map(name = "ORPHANS")]
pub static ORPHANS: LruHashMap<OrphanKey, Orphan> =
    LruHashMap::with_max_entries(guard::ORPHANS_CAPACITY, 0);

/// pid_tgid of the agent's loading thread -> instructions the verifier processed for the
/// program it loaded last (kernels whose program info lacks the count).
#[map(name = "VERIFIER_INSNS")]
pub static VERIFIER_INSNS: HashMap<u64, u32> = HashMap::with_max_entries(16, 0);

#[unsafe(no_mangle)]
pub static AGENT_TGID: Global<u32> = Global::new(0);

#[unsafe(no_mangle)]
pub static WAKEUP_BYTES: Global<u64> = Global::new((maps::EVENTS_BYTES / 4) as u64);

#[unsafe(no_mangle)]
pub static WATCH_ALL: Global<u8> = Global::new(1);

/// `vfs_unlink`'s and `vfs_rename`'s parameter counts, read by the loader from the kernel's
/// BTF: their layouts changed in 5.12, and stable kernels took parts of that back.
#[unsafe(no_mangle)]
pub static VFS_UNLINK_ARGS: Global<u32> = Global::new(4);

#[unsafe(no_mangle)]
pub static VFS_RENAME_ARGS: Global<u32> = Global::new(1);
