//! Unlink of a socket file (one per file, so a recursive removal yields one per socket).
//!
//! Exact tiers look at the inode about to be removed: live or not, its owner, and whether
//! the unlinker holds the socket itself, all decided before the unlink can complete.
use core::ffi::c_void;

use aya_ebpf::{
    EbpfContext as _,
    macros::{fentry, fexit, kprobe, kretprobe, lsm, tracepoint},
    programs::{
        FEntryContext, FExitContext, LsmContext, ProbeContext, RetProbeContext, TracePointContext,
    },
};

use super::{
    kprobe_arg,
    removal::{self, AT_FDCWD, Removal::Unlink},
    tp_arg,
};
use crate::{maps::VFS_UNLINK_ARGS, shim};

/// `AT_REMOVEDIR`: an unlinkat that is an rmdir.
const AT_REMOVEDIR: u64 = 0x200;

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
        let dentry = shim::ctx_arg(ctx.as_ptr(), dentry_arg()) as *const c_void;
        removal::begin(Unlink, dentry, flavor);
        0
    }

    /// fexit tier: the result follows the arguments.
    #[fexit(function = "vfs_unlink")]
    fn unlink_fexit / unlink_fexit_b(ctx: FExitContext, flavor) -> i32 {
        removal::fexit_end(Unlink, &ctx, VFS_UNLINK_ARGS.load(), flavor)
    }

    /// LSM tier: `inode_unlink(dir, dentry)`, before the unlink.
    #[lsm(hook = "inode_unlink")]
    fn unlink_lsm / unlink_lsm_b(ctx: LsmContext, flavor) -> i32 {
        removal::report_before(Unlink, ctx.arg(1), flavor)
    }

    #[kprobe(function = "vfs_unlink")]
    fn unlink_kprobe / unlink_kprobe_b(ctx: ProbeContext, flavor) -> u32 {
        let (a1, a2) = (kprobe_arg::<1>(&ctx), kprobe_arg::<2>(&ctx));
        let dentry = if dentry_arg() == 2 { a2 } else { a1 };
        removal::begin(Unlink, dentry as *const c_void, flavor);
        0
    }

    #[kretprobe(function = "vfs_unlink")]
    fn unlink_kret / unlink_kret_b(ctx: RetProbeContext, flavor) -> u32 {
        removal::kret_end(Unlink, &ctx, flavor)
    }
}

/// Tracepoint tier: no inode in sight, so keep only paths whose last component is named like
/// a live socket's file; userspace resolves the rest.
#[tracepoint(category = "syscalls", name = "sys_enter_unlink")]
pub fn unlink_tp_enter(ctx: TracePointContext) -> u32 {
    removal::path_begin(Unlink, AT_FDCWD, tp_arg(&ctx, 0) as *const u8);
    0
}

/// `unlinkat(dirfd, path, flags)`, unless it removes a directory.
#[tracepoint(category = "syscalls", name = "sys_enter_unlinkat")]
pub fn unlinkat_tp_enter(ctx: TracePointContext) -> u32 {
    if tp_arg(&ctx, 2) & AT_REMOVEDIR == 0 {
        removal::path_begin(Unlink, tp_arg(&ctx, 0) as i32, tp_arg(&ctx, 1) as *const u8);
    }
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_unlink")]
pub fn unlink_tp_exit(ctx: TracePointContext) -> u32 {
    removal::path_end(Unlink, &ctx)
}

#[tracepoint(category = "syscalls", name = "sys_exit_unlinkat")]
pub fn unlinkat_tp_exit(ctx: TracePointContext) -> u32 {
    removal::path_end(Unlink, &ctx)
}
