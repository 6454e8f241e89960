//! State carried from a hook's entry to its exit, per thread and hook.
use agent_common::Counter;
use aya_ebpf::helpers::bpf_get_current_pid_tgid;

use crate::{
    counters::count,
    maps::PENDING,
    record::{Pending, PendingKey, Slot},
};

#[inline(always)]
fn key(slot: Slot) -> PendingKey {
    PendingKey {
        pid_tgid: bpf_get_current_pid_tgid(),
        slot: slot as u64,
    }
}

#[inline(always)]
pub fn stash(slot: Slot, p: &Pending) {
    if PENDING.insert(key(slot), p, 0).is_err() {
        count(Counter::MapFull);
    }
}

/// Takes this thread's record for `slot`. A missing one is counted as unpaired only when
/// `expected`, which only the kprobe tier's bind and listen exits pass (`bind_kretprobe`,
/// `listen_kretprobe`: their entries stash on every call but the agent's); no other exit
/// counts it.
#[inline(always)]
pub fn take(slot: Slot, expected: bool) -> Option<Pending> {
    let k = key(slot);
    // SAFETY: the value is copied at once, before any update of the map could free it.
    let p = unsafe { PENDING.get(k) }.copied();
    match p {
        Some(_) => {
            let _ = PENDING.remove(k);
        }
        None if expected => count(Counter::Unpaired),
        None => {}
    }
    p
}
