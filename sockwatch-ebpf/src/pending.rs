//! State carried from a hook's entry to its exit, per thread and hook.
//!
//! Of nested calls (see [`Slot::nests`]) the outermost keeps its record: an inner call that
//! would keep one only counts itself in it, and its exit uncounts itself, so the outer exit
//! reports the file the caller named (overlayfs's own inode, not the upper layer's), with
//! the outer call's result and after its names moved. An inner call that keeps nothing (its
//! file not a watched socket) counts itself too ([`nest`]): its exit must not take the outer
//! record, whose rename has not moved the names yet.
use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_ns};
use sockwatch_common::Counter;

use crate::{
    counters::count,
    maps::PENDING,
    record::{Pending, PendingKey, Slot},
};

/// A record younger than this when another call of its slot begins on its thread belongs to
/// a call still running, which the new one is nested in (overlayfs's inner call follows the
/// outer one within microseconds). An older one was left by an exit never seen (a kretprobe
/// missed past its `maxactive`) and is replaced, so a missed exit cannot hold a thread's
/// slot for longer than this.
const NESTED_WITHIN_NS: u64 = 1_000_000_000;

#[inline(always)]
fn key(slot: Slot) -> PendingKey {
    PendingKey {
        pid_tgid: bpf_get_current_pid_tgid(),
        slot: slot as u64,
    }
}

#[inline(always)]
pub fn stash(slot: Slot, p: &Pending) {
    let k = key(slot);
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    if slot.nests() && nested_in_outer(&k, now) {
        return;
    }
    let p = Pending {
        stamp_ns: now,
        ..*p
    };
    if PENDING.insert(k, p, 0).is_err() {
        count(Counter::MapFull);
    }
}

/// A call of `slot` that keeps no record of its own: counted in the thread's running outer
/// call, if there is one, so that its exit leaves that call's record alone.
#[inline(always)]
pub fn nest(slot: Slot) {
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    let _ = nested_in_outer(&key(slot), now);
}

/// Counts a call begun inside the still-running one whose record this thread keeps.
#[inline(always)]
fn nested_in_outer(k: &PendingKey, now: u64) -> bool {
    let Some(outer) = PENDING.get_ptr_mut(k) else {
        return false;
    };
    // SAFETY: this thread's own record, written only by this thread; a sweep that deletes it
    // meanwhile leaves the memory valid until this program ends.
    let outer = unsafe { &mut *outer };
    if now.saturating_sub(outer.stamp_ns) >= NESTED_WITHIN_NS {
        return false;
    }
    outer.nested = outer.nested.saturating_add(1);
    true
}

/// Takes this thread's record for `slot`, unless this is the exit of a call nested in the one
/// that kept it (then it only uncounts itself). A missing one is counted as unpaired only
/// when `expected`, which only the kprobe tier's bind and listen exits pass
/// (`bind_kretprobe`, `listen_kretprobe`: their entries stash on every call but the agent's);
/// no other exit counts it.
#[inline(always)]
pub fn take(slot: Slot, expected: bool) -> Option<Pending> {
    let k = key(slot);
    let Some(rec) = PENDING.get_ptr_mut(k) else {
        if expected {
            count(Counter::Unpaired);
        }
        return None;
    };
    // SAFETY: as in `nested_in_outer`; the value is copied before the map frees it.
    let rec = unsafe { &mut *rec };
    if slot.nests() && rec.nested > 0 {
        rec.nested -= 1;
        return None;
    }
    let p = *rec;
    let _ = PENDING.remove(k);
    Some(p)
}

/// This thread's record for `slot` (one that does not nest), to read and then rewrite with
/// [`restash`]: one lookup where a take and a stash cost a lookup, a delete and an insert.
#[inline(always)]
pub fn slot_mut(slot: Slot) -> Option<*mut Pending> {
    PENDING.get_ptr_mut(key(slot))
}

/// Keeps `p` for `slot`, written over `kept` (from [`slot_mut`]) where that record is young,
/// else stashed as new.
#[inline(always)]
pub fn restash(kept: Option<*mut Pending>, slot: Slot, p: &Pending) {
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_ns() };
    if let Some(rec) = kept {
        // SAFETY: this thread's own record, written only by this thread. The agent prunes
        // only records older than seconds (`PENDING_STALE_NS`), so one this young is still
        // this key's element, not one freed and taken by another insert.
        let rec = unsafe { &mut *rec };
        if now.saturating_sub(rec.stamp_ns) < NESTED_WITHIN_NS {
            *rec = Pending {
                stamp_ns: now,
                ..*p
            };
            return;
        }
    }
    stash(slot, p);
}
