//! A slot filter in front of a kernel hash table ([`sockwatch_common::maps::NAME_FILTER`]),
//! mapped into this process: marked on every key userspace adds to the table, and one of its
//! two generations rebuilt at each sweep from the table, so that keys removed since stop
//! passing it.
use std::{
    io,
    os::fd::{AsFd as _, AsRawFd as _},
    ptr::NonNull,
    sync::atomic::{AtomicU8, AtomicU16, Ordering, fence},
};

use aya::maps::{MapData, MapError};
use sockwatch_common::maps::{FILTER_MARKED, FILTER_SLOTS};

const MAPPED_BYTES: usize = FILTER_SLOTS * size_of::<u16>();

pub struct SlotFilter {
    slots: Mapping,
    /// The generation the next rebuild clears: 0 or 1, each in turn.
    next: usize,
}

impl SlotFilter {
    pub fn open(map: &MapData) -> io::Result<Self> {
        Ok(Self {
            slots: Mapping::shared(map)?,
            next: 0,
        })
    }

    /// Marks a key just added to the table, in both generations.
    pub fn mark(&self, slot: usize) {
        self.slots
            .slot(slot)
            .store(FILTER_MARKED, Ordering::Relaxed);
    }

    /// Whether the kernel's programs ask the table about a key of this slot.
    pub fn passes(&self, slot: usize) -> bool {
        self.slots.slot(slot).load(Ordering::Relaxed) != 0
    }

    /// Clears one generation, marks in it the slot of every key `read_table` returns, and
    /// makes the other one the next to clear. Returns how many keys it marked. The other
    /// generation, untouched meanwhile, holds every key throughout; where the table cannot be
    /// read whole, the same generation is the next to clear.
    pub fn rebuild(
        &mut self,
        read_table: impl FnOnce() -> Result<Vec<usize>, MapError>,
    ) -> Result<usize, MapError> {
        let generation = self.next;
        for slot in 0..FILTER_SLOTS {
            self.slots
                .generation(slot, generation)
                .store(0, Ordering::Relaxed);
        }
        // The kernel marks a key after adding it to its table: a mark cleared just now belongs
        // to a key the read below, a syscall later, finds in the table.
        fence(Ordering::SeqCst);
        let slots = read_table()?;
        for &slot in &slots {
            self.slots
                .generation(slot, generation)
                .store(1, Ordering::Relaxed);
        }
        fence(Ordering::SeqCst);
        self.next = 1 - generation;
        Ok(slots.len())
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

    /// Slot `slot` (masked to the filter), both generations.
    fn slot(&self, slot: usize) -> &AtomicU16 {
        let at = (slot & (FILTER_SLOTS - 1)) * size_of::<u16>();
        // SAFETY: within the mapping, which lives as long as `self` and is page-aligned, so
        // every slot is aligned; accessed atomically only.
        unsafe { AtomicU16::from_ptr(self.0.as_ptr().add(at).cast()) }
    }

    /// One generation's byte of slot `slot` (masked to the filter).
    fn generation(&self, slot: usize, generation: usize) -> &AtomicU8 {
        let at = (slot & (FILTER_SLOTS - 1)) * size_of::<u16>() + (generation & 1);
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
