//! Failed connects (stream and datagram) and sendto by path; successes are only counted.
//!
//! Exact tiers see `unix_find_other`'s verdict on the target: a socket bound to the inode the
//! path resolved to (reported with its file, owner and listening state), or none — which,
//! with ECONNREFUSED, is the signature of a stale inode (unlinked but pinned, or a dead
//! listener's file). On the fentry tier `kern_path`'s result names the inode the path
//! resolved to, bound or not, also where `unix_find_other` is inlined (6.12) or its result
//! unreadable (before 5.17). Every refused connect carries the client's mount namespace, so
//! where the kernel named no inode (kprobe and tracepoint tiers) the agent resolves the path
//! through any process of that namespace, after the client has exited too.
use core::ffi::c_void;

use aya_ebpf::{
    macros::{fexit, kprobe, kretprobe, tracepoint},
    programs::{FExitContext, ProbeContext, RetProbeContext, TracePointContext},
};
use sockwatch_common::{Counter, EventKind, Fidelity, Tier, flags};

use super::{is_err_ptr, tp_arg, tp_ret};
use crate::{
    counters::count,
    current, emit, live, pending,
    record::{Pending, Slot},
    shim::{self, SockCall},
    sockaddr::{self, SUN_PATH_OFFSET},
    watch,
};

const SOCK_DGRAM: i32 = 2;

/// fentry tier: the target lookup of every connect/sendto by address. Its arity changed
/// across kernels, so the result comes from `bpf_get_func_ret` (5.17+).
#[fexit(function = "unix_find_other")]
pub fn conn_tgt_fexit(ctx: FExitContext) -> i32 {
    if let Ok(sk) = ctx.ret::<u64>() {
        target_found(sk, ctx.arg(1));
    }
    0
}

/// fentry tier: the path lookup inside the target lookup. `unix_find_bsd` (inlined on every
/// kernel checked, 5.10 to 6.18) resolves `sun_path` with `kern_path`, whose result names
/// the inode a connect reached, bound or not, even where `unix_find_other` is inlined too.
/// `kern_path` has few other callers (mounts, block device lookups), none on a hot path; a
/// socket inode alone is kept, and only the connect whose `sun_path` it was takes it.
#[fexit(function = "kern_path")]
pub fn conn_path_fexit(ctx: FExitContext) -> i32 {
    // kern_path(name, flags, path): the int result follows the three arguments.
    let ret: i32 = ctx.arg(3);
    if ret == 0 {
        path_resolved(ctx.arg(0), ctx.arg(2));
    }
    0
}

#[fexit(function = "unix_stream_connect")]
pub fn conn_stream_fexit(ctx: FExitContext) -> i32 {
    let ret: i32 = ctx.arg(4);
    finished(ctx.arg(1), i64::from(ret), 0, Tier::Fentry);
    0
}

#[fexit(function = "unix_dgram_connect")]
pub fn conn_dgram_fexit(ctx: FExitContext) -> i32 {
    let ret: i32 = ctx.arg(4);
    finished(ctx.arg(1), i64::from(ret), flags::DGRAM, Tier::Fentry);
    0
}

/// `unix_dgram_sendmsg(sock, msg, len)`: a sendto with a destination path.
#[fexit(function = "unix_dgram_sendmsg")]
pub fn conn_sendmsg_fexit(ctx: FExitContext) -> i32 {
    // An int: read as i32, the upper half of the argument slot is not sign-extended.
    let ret: i32 = ctx.arg(3);
    let addr = shim::msghdr_name(ctx.arg(1)) as *const u8;
    if addr.is_null() {
        return 0;
    }
    finished(
        addr,
        i64::from(ret.min(0)),
        flags::DGRAM | flags::SENDTO,
        Tier::Fentry,
    );
    0
}

#[kretprobe(function = "unix_find_other")]
pub fn conn_tgt_kret(ctx: RetProbeContext) -> u32 {
    target_found(ctx.ret::<u64>(), 0);
    0
}

#[kprobe(function = "unix_stream_connect")]
pub fn conn_stream_kprobe(ctx: ProbeContext) -> u32 {
    stash_addr(ctx.arg::<u64>(1).unwrap_or(0), 0);
    0
}

#[kretprobe(function = "unix_stream_connect")]
pub fn conn_stream_kret(ctx: RetProbeContext) -> u32 {
    kprobe_finished(i64::from(ctx.ret::<i32>()));
    0
}

#[kprobe(function = "unix_dgram_connect")]
pub fn conn_dgram_kprobe(ctx: ProbeContext) -> u32 {
    stash_addr(ctx.arg::<u64>(1).unwrap_or(0), flags::DGRAM);
    0
}

