//! sockwatch's task runner (`cargo xtask ...`). It runs things; cargo still builds them.
mod apt;
mod bench;
mod cmd;
mod fuzz;
mod headroom;
mod initramfs;
mod kernels;
mod setup;
mod soak;
mod suite;
mod testrun;
mod vm;

use std::{ffi::OsString, os::unix::process::CommandExt as _, process::ExitCode, time::Duration};

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use kernels::Series;

/// sockwatch's task runner: installs what is missing, builds, runs the agent, runs the tests.
#[derive(Debug, Parser)]
#[command(name = "xtask", bin_name = "cargo xtask")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Install what is missing for building (Debian packages, nightly's rust-src, bpf-linker).
    Setup {
        /// Also what the QEMU tests need: QEMU, busybox, cpio and Debian's kernels (5.10 from
        /// Debian 11, 6.1 and 6.12 from Debian 12).
        #[arg(long)]
        vm: bool,
    },
    /// Set up, build the agent (release) and run it with these arguments: `cargo xtask run -- run`.
    Run {
        /// Arguments for `sockwatch`, after `--`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// The whole suite: setup --vm, fmt, clippy (host and eBPF), fuzzing, host tests, QEMU
    /// tests.
    Test(VmArgs),
    /// The agent's integration tests as root inside QEMU on Debian's stock kernels.
    VmTest(VmArgs),
    /// Overhead, throughput, loss, latency and footprint, beside bpftrace and auditd; writes
    /// docs/BENCHMARKS.md.
    Bench(bench::BenchArgs),
    /// The release agent for minutes at a steady event rate, sweeps on and owners churning:
    /// fails unless memory and the engine's tables stay flat, nothing vanishes uncounted and no
    /// verdict comes from a workload that gives none.
    Soak(soak::SoakArgs),
    /// Coverage-guided fuzzing of the agent's parsers (libFuzzer, nightly), each target for a
    /// fixed time from its committed corpus in `fuzz/corpus/`.
    Fuzz {
        /// Seconds each target runs.
        #[arg(long, default_value_t = 30)]
        secs: u64,
        /// Replace the fuzz table of docs/RELIABILITY.md with this run's figures.
        #[arg(long)]
        write_doc: bool,
        /// Targets to run; all by default.
        targets: Vec<String>,
    },
}

#[derive(Debug, Args)]
struct VmArgs {
    /// Kernel series to boot (repeatable); all of them by default.
    #[arg(long = "kernel", value_enum)]
    kernels: Vec<Series>,
    /// Seconds one guest may take, boot to power-off, before it counts as failed. Under TCG on a
    /// busy 2-core host the 6.12 guest took 1030 s for the suite of 2026-11-30, alone; guests
    /// that share the cores each take longer.
    #[arg(long, default_value_t = 3600, env = "SOCKWATCH_VM_TIMEOUT")]
    vm_timeout: u64,
    /// Run the end-to-end tests under every tier on every kernel, 5.10's `tracepoint` too
    /// (left out of the suite: it once locked up a 5.10 guest under TCG).
    #[arg(long, env = "SOCKWATCH_ALL_TIERS", value_parser = clap::builder::BoolishValueParser::new())]
    all_tiers: bool,
    /// Guests booted at once; every kernel's by default. A guest's tests run one thread and keep
    /// about one core busy, so a lone guest leaves the second core of a 2-core machine idle.
    #[arg(long, default_value_t = 3, env = "SOCKWATCH_VM_JOBS")]
    vm_jobs: usize,
    /// Only these test executables in the guests (repeatable, e.g. `--test faults`); all of
    /// them by default.
    #[arg(long = "test", value_name = "NAME")]
    tests: Vec<String>,
}

impl VmArgs {
    fn tiers(&self) -> vm::Tiers {
        if self.all_tiers {
            vm::Tiers::All
        } else {
            vm::Tiers::Rotation
        }
    }

    fn series(&self) -> Vec<Series> {
        if self.kernels.is_empty() {
            Series::ALL.to_vec()
        } else {
            self.kernels.clone()
        }
    }
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<bool> {
    match cli.command {
        Command::Setup { vm } => {
            setup::setup(vm, &Series::ALL)?;
            Ok(true)
        }
        Command::Run { args } => run_agent(args),
        Command::Test(a) => Ok(suite::run(
            &a.series(),
            a.tiers(),
            Duration::from_secs(a.vm_timeout),
            a.vm_jobs,
            &a.tests,
        )),
        Command::VmTest(a) => {
            let ready = setup::setup(true, &a.series())?;
            let outcomes = vm::test(
                &ready.kernels,
                a.tiers(),
                Duration::from_secs(a.vm_timeout),
                a.vm_jobs,
                &a.tests,
            )?;
            Ok(outcomes.iter().all(|o| o.failure.is_none()))
        }
        Command::Bench(a) => bench::run(&a),
        Command::Soak(a) => soak::run(&a),
        Command::Fuzz {
            secs,
            write_doc,
            targets,
        } => {
            setup::setup(false, &[])?;
            fuzz::run(secs, &targets, write_doc)
        }
    }
}

/// Builds the release agent and replaces this process with it, so signals (Ctrl-C) and the exit
/// code are the agent's own.
fn run_agent(args: Vec<OsString>) -> anyhow::Result<bool> {
    setup::setup(false, &[])?;
    cmd::run(cmd::cargo().args(["build", "--release", "-p", "agent"]))?;
    let bin = cmd::target_dir().join("release/sockwatch");
    let err = cmd::command(&bin).args(&args).exec();
    Err(err).with_context(|| format!("cannot execute {}", bin.display()))
}
