//! One empty program per kind of attachment the agent uses. The floor loads one copy per
//! attach point of a probe mode: what remains is the cost of the attachment itself, the floor
//! the agent's programs are measured against. Attach targets are given at load time.
#![no_std]
#![no_main]

use aya_ebpf::{
    macros::{btf_tracepoint, fentry, fexit, kprobe, kretprobe, lsm, tracepoint},
    programs::{
        BtfTracePointContext, FEntryContext, FExitContext, LsmContext, ProbeContext,
        RetProbeContext, TracePointContext,
    },
};

#[fentry]
pub fn floor_fentry(_ctx: FEntryContext) -> i32 {
    0
}

#[fexit]
pub fn floor_fexit(_ctx: FExitContext) -> i32 {
    0
}

/// Allows everything: 0 is the LSM hook's "go on".
#[lsm]
pub fn floor_lsm(_ctx: LsmContext) -> i32 {
    0
}

#[kprobe]
pub fn floor_kprobe(_ctx: ProbeContext) -> u32 {
    0
}

#[kretprobe]
pub fn floor_kretprobe(_ctx: RetProbeContext) -> u32 {
    0
}

#[tracepoint]
pub fn floor_tp(_ctx: TracePointContext) -> u32 {
    0
}

#[btf_tracepoint]
pub fn floor_tp_btf(_ctx: BtfTracePointContext) -> i32 {
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
