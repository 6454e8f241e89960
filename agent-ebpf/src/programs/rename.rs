//! A rename whose target is an existing socket file: the displaced inode is what matters.
use core::ffi::c_void;

use agent_common::{Flavor, flags};
use aya_ebpf::{
    EbpfContext as _,
    macros::{fentry, fexit, kprobe, kretprobe, lsm, tracepoint},
    programs::{
        FEntryContext, FExitContext, LsmContext, ProbeContext, RetProbeContext, TracePointContext,
    },
};

use super::{
    removal::{self, AT_FDCWD, Removal::Rename},
    tp_arg,
};
use crate::{
    maps::VFS_RENAME_ARGS,
    shim::{self, Dentry},
};

/// `RENAME_EXCHANGE`: both names stay, swapped.
const RENAME_EXCHANGE: u32 = 1 << 1;

/// `vfs_rename(struct renamedata *)`, as the kernel's BTF says (loader) and its types allow
/// (CO-RE: without the type the branch that reads it is dead code the verifier never sees).
#[inline(always)]
fn takes_renamedata() -> bool {
    shim::renamedata_exists() && VFS_RENAME_ARGS.load() == 1
}

/// Entry of an exact tier, from `vfs_rename`'s arguments (`arg(n)`): the target and flags are
/// in `struct renamedata` since 5.12, before that arguments 3 and 5.
#[inline(always)]
fn begin(arg: impl Fn(u32) -> u64, flavor: Flavor) {
    let (target, rename_flags) = if takes_renamedata() {
        let rd = arg(0) as *const c_void;
        (shim::renamedata_target(rd), shim::renamedata_flags(rd))
    } else {
        (arg(3) as Dentry, arg(5) as u32)
    };
    let exchange = || {
        if rename_flags & RENAME_EXCHANGE != 0 {
            flags::EXCHANGE
        } else {
            0
        }
    };
    removal::begin(Rename, target, exchange, flavor);
}

flavored! {
    /// fentry tier: `vfs_rename(struct renamedata *rd)` since 5.12, before that
    /// `vfs_rename(old_dir, old_dentry, new_dir, new_dentry, delegated, flags)`.
    #[fentry(function = "vfs_rename")]
    fn rename_fentry / rename_fentry_b(ctx: FEntryContext, flavor) -> i32 {
        begin(|n| shim::ctx_arg(ctx.as_ptr(), n), flavor);
        0
    }

    #[fexit(function = "vfs_rename")]
    fn rename_fexit / rename_fexit_b(ctx: FExitContext, flavor) -> i32 {
        removal::fexit_end(Rename, &ctx, VFS_RENAME_ARGS.load(), flavor)
    }

    /// LSM tier: `inode_rename(old_dir, old_dentry, new_dir, new_dentry)`, before the rename.
    #[lsm(hook = "inode_rename")]
    fn rename_lsm / rename_lsm_b(ctx: LsmContext, flavor) -> i32 {
        removal::report_before(Rename, ctx.arg(3), flavor)
    }

    #[kprobe(function = "vfs_rename")]
    fn rename_kprobe / rename_kprobe_b(ctx: ProbeContext, flavor) -> u32 {
        begin(|n| ctx.arg::<u64>(n as usize).unwrap_or(0), flavor);
        0
    }

    #[kretprobe(function = "vfs_rename")]
    fn rename_kret / rename_kret_b(ctx: RetProbeContext, flavor) -> u32 {
        removal::kret_end(Rename, &ctx, flavor)
    }
}

/// Tracepoint tier: `rename(old, new)`; the new name is the one whose file is displaced.
#[tracepoint(category = "syscalls", name = "sys_enter_rename")]
pub fn rename_tp_enter(ctx: TracePointContext) -> u32 {
    removal::path_begin(Rename, AT_FDCWD, tp_arg(&ctx, 1) as *const u8);
    0
}

/// `renameat(olddirfd, old, newdirfd, new)`; renameat2 adds flags.
#[tracepoint(category = "syscalls", name = "sys_enter_renameat")]
pub fn renameat_tp_enter(ctx: TracePointContext) -> u32 {
    new_name_begin(&ctx)
}

#[tracepoint(category = "syscalls", name = "sys_enter_renameat2")]
pub fn renameat2_tp_enter(ctx: TracePointContext) -> u32 {
    new_name_begin(&ctx)
}

#[tracepoint(category = "syscalls", name = "sys_exit_rename")]
pub fn rename_tp_exit(ctx: TracePointContext) -> u32 {
    removal::path_end(Rename, &ctx)
}

#[tracepoint(category = "syscalls", name = "sys_exit_renameat")]
pub fn renameat_tp_exit(ctx: TracePointContext) -> u32 {
    removal::path_end(Rename, &ctx)
}

#[tracepoint(category = "syscalls", name = "sys_exit_renameat2")]
pub fn renameat2_tp_exit(ctx: TracePointContext) -> u32 {
    removal::path_end(Rename, &ctx)
}

/// renameat's and renameat2's entry: the new name is arguments 2 (dirfd) and 3.
#[inline(always)]
fn new_name_begin(ctx: &TracePointContext) -> u32 {
    removal::path_begin(Rename, tp_arg(ctx, 2) as i32, tp_arg(ctx, 3) as *const u8);
    0
}
