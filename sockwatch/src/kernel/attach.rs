//! Loading and attaching one program, or one tier's programs, measured: how long the load
//! took and how many instructions the verifier processed. Below `loader`, which picks the
//! tiers for `run` and measures every tier for `check`.
use std::{
    sync::OnceLock,
    time::{Duration, Instant},
};

use aya::{
    Btf, Ebpf,
    maps::HashMap,
    programs::{BtfTracePoint, FEntry, FExit, KProbe, Lsm, Program, ProgramError, TracePoint},
};
use sockwatch_common::{Flavor, Tier, maps};

use crate::kernel::{
    features,
    probes::{Attach, Hook, ProgramSpec, TierSpec},
};

/// One program's load: what the verifier did and what the kernel said.
#[derive(Clone, Debug)]
pub struct ProgramLoad {
    pub program: &'static str,
    pub hook: Hook,
    pub tier: Tier,
    pub flavor: Flavor,
    /// Instructions the verifier processed (reported by kernels 5.16+).
    pub verified_insns: Option<u32>,
    /// `BPF_PROG_LOAD`: verification and JIT.
    pub load_time: Duration,
    /// Why it was refused (at load or attach).
    pub refused: Option<String>,
}

pub fn other_flavor(f: Flavor) -> Flavor {
    match f {
        Flavor::Helpers => Flavor::Bounded,
        Flavor::Bounded => Flavor::Helpers,
    }
}

/// What the integration tests make the loader pretend about the kernel, as hidden flags of
/// `run` and `check` (the product reads no test switch from its environment).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct StandIns {
    /// Hooks refused on every tier, as by a kernel that cannot load them (`exit,connect`).
    #[arg(
        long = "test-refuse-hooks",
        value_name = "HOOKS",
        value_delimiter = ',',
        hide = true
    )]
    pub refuse_hooks: Vec<String>,
    /// The bounded programs (those of kernels before `bpf_loop`) on any kernel.
    #[arg(long = "test-bounded-programs", hide = true)]
    pub bounded_programs: bool,
}

impl StandIns {
    pub fn refuses(&self, hook: Hook) -> bool {
        self.refuse_hooks.iter().any(|h| h == hook.name())
    }
}

/// How [`try_tier`] goes: `run` stops at the first refusal; a measurement loads every program
/// and reads the verifier's count where program info lacks it.
#[derive(Clone, Copy)]
pub struct Trial {
    pub every_program: bool,
    pub verifier_counter: bool,
}

/// Loads and attaches the programs of one tier. Returns the refused optional programs, or
/// why the tier was refused (its first required program refused), and every load.
pub fn try_tier(
    ebpf: &mut Ebpf,
    hook: Hook,
    tier: &TierSpec,
    flavor: Flavor,
    btf: &Btf,
    stand_ins: &StandIns,
    trial: Trial,
) -> (Result<Vec<String>, String>, Vec<ProgramLoad>) {
    if stand_ins.refuses(hook) {
        return (Err("refused by --test-refuse-hooks".into()), Vec::new());
    }
    let mut degraded = Vec::new();
    let mut refused = None;
    let mut loads = Vec::new();
    for spec in tier.programs_in(flavor) {
        let load = measure_program(ebpf, spec, hook, tier.tier, flavor, btf, trial);
        match &load.refused {
            None => {}
            Some(e) if spec.optional => degraded.push(format!("{}: {e}", spec.name(flavor))),
            Some(e) => {
                refused.get_or_insert_with(|| format!("{}: {e}", spec.name(flavor)));
            }
        }
        loads.push(load);
        if refused.is_some() && !trial.every_program {
            break;
        }
    }
    (refused.map_or(Ok(degraded), Err), loads)
}

/// [`attach_program`], with the verifier's count read from the counter where asked.
pub fn measure_program(
    ebpf: &mut Ebpf,
    spec: &ProgramSpec,
    hook: Hook,
    tier: Tier,
    flavor: Flavor,
    btf: &Btf,
    trial: Trial,
) -> ProgramLoad {
    if trial.verifier_counter {
        take_verifier_count(ebpf);
    }
    let mut load = attach_program(ebpf, spec, hook, tier, flavor, btf);
    if trial.verifier_counter && load.verified_insns.is_none() {
        load.verified_insns = take_verifier_count(ebpf);
    }
    load
}

