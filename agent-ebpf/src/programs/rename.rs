//! A rename whose target is an existing socket file: the displaced inode is what matters.
use core::ffi::c_void;

use agent_common::{EventKind, Fidelity, Flavor, Tier, flags};
use aya_ebpf::{
    EbpfContext as _,
    macros::{fentry, fexit, kprobe, kretprobe, lsm, tracepoint},
    programs::{
        FEntryContext, FExitContext, LsmContext, ProbeContext, RetProbeContext, TracePointContext,
    },
};

use super::{
    tp_arg, tp_ret,
    unlink::{AT_FDCWD, path_begin, path_end},
};
use crate::{
    current, emit, live,
    maps::VFS_RENAME_ARGS,
    pending,
    record::{Pending, Slot},
    shim,
};

/// `vfs_rename(struct renamedata *)`, as the kernel's BTF says (loader) and its types allow
/// (CO-RE: without the type the branch that reads it is dead code the verifier never sees).
#[inline(always)]
fn takes_renamedata() -> bool {
    shim::renamedata_exists() && VFS_RENAME_ARGS.load() == 1
}

/// `RENAME_EXCHANGE`: both names stay, swapped.
const RENAME_EXCHANGE: u32 = 1 << 1;

flavored! {
    /// fentry tier: `vfs_rename(struct renamedata *rd)` since 5.12, before that
    /// `vfs_rename(old_dir, old_dentry, new_dir, new_dentry, delegated, flags)`.
    #[fentry(function = "vfs_rename")]
    fn rename_fentry / rename_fentry_b(ctx: FEntryContext, flavor) -> i32 {
        let arg = |n| shim::ctx_arg(ctx.as_ptr(), n) as *const c_void;
        if takes_renamedata() {
            let rd = arg(0);
            begin(shim::renamedata_target(rd), shim::renamedata_flags(rd), flavor);
        } else {
            begin(arg(3), arg(5) as u32, flavor);
        }
        0
    }
}

flavored! {
    #[fexit(function = "vfs_rename")]
    fn rename_fexit / rename_fexit_b(ctx: FExitContext, flavor) -> i32 {
        let ret = shim::ctx_arg(ctx.as_ptr(), VFS_RENAME_ARGS.load()) as i32;
        end(ret as i64, Tier::Fentry, flavor);
        0
    }
}

flavored! {
    /// LSM tier: `inode_rename(old_dir, old_dentry, new_dir, new_dentry)`, before the rename.
    #[lsm(hook = "inode_rename")]
    fn rename_lsm / rename_lsm_b(ctx: LsmContext, flavor) -> i32 {
        let target: *const c_void = ctx.arg(3);
        if !current::is_agent()
            && let Some(p) = live::inspect_victim(target, flavor)
        {
            report(&p, 0, Tier::Lsm, flags::RESULT_UNKNOWN, flavor);
        }
        0
    }
}

flavored! {
    #[kprobe(function = "vfs_rename")]
    fn rename_kprobe / rename_kprobe_b(ctx: ProbeContext, flavor) -> u32 {
        let arg = |n| ctx.arg::<u64>(n).unwrap_or(0);
        if takes_renamedata() {
            let rd = arg(0) as *const c_void;
            begin(shim::renamedata_target(rd), shim::renamedata_flags(rd), flavor);
        } else {
            begin(arg(3) as *const c_void, arg(5) as u32, flavor);
        }
        0
    }
}

flavored! {
    #[kretprobe(function = "vfs_rename")]
    fn rename_kret / rename_kret_b(ctx: RetProbeContext, flavor) -> u32 {
        end(ctx.ret::<i32>() as i64, Tier::Kprobe, flavor);
        0
    }
}

#[tracepoint(category = "syscalls", name = "sys_enter_rename")]
pub fn rename_tp_enter(ctx: TracePointContext) -> u32 {
    path_begin(AT_FDCWD, tp_arg(&ctx, 1) as *const u8, Slot::Rename);
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_renameat")]
pub fn renameat_tp_enter(ctx: TracePointContext) -> u32 {
    path_begin(
        tp_arg(&ctx, 2) as i32,
        tp_arg(&ctx, 3) as *const u8,
        Slot::Rename,
    );
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_renameat2")]
pub fn renameat2_tp_enter(ctx: TracePointContext) -> u32 {
    path_begin(
        tp_arg(&ctx, 2) as i32,
        tp_arg(&ctx, 3) as *const u8,
        Slot::Rename,
    );
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_rename")]
pub fn rename_tp_exit(ctx: TracePointContext) -> u32 {
    path_end(tp_ret(&ctx), EventKind::Rename, Slot::Rename);
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_renameat")]
pub fn renameat_tp_exit(ctx: TracePointContext) -> u32 {
    path_end(tp_ret(&ctx), EventKind::Rename, Slot::Rename);
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_renameat2")]
pub fn renameat2_tp_exit(ctx: TracePointContext) -> u32 {
    path_end(tp_ret(&ctx), EventKind::Rename, Slot::Rename);
    0
}

#[inline(always)]
fn begin(target: *const c_void, rename_flags: u32, flavor: Flavor) {
    if current::is_agent() || target.is_null() {
        return;
    }
    if let Some(mut p) = live::inspect_victim(target, flavor) {
        if rename_flags & RENAME_EXCHANGE != 0 {
            p.flags |= flags::EXCHANGE;
        }
        pending::stash(Slot::Rename, &p);
    }
}

#[inline(always)]
fn end(ret: i64, tier: Tier, flavor: Flavor) {
    if let Some(p) = pending::take(Slot::Rename, false)
        && ret == 0
    {
        report(&p, ret, tier, 0, flavor);
    }
}

#[inline(always)]
fn report(p: &Pending, ret: i64, tier: Tier, extra: u16, flavor: Flavor) {
    if let Some(mut ev) = emit::reserve(EventKind::Rename, tier, Fidelity::Exact) {
        ev.pending(p)
            .ret(ret)
            .flags(extra)
            .removed_path(flavor, p.ptr as *const c_void);
        ev.submit();
    }
}
