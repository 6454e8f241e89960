//! Receipt of a live socket's descriptor by SCM_RIGHTS (listener hand-over: systemd socket
//! activation's fd store, HAProxy `-x`, Envoy hot restart): the receiver joins the owner set.
//!
//! The kernel checks every received descriptor with `security_file_receive(file)`, once per
//! descriptor and only on SCM_RIGHTS receipt, so the hook is rare and cheap. There is no
//! tracepoint tier: there the sweeps learn receivers from `/proc/PID/fd`.
use core::ffi::c_void;

use aya_ebpf::{
    helpers::generated::bpf_get_current_cgroup_id,
    macros::{fexit, kprobe, lsm},
    programs::{FExitContext, LsmContext, ProbeContext},
};
use sockwatch_common::{EventKind, Fidelity, LiveSock, Tier, flags};

use crate::{
    current, emit, live,
    maps::LIVE,
    shim::{self, File},
};

/// fentry tier: `security_file_receive(file)` returned; 0 means the receipt goes ahead.
#[fexit(function = "security_file_receive")]
pub fn receive_fexit(ctx: FExitContext) -> i32 {
    let ret: i32 = ctx.arg(1);
    if ret == 0 {
        received(ctx.arg(0), Tier::Fentry);
    }
    0
}

/// LSM tier: `file_receive(file)`, after the LSMs before BPF allowed it. Returns 0: allow.
#[lsm(hook = "file_receive")]
pub fn receive_lsm(ctx: LsmContext) -> i32 {
    received(ctx.arg(0), Tier::Lsm);
    0
}

#[kprobe(function = "security_file_receive")]
pub fn receive_kprobe(ctx: ProbeContext) -> u32 {
    received(ctx.arg(0).unwrap_or(core::ptr::null()), Tier::Kprobe);
    0
}

#[inline(always)]
fn received(file: *const c_void, tier: Tier) {
    if current::is_agent() {
        return;
    }
    // Non-sockets, other families, abstract and unnamed sockets: dropped before anything else.
    let sk = shim::file_sock(file);
    let Some(bound) = shim::sk_bound_file(sk, shim::sk_dentry(sk)) else {
        return;
    };
    let Some(before) = hand_over(&bound) else {
        return;
    };
    if let Some(mut ev) = emit::reserve(EventKind::Receive, tier, Fidelity::Exact) {
        ev.file(&bound)
            .owner(&before.owner)
            .flags(before.flags & flags::LISTENING)
            .sun_path_of(sk);
        ev.submit();
    }
}

/// Makes the receiver the owner the live table records, and tracks it (its fork and exit
/// matter now). A hand-over's receiver is the process that goes on serving: naming it keeps
/// the in-kernel unlink decision right after the sender exits or closes its copy (the
/// unlinker's own descriptor check still clears every holder). `None`, and nothing written,
/// when the socket is not live (an accepted connection shares its listener's file but is
/// another socket) or the receiver is already the owner.
#[inline(always)]
fn hand_over(bound: &File) -> Option<LiveSock> {
    let entry = LIVE.get_ptr_mut(bound.id())?;
    let tgid = current::tgid();
    // SAFETY: a value of LIVE found in this run: it stays allocated until the program ends.
    let before = unsafe { *entry };
    if before.sock_ino != bound.sock_ino || before.owner.tgid == tgid {
        return None;
    }
    // SAFETY: as above; the helper takes no arguments. A racing receipt writes the same fields.
    unsafe {
        (*entry).owner.tgid = tgid;
        (*entry).owner.cgroup_id = bpf_get_current_cgroup_id();
    }
    live::track(tgid);
    Some(before)
}
