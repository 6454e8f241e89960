//! listen(2) on a live socket: marks it listening in the table and reports it.
use core::ffi::c_void;

use aya_ebpf::{
    macros::{fexit, kprobe, kretprobe, tracepoint},
    programs::{FExitContext, ProbeContext, RetProbeContext, TracePointContext},
};
use sockwatch_common::{EventKind, Fidelity, Tier, flags};

use super::{tp_arg, tp_ret};
use crate::{
    current, emit, live, pending,
    record::{Pending, Slot},
    shim::{self, Sock},
};

/// fentry tier: `unix_listen(sock, backlog)`.
#[fexit(function = "unix_listen")]
pub fn listen_fexit(ctx: FExitContext) -> i32 {
    let ret: i32 = ctx.arg(2);
    if ret == 0 && !current::is_agent() {
        let backlog: i32 = ctx.arg(1);
        listening(shim::socket_sk(ctx.arg(0)), backlog as u32, Tier::Fentry);
    }
    0
}

#[kprobe(function = "unix_listen")]
pub fn listen_kprobe(ctx: ProbeContext) -> u32 {
    if !current::is_agent() {
        let sock: *const c_void = ctx.arg(0).unwrap_or(core::ptr::null());
        let backlog: u64 = ctx.arg(1).unwrap_or(0);
        pending::stash(Slot::Listen, &Pending::args(sock as u64, backlog));
    }
    0
}

#[kretprobe(function = "unix_listen")]
pub fn listen_kretprobe(ctx: RetProbeContext) -> u32 {
    if let Some(p) = pending::take(Slot::Listen, !current::is_agent())
        && ctx.ret::<i32>() == 0
    {
        let sk = shim::socket_sk(p.ptr as *const c_void);
        listening(sk, p.arg as u32, Tier::Kprobe);
    }
    0
}

/// Tracepoint tier, one program: `listen(fd, backlog)`'s arguments read at the exit from the
/// registers the syscall saved (`bpf_task_pt_regs`), its descriptor table through the typed
/// current task. Every listen on the node runs this, TCP's too: a process that holds no live
/// socket (not tracked, as for close) leaves after one map lookup. A receiver of a socket by
/// SCM_RIGHTS is tracked from the next sweep on (no receive program on this tier): its listen
/// before that is left to the sweep's sock_diag view.
#[tracepoint(category = "syscalls", name = "sys_exit_listen")]
pub fn listen_tp_ret(ctx: TracePointContext) -> u32 {
    if tp_ret(&ctx) == 0 && !current::is_agent() && live::is_tracked(current::tgid()) {
        let call = shim::syscall_sock_call(false);
        let file = shim::current_fd_file_btf(call.fd as i32);
        listening(
            shim::socket_sk(shim::file_socket(file)),
            call.addr as u32,
            Tier::Tracepoint,
        );
    }
    0
}

/// Tracepoint tier without `bpf_task_pt_regs` (before 5.15), entry: the same filter, and the
/// arguments kept for the exit.
#[tracepoint(category = "syscalls", name = "sys_enter_listen")]
pub fn listen_tp_enter(ctx: TracePointContext) -> u32 {
    if !current::is_agent() && live::is_tracked(current::tgid()) {
        pending::stash(
            Slot::Listen,
            &Pending::args(tp_arg(&ctx, 1), tp_arg(&ctx, 0)),
        );
    }
    0
}

/// The same, exit: the kept descriptor resolved.
#[tracepoint(category = "syscalls", name = "sys_exit_listen")]
pub fn listen_tp_exit(ctx: TracePointContext) -> u32 {
    if let Some(p) = pending::take(Slot::Listen, false)
        && tp_ret(&ctx) == 0
    {
        let sk = shim::socket_sk(shim::current_fd_socket(p.arg as i32));
        listening(sk, p.ptr as u32, Tier::Tracepoint);
    }
    0
}

#[inline(always)]
fn listening(sk: Sock, backlog: u32, tier: Tier) {
    // Only sockets in the live table (watched, bind seen or seeded by the startup scan).
    let Some((file, live)) = live::live_entry(sk) else {
        return;
    };
    live.mark_listening();
    if let Some(mut ev) = emit::reserve(EventKind::Listen, tier, Fidelity::Exact) {
        ev.file(&file)
            .aux(backlog)
            .flags(flags::LISTENING)
            .sun_path_of(sk);
        ev.submit();
    }
}