/// The program that reads the verifier's count where program info lacks it (before 5.16).
const VERIFIER_COUNTER: &str = "verifier_insns";

/// Attaches [`VERIFIER_COUNTER`] (fexit on the verifier's per-program check); false where the
/// kernel refuses it or reports counts itself.
pub fn attach_verifier_counter(ebpf: &mut Ebpf, btf: &Btf) -> bool {
    let Some(prog) = ebpf.program_mut(VERIFIER_COUNTER) else {
        return false;
    };
    let attached = (|| {
        let p: &mut FExit = prog.try_into()?;
        p.load("do_check_common", btf)?;
        if p.info()?.verified_instruction_count().is_some() {
            return Ok(false); // this kernel reports counts in program info
        }
        p.attach().map(|_| true)
    })();
    match attached {
        Ok(a) => a,
        Err(e) => {
            log::debug!("verifier counter not attached: {}", describe(&e));
            false
        }
    }
}

/// The count the verifier counter recorded for this thread's last load, removed.
fn take_verifier_count(ebpf: &mut Ebpf) -> Option<u32> {
    let map = ebpf.map_mut(maps::VERIFIER_INSNS)?;
    let mut counts = HashMap::<_, u64, u32>::try_from(map).ok()?;
    // SAFETY: getpid and gettid have no preconditions.
    let key = (u64::from(std::process::id()) << 32) | u64::from(unsafe { libc::gettid() } as u32);
    let n = counts.get(&key, 0).ok();
    let _ = counts.remove(&key);
    n
}

/// Unloads (and so detaches) every program of a tier in one flavor.
pub fn unload_tier(ebpf: &mut Ebpf, tier: &TierSpec, flavor: Flavor) {
    for spec in tier.programs_in(flavor) {
        if let Some(p) = ebpf.program_mut(spec.name(flavor)) {
            let _ = unload(p);
        }
    }
}

/// Loads, measures and attaches one program; a program the kernel refused at attach is
/// unloaded again, and a kprobe is not even loaded on a kernel without kprobes.
fn attach_program(
    ebpf: &mut Ebpf,
    spec: &ProgramSpec,
    hook: Hook,
    tier: Tier,
    flavor: Flavor,
    btf: &Btf,
) -> ProgramLoad {
    let program = spec.name(flavor);
    let mut load = ProgramLoad {
        program,
        hook,
        tier,
        flavor,
        verified_insns: None,
        load_time: Duration::ZERO,
        refused: None,
    };
    let Some(prog) = ebpf.program_mut(program) else {
        load.refused = Some("not in the eBPF object".into());
        return load;
    };
    if matches!(
        spec.attach,
        Attach::Kprobe { .. } | Attach::Kretprobe { .. }
    ) && !std::path::Path::new(KPROBE_PMU).exists()
    {
        load.refused = Some(format!(
            "kprobes not supported by this kernel (no {KPROBE_PMU})"
        ));
        return load;
    }
    if let Attach::Lsm { .. } = spec.attach
        && let Err(why) = bpf_lsm_runs()
    {
        load.refused = Some(why);
        return load;
    }
    let started = Instant::now();
    let loaded = load_program(prog, spec.attach, btf);
    load.load_time = started.elapsed();
    if let Err(e) = loaded {
        load.refused = Some(describe(&e));
        return load;
    }
    load.verified_insns = prog
        .info()
        .ok()
        .and_then(|i| i.verified_instruction_count());
    if let Err(e) = attach_loaded(prog, spec.attach) {
        load.refused = Some(describe(&e));
        let _ = unload(prog);
    }
    load
}

/// [`features::bpf_lsm`], probed once: the answer holds until the next boot.
fn bpf_lsm_runs() -> Result<(), String> {
    static PROBED: OnceLock<Result<(), String>> = OnceLock::new();
    PROBED.get_or_init(features::bpf_lsm).clone()
}

/// Loads `prog` for `attach` and attaches it there, as [`attach_program`] does without the
/// measuring: the bench's empty-program floor puts its programs where the agent's go this way.
pub fn load_and_attach(prog: &mut Program, attach: Attach, btf: &Btf) -> Result<(), String> {
    load_program(prog, attach, btf).map_err(|e| describe(&e))?;
    attach_loaded(prog, attach).map_err(|e| describe(&e))
}

