//! The per-CPU `COUNTERS` array: every loss and failure the kernel side sees.
use crate::EventKind;

named_enum! {
    /// Indices into the per-CPU `COUNTERS` array. Submitted and lost events are counted per
    /// [`EventKind`] after these (see [`slots`]).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Counter: u32 {
        /// A map update failed (map full): state or an event may be lost.
        MapFull = 0 => "map_full",
        /// A kernel or user memory read failed while building an event.
        ReadFailed = 1 => "read_failed",
        /// Successful connects by path: counted, not reported.
        ConnectOk = 2 => "connect_ok",
        /// A bind or listen kretprobe found no record of its entry (attached mid-call, or
        /// `PENDING` full). Only those two count it: their entries record every call, while
        /// every other entry filters, so an exit without an entry is normal there.
        Unpaired = 3 => "unpaired",
        /// An fd-table walk (owner check at unlink, releases at exit) cut at
        /// [`crate::FD_SCAN_BOUNDED`] descriptors on a kernel without `bpf_loop`: what lies
        /// beyond is left to the sweeps.
        FdWalkPartial = 4 => "fd_walk_partial",
        /// Guard mode refused a removal (`EPERM`).
        GuardDenied = 5 => "guard_denied",
        /// A socket file removed while the guard was on whose socket `LIVE` did not hold
        /// (unbound, or lost to a full table): let through, as every missing fact is.
        GuardUnknown = 6 => "guard_unknown",
        /// Guard mode, in audit, would have refused a removal, and let it through.
        GuardWouldDeny = 7 => "guard_would_deny",
    }
}

impl Counter {
    /// How many counters precede the per-kind slots.
    pub const COUNT: u32 = Self::ALL.len() as u32;
}

/// Layout of the `COUNTERS` array: [`Counter`]s, then per event kind the records submitted,
/// then per event kind the records lost to a full ring buffer.
pub mod slots {
    use super::{Counter, EventKind};

    /// Room per group; kind ids stay below it.
    pub const KINDS: u32 = 16;
    /// Length of the array.
    pub const LEN: u32 = Counter::COUNT + 2 * KINDS;

    /// The slot counting records of `kind` submitted to the ring buffer.
    pub const fn emitted(kind: EventKind) -> u32 {
        Counter::COUNT + kind as u32
    }

    /// The slot counting records of `kind` lost to a full ring buffer.
    pub const fn lost(kind: EventKind) -> u32 {
        Counter::COUNT + KINDS + kind as u32
    }
}
