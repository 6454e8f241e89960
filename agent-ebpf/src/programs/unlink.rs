//! Unlink of a socket file (one per file, so a recursive removal yields one per socket).
//!
//! Exact tiers look at the inode about to be removed: live or not, its owner, and whether
//! the unlinker holds the socket itself, all decided before the unlink can complete.
use core::ffi::c_void;

use agent_common::{EventKind, Fidelity, Flavor, PATH_CAP, Tier, flags};
use aya_ebpf::{
    EbpfContext as _,
    helpers::bpf_probe_read_user_str_bytes,
    macros::{fentry, fexit, kprobe, kretprobe, lsm, tracepoint},
    programs::{
        FEntryContext, FExitContext, LsmContext, ProbeContext, RetProbeContext, TracePointContext,
    },
};

use super::{tp_arg, tp_ret};
use crate::{
    current, emit, live,
    maps::{SCRATCH, VFS_UNLINK_ARGS},
    pending,
    record::{Pending, Slot},
    shim,
};

/// `AT_REMOVEDIR`: an unlinkat that is an rmdir.
const AT_REMOVEDIR: u64 = 0x200;
/// `AT_FDCWD`: a path relative to the working directory.
pub const AT_FDCWD: i32 = -100;

/// `vfs_unlink`'s arguments: `(idmap, dir, dentry, delegated)` since 5.12, before that
/// `(dir, dentry, delegated)`; the loader reads which from the kernel's BTF.
#[inline(always)]
fn dentry_arg() -> u32 {
    VFS_UNLINK_ARGS.load().saturating_sub(2)
}

flavored! {
    /// fentry tier: the unlink's victim, before it is removed.
    #[fentry(function = "vfs_unlink")]
    fn unlink_fentry / unlink_fentry_b(ctx: FEntryContext, flavor) -> i32 {
        begin(shim::ctx_arg(ctx.as_ptr(), dentry_arg()) as *const c_void, flavor);
        0
    }
}

flavored! {
    /// fexit tier: the result follows the arguments.
    #[fexit(function = "vfs_unlink")]
    fn unlink_fexit / unlink_fexit_b(ctx: FExitContext, flavor) -> i32 {
        let ret = shim::ctx_arg(ctx.as_ptr(), VFS_UNLINK_ARGS.load()) as i32;
        end(ret as i64, Tier::Fentry, flavor);
        0
    }
}

flavored! {
    /// LSM tier: `inode_unlink(dir, dentry)`, before the unlink; its result is not known.
    #[lsm(hook = "inode_unlink")]
    fn unlink_lsm / unlink_lsm_b(ctx: LsmContext, flavor) -> i32 {
        let dentry: *const c_void = ctx.arg(1);
        if !current::is_agent()
            && let Some(p) = live::inspect_victim(dentry, flavor)
        {
            report(&p, 0, Tier::Lsm, flags::RESULT_UNKNOWN, flavor);
        }
        0
    }
}

flavored! {
    #[kprobe(function = "vfs_unlink")]
    fn unlink_kprobe / unlink_kprobe_b(ctx: ProbeContext, flavor) -> u32 {
        // Both registers read at constant offsets, as volatile loads: the compiler would
        // otherwise load from a chosen offset, a modified context pointer the verifier refuses.
        let regs = ctx.regs;
        // SAFETY: `regs` is the kernel's register frame for this probe, valid while it runs.
        let (a1, a2) = unsafe {
            (
                core::ptr::read_volatile(core::ptr::addr_of!((*regs).rsi)),
                core::ptr::read_volatile(core::ptr::addr_of!((*regs).rdx)),
            )
        };
        let dentry = if dentry_arg() == 2 { a2 } else { a1 };
        begin(dentry as *const c_void, flavor);
        0
    }
}

flavored! {
    #[kretprobe(function = "vfs_unlink")]
    fn unlink_kret / unlink_kret_b(ctx: RetProbeContext, flavor) -> u32 {
        end(ctx.ret::<i32>() as i64, Tier::Kprobe, flavor);
        0
    }
}

/// Tracepoint tier: no inode in sight, so keep only paths whose last component is named like
/// a live socket's file; userspace resolves the rest.
#[tracepoint(category = "syscalls", name = "sys_enter_unlink")]
pub fn unlink_tp_enter(ctx: TracePointContext) -> u32 {
    path_begin(AT_FDCWD, tp_arg(&ctx, 0) as *const u8, Slot::Unlink);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_unlinkat")]
pub fn unlinkat_tp_enter(ctx: TracePointContext) -> u32 {
    if tp_arg(&ctx, 2) & AT_REMOVEDIR == 0 {
        path_begin(
            tp_arg(&ctx, 0) as i32,
            tp_arg(&ctx, 1) as *const u8,
            Slot::Unlink,
        );
    }
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_unlink")]
pub fn unlink_tp_exit(ctx: TracePointContext) -> u32 {
    path_end(tp_ret(&ctx), EventKind::Unlink, Slot::Unlink);
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_unlinkat")]
pub fn unlinkat_tp_exit(ctx: TracePointContext) -> u32 {
    path_end(tp_ret(&ctx), EventKind::Unlink, Slot::Unlink);
    0
}

#[inline(always)]
fn begin(dentry: *const c_void, flavor: Flavor) {
    if !current::is_agent()
        && let Some(p) = live::inspect_victim(dentry, flavor)
    {
        pending::stash(Slot::Unlink, &p);
    }
}

#[inline(always)]
fn end(ret: i64, tier: Tier, flavor: Flavor) {
    // Only socket files were stashed: no record is the common, regular-file case.
    if let Some(p) = pending::take(Slot::Unlink, false)
        && ret == 0
    {
        report(&p, ret, tier, 0, flavor);
    }
}

#[inline(always)]
fn report(p: &Pending, ret: i64, tier: Tier, extra: u16, flavor: Flavor) {
    if let Some(mut ev) = emit::reserve(EventKind::Unlink, tier, Fidelity::Exact) {
        ev.pending(p)
            .ret(ret)
            .flags(extra)
            .removed_path(flavor, p.ptr as *const c_void);
        ev.submit();
    }
}

/// Stashes a user path whose base name matches a live socket's (tracepoint tier), with the
/// directory a relative path starts from (`dirfd`, or the working directory).
#[inline(always)]
pub fn path_begin(dirfd: i32, user_path: *const u8, slot: Slot) {
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
        pending::stash(slot, &p);
    }
}

/// Reports a successful unlink or rename of a stashed path (tracepoint tier).
#[inline(always)]
pub fn path_end(ret: i64, kind: EventKind, slot: Slot) {
    if let Some(p) = pending::take(slot, false)
        && ret == 0
        && let Some(mut ev) = emit::reserve(kind, Tier::Tracepoint, Fidelity::PathOnly)
    {
        ev.user_path(p.ptr as *const u8).dir(p.dir);
        ev.submit();
    }
}
