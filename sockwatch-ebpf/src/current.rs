//! The task the program runs in.
use aya_ebpf::helpers::bpf_get_current_pid_tgid;

use crate::maps::AGENT_TGID;

/// The current process (thread group) id.
#[inline(always)]
pub fn tgid() -> u32 {
    (bpf_get_current_pid_tgid() >> 32) as u32
}

/// True for the agent's own threads, whose activity is never reported.
#[inline(always)]
pub fn is_agent() -> bool {
    tgid() == AGENT_TGID.load()
}
