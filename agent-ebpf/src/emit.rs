//! Building and submitting events, and counting what is lost on the way.
use agent_common::{COMM_LEN, Counter, Event, EventKind, FileId, Tier};
use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid,
        generated::{bpf_get_current_cgroup_id, bpf_ktime_get_boot_ns},
    },
    maps::ring_buf::RingBufEntry,
};

use crate::{
    maps::{AGENT_TGID, COUNTERS, EVENTS, WAKEUP_BYTES},
    shim::BoundFile,
};

#[inline(always)]
pub fn count(counter: Counter) {
    if let Some(slot) = COUNTERS.get_ptr_mut(counter as u32) {
        // Per-CPU slot: no other writer while this program runs on this CPU.
        unsafe { *slot += 1 };
    }
}

/// True for the agent's own threads, whose activity is never reported.
#[inline(always)]
pub fn is_agent(pid_tgid: u64) -> bool {
    (pid_tgid >> 32) as u32 == AGENT_TGID.load()
}

/// Reserves one event and fills the fields every kind shares; counts a full ring buffer.
#[inline(always)]
pub fn reserve(kind: EventKind, tier: Tier) -> Option<RingBufEntry<Event>> {
    let Some(mut entry) = EVENTS.reserve::<Event>(0) else {
        count(Counter::RingbufFull);
        return None;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    let ev = entry.as_mut_ptr();
    unsafe {
        (*ev).kind = kind as u32;
        (*ev).tier = tier as u8;
        (*ev)._pad0 = 0;
        (*ev).flags = 0;
        (*ev).ts_ns = bpf_ktime_get_boot_ns();
        (*ev).tgid = (pid_tgid >> 32) as u32;
        (*ev).pid = pid_tgid as u32;
        (*ev).cgroup_id = bpf_get_current_cgroup_id();
        (*ev).comm = bpf_get_current_comm().unwrap_or([0; COMM_LEN]);
        (*ev).file = FileId::default();
        (*ev).sock_ino = 0;
        (*ev).ret = 0;
        (*ev).path_len = 0;
        (*ev)._pad1 = 0;
    }
    Some(entry)
}

#[inline(always)]
pub fn set_file(entry: &mut RingBufEntry<Event>, file: &BoundFile) {
    let ev = entry.as_mut_ptr();
    unsafe {
        (*ev).file = FileId {
            dev: file.dev,
            ino: file.ino,
        };
        (*ev).sock_ino = file.sock_ino;
    }
}

/// Submits without waking the reader unless the backlog passed the threshold: the agent
/// drains on a short timer, so a wakeup per event would only burn CPU.
#[inline(always)]
pub fn submit(entry: RingBufEntry<Event>) {
    let backlog = EVENTS.query(BPF_RB_AVAIL_DATA as u64);
    let flags = if backlog >= WAKEUP_BYTES.load() {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    };
    entry.submit(flags as u64);
    count(Counter::Emitted);
}
