//! Every map and load-time global of the kernel side, in one place.
use agent_common::{Counter, Event, maps};
use aya_ebpf::{
    Global,
    macros::map,
    maps::{HashMap, PerCpuArray, RingBuf},
};

#[map(name = "EVENTS")]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(maps::EVENTS_BYTES, 0);

#[map(name = "COUNTERS")]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(Counter::COUNT, 0);

/// Tracepoint tier: fd of a UNIX path bind between syscall entry and exit, by pid_tgid.
#[map(name = "PENDING_BIND")]
pub static PENDING_BIND: HashMap<u64, i32> = HashMap::with_max_entries(maps::PENDING_CAPACITY, 0);

#[unsafe(no_mangle)]
pub static AGENT_TGID: Global<u32> = Global::new(0);

#[unsafe(no_mangle)]
pub static WAKEUP_BYTES: Global<u64> = Global::new((64 * Event::SIZE) as u64);
