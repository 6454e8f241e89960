//! The kernel's table of live sockets, as userspace reads and seeds it.
use aya::maps::{HashMap, MapData};
use sockwatch_common::{
    FileId, LiveSock,
    maps::{Pending, PendingKey, name_filter_slot, tracked_filter_slot},
};

use super::slot_filter::SlotFilter;

/// `BPF_NOEXIST`: create only.
const BPF_NOEXIST: u64 = 1;
/// `BPF_EXIST`: update only.
const BPF_EXIST: u64 = 2;

/// The kernel's table of live sockets, and its base-name index (the tracepoint tier's
/// filter, kept only where a removal hook runs on that tier), as userspace reads and seeds
/// them.
pub struct LiveTable {
    /// Entries the table was created with.
    pub capacity: u32,
    pub(super) live: HashMap<MapData, FileId, LiveSock>,
    pub(super) names: Option<HashMap<MapData, u64, u64>>,
    /// The base names of sockets released lately, read by the rebuild of the filter in front
    /// of both (with `names`).
    pub(super) released: Option<HashMap<MapData, u64, u8>>,
    pub(super) name_filter: Option<SlotFilter>,
    /// tgid -> 1 for the processes the exit hook releases sockets of.
    pub(super) tracked: HashMap<MapData, u32, u32>,
    pub(super) tracked_filter: SlotFilter,
    /// What hooks' entries keep for their exits, per thread and hook.
    pub(super) pending: HashMap<MapData, PendingKey, Pending>,
    /// The entries the last walk of `live` counted, and when (`CLOCK_MONOTONIC` ns).
    pub(super) counted: Option<(usize, u64)>,
}

/// A count of the live entries at most this old is what a scrape reports: the sweeps walk
/// the table anyway (every 30 s by default), so a scrape, which holds the pipeline, walks it
/// only when they do not (`--scan-interval 0s`), and stays flat in the table's size.
const COUNT_MAX_AGE_NS: u64 = 30_000_000_000;

/// A pending record this old is one no exit will take: its exit was never seen (a kretprobe
/// missed past its `maxactive`, a thread gone), or its entry has no exit of its own (the
/// fentry tier's `kern_path` of a socket file outside a connect). A call still running this
/// long (a connect waiting on a full backlog) loses its exit's report, counted as pruned.
pub const PENDING_STALE_NS: u64 = 10_000_000_000;

impl LiveTable {
    pub fn get(&self, id: &FileId) -> Option<LiveSock> {
        self.live.get(id, 0).ok()
    }

    /// Entries in the table as of its last walk, walked again when that is older than
    /// [`COUNT_MAX_AGE_NS`]: the map has no count of its own.
    pub fn entries(&mut self) -> usize {
        let now = monotonic_ns();
        match self.counted {
            Some((n, at)) if now.saturating_sub(at) < COUNT_MAX_AGE_NS => n,
            _ => {
                let n = self.live.keys().count();
                self.counted = Some((n, now));
                n
            }
        }
    }

    /// Adds a socket the kernel has not seen bound (it was bound before the agent started,
    /// or its bind event was lost); an entry the kernel made is never overwritten. Returns
    /// whether it was added.
    pub fn seed(&mut self, file: FileId, entry: LiveSock) -> Result<bool, aya::maps::MapError> {
        if self.get(&file).is_some() {
            return Ok(false);
        }
        // EEXIST: the kernel got there first.
        if !self.insert_unless(file, entry, BPF_NOEXIST, libc::EEXIST)? {
            return Ok(false);
        }
        self.add_name(entry.name_hash)?;
        Ok(true)
    }

    /// A live socket's file now bears another base name (renamed away, or exchanged): its
    /// entry and the base-name index follow, so the tracepoint tier, which filters unlinks and
    /// renames by base name, sees the next removal of the new name. Returns whether the entry
    /// changed (false when the socket is not in the table any more, or kept its name).
    pub fn rename(&mut self, file: FileId, name_hash: u64) -> Result<bool, aya::maps::MapError> {
        let Some(mut entry) = self.get(&file) else {
            return Ok(false);
        };
        let old = entry.name_hash;
        if old == name_hash {
            return Ok(false);
        }
        entry.name_hash = name_hash;
        // ENOENT: released since the look-up; the kernel dropped its old name already.
        if !self.insert_unless(file, entry, BPF_EXIST, libc::ENOENT)? {
            return Ok(false);
        }
        self.add_name(name_hash)?;
        self.drop_name(old)?;
        Ok(true)
    }

    /// Removes the entries `gone` picks, with their base names (walks the table: for sweeps,
    /// never the event path). An entry the kernel replaced since the walk (a new bind of the
    /// same file) is kept. Returns how many were removed.
    pub fn prune(
        &mut self,
        gone: impl Fn(&FileId, &LiveSock) -> bool,
    ) -> Result<usize, aya::maps::MapError> {
        let mut walked = 0;
        let doomed: Vec<(FileId, LiveSock)> = self
            .live
            .iter()
            .filter_map(Result::ok)
            .inspect(|_| walked += 1)
            .filter(|(file, entry)| gone(file, entry))
            .collect();
        let walked_at = monotonic_ns();
        let mut removed = 0;
        for (file, entry) in doomed {
            if self
                .get(&file)
                .is_none_or(|now| now.sock_ino != entry.sock_ino)
            {
                continue;
            }
            self.live.remove(&file)?;
            self.drop_name(entry.name_hash)?;
            removed += 1;
        }
        self.counted = Some((walked - removed, walked_at));
        Ok(removed)
    }

