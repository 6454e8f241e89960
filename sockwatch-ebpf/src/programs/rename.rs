//! A rename that concerns a socket file: the inode it displaces (a rename-over), the live
//! socket file it moves away from its bound path, or both files of a `RENAME_EXCHANGE`.
use core::ffi::c_void;

use aya_ebpf::{
    EbpfContext as _,
    macros::{fentry, fexit, kprobe, kretprobe, lsm, tracepoint},
    programs::{
        FEntryContext, FExitContext, LsmContext, ProbeContext, RetProbeContext, TracePointContext,
    },
};
use sockwatch_common::Flavor;

use super::{
    kprobe_arg,
    removal::{self, AT_FDCWD, Removal::Rename},
    tp_arg,
};
use crate::{
    maps::VFS_RENAME_ARGS,
    shim::{self, Dentry},
    watch,
};

/// `RENAME_EXCHANGE`: both names stay, swapped.
const RENAME_EXCHANGE: u32 = 1 << 1;

/// `vfs_rename(struct renamedata *)`, as the kernel's BTF says (loader) and its types allow
/// (CO-RE: without the type the branch that reads it is dead code the verifier never sees).
#[inline(always)]
fn takes_renamedata() -> bool {
    shim::renamedata_exists() && VFS_RENAME_ARGS.load() == 1
}

/// Entry of an exact tier, from `vfs_rename`'s arguments (`arg(n)`): the source, target and
/// flags are in `struct renamedata` since 5.12, before that arguments 1, 3 and 5.
#[inline(always)]
fn begin(arg: impl Fn(u32) -> u64, flavor: Flavor) {
    let (source, target, rename_flags) = if takes_renamedata() {
        let rd = arg(0) as *const c_void;
        (
            shim::renamedata_source(rd),
            shim::renamedata_target(rd),
            shim::renamedata_flags(rd),
        )
    } else {
        (arg(1) as Dentry, arg(3) as Dentry, arg(5) as u32)
    };
    removal::rename_begin(source, target, rename_flags & RENAME_EXCHANGE != 0, flavor);
}

/// The LSM hook is not passed the flags: they are the syscall's (renameat2's fifth argument).
#[inline(always)]
fn syscall_exchanges(flavor: Flavor) -> bool {
    let rename_flags = match flavor {
        Flavor::Helpers => shim::syscall_rename_flags(),
        Flavor::Bounded => shim::syscall_rename_flags_bounded(),
    };
    rename_flags & RENAME_EXCHANGE != 0
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
        watch::renamed();
        removal::fexit_end(Rename, &ctx, VFS_RENAME_ARGS.load(), flavor)
    }

    /// LSM tier: `inode_rename(old_dir, old_dentry, new_dir, new_dentry)`, before the rename.
    #[lsm(hook = "inode_rename")]
    fn rename_lsm / rename_lsm_b(ctx: LsmContext, flavor) -> i32 {
        let exchange = syscall_exchanges(flavor);
        removal::rename_report_before(ctx.arg(1), ctx.arg(3), exchange, flavor)
    }

    #[kprobe(function = "vfs_rename")]
    fn rename_kprobe / rename_kprobe_b(ctx: ProbeContext, flavor) -> u32 {
        // The registers `begin` may ask for, each read once: arguments 0, 1, 3 and 5.
        let [a0, a1, a3, a5] = [
            kprobe_arg::<0>(&ctx),
            kprobe_arg::<1>(&ctx),
            kprobe_arg::<3>(&ctx),
            kprobe_arg::<5>(&ctx),
        ];
        let arg = |n| match n {
            0 => a0,
            1 => a1,
            3 => a3,
            _ => a5,
        };
        begin(arg, flavor);
        0
    }

    #[kretprobe(function = "vfs_rename")]
    fn rename_kret / rename_kret_b(ctx: RetProbeContext, flavor) -> u32 {
        removal::kret_end(Rename, &ctx, flavor)
    }
}

/// Tracepoint tier: `rename(old, new)`, both names relative to the working directory.
#[tracepoint(category = "syscalls", name = "sys_enter_rename")]
pub fn rename_tp_enter(ctx: TracePointContext) -> u32 {
    let (old, new) = (tp_arg(&ctx, 0), tp_arg(&ctx, 1));
    removal::rename_path_begin(
        (AT_FDCWD, old as *const u8),
        (AT_FDCWD, new as *const u8),
        false,
    );
    0
}

/// `renameat(olddirfd, old, newdirfd, new)`.
#[tracepoint(category = "syscalls", name = "sys_enter_renameat")]
pub fn renameat_tp_enter(ctx: TracePointContext) -> u32 {
    at_begin(&ctx, false)
}

/// `renameat2(olddirfd, old, newdirfd, new, flags)`.
#[tracepoint(category = "syscalls", name = "sys_enter_renameat2")]
pub fn renameat2_tp_enter(ctx: TracePointContext) -> u32 {
    let exchange = tp_arg(&ctx, 4) as u32 & RENAME_EXCHANGE != 0;
    at_begin(&ctx, exchange)
}

#[tracepoint(category = "syscalls", name = "sys_exit_rename")]
pub fn rename_tp_exit(ctx: TracePointContext) -> u32 {
    watch::renamed();
    removal::rename_path_end(&ctx)
}

#[tracepoint(category = "syscalls", name = "sys_exit_renameat")]
pub fn renameat_tp_exit(ctx: TracePointContext) -> u32 {
    watch::renamed();
    removal::rename_path_end(&ctx)
}

#[tracepoint(category = "syscalls", name = "sys_exit_renameat2")]
pub fn renameat2_tp_exit(ctx: TracePointContext) -> u32 {
    watch::renamed();
    removal::rename_path_end(&ctx)
}

/// renameat's and renameat2's entry: the old name is arguments 0 (dirfd) and 1, the new one
/// 2 and 3.
#[inline(always)]
fn at_begin(ctx: &TracePointContext, exchange: bool) -> u32 {
    let old = (tp_arg(ctx, 0) as i32, tp_arg(ctx, 1) as *const u8);
    let new = (tp_arg(ctx, 2) as i32, tp_arg(ctx, 3) as *const u8);
    removal::rename_path_begin(old, new, exchange);
    0
}
