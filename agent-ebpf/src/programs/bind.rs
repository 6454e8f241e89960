//! bind(2) of a path UNIX socket, reported on success only.
//!
//! - `bind_fexit` (fentry tier): fexit on `unix_bind`, reads the bound inode from the socket.
//! - `bind_tp_enter`/`bind_tp_exit` (tracepoint tier): the syscall tracepoints; the entry side
//!   keeps only UNIX path binds, the exit side resolves the fd to its socket.
use core::ffi::c_void;

use agent_common::{Counter, EventKind, SUN_PATH_LEN, Tier};
use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user},
    macros::{fexit, tracepoint},
    programs::{FExitContext, TracePointContext},
};

use crate::{
    emit::{self, count},
    maps::PENDING_BIND,
    shim,
};

const AF_UNIX: u16 = 1;
/// `offsetof(struct sockaddr_un, sun_path)`.
const SUN_PATH_OFFSET: usize = 2;

// Syscall tracepoint layout (stable ABI): 8-byte common header, syscall nr, then the
// arguments as longs from offset 16; the exit record has the return value at 16.
const TP_ARG0: usize = 16;
const TP_ARG1: usize = 24;
const TP_ARG2: usize = 32;
const TP_RET: usize = 16;

#[fexit(function = "unix_bind")]
pub fn bind_fexit(ctx: FExitContext) -> i32 {
    // unix_bind(sock, uaddr, addr_len): the return value follows the three arguments.
    let ret: i32 = ctx.arg(3);
    let sock: *const c_void = ctx.arg(0);
    if ret == 0 && !emit::is_agent(bpf_get_current_pid_tgid()) {
        emit_bind(shim::socket_sk(sock), Tier::Fentry);
    }
    0
}

#[tracepoint(category = "syscalls", name = "sys_enter_bind")]
pub fn bind_tp_enter(ctx: TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    if emit::is_agent(pid_tgid) {
        return 0;
    }
    let Ok(fd) = (unsafe { ctx.read_at::<i64>(TP_ARG0) }) else {
        count(Counter::ReadFailed);
        return 0;
    };
    let addr: *const u8 = unsafe { ctx.read_at::<u64>(TP_ARG1) }.unwrap_or(0) as *const u8;
    let len = unsafe { ctx.read_at::<i64>(TP_ARG2) }.unwrap_or(0);
    if is_unix_path(addr, len) && PENDING_BIND.insert(pid_tgid, fd as i32, 0).is_err() {
        count(Counter::MapFull);
    }
    0
}

#[tracepoint(category = "syscalls", name = "sys_exit_bind")]
pub fn bind_tp_exit(ctx: TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some(&fd) = (unsafe { PENDING_BIND.get(pid_tgid) }) else {
        return 0;
    };
    let _ = PENDING_BIND.remove(pid_tgid);
    if unsafe { ctx.read_at::<i64>(TP_RET) } == Ok(0) {
        emit_bind(
            shim::socket_sk(shim::current_fd_socket(fd)),
            Tier::Tracepoint,
        );
    }
    0
}

/// A sockaddr of family AF_UNIX naming a path (not abstract, not unnamed), read from user
/// memory before the kernel copies it.
#[inline(always)]
fn is_unix_path(addr: *const u8, len: i64) -> bool {
    if addr.is_null() || len <= SUN_PATH_OFFSET as i64 {
        return false;
    }
    let family = unsafe { bpf_probe_read_user(addr as *const u16) };
    let first = unsafe { bpf_probe_read_user(addr.wrapping_add(SUN_PATH_OFFSET)) };
    matches!((family, first), (Ok(AF_UNIX), Ok(b)) if b != 0u8)
}

#[inline(always)]
fn emit_bind(sk: *const c_void, tier: Tier) {
    // Non-UNIX, abstract and unnamed sockets have no file: dropped before reserving.
    let Some(file) = shim::sk_bound_file(sk) else {
        return;
    };
    let Some(mut entry) = emit::reserve(EventKind::Bind, tier) else {
        return;
    };
    emit::set_file(&mut entry, &file);
    let ev = entry.as_mut_ptr();
    let path = unsafe { &mut *((*ev).path.as_mut_ptr() as *mut [u8; SUN_PATH_LEN]) };
    match shim::sk_path(sk, path) {
        // The shim counts the NUL; the event carries the bare path.
        Some(n) => unsafe { (*ev).path_len = n - 1 },
        None => count(Counter::ReadFailed),
    }
    emit::submit(entry);
}
