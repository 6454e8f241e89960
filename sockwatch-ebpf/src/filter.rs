//! Slot filters in front of hash tables whose lookups of new keys miss the cache (see
//! [`sockwatch_common::maps::NAME_FILTER`]): a key's slot is marked after the key is added to
//! its table, and read before the table is.
use sockwatch_common::maps::{FILTER_MARKED, FILTER_SLOTS};

use crate::maps::SlotFilter;

/// Marks `slot` in both generations, after its key was added to the table: a sweep that clears
/// this mark reads the table afterwards.
#[inline(always)]
pub fn mark(filter: &SlotFilter, slot: usize) {
    if let Some(marks) = filter.get_ptr_mut(0) {
        // SAFETY: the map's one element, valid for this run; the index is masked to its length.
        // Every writer stores whole aligned bytes or slots, never a torn value.
        unsafe { (*marks)[slot & (FILTER_SLOTS - 1)] = FILTER_MARKED };
    }
}

/// False when no key the table holds falls in `slot`: the table need not be asked.
#[inline(always)]
pub fn may_hold(filter: &SlotFilter, slot: usize) -> bool {
    filter
        .get(0)
        .is_none_or(|marks| marks[slot & (FILTER_SLOTS - 1)] != 0)
}
