//! `cargo xtask bench`: what sockwatch costs, measured on this machine, side by side with an
//! equivalent bpftrace script and an auditd watch, written to `docs/BENCHMARKS.md`.
//!
//! Phases, each against a fresh `sockwatch run --probe-mode tracepoint` (the start-up times
//! with `--probe-mode auto`):
//! 1. overhead: one workload process (`bench/`, release) times five operations while xtask
//!    switches the observers on and off around it, in rotated order each round;
//! 2. latency: bind's return → its line in the events file, and → counted in /metrics; and
//!    the agent's start-up;
//! 3. throughput and loss: paced socket life cycles stepped up until loss, then bursts, with
//!    produced = submitted + lost and submitted = delivered = lines checked per event kind;
//! 4. footprint: idle CPU, RSS with 10,000 live watched sockets, /metrics scrape time with the
//!    most watches the agent accepts.
//!
//! `--vm SERIES` runs none of these: it measures every tier inside a QEMU guest (`vm`) and
//! replaces only the report's VM section, which a host run keeps as it is.
//!
//! Modules, lowest first: `plan`, `stats`, `log` and `process` depend on nothing here; `agent`,
//! `bpftrace` and `audit` drive the observers; `env` starts agents in the bench's tmpfs;
//! `observer` switches one observer on and off; the phases `overhead`, `latency`, `throughput`
//! and `footprint` measure, and `vm` in a guest; `report` writes what they measured.
pub mod agent;
mod audit;
mod bpftrace;
pub mod env;
mod footprint;
mod latency;
mod log;
mod observer;
mod overhead;
mod plan;
mod process;
mod profile;
mod report;
mod stats;
mod throughput;
mod vm;

use std::{fs, path::PathBuf, time::Instant};

use anyhow::{Context as _, bail};
use clap::Args;

use self::{audit::AuditGuard, env::Env, log::progress, plan::Plan};
use crate::{apt::Apt, arch::Arch, cmd, kernels::Series, setup};

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Interleaved rounds of the overhead phase (or of the VM's); each visits every observer
    /// (every tier) once.
    #[arg(long, default_value_t = 12)]
    rounds: usize,
    /// Measure every tier in a QEMU guest on this kernel series instead of the host phases
    /// (repeatable); replaces only the report's VM section.
    #[arg(long = "vm", value_enum, value_name = "SERIES")]
    vm: Vec<Series>,
    /// A short run that exercises the harness (few rounds and samples); its report goes to
    /// target/bench/BENCHMARKS.md unless --output says otherwise.
    #[arg(long)]
    quick: bool,
    /// Where to write the report [default: docs/BENCHMARKS.md].
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub fn run(args: &BenchArgs) -> anyhow::Result<bool> {
    if !cmd::is_root() {
        bail!("`cargo xtask bench` needs root: eBPF, auditctl and a tmpfs mount");
    }
    let started = Instant::now();
    let plan = Plan::new(args.quick, args.rounds);
    let output = args.output.clone().unwrap_or_else(|| {
        if args.quick {
            cmd::target_dir().join("bench/BENCHMARKS.md")
        } else {
            cmd::workspace_root().join("docs/BENCHMARKS.md")
        }
    });
    if !args.vm.is_empty() {
        return run_vm(args, &output, started);
    }
    setup::setup(&setup::Wanted::default())?;
    Apt::default().ensure_installed(&["bpftrace", "auditd", "linux-perf"])?;
    cmd::run(cmd::cargo().args(["build", "--release", "-p", "sockwatch", "-p", "bench"]))?;
    env::mount_tracefs()?;
    let env = Env::prepare()?;
    let mut rep = report::Report::new(&plan, std::env::args().skip(1).collect(), &env)?;
    rep.before = report::Before::read(&output);
    progress(started, "machine and tiers recorded");

    let audit = match AuditGuard::prepare() {
        Ok(g) => Some(g),
        Err(e) => {
            rep.notes.push(format!("auditd not compared: {e:#}"));
            None
        }
    };
    let o = overhead::overhead(&env, &plan, audit.as_ref(), &mut rep.notes, started)?;
    rep.overhead = Some(o);
    drop(audit); // audit off, `-a never,task` kept, our auditd stopped, backlog restored
    rep.load_after_overhead = report::loadavg();

    rep.latency = Some(latency::latency(&env, &plan, started)?);
    rep.throughput = Some(throughput::throughput(&env, &plan, started)?);
    rep.footprint = Some(footprint::footprint(&env, &plan, started)?);
    rep.finish(started.elapsed());
    let old = fs::read_to_string(&output).unwrap_or_default();
    let text = match report::vm::section(&old) {
        Some(vm) => report::vm::splice(&rep.render(), vm),
        None => rep.render(),
    };
    write_report(&output, &text)?;
    println!(
        "bench: report written to {} in {:.0?}",
        output.display(),
        started.elapsed()
    );
    Ok(true)
}

/// `--vm`: every tier in a guest of each series, the report's VM section replaced.
fn run_vm(args: &BenchArgs, output: &std::path::Path, started: Instant) -> anyhow::Result<bool> {
    // The bench guests are x86-64: the workload is measured where the precise tiers run.
    let wanted = [(Arch::X86_64, args.vm.clone())];
    let ready = setup::setup(&setup::Wanted::guests(&wanted))?;
    let (_, busybox) = ready.busybox.first().context("setup fetched no busybox")?;
    let guests = vm::run(&ready.kernels, busybox, args.rounds)?;
    let command = report::command_line(std::env::args().skip(1));
    let old = fs::read_to_string(output).unwrap_or_default();
    let before = report::vm::section(&old).and_then(report::vm::VmBefore::parse);
    let section = report::vm::render(&guests, &command, &report::date(), before.as_ref());
    write_report(output, &report::vm::splice(&old, &section))?;
    println!(
        "bench: VM section written to {} in {:.0?}",
        output.display(),
        started.elapsed()
    );
    Ok(true)
}

/// Writes `text` to `output` (creating its directory) and prints it.
fn write_report(output: &std::path::Path, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = output.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(output, text).with_context(|| format!("writing {}", output.display()))?;
    println!("{text}");
    Ok(())
}
