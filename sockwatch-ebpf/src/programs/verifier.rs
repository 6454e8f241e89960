//! The verifier's own count of the instructions it processed, for kernels whose program info
//! does not report it (before 5.16): `sockwatch check --verbose` and the headroom test attach
//! this to the verifier's per-program check and read the count after each load.
use core::ffi::c_void;

use aya_ebpf::{helpers::bpf_get_current_pid_tgid, macros::fexit, programs::FExitContext};

use crate::{current, maps::VERIFIER_INSNS, shim};

/// `do_check_common(env, subprog)` ends once per checked (sub)program; `insn_processed` is the
/// running total the verifier reports as "processed N insns".
#[fexit(function = "do_check_common")]
pub fn verifier_insns(ctx: FExitContext) -> i32 {
    if current::is_agent() {
        let env: *const c_void = ctx.arg(0);
        let n = shim::verifier_insn_processed(env);
        let _ = VERIFIER_INSNS.insert(bpf_get_current_pid_tgid(), n, 0);
    }
    0
}
