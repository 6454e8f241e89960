//! One module per hook family; each program's name says hook and tier (`verifier_insns` is
//! the loader's measuring aid), `_b` its bounded twin. `removal` is what unlink and rename
//! share.
use aya_ebpf::programs::{ProbeContext, TracePointContext};

/// Defines each program twice, once per [`Flavor`](sockwatch_common::Flavor): `name / name_b`. The
/// loader attaches the `Helpers` one where the kernel has `bpf_loop`, the other elsewhere.
macro_rules! flavored {
    ($(
        $(#[$attr:meta])*
        fn $helpers:ident / $bounded:ident ($ctx:ident : $ty:ty, $flavor:ident) -> $ret:ty $body:block
    )+) => {$(
        $(#[$attr])*
        pub fn $helpers($ctx: $ty) -> $ret {
            let $flavor = sockwatch_common::Flavor::Helpers;
            $body
        }

        /// Without `bpf_loop` or `bpf_task_pt_regs`, for kernels before 5.17.
        $(#[$attr])*
        pub fn $bounded($ctx: $ty) -> $ret {
            let $flavor = sockwatch_common::Flavor::Bounded;
            $body
        }
    )+};
}

pub mod bind;
pub mod connect;
pub mod listen;
pub mod process;
pub mod receive;
pub mod release;
mod removal;
pub mod rename;
pub mod unlink;
pub mod verifier;

/// Syscall tracepoint records (a stable ABI): 8-byte common header, the syscall number, then
/// the arguments as longs from offset 16; an exit record has the return value at 16.
#[inline(always)]
pub fn tp_arg(ctx: &TracePointContext, n: usize) -> u64 {
    // SAFETY: read through bpf_probe_read_kernel: an offset past the record fails, it does
    // not fault.
    unsafe { ctx.read_at::<u64>(16 + 8 * n) }.unwrap_or(0)
}

#[inline(always)]
pub fn tp_ret(ctx: &TracePointContext) -> i64 {
    // SAFETY: as in `tp_arg`.
    unsafe { ctx.read_at::<i64>(16) }.unwrap_or(-1)
}

/// Argument `N` of a kprobe'd function, from its register in the probe's frame: a volatile
/// load at a constant offset, since the compiler would otherwise compute the offset and load
/// through a modified context pointer, which the verifier refuses.
#[inline(always)]
pub fn kprobe_arg<const N: usize>(ctx: &ProbeContext) -> u64 {
    let regs = ctx.regs;
    // SAFETY: `regs` is the kernel's register frame for this probe, valid while it runs.
    unsafe {
        #[cfg(bpf_target_arch = "x86_64")]
        let reg = match N {
            0 => core::ptr::addr_of!((*regs).rdi),
            1 => core::ptr::addr_of!((*regs).rsi),
            2 => core::ptr::addr_of!((*regs).rdx),
            3 => core::ptr::addr_of!((*regs).rcx),
            4 => core::ptr::addr_of!((*regs).r8),
            _ => core::ptr::addr_of!((*regs).r9),
        };
        // The AAPCS64 passes the first eight arguments in x0-x7.
        #[cfg(bpf_target_arch = "aarch64")]
        let reg = core::ptr::addr_of!((*regs).regs[N]);
        core::ptr::read_volatile(reg)
    }
}

/// A kernel pointer returned as `ERR_PTR(-errno)`.
#[inline(always)]
pub fn is_err_ptr(p: u64) -> bool {
    p >= (-4095i64) as u64
}
