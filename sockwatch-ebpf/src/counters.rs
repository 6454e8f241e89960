//! The per-CPU `COUNTERS` array: what the kernel side lost or failed at, and the events it
//! submitted or lost, per kind (layout in `sockwatch_common::slots`).
use sockwatch_common::{Counter, EventKind, slots};

use crate::maps::COUNTERS;

#[inline(always)]
pub fn count(counter: Counter) {
    bump(counter as u32);
}

#[inline(always)]
pub fn count_emitted(kind: EventKind) {
    bump(slots::emitted(kind));
}

/// An event of this kind that found the ring buffer full.
#[inline(always)]
pub fn count_lost(kind: EventKind) {
    bump(slots::lost(kind));
}

#[inline(always)]
fn bump(index: u32) {
    if let Some(slot) = COUNTERS.get_ptr_mut(index) {
        // SAFETY: a slot of this CPU's copy: no other writer while this program runs here.
        unsafe { *slot += 1 };
    }
}