fn load_program(prog: &mut Program, attach: Attach, btf: &Btf) -> Result<(), ProgramError> {
    match attach {
        Attach::Fentry { function } => <&mut FEntry>::try_from(prog)?.load(function, btf),
        Attach::Fexit { function } => <&mut FExit>::try_from(prog)?.load(function, btf),
        Attach::Lsm { hook } => <&mut Lsm>::try_from(prog)?.load(hook, btf),
        Attach::Kprobe { .. } | Attach::Kretprobe { .. } => <&mut KProbe>::try_from(prog)?.load(),
        Attach::Tracepoint { .. } => <&mut TracePoint>::try_from(prog)?.load(),
        Attach::BtfTracepoint { name } => <&mut BtfTracePoint>::try_from(prog)?.load(name, btf),
    }
}

fn attach_loaded(prog: &mut Program, attach: Attach) -> Result<(), ProgramError> {
    match attach {
        Attach::Fentry { .. } => <&mut FEntry>::try_from(prog)?.attach().map(drop),
        Attach::Fexit { .. } => <&mut FExit>::try_from(prog)?.attach().map(drop),
        Attach::Lsm { .. } => <&mut Lsm>::try_from(prog)?.attach().map(drop),
        Attach::Kprobe { function } | Attach::Kretprobe { function } => {
            <&mut KProbe>::try_from(prog)?.attach(function, 0).map(drop)
        }
        Attach::Tracepoint { category, name } => <&mut TracePoint>::try_from(prog)?
            .attach(category, name)
            .map(drop),
        Attach::BtfTracepoint { .. } => <&mut BtfTracePoint>::try_from(prog)?.attach().map(drop),
    }
}

fn unload(p: &mut Program) -> Result<(), ProgramError> {
    match p {
        Program::FEntry(p) => p.unload(),
        Program::FExit(p) => p.unload(),
        Program::Lsm(p) => p.unload(),
        Program::KProbe(p) => p.unload(),
        Program::TracePoint(p) => p.unload(),
        Program::BtfTracePoint(p) => p.unload(),
        _ => Ok(()),
    }
}

const KPROBE_PMU: &str = "/sys/bus/event_source/devices/kprobe";

/// One line for a program error; the verifier log goes to the debug log, not the message.
/// The kernel's internal "not supported" errno, which libc has no name for: what attaching an
/// fentry, fexit or LSM program returns where the architecture cannot build its trampoline.
const ENOTSUPP: i32 = 524;

pub fn describe(e: &ProgramError) -> String {
    match e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            log::debug!("verifier log:\n{verifier_log}");
            format!("BPF_PROG_LOAD failed: {io_error}")
        }
        ProgramError::SyscallError(s) if s.io_error.raw_os_error() == Some(ENOTSUPP) => format!(
            "{} failed: ENOTSUPP (524): this kernel has no BPF trampoline for this attach point \
             (arm64 has them for kernel functions from 6.4)",
            s.call
        ),
        ProgramError::SyscallError(s) => format!("{} failed: {}", s.call, s.io_error),
        ProgramError::KProbeError(_) if !std::path::Path::new(KPROBE_PMU).exists() => {
            format!("kprobes not supported by this kernel (no {KPROBE_PMU})")
        }
        other => {
            let mut s = other.to_string();
            let mut src = std::error::Error::source(other);
            while let Some(e) = src {
                s.push_str(": ");
                s.push_str(&e.to_string());
                src = e.source();
            }
            s.lines().next().unwrap_or_default().to_string()
        }
    }
}

#[cfg(test)]
mod tests {
    use aya::sys::SyscallError;

    use super::*;

    #[test]
    fn a_missing_trampoline_is_named() {
        let e = ProgramError::SyscallError(SyscallError {
            call: "bpf_raw_tracepoint_open",
            io_error: std::io::Error::from_raw_os_error(ENOTSUPP),
        });
        assert_eq!(
            describe(&e),
            "bpf_raw_tracepoint_open failed: ENOTSUPP (524): this kernel has no BPF trampoline \
             for this attach point (arm64 has them for kernel functions from 6.4)"
        );
        let e = ProgramError::SyscallError(SyscallError {
            call: "perf_event_open",
            io_error: std::io::Error::from_raw_os_error(libc::EACCES),
        });
        assert_eq!(
            describe(&e),
            "perf_event_open failed: Permission denied (os error 13)"
        );
    }
}
