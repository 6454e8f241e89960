//! bind(2) of a path UNIX socket, on success: records the live socket and reports it.
use core::ffi::c_void;

use aya_ebpf::{
    macros::{fexit, kprobe, kretprobe, tracepoint},
    programs::{FExitContext, ProbeContext, RetProbeContext, TracePointContext},
};
use sockwatch_common::{EventKind, Fidelity, Tier};

use super::{tp_arg, tp_ret};
use crate::{
    current, emit, live, pending,
    record::{Pending, Slot},
    shim::{self, Sock},
    sockaddr, watch,
};

/// fentry tier: `unix_bind(sock, uaddr, addr_len)`, the result following the arguments.
#[fexit(function = "unix_bind")]
pub fn bind_fexit(ctx: FExitContext) -> i32 {
    let ret: i32 = ctx.arg(3);
    if ret == 0 && !current::is_agent() {
        bound(shim::socket_sk(ctx.arg(0)), Tier::Fentry);
    }
    0
}

#[kprobe(function = "unix_bind")]
pub fn bind_kprobe(ctx: ProbeContext) -> u32 {
    if !current::is_agent() {
        let sock: *const c_void = ctx.arg(0).unwrap_or(core::ptr::null());
        pending::stash(Slot::Bind, &Pending::args(sock as u64, 0));
    }
    0
}

#[kretprobe(function = "unix_bind")]
pub fn bind_kretprobe(ctx: RetProbeContext) -> u32 {
    if let Some(p) = pending::take(Slot::Bind, !current::is_agent())
        && ctx.ret::<i32>() == 0
    {
        bound(shim::socket_sk(p.ptr as *const c_void), Tier::Kprobe);
    }
    0
}

/// Tracepoint tier, one program: the descriptor read at the exit from the registers the
/// syscall saved (`bpf_task_pt_regs`). The bound socket itself says whether it is a UNIX
/// path socket: its kernel reads cost less than a copy of the caller's address. The slot is
/// checked to hold a socket only once the socket is a watched one: it held the socket the
/// bind succeeded on unless another thread replaced it since, and until then a wrong file
/// only makes the reads below read nothing that counts.
#[tracepoint(category = "syscalls", name = "sys_exit_bind")]
pub fn bind_tp_ret(ctx: TracePointContext) -> u32 {
    if tp_ret(&ctx) == 0 && !current::is_agent() {
        let file = shim::current_fd_any_file_btf(shim::syscall_sock_call(false).fd as i32);
        let sk = shim::socket_sk(shim::file_socket(file));
        bound_if(sk, Tier::Tracepoint, || shim::is_socket_file(file));
    }
    0
}

/// Tracepoint tier without `bpf_task_pt_regs` (before 5.15), entry: keep only UNIX path binds
/// (read from user memory) for the exit.
#[tracepoint(category = "syscalls", name = "sys_enter_bind")]
pub fn bind_tp_enter(ctx: TracePointContext) -> u32 {
    if !current::is_agent() && sockaddr::is_user_unix_path(tp_arg(&ctx, 1) as _, tp_arg(&ctx, 2)) {
        pending::stash(Slot::Bind, &Pending::args(0, tp_arg(&ctx, 0)));
    }
    0
}

/// The same, exit: the kept descriptor resolved.
#[tracepoint(category = "syscalls", name = "sys_exit_bind")]
pub fn bind_tp_exit(ctx: TracePointContext) -> u32 {
    if let Some(p) = pending::take(Slot::Bind, false)
        && tp_ret(&ctx) == 0
    {
        tp_bound(shim::current_fd_socket(p.arg as i32));
    }
    0
}

/// The socket behind a successful bind's descriptor, resolved to its bound file.
#[inline(always)]
fn tp_bound(sock: *const c_void) {
    bound(shim::socket_sk(sock), Tier::Tracepoint);
}

#[inline(always)]
fn bound(sk: Sock, tier: Tier) {
    bound_if(sk, tier, || true);
}

/// [`bound`], once `confirmed` holds for a socket in a watched directory.
#[inline(always)]
fn bound_if(sk: Sock, tier: Tier, confirmed: impl FnOnce() -> bool) {
    // Non-UNIX, abstract and unnamed sockets have no dentry: dropped before anything else.
    let dentry = shim::sk_dentry(sk);
    if dentry.is_null() {
        return;
    }
    let Some(dir) = watch::watched_dir(dentry).filter(|_| confirmed()) else {
        return;
    };
    let Some(file) = shim::sk_bound_file(sk, dentry) else {
        return;
    };
    // One clock and cgroup read serve the table's entry and the record.
    let owner = live::binder();
    live::bound(&file, dentry, owner);
    if let Some(mut ev) = emit::reserve_as(EventKind::Bind, tier, Fidelity::Exact, &owner) {
        ev.file(&file).dir(dir).owner(&owner).sun_path_of(sk);
        ev.submit();
    }
}
