//! Guard mode (LSM tier): refuses the removal of a live listener's file by a process outside
//! its owner set, as the watch's policy says, or in audit mode reports that it would have.
//! Every missing fact lets the removal through.
use aya_ebpf::helpers::{bpf_get_current_comm, generated::bpf_get_current_cgroup_id};
use sockwatch_common::{
    Counter, FileId, GuardPolicy, GuardSwitch, flags,
    guard::{GuardAllowKey, Orphan, OrphanKey, place_hash},
};

use crate::{
    counters::count,
    current, live,
    maps::{GUARD_ALLOW, GUARD_POLICIES, GUARD_SWITCH, ORPHANS},
    record::Pending,
    shim::{self, Dentry},
    watch,
};

/// What an LSM hook returns to refuse: `-EPERM`.
pub const REFUSE: i32 = -1;

/// What the guard makes of one removal.
pub enum Decision {
    /// Let it through: no policy refuses it, or a fact is missing.
    Pass,
    /// Refuse it (`-EPERM`) under this policy.
    Refuse(GuardPolicy),
    /// Audit mode: this policy would refuse it; it goes ahead, reported as such.
    WouldRefuse(GuardPolicy),
}

/// The guard's decision on removing `victim` (whose record `p` is `live::inspect_victim`'s).
/// Enforcing and auditing share every step; only the switch's value tells the two apart at
/// the end, so moving between them is a map write. A listener that loses its file is
/// remembered for the stale owner check, whoever removes it.
#[inline(always)]
pub fn decide(p: &Pending, victim: Dentry) -> Decision {
    let switch = switch();
    if switch == GuardSwitch::Unused as u32 {
        return Decision::Pass;
    }
    let deciding = switch != GuardSwitch::Paused as u32;
    if p.flags & flags::LIVE == 0 {
        if deciding {
            count(Counter::GuardUnknown);
        }
        return Decision::Pass;
    }
    if p.flags & flags::LISTENING == 0 {
        return Decision::Pass;
    }
    let Some(live) = live::lookup(&p.file) else {
        return Decision::Pass;
    };
    let dir_hash = shim::dentry_name_hash(shim::dentry_parent(victim));
    let place = place_hash(live.name_hash, dir_hash);
    let tgid = current::tgid();
    // Owners, and tasks whose descriptors were not all seen, are never refused.
    let outsider = p.owner.tgid != tgid && p.flags & (flags::HOLDS_FD | flags::OWNERS_PARTIAL) == 0;
    if deciding && outsider {
        let slot = watch::slot_of(victim);
        let policy = policy(slot);
        if refuses(policy, slot, tgid, place, &p.file) {
            if switch == GuardSwitch::On as u32 {
                count(Counter::GuardDenied);
                return Decision::Refuse(policy);
            }
            count(Counter::GuardWouldDeny);
            remember(p, place);
            return Decision::WouldRefuse(policy);
        }
    }
    remember(p, place);
    Decision::Pass
}

#[inline(always)]
fn switch() -> u32 {
    GUARD_SWITCH.get(0).copied().unwrap_or(0)
}

#[inline(always)]
fn policy(slot: u32) -> GuardPolicy {
    let raw = GUARD_POLICIES.get(slot).copied().unwrap_or(0);
    if raw == GuardPolicy::StaleOwner as u32 {
        GuardPolicy::StaleOwner
    } else if raw == GuardPolicy::Foreign as u32 {
        GuardPolicy::Foreign
    } else {
        GuardPolicy::Off
    }
}

#[inline(always)]
fn refuses(policy: GuardPolicy, slot: u32, tgid: u32, place: u64, victim: &FileId) -> bool {
    match policy {
        GuardPolicy::Off => false,
        GuardPolicy::StaleOwner => holds_stale_listener(tgid, place, victim),
        GuardPolicy::Foreign => !allowed(slot),
    }
}

/// The remover still holds a listener of its own bound at this place, whose file (another
/// than the victim) was removed or replaced: it is a stale owner.
#[inline(always)]
fn holds_stale_listener(tgid: u32, place: u64, victim: &FileId) -> bool {
    let key = OrphanKey {
        tgid,
        _pad: 0,
        place,
    };
    // SAFETY: the value is copied at once.
    let Some(orphan) = (unsafe { ORPHANS.get(key) }).copied() else {
        return false;
    };
    if orphan.file == *victim {
        return false;
    }
    live::lookup(&orphan.file).is_some_and(|l| {
        l.sock_ino == orphan.sock_ino && l.owner.tgid == tgid && l.flags & flags::LISTENING != 0
    })
}

/// The remover's comm or cgroup is on the watch's allow-list.
#[inline(always)]
fn allowed(slot: u32) -> bool {
    let comm = bpf_get_current_comm().unwrap_or_default();
    let mut by_comm = GuardAllowKey {
        slot,
        kind: sockwatch_common::guard::ALLOW_COMM,
        value: [0; 16],
    };
    by_comm.value[..15].copy_from_slice(&comm[..15]);
    // SAFETY: a helper without arguments.
    let cgroup = unsafe { bpf_get_current_cgroup_id() };
    let by_cgroup = GuardAllowKey::cgroup(slot, cgroup);
    // SAFETY: only presence is tested; the values are never read.
    unsafe { GUARD_ALLOW.get(by_comm).is_some() || GUARD_ALLOW.get(by_cgroup).is_some() }
}

/// Keeps the listener losing its file, by its owner and place.
#[inline(always)]
fn remember(p: &Pending, place: u64) {
    let key = OrphanKey {
        tgid: p.owner.tgid,
        _pad: 0,
        place,
    };
    let orphan = Orphan {
        file: p.file,
        sock_ino: p.sock_ino,
        _pad: 0,
    };
    let _ = ORPHANS.insert(key, orphan, 0);
}
