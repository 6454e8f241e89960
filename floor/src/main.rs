//! `sockwatch-floor --probe-mode MODE`: the bench's empty-program floor. For every program the
//! agent attaches under MODE (each hook's first candidate tier in the probe table), an empty
//! program of the same kind at the same attach point, loaded and attached by the agent's own
//! code. What the workload pays under it is the cost of the attachments alone, the floor the
//! agent's cost is measured against.
//!
//! Prints `running; …` on stderr once attached (the bench waits for it as for the agent's),
//! then waits for SIGINT or SIGTERM and prints one line per empty program on stdout:
//! `ID PROGRAM RUNS RUN_NS`, PROGRAM the agent's program it stands for; the counts are the
//! kernel's (`kernel.bpf_stats_enabled`).
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use aya::{Btf, Ebpf};
use clap::Parser;
use sockwatch::kernel::{
    attach::load_and_attach,
    loader, preflight,
    probes::{Attach, PROBES, ProbeMode, ProgramSpec},
};

/// The empty programs, built by build.rs for the BPF target.
static FLOOR_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sockwatch-floor-ebpf"));

#[derive(Parser)]
#[command(
    name = "sockwatch-floor",
    about = "Empty programs where the agent's attach"
)]
struct Args {
    /// The agent's probe mode whose attach points get an empty program each.
    #[arg(long, value_enum)]
    probe_mode: ProbeMode,
}

/// An empty program attached in place of one of the agent's; detached when dropped.
struct Floor {
    /// The agent's program it stands for.
    program: &'static str,
    ebpf: Ebpf,
    empty: &'static str,
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sockwatch-floor: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<()> {
    // Blocked before anything attaches, so that a signal always ends in the report.
    let signals = block_stop_signals()?;
    preflight::prepare()?;
    let kernel = loader::kernel_btf()?;
    let (btf, features) = (kernel.whole, kernel.features);
    let flavor = features.flavor();
    let mut floors = Vec::new();
    for spec in programs_of(args.probe_mode).filter(|p| p.loads_in(flavor)) {
        let program = spec.name(flavor);
        match attach(spec, &btf) {
            Ok((ebpf, empty)) => floors.push(Floor {
                program,
                ebpf,
                empty,
            }),
            Err(e) => eprintln!("sockwatch-floor: no empty program for {program}: {e}"),
        }
    }
    if floors.is_empty() {
        bail!(
            "no empty program attached for --probe-mode {}",
            args.probe_mode.name()
        );
    }
    eprintln!(
        "running; {} empty programs at the attach points of --probe-mode {}",
        floors.len(),
        args.probe_mode.name()
    );
    wait_for(&signals)?;
    for f in &floors {
        report(f)?;
    }
    Ok(())
}

/// The agent's programs under `mode`: every program of each hook's first candidate tier, the
/// one `run` attaches where the kernel takes it.
fn programs_of(mode: ProbeMode) -> impl Iterator<Item = &'static ProgramSpec> {
    PROBES
        .iter()
        .filter_map(move |hook| mode.candidates(hook).first().copied())
        .flat_map(|tier| tier.programs.iter())
}

/// The empty program of the object that attaches as `attach` does.
fn empty_program(attach: Attach) -> &'static str {
    match attach {
        Attach::Fentry { .. } => "floor_fentry",
        Attach::Fexit { .. } => "floor_fexit",
        Attach::Lsm { .. } => "floor_lsm",
        Attach::Kprobe { .. } => "floor_kprobe",
        Attach::Kretprobe { .. } => "floor_kretprobe",
        Attach::Tracepoint { .. } => "floor_tp",
        Attach::BtfTracepoint { .. } => "floor_tp_btf",
    }
}

/// A fresh copy of the object with its empty program for `spec` attached where `spec`'s goes:
/// a program has one attach point, so each attach point takes its own copy.
fn attach(spec: &ProgramSpec, btf: &Btf) -> Result<(Ebpf, &'static str), String> {
    let mut ebpf = Ebpf::load(FLOOR_OBJECT).map_err(|e| format!("loading the object: {e}"))?;
    let empty = empty_program(spec.attach);
    let prog = ebpf
        .program_mut(empty)
        .ok_or_else(|| format!("{empty} is not in the object"))?;
    load_and_attach(prog, spec.attach, btf)?;
    Ok((ebpf, empty))
}

/// `ID PROGRAM RUNS RUN_NS` of one empty program.
fn report(f: &Floor) -> anyhow::Result<()> {
    let info = f
        .ebpf
        .program(f.empty)
        .context("the empty program vanished from its object")?
        .info()
        .with_context(|| format!("reading the run counts of {}", f.program))?;
    println!(
        "{} {} {} {}",
        info.id(),
        f.program,
        info.run_count(),
        info.run_time().as_nanos()
    );
    Ok(())
}

/// SIGINT and SIGTERM, blocked in this thread so that [`wait_for`] takes them.
fn block_stop_signals() -> anyhow::Result<libc::sigset_t> {
    // SAFETY: a zeroed sigset_t is a valid argument for sigemptyset, which initialises it;
    // every pointer is to that local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            bail!(
                "blocking SIGINT and SIGTERM: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
        Ok(set)
    }
}

fn wait_for(signals: &libc::sigset_t) -> anyhow::Result<()> {
    let mut got = 0;
    // SAFETY: `signals` is an initialised set and `got` a live local.
    let rc = unsafe { libc::sigwait(signals, &mut got) };
    if rc != 0 {
        bail!(
            "waiting for SIGINT or SIGTERM: {}",
            std::io::Error::from_raw_os_error(rc)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_stands_in_for_the_programs_its_first_tiers_attach() {
        let names = |mode| -> Vec<&str> { programs_of(mode).map(|p| p.program).collect() };
        let lsm = names(ProbeMode::Lsm);
        assert!(lsm.contains(&"unlink_lsm") && lsm.contains(&"bind_fexit"));
        assert!(!lsm.contains(&"unlink_fentry"));
        let tp = names(ProbeMode::Tracepoint);
        assert!(tp.contains(&"bind_tp_ret") && tp.contains(&"bind_tp_exit"));
        assert!(tp.contains(&"release_tp"));
        // Process events keep their tracepoints under every mode.
        for mode in [ProbeMode::Lsm, ProbeMode::Fentry, ProbeMode::Kprobe] {
            let n = names(mode);
            assert!(
                n.contains(&"exit_tp") && n.contains(&"fork_tp_btf"),
                "{n:?}"
            );
            assert!(!n.iter().any(|p| p.contains("_tp_e")), "{n:?}");
        }
    }

    #[test]
    fn every_attach_kind_has_its_empty_program() {
        // Parsing the object loads no program; the host tests run as root for its feature probes.
        let ebpf = Ebpf::load(FLOOR_OBJECT).expect("the floor's object parses");
        let names: Vec<&str> = ebpf.programs().map(|(name, _)| name).collect();
        for spec in PROBES
            .iter()
            .flat_map(|h| h.tiers.iter())
            .flat_map(|t| t.programs.iter())
        {
            let empty = empty_program(spec.attach);
            assert!(
                names.contains(&empty),
                "{empty} for {} missing",
                spec.program
            );
        }
    }
}