    /// Marks process `tgid` as a holder of a live socket, found by a scan (bound before the
    /// agent started, or received by SCM_RIGHTS on a tier without the receipt hook): the
    /// tracepoint tier's close and exit programs look only at tracked processes.
    pub fn track(&mut self, tgid: u32) -> Result<(), aya::maps::MapError> {
        self.tracked.insert(tgid, 1, 0)?;
        self.tracked_filter.mark(tracked_filter_slot(tgid));
        Ok(())
    }

    /// Removes the tracked processes `alive` says are gone (their exit was not seen: the
    /// exit hook missing, or a lost event). Walks the table: for sweeps only.
    pub fn prune_tracked(
        &mut self,
        alive: impl Fn(u32) -> bool,
    ) -> Result<usize, aya::maps::MapError> {
        let gone: Vec<u32> = self
            .tracked
            .keys()
            .filter_map(Result::ok)
            .filter(|tgid| !alive(*tgid))
            .collect();
        for tgid in &gone {
            self.tracked.remove(tgid)?;
        }
        Ok(gone.len())
    }

    /// Removes the pending records kept more than `older_than_ns` ago (`CLOCK_MONOTONIC`, the
    /// kernel's `bpf_ktime_get_ns`). A record the kernel replaced since the walk is kept.
    /// Walks the table: for sweeps only.
    pub fn prune_pending(&mut self, older_than_ns: u64) -> Result<usize, aya::maps::MapError> {
        let now = monotonic_ns();
        let stale: Vec<(PendingKey, u64)> = self
            .pending
            .iter()
            .filter_map(Result::ok)
            .filter(|(_, p)| now.saturating_sub(p.stamp_ns) > older_than_ns)
            .map(|(k, p)| (k, p.stamp_ns))
            .collect();
        let mut removed = 0;
        for (key, stamp_ns) in stale {
            if self
                .pending
                .get(&key, 0)
                .is_ok_and(|now| now.stamp_ns == stamp_ns)
            {
                self.pending.remove(&key)?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Writes `entry` under `flags` (`BPF_NOEXIST`, `BPF_EXIST`); false when the kernel
    /// refused it with `raced`, the errno of an entry the kernel changed in the meantime.
    fn insert_unless(
        &mut self,
        file: FileId,
        entry: LiveSock,
        flags: u64,
        raced: i32,
    ) -> Result<bool, aya::maps::MapError> {
        match self.live.insert(file, entry, flags) {
            Ok(()) => Ok(true),
            Err(aya::maps::MapError::SyscallError(e))
                if e.io_error.raw_os_error() == Some(raced) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    fn add_name(&mut self, hash: u64) -> Result<(), aya::maps::MapError> {
        let Some(names) = &mut self.names else {
            return Ok(());
        };
        let n = names.get(&hash, 0).unwrap_or(0);
        names.insert(hash, n + 1, 0)?;
        if let Some(filter) = &self.name_filter {
            filter.mark(name_filter_slot(hash));
        }
        Ok(())
    }

    /// The filter in front of the base-name index, where the index is kept.
    pub fn name_filter(&self) -> Option<&SlotFilter> {
        self.name_filter.as_ref()
    }

    /// The filter in front of the tracked processes.
    pub fn tracked_filter(&self) -> &SlotFilter {
        &self.tracked_filter
    }

    /// Rebuilds one generation of the name filter from the base-name index and the released
    /// names (a sweep's): a name forgotten stops passing once both were rebuilt without it.
    /// Returns how many names it marked; `None` where no filter is kept.
    pub fn rebuild_name_filter(&mut self) -> Result<Option<usize>, aya::maps::MapError> {
        let (Some(names), Some(released), Some(filter)) =
            (&self.names, &self.released, &mut self.name_filter)
        else {
            return Ok(None);
        };
        let read = || {
            let live = names.keys().map(|k| k.map(name_filter_slot));
            let gone = released.keys().map(|k| k.map(name_filter_slot));
            live.chain(gone).collect()
        };
        filter.rebuild(read).map(Some)
    }

    /// The same for the tracked processes: a process untracked stops passing once both
    /// generations were rebuilt without it. Returns how many processes it marked.
    pub fn rebuild_tracked_filter(&mut self) -> Result<usize, aya::maps::MapError> {
        let tracked = &self.tracked;
        let read = || tracked.keys().map(|k| k.map(tracked_filter_slot)).collect();
        self.tracked_filter.rebuild(read)
    }

    fn drop_name(&mut self, hash: u64) -> Result<(), aya::maps::MapError> {
        let Some(names) = &mut self.names else {
            return Ok(());
        };
        match names.get(&hash, 0) {
            Ok(n) if n > 1 => names.insert(hash, n - 1, 0),
            Ok(_) => names.remove(&hash),
            Err(_) => Ok(()),
        }
    }
}

/// `CLOCK_MONOTONIC` in ns: the clock of `bpf_ktime_get_ns`.
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
