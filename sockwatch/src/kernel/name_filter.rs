//! The tracepoint tier's name filter ([`sockwatch_common::maps::NAME_FILTER`]), mapped into
//! this process: marked on every name userspace adds to the base-name index, and one of its two
//! generations rebuilt at each sweep from the index and the released names, so that names
//! forgotten since stop passing it.
use std::{
    io,
    os::fd::{AsFd as _, AsRawFd as _},
    ptr::NonNull,
    sync::atomic::{AtomicU8, AtomicU16, Ordering, fence},
};

use aya::maps::{HashMap, MapData, MapError};
use sockwatch_common::maps::{NAME_FILTER_MARKED, NAME_FILTER_SLOTS, name_filter_slot};

const MAPPED_BYTES: usize = NAME_FILTER_SLOTS * size_of::<u16>();

pub struct NameFilter {
    slots: Mapping,
    /// `RELEASED_NAMES`, read by the rebuild.
    released: HashMap<MapData, u64, u8>,
    /// The generation the next rebuild clears: 0 or 1, each in turn.
    next: usize,
}

impl NameFilter {
    pub fn open(filter: &MapData, released: HashMap<MapData, u64, u8>) -> io::Result<Self> {
        Ok(Self {
            slots: Mapping::shared(filter)?,
            released,
            next: 0,
        })
    }

    /// Marks a name just added to the base-name index, in both generations.
    pub fn mark(&self, name_hash: u64) {
        self.slots
            .slot(name_hash)
            .store(NAME_FILTER_MARKED, Ordering::Relaxed);
    }

    /// Whether the kernel's filters pass a name of this hash on to the tables.
    pub fn passes(&self, name_hash: u64) -> bool {
        self.slots.slot(name_hash).load(Ordering::Relaxed) != 0
    }

    /// Clears one generation, marks in it every name of `live_names` (the base-name index)
    /// and of the released names, and makes the other one the next to clear. Returns how many
    /// names it marked. The other generation, untouched meanwhile, holds every name
    /// throughout; where a map cannot be read whole, the same generation is the next to clear.
    pub fn rebuild(&mut self, live_names: &HashMap<MapData, u64, u64>) -> Result<usize, MapError> {
        let generation = self.next;
        for slot in 0..NAME_FILTER_SLOTS {
            self.slots
                .generation(slot, generation)
                .store(0, Ordering::Relaxed);
        }
        // The kernel marks a name after adding it to its map: a mark cleared just now belongs
        // to a name the reads below, a syscall later, find in the map.
        fence(Ordering::SeqCst);
        let live: Vec<u64> = live_names.keys().collect::<Result<_, _>>()?;
        let released: Vec<u64> = self.released.keys().collect::<Result<_, _>>()?;
        for &hash in live.iter().chain(&released) {
            let slot = name_filter_slot(hash);
            self.slots
                .generation(slot, generation)
                .store(1, Ordering::Relaxed);
        }
        fence(Ordering::SeqCst);
        self.next = 1 - generation;
        Ok(live.len() + released.len())
    }
}

/// The map's value, shared with the kernel (`BPF_F_MMAPABLE`): both sides only store whole
/// aligned bytes or slots, so this process's atomics see the kernel's stores as another
/// thread's.
struct Mapping(NonNull<u8>);

// SAFETY: the mapping is shared memory owned by this value alone; every access is atomic.
unsafe impl Send for Mapping {}

impl Mapping {
    fn shared(map: &MapData) -> io::Result<Self> {
        let fd = map.fd().as_fd().as_raw_fd();
        // SAFETY: a new mapping of the map's value, never aliased by a Rust reference.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                MAPPED_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        NonNull::new(at.cast())
            .map(Self)
            .ok_or_else(|| io::Error::other("mmap returned NULL"))
    }

    /// A name's slot, both generations.
    fn slot(&self, name_hash: u64) -> &AtomicU16 {
        let at = name_filter_slot(name_hash) * size_of::<u16>();
        // SAFETY: within the mapping, which lives as long as `self` and is page-aligned, so
        // every slot is aligned; accessed atomically only.
        unsafe { AtomicU16::from_ptr(self.0.as_ptr().add(at).cast()) }
    }

    /// One generation's byte of slot `slot`.
    fn generation(&self, slot: usize, generation: usize) -> &AtomicU8 {
        let at = slot * size_of::<u16>() + generation;
        debug_assert!(at < MAPPED_BYTES);
        // SAFETY: within the mapping, as above; accessed atomically only.
        unsafe { AtomicU8::from_ptr(self.0.as_ptr().add(at)) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `shared`, unmapped once.
        unsafe { libc::munmap(self.0.as_ptr().cast(), MAPPED_BYTES) };
    }
}
