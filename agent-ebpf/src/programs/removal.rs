//! What unlink and rename share: the file a removal displaces, checked at the operation's
//! entry and reported at its exit (exact tiers), or a path filtered by name (tracepoint tier).
use agent_common::{EventKind, Fidelity, Flavor, PATH_CAP, Tier, flags};
use aya_ebpf::{
    EbpfContext as _,
    helpers::bpf_probe_read_user_str_bytes,
    programs::{FExitContext, RetProbeContext, TracePointContext},
};

use super::tp_ret;
use crate::{
    current, emit, live,
    maps::SCRATCH,
    pending,
    record::{Pending, Slot},
    shim::{self, Dentry},
};

/// `AT_FDCWD`: a path relative to the working directory.
pub const AT_FDCWD: i32 = -100;

/// An operation that removes a name: the file it displaces is what is reported.
#[derive(Clone, Copy)]
pub enum Removal {
    Unlink,
    /// A rename onto an existing file.
    Rename,
}

impl Removal {
    #[inline(always)]
    fn kind(self) -> EventKind {
        match self {
            Removal::Unlink => EventKind::Unlink,
            Removal::Rename => EventKind::Rename,
        }
    }

    #[inline(always)]
    fn slot(self) -> Slot {
        match self {
            Removal::Unlink => Slot::Unlink,
            Removal::Rename => Slot::Rename,
        }
    }
}

/// Entry: keeps the record of a socket file about to be removed, with `extra` flags. They
/// are worked out only for a file that matters: a branch before the fd-table walk would
/// make the verifier walk it once per side.
#[inline(always)]
pub fn begin(op: Removal, victim: Dentry, extra: impl FnOnce() -> u16, flavor: Flavor) {
    if current::is_agent() || victim.is_null() {
        return;
    }
    if let Some(mut p) = live::inspect_victim(victim, flavor) {
        p.flags |= extra();
        pending::stash(op.slot(), &p);
    }
}

/// fexit tier's exit: the result follows the function's `nargs` arguments.
#[inline(always)]
pub fn fexit_end(op: Removal, ctx: &FExitContext, nargs: u32, flavor: Flavor) -> i32 {
    let ret = shim::ctx_arg(ctx.as_ptr(), nargs) as i32;
    end(op, i64::from(ret), Tier::Fentry, flavor);
    0
}

#[inline(always)]
pub fn kret_end(op: Removal, ctx: &RetProbeContext, flavor: Flavor) -> u32 {
    end(op, i64::from(ctx.ret::<i32>()), Tier::Kprobe, flavor);
    0
}

/// Exit: reports a successful removal whose entry kept a record. Only socket files were
/// kept: no record is the common, regular-file case.
#[inline(always)]
fn end(op: Removal, ret: i64, tier: Tier, flavor: Flavor) {
    if let Some(p) = pending::take(op.slot(), false)
        && ret == 0
    {
        report(op, &p, ret, tier, 0, flavor);
    }
}

/// LSM tier: reports a socket file at once, before the removal; its result is not known.
#[inline(always)]
pub fn report_before(op: Removal, victim: Dentry, flavor: Flavor) -> i32 {
    if !current::is_agent()
        && let Some(p) = live::inspect_victim(victim, flavor)
    {
        report(op, &p, 0, Tier::Lsm, flags::RESULT_UNKNOWN, flavor);
    }
    0
}

#[inline(always)]
fn report(op: Removal, p: &Pending, ret: i64, tier: Tier, extra: u16, flavor: Flavor) {
    if let Some(mut ev) = emit::reserve(op.kind(), tier, Fidelity::Exact) {
        ev.pending(p)
            .ret(ret)
            .flags(extra)
            .removed_path(flavor, p.ptr as Dentry);
        ev.submit();
    }
}

/// Tracepoint tier, entry: keeps a user path whose base name matches a live socket's, with
/// the directory a relative path starts from (`dirfd`, or the working directory).
#[inline(always)]
pub fn path_begin(op: Removal, dirfd: i32, user_path: *const u8) {
    if current::is_agent() || user_path.is_null() {
        return;
    }
    let Some(buf) = SCRATCH.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's slot of SCRATCH: nothing else uses it while this program runs here.
    let buf: &mut [u8; PATH_CAP] = unsafe { &mut *buf };
    // SAFETY: the helper checks `user_path`, and writes only within `buf`.
    let Ok(s) = (unsafe { bpf_probe_read_user_str_bytes(user_path, buf) }) else {
        return;
    };
    let len = s.len();
    if live::name_is_live(shim::basename_hash(buf, len)) {
        let dir = if buf[0] == b'/' {
            Default::default()
        } else {
            shim::current_dirfd_id(dirfd)
        };
        let p = Pending {
            ptr: user_path as u64,
            dir,
            ..Default::default()
        };
        pending::stash(op.slot(), &p);
    }
}

/// Tracepoint tier, exit: reports a successful removal of a kept path.
#[inline(always)]
pub fn path_end(op: Removal, ctx: &TracePointContext) -> u32 {
    if let Some(p) = pending::take(op.slot(), false)
        && tp_ret(ctx) == 0
        && let Some(mut ev) = emit::reserve(op.kind(), Tier::Tracepoint, Fidelity::PathOnly)
    {
        ev.user_path(p.ptr as *const u8).dir(p.dir);
        ev.submit();
    }
    0
}
