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
}
