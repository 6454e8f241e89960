//! Forks and exits of tracked processes (holders of live sockets and their descendants):
//! the owner sets the agent keeps.
use core::ffi::c_void;

use aya_ebpf::{
    macros::{btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
};
use sockwatch_common::{Counter, EventKind, Fidelity, Tier};

use super::release::released;
use crate::{
    counters::count,
    current, emit, live,
    shim::{self, Sock},
};

/// `sched_process_fork(parent, child)`, typed: tells a new process from a new thread.
#[btf_tracepoint(function = "sched_process_fork")]
pub fn fork_tp_btf(ctx: BtfTracePointContext) -> u32 {
    let parent = current::tgid();
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

flavored! {
    /// The last thread of a tracked process exits. Its descriptors are still attached: bound
    /// sockets it holds the last reference to are released here, which no close(2) will show.
    #[tracepoint(category = "sched", name = "sched_process_exit")]
    fn exit_tp / exit_tp_b(_ctx: TracePointContext, flavor) -> u32 {
        let tgid = current::tgid();
        if live::is_tracked(tgid) && shim::current_group_dead() {
            live::untrack(tgid);
            if !shim::release_last_bound_sockets(flavor) {
                count(Counter::FdWalkPartial);
            }
            if let Some(ev) = emit::reserve(EventKind::Exit, Tier::Tracepoint, Fidelity::Exact) {
                ev.submit();
            }
        }
        0
    }
}

/// Called by the shim's fd-table walk at exit for each socket the exit releases. A global
/// function, checked once by the verifier: it takes and returns scalars only. Never inlined:
/// a copy per descriptor would be walked per descriptor.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn sockwatch_release_at_exit(sk: u64) -> i32 {
    released(sk as Sock, Tier::Tracepoint);
    0
}
