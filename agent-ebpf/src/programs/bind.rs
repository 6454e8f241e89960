//! bind(2) of a path UNIX socket, on success: records the live socket and reports it.
use core::ffi::c_void;

use agent_common::{EventKind, Fidelity, Tier};
use aya_ebpf::{
    helpers::bpf_probe_read_user,
    macros::{fexit, kprobe, kretprobe, tracepoint},
    programs::{FExitContext, ProbeContext, RetProbeContext, TracePointContext},
};

use super::{tp_arg, tp_ret};
use crate::{
    emit::{self, SUN_PATH_OFFSET},
    live,
    pending::{self, Pending, Slot},
    shim::{self, Sock},
    watch,
};

const AF_UNIX: u16 = 1;

/// fentry tier: `unix_bind(sock, uaddr, addr_len)`, the result following the arguments.
#[fexit(function = "unix_bind")]
pub fn bind_fexit(ctx: FExitContext) -> i32 {
    let ret: i32 = ctx.arg(3);
    if ret == 0 && !emit::is_agent() {
        bound(shim::socket_sk(ctx.arg(0)), Tier::Fentry);
    }
    0
}

#[kprobe(function = "unix_bind")]
pub fn bind_kprobe(ctx: ProbeContext) -> u32 {
    if !emit::is_agent() {
        let sock: *const c_void = ctx.arg(0).unwrap_or(core::ptr::null());
        pending::stash(
            Slot::Bind,
            &Pending {
                ptr: sock as u64,
                ..Default::default()
            },
        );
    }
    0
}

#[kretprobe(function = "unix_bind")]
pub fn bind_kretprobe(ctx: RetProbeContext) -> u32 {
    if let Some(p) = pending::take(Slot::Bind, !emit::is_agent())
        && ctx.ret::<i32>() == 0
    {
        bound(shim::socket_sk(p.ptr as *const c_void), Tier::Kprobe);
    }
    0
}

/// Tracepoint tier, entry: keep only UNIX path binds (read from user memory).
#[tracepoint(category = "syscalls", name = "sys_enter_bind")]
pub fn bind_tp_enter(ctx: TracePointContext) -> u32 {
    if !emit::is_agent() && is_unix_path(tp_arg(&ctx, 1) as *const u8, tp_arg(&ctx, 2)) {
        pending::stash(
            Slot::Bind,
            &Pending {
                arg: tp_arg(&ctx, 0),
                ..Default::default()
            },
        );
    }
    0
}

/// Tracepoint tier, exit: resolve the descriptor to its socket and bound file.
#[tracepoint(category = "syscalls", name = "sys_exit_bind")]
pub fn bind_tp_exit(ctx: TracePointContext) -> u32 {
    if let Some(p) = pending::take(Slot::Bind, false)
        && tp_ret(&ctx) == 0
    {
        bound(
            shim::socket_sk(shim::current_fd_socket(p.arg as i32)),
            Tier::Tracepoint,
        );
    }
    0
}

/// A `sockaddr` of family AF_UNIX naming a path (not abstract, not unnamed), in user memory.
#[inline(always)]
pub fn is_unix_path(addr: *const u8, len: u64) -> bool {
    if addr.is_null() || len <= SUN_PATH_OFFSET as u64 {
        return false;
    }
    let family = unsafe { bpf_probe_read_user(addr as *const u16) };
    let first = unsafe { bpf_probe_read_user(addr.wrapping_add(SUN_PATH_OFFSET)) };
    matches!((family, first), (Ok(AF_UNIX), Ok(b)) if b != 0u8)
}

#[inline(always)]
fn bound(sk: Sock, tier: Tier) {
    // Non-UNIX, abstract and unnamed sockets have no dentry: dropped before anything else.
    let dentry = shim::sk_dentry(sk);
    if dentry.is_null() || !watch::is_watched(dentry) {
        return;
    }
    let Some(file) = shim::sk_bound_file(sk) else {
        return;
    };
    let owner = live::bound(&file, dentry);
    if let Some(mut ev) = emit::reserve(EventKind::Bind, tier, Fidelity::Exact) {
        ev.file(&file)
            .dir(live::parent_id(dentry))
            .owner(&owner)
            .sun_path_of(sk);
        ev.submit();
    }
}
