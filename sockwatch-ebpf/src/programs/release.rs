//! Release of a bound socket (its last reference closed): drops it from the live table.
use core::ffi::c_void;

use aya_ebpf::{
    macros::{fentry, kprobe, tracepoint},
    programs::{FEntryContext, ProbeContext, TracePointContext},
};
use sockwatch_common::{EventKind, Fidelity, Flavor, Tier, flags};

use super::tp_arg;
use crate::{
    current, emit, live,
    shim::{self, Sock},
};

/// fentry tier: `unix_release(sock)` runs on the last close, while `sock->sk` is intact.
#[fentry(function = "unix_release")]
pub fn release_fentry(ctx: FEntryContext) -> i32 {
    released(shim::socket_sk(ctx.arg(0)), Tier::Fentry);
    0
}

#[kprobe(function = "unix_release")]
pub fn release_kprobe(ctx: ProbeContext) -> u32 {
    let sock: *const c_void = ctx.arg(0).unwrap_or(core::ptr::null());
    released(shim::socket_sk(sock), Tier::Kprobe);
    0
}

flavored! {
    /// Tracepoint tier: a close(2) that drops a socket file's last reference. Sockets closed
    /// by a process's exit make no close(2): the exit hook releases those (see `process.rs`).
    /// Every close on the node runs this: a process that holds no live socket (not tracked:
    /// it bound none, descends from no holder, no scan found it holding one) leaves after one
    /// map lookup, before its descriptor table is read. A tracked one (without `--watch`, every
    /// holder of a path socket and its descendants) reads it on each close: where the typed
    /// current task exists, its table's pointers are plain loads.
    #[tracepoint(category = "syscalls", name = "sys_enter_close")]
    fn release_tp / release_tp_b(ctx: TracePointContext, flavor) -> u32 {
        if !live::is_tracked(current::tgid()) {
            return 0;
        }
        let fd = tp_arg(&ctx, 0) as i32;
        let file = match flavor {
            Flavor::Helpers => shim::current_fd_file_btf(fd),
            Flavor::Bounded => shim::current_fd_file(fd),
        };
        if !file.is_null() && shim::file_refs(file) == 1 {
            released(shim::socket_sk(shim::file_socket(file)), Tier::Tracepoint);
        }
        0
    }
}

/// The release of `sk`: reported if it is the live socket of its file.
#[inline(always)]
pub fn released(sk: Sock, tier: Tier) {
    let Some((file, entry)) = live::live_entry(sk) else {
        return;
    };
    let live = entry.release(&file);
    if let Some(mut ev) = emit::reserve(EventKind::Release, tier, Fidelity::Exact) {
        ev.file(&file)
            .owner(&live.owner)
            .flags(live.flags & flags::LISTENING)
            .sun_path_of(sk);
        ev.submit();
    }
}