#[kretprobe(function = "unix_dgram_connect")]
pub fn conn_dgram_kret(ctx: RetProbeContext) -> u32 {
    kprobe_finished(i64::from(ctx.ret::<i32>()));
    0
}

/// Tracepoint tier, one program per syscall: `connect(fd, uaddr, len)`, its arguments read at
/// the exit from the registers the syscall saved (`bpf_task_pt_regs`), the path from user
/// memory.
#[tracepoint(category = "syscalls", name = "sys_exit_connect")]
pub fn connect_tp_ret(ctx: TracePointContext) -> u32 {
    tp_returned(tp_ret(&ctx), shim::syscall_sock_call(false), 0);
    0
}

/// `sendto(fd, buf, len, flags, addr, addr_len)`.
#[tracepoint(category = "syscalls", name = "sys_exit_sendto")]
pub fn sendto_tp_ret(ctx: TracePointContext) -> u32 {
    tp_returned(
        tp_ret(&ctx).min(0),
        shim::syscall_sock_call(true),
        flags::SENDTO,
    );
    0
}

/// Tracepoint tier without `bpf_task_pt_regs` (before 5.15): the entry keeps a connect to a
/// path for the exit.
#[tracepoint(category = "syscalls", name = "sys_enter_connect")]
pub fn connect_tp_enter(ctx: TracePointContext) -> u32 {
    tp_begin(tp_arg(&ctx, 0), tp_arg(&ctx, 1), tp_arg(&ctx, 2), 0);
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_connect")]
pub fn connect_tp_exit(ctx: TracePointContext) -> u32 {
    tp_end(tp_ret(&ctx));
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_sendto")]
pub fn sendto_tp_enter(ctx: TracePointContext) -> u32 {
    tp_begin(
        tp_arg(&ctx, 0),
        tp_arg(&ctx, 4),
        tp_arg(&ctx, 5),
        flags::SENDTO,
    );
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_sendto")]
pub fn sendto_tp_exit(ctx: TracePointContext) -> u32 {
    tp_end(tp_ret(&ctx).min(0));
    0
}

/// A socket inode `kern_path` resolved `name` to: kept for the connect whose `sun_path`
/// that is, with what the live table knows of it (the lookup's own answer, where it is
/// seen, replaces that).
#[inline(always)]
fn path_resolved(name: u64, path: *const c_void) {
    let Some(file) = shim::path_file(path) else {
        return;
    };
    if !shim::is_sock_mode(file.mode) || current::is_agent() {
        return;
    }
    let mut p = Pending {
        ptr: name,
        file: file.id(),
        nlink: file.nlink,
        ..Pending::default()
    };
    if let Some(l) = live::lookup(&p.file) {
        p.owner = l.owner;
        p.sock_ino = l.sock_ino;
        p.flags = flags::TARGET_BOUND | (l.flags & flags::LISTENING);
    }
    pending::stash(Slot::ConnectTarget, &p);
}

/// Keeps what the lookup of `sunaddr` found for the connect's exit to report; with no socket
/// bound, the inode its path resolved to (if `kern_path` was seen) stays named. The record is
/// rewritten in place where `kern_path` kept one (no delete and insert), and a socket bound to
/// a file neither live nor watched is marked after its identity alone: most connects reach
/// such a socket, and nothing more of them is ever reported.
#[inline(always)]
fn target_found(sk: u64, sunaddr: u64) {
    if current::is_agent() {
        return;
    }
    let kept = pending::slot_mut(Slot::ConnectTarget);
    let mut p = Pending {
        flags: flags::TARGET_SEEN,
        ..Pending::default()
    };
    // SAFETY: this thread's own record (see `pending::slot_mut`); copied at once.
    if let Some(r) = kept.map(|r| unsafe { *r })
        && sunaddr != 0
        && r.ptr == sunaddr + SUN_PATH_OFFSET as u64
    {
        p.file = r.file;
        p.nlink = r.nlink;
    }
    if sk != 0 && !is_err_ptr(sk) {
        bound_target(sk as *const c_void, &mut p);
    }
    pending::restash(kept, Slot::ConnectTarget, &p);
}

/// What a connect's target socket `sk` is bound to, into `p`: [`Pending::NOT_OURS`] alone for
/// a file neither live nor watched; nothing for an abstract or unnamed socket.
#[inline(always)]
fn bound_target(sk: *const c_void, p: &mut Pending) {
    let dentry = shim::sk_dentry(sk);
    let Some(id) = shim::dentry_id(dentry) else {
        return;
    };
    let live = live::lookup(&id);
    if live.is_none() && !watch::is_watched(dentry) {
        p.arg = Pending::NOT_OURS;
        return;
    }
    let file = shim::bound_file_of(dentry, id, shim::sk_sock_ino(sk));
    p.file = file.id();
    p.sock_ino = file.sock_ino;
    p.nlink = file.nlink;
    p.flags |= flags::TARGET_BOUND;
    if shim::sk_listening(sk) {
        p.flags |= flags::LISTENING;
    }
    if let Some(l) = live {
        p.owner = l.owner;
    }
}

/// Kprobe tier, entry: keeps the kernel copy of the address.
#[inline(always)]
fn stash_addr(addr: u64, dgram: u16) {
    if !current::is_agent() {
        stash_connect(addr, dgram);
    }
}

/// Keeps a connect's or sendto's address (kernel or user copy) and flags for its exit.
#[inline(always)]
fn stash_connect(addr: u64, extra: u16) {
    let p = Pending {
        flags: extra,
        ..Pending::args(addr, 0)
    };
    pending::stash(Slot::Connect, &p);
}

#[inline(always)]
fn kprobe_finished(ret: i64) {
    if let Some(p) = pending::take(Slot::Connect, false) {
        finished(p.ptr as *const u8, ret, p.flags, Tier::Kprobe);
    }
}

/// The end of a connect or sendto in kernel context (`addr` is the kernel copy).
#[inline(always)]
fn finished(addr: *const u8, ret: i64, extra: u16, tier: Tier) {
    // A path `kern_path` resolved for another caller is not this connect's target.
    let sun_path = addr.wrapping_add(SUN_PATH_OFFSET) as u64;
    let target =
        pending::take(Slot::ConnectTarget, false).filter(|t| t.ptr == 0 || t.ptr == sun_path);
    if current::is_agent() || !sockaddr::is_kernel_unix_path(addr) {
        return;
    }
    if ret >= 0 {
        count(Counter::ConnectOk);
        return;
    }
    let target = target.unwrap_or_default();
    if target.arg == Pending::NOT_OURS {
        return;
    }
    if let Some(mut ev) = emit::reserve(EventKind::Connect, tier, Fidelity::Exact) {
        ev.pending(&target)
            .ret(ret)
            .flags(extra)
            .aux(shim::current_mntns())
            .kernel_sun_path(addr);
        ev.submit();
    }
}

#[inline(always)]
fn tp_begin(fd: u64, uaddr: u64, len: u64, extra: u16) {
    if current::is_agent() || !sockaddr::is_user_unix_path(uaddr as *const u8, len) {
        return;
    }
    // The descriptor is kept, not resolved: most connects succeed, and only a failure needs
    // the socket's type (`tp_finished`).
    let p = Pending {
        flags: extra,
        ..Pending::args(uaddr, fd)
    };
    pending::stash(Slot::Connect, &p);
}

#[inline(always)]
fn tp_end(ret: i64) {
    if let Some(p) = pending::take(Slot::Connect, false) {
        tp_finished(ret, p.arg, p.ptr, p.flags);
    }
}

/// A connect or sendto at its exit, its arguments read there.
#[inline(always)]
fn tp_returned(ret: i64, call: SockCall, extra: u16) {
    if !current::is_agent() && sockaddr::is_user_unix_path(call.addr as *const u8, call.len) {
        tp_finished(ret, call.fd, call.addr, extra);
    }
}

/// A connect or sendto to a path (`uaddr` in user memory) by descriptor `fd` returned `ret`:
/// a success counted, a failure reported.
#[inline(always)]
fn tp_finished(ret: i64, fd: u64, uaddr: u64, extra: u16) {
    if ret >= 0 {
        count(Counter::ConnectOk);
        return;
    }
    // The descriptor is still this thread's at the syscall's exit (a sibling thread's close
    // in between would only lose the datagram flag).
    let mut f = extra;
    let sk = shim::socket_sk(shim::current_fd_socket(fd as i32));
    if !sk.is_null() && shim::sk_type(sk) == SOCK_DGRAM {
        f |= flags::DGRAM;
    }
    if let Some(mut ev) = emit::reserve(EventKind::Connect, Tier::Tracepoint, Fidelity::PathOnly) {
        ev.ret(ret)
            .flags(f)
            .aux(shim::current_mntns())
            .user_path((uaddr as *const u8).wrapping_add(SUN_PATH_OFFSET));
        ev.submit();
    }
}
