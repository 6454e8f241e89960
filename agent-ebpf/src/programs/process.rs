//! Forks and exits of tracked processes (holders of live sockets and their descendants):
//! the owner sets the agent keeps.
use core::ffi::c_void;

use agent_common::{EventKind, Fidelity, Tier};
use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
};

use crate::{emit, live, shim};

/// `sched_process_fork(parent, child)`, typed: tells a new process from a new thread.
#[btf_tracepoint(function = "sched_process_fork")]
pub fn fork_tp_btf(ctx: BtfTracePointContext) -> u32 {
    let parent = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !live::is_tracked(parent) {
        return 0;
    }
    let child: *const c_void = ctx.arg(1);
    let tgid = shim::new_process_tgid(child);
    if tgid != 0 {
        live::track(tgid);
        if let Some(mut ev) = emit::reserve(EventKind::Fork, Tier::TpBtf, Fidelity::Exact) {
            ev.aux(tgid);
            ev.submit();
        }
    }
    0
}

/// The last thread of a tracked process exits. Its descriptors are still attached: bound
/// sockets it holds the last reference to are released here, which no close(2) will show.
#[tracepoint(category = "sched", name = "sched_process_exit")]
pub fn exit_tp(_ctx: TracePointContext) -> u32 {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if live::is_tracked(tgid) && shim::current_group_dead() {
        live::untrack(tgid);
        let mut socks = [core::ptr::null(); shim::EXIT_SOCKETS_MAX];
        let n = shim::current_last_bound_sockets(&mut socks);
        for (i, sk) in socks.iter().enumerate() {
            if i < n {
                super::release::released(*sk, Tier::Tracepoint);
            }
        }
        if let Some(ev) = emit::reserve(EventKind::Exit, Tier::Tracepoint, Fidelity::Exact) {
            ev.submit();
        }
    }
    0
}
