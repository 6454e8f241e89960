//! State carried from a hook's entry to its exit, per thread and hook.
use agent_common::{Counter, FileId, Owner};
use aya_ebpf::helpers::bpf_get_current_pid_tgid;

use crate::{emit::count, maps::PENDING};

/// Which entry/exit pair a pending record belongs to.
#[repr(u64)]
#[derive(Clone, Copy)]
pub enum Slot {
    Bind = 1,
    Listen = 2,
    Unlink = 3,
    Rename = 4,
    Connect = 5,
    /// `unix_find_other`'s verdict on a connect's target, read by the connect's exit.
    ConnectTarget = 6,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PendingKey {
    pub pid_tgid: u64,
    pub slot: u64,
}

/// A socket file as seen at an entry hook, or raw arguments for the exit hook.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Pending {
    /// A kernel or user pointer argument (socket, sockaddr, path).
    pub ptr: u64,
    /// A scalar argument (fd, backlog, rename flags).
    pub arg: u64,
    pub file: FileId,
    /// The directory holding `file`, or the start of a relative path.
    pub dir: FileId,
    pub sock_ino: u64,
    pub owner: Owner,
    pub nlink: u32,
    /// `agent_common::flags` bits decided at entry.
    pub flags: u16,
    pub _pad: u16,
}

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

/// Takes this thread's record for `slot`; a missing one is counted as unpaired when
/// `expected`.
#[inline(always)]
pub fn take(slot: Slot, expected: bool) -> Option<Pending> {
    let k = key(slot);
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
