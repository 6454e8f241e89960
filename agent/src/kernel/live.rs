//! The kernel's table of live sockets, as userspace reads and seeds it.
use agent_common::{FileId, LiveSock};
use aya::maps::{HashMap, MapData};

/// `BPF_NOEXIST`: create only.
const BPF_NOEXIST: u64 = 1;

/// The kernel's table of live sockets, and its base-name index (the tracepoint tier's
/// filter), as userspace reads and seeds them.
pub struct LiveTable {
    pub(super) live: HashMap<MapData, FileId, LiveSock>,
    pub(super) names: HashMap<MapData, u64, u64>,
    /// tgid -> 1 for the processes the exit hook releases sockets of.
    pub(super) tracked: HashMap<MapData, u32, u32>,
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

    /// Removes the entries `gone` picks, with their base names (walks the table: for sweeps,
    /// never the event path). An entry the kernel replaced since the walk (a new bind of the
    /// same file) is kept. Returns how many were removed.
    pub fn prune(
        &mut self,
        gone: impl Fn(&FileId, &LiveSock) -> bool,
    ) -> Result<usize, aya::maps::MapError> {
        let doomed: Vec<(FileId, LiveSock)> = self
            .live
            .iter()
            .filter_map(Result::ok)
            .filter(|(file, entry)| gone(file, entry))
            .collect();
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
        Ok(removed)
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

    fn drop_name(&mut self, hash: u64) -> Result<(), aya::maps::MapError> {
        match self.names.get(&hash, 0) {
            Ok(n) if n > 1 => self.names.insert(hash, n - 1, 0),
            Ok(_) => self.names.remove(&hash),
            Err(_) => Ok(()),
        }
    }
}
