//! A rename whose target is an existing socket file: the displaced inode is what matters.
use core::ffi::c_void;

use agent_common::{EventKind, Fidelity, Tier, flags};
use aya_ebpf::{
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
    emit, live,
    pending::{self, Pending, Slot},
    shim,
};

/// `RENAME_EXCHANGE`: both names stay, swapped.
const RENAME_EXCHANGE: u32 = 1 << 1;

/// fentry tier: `vfs_rename(struct renamedata *rd)` (5.12+).
#[fentry(function = "vfs_rename")]
pub fn rename_fentry(ctx: FEntryContext) -> i32 {
    begin(ctx.arg(0));
    0
}

#[fexit(function = "vfs_rename")]
pub fn rename_fexit(ctx: FExitContext) -> i32 {
    let ret: i32 = ctx.arg(1);
    end(ret as i64, Tier::Fentry);
    0
}

/// LSM tier: `inode_rename(old_dir, old_dentry, new_dir, new_dentry)`, before the rename.
#[lsm(hook = "inode_rename")]
pub fn rename_lsm(ctx: LsmContext) -> i32 {
    let target: *const c_void = ctx.arg(3);
    if !emit::is_agent()
        && let Some(p) = live::inspect_victim(target)
    {
        report(&p, 0, Tier::Lsm, flags::RESULT_UNKNOWN);
    }
    0
}

#[kprobe(function = "vfs_rename")]
pub fn rename_kprobe(ctx: ProbeContext) -> u32 {
    begin(ctx.arg(0).unwrap_or(core::ptr::null()));
    0
}

#[kretprobe(function = "vfs_rename")]
pub fn rename_kretprobe(ctx: RetProbeContext) -> u32 {
    end(ctx.ret::<i32>() as i64, Tier::Kprobe);
    0
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
fn begin(rd: *const c_void) {
    if emit::is_agent() || rd.is_null() {
        return;
    }
    if let Some(mut p) = live::inspect_victim(shim::renamedata_target(rd)) {
        if shim::renamedata_flags(rd) & RENAME_EXCHANGE != 0 {
            p.flags |= flags::EXCHANGE;
        }
        pending::stash(Slot::Rename, &p);
    }
}

#[inline(always)]
fn end(ret: i64, tier: Tier) {
    if let Some(p) = pending::take(Slot::Rename, false)
        && ret == 0
    {
        report(&p, ret, tier, 0);
    }
}

#[inline(always)]
fn report(p: &Pending, ret: i64, tier: Tier, extra: u16) {
    if let Some(mut ev) = emit::reserve(EventKind::Rename, tier, Fidelity::Exact) {
        ev.pending(p).ret(ret).flags(extra).syscall_target_path();
        ev.submit();
    }
}
