//! sockwatch's task runner (`cargo xtask ...`). It runs things; cargo still builds them.
mod apt;
mod arch;
mod bench;
mod cmd;
mod fuzz;
mod headroom;
mod healthy;
mod image;
mod initramfs;
mod kernels;
mod setup;
mod soak;
mod suite;
mod testrun;
mod vm;

use std::{ffi::OsString, os::unix::process::CommandExt as _, process::ExitCode, time::Duration};

use anyhow::Context as _;
use arch::Arch;
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
        /// Also what the rest of the suite needs: QEMU, busybox, cpio and Debian's kernels (5.10
        /// from Debian 11, 6.1 and 6.12 from Debian 12) for the guests, podman for the image.
        #[arg(long)]
        vm: bool,
    },
    /// Set up and build the release agent, for this machine or cross-built for another
    /// architecture (`--target aarch64`); prints the binary's path.
    Build {
        /// The architecture to build for; this machine's by default.
        #[arg(long, value_enum)]
        target: Option<Arch>,
        /// Link glibc statically, for an image with nothing beside the binary (the arm64
        /// build always is).
        #[arg(long = "static")]
        static_libc: bool,
    },
    /// Build the agent's OCI image with podman from the static binary on an empty base
    /// (deploy/Containerfile; nothing pulled from a registry); prints the image's reference.
    Image {
        /// The architecture to build for; this machine's by default.
        #[arg(long, value_enum)]
        target: Option<Arch>,
        /// Then run it under podman as the DaemonSet runs it (the suite's image step): `check`
        /// exits 0, `run` reports a bind made on this machine (root; this machine's
        /// architecture only).
        #[arg(long)]
        check: bool,
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
    /// Seconds one guest may take, boot to power-off, before it counts as failed: CI's own 90
    /// minutes. Under TCG on a busy 2-core host the 6.12 guest took 1030 s for the suite of
    /// 2026-11-30 alone; five guests that share the cores took up to 3,300 s each on
    /// 2026-12-07, and a slower machine must not fail a guest that is only slow (a hung one is
    /// caught by its console's silence, below).
    #[arg(long, default_value_t = 5400, env = "SOCKWATCH_VM_TIMEOUT")]
    vm_timeout: u64,
    /// Run the end-to-end tests under every tier on every kernel, `tracepoint` too (which the
    /// suite runs on the host and in the arm64 6.1 guest only; it once locked up a 5.10 guest
    /// under TCG).
    #[arg(long, env = "SOCKWATCH_ALL_TIERS", value_parser = clap::builder::BoolishValueParser::new())]
    all_tiers: bool,
    /// Guests booted at once; three by default, the x86-64 ones (the arm64 ones follow). A lone
    /// guest keeps about 0.6 of a core busy (its tests often wait on the agent and on the
    /// kernel's grace periods); three fill a 2-core machine. Five at once (2026-12-07) made
    /// every guest 1.5-3x slower than three did, the arm64 ones most: more emulators than
    /// cores only share the cores worse.
    #[arg(long, default_value_t = 3, env = "SOCKWATCH_VM_JOBS")]
    vm_jobs: usize,
    /// Only these test modules in the guests (repeatable, e.g. `--test faults`); all of
    /// them by default.
    #[arg(long = "test", value_name = "NAME")]
    tests: Vec<String>,
    /// Guest architectures (repeatable). By default `vm-test` boots x86_64 guests, and `test`
    /// x86_64 guests plus arm64 guests running a subset (`AARCH64_SUITE_TESTS` in `xtask/src/vm/plan.rs`). An
    /// architecture named here runs every test (or `--test`'s). arm64 boots 6.1 and 6.12.
    #[arg(long = "arch", value_enum)]
    arches: Vec<Arch>,
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

    /// The guests `test` (`suite`) or `vm-test` boots: see `--arch`.
    fn plans(&self, suite: bool) -> anyhow::Result<Vec<vm::Plan>> {
        let plans: Vec<vm::Plan> = if self.arches.is_empty() && suite {
            vm::Plan::suite(&self.series(), &self.tests, &vm::agent_integration_tests()?)
        } else if self.arches.is_empty() {
            vm::Plan::new(Arch::X86_64, &self.series(), self.tests.clone())
                .into_iter()
                .collect()
        } else {
            let mut plans = Vec::new();
            for arch in &self.arches {
                plans.push(
                    vm::Plan::new(*arch, &self.series(), self.tests.clone()).with_context(
                        || format!("the {arch} guest boots none of the kernels asked for"),
                    )?,
                );
            }
            plans
        };
        Ok(plans)
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
            let fetch = vm::Plan::fetch(&vm::Plan::suite(&Series::ALL, &[], &[]));
            setup::setup(&if vm {
                setup::Wanted {
                    image: true,
                    ..setup::Wanted::guests(&fetch)
                }
            } else {
                setup::Wanted::default()
            })?;
            Ok(true)
        }
        Command::Build {
            target,
            static_libc,
        } => {
            let arch = target.unwrap_or_else(Arch::host);
            setup::setup(&setup::Wanted {
                cross: vec![arch],
                ..setup::Wanted::default()
            })?;
            let linking = if static_libc {
                Linking::Static
            } else {
                Linking::Default
            };
            println!("{}", build(arch, linking)?.display());
            Ok(true)
        }
        Command::Image { target, check } => image_command(target, check),
        Command::Run { args } => run_agent(args),
        Command::Test(a) => Ok(suite::run(
            &a.plans(true)?,
            a.tiers(),
            Duration::from_secs(a.vm_timeout),
            a.vm_jobs,
        )),
        Command::VmTest(a) => {
            let plans = a.plans(false)?;
            let ready = setup::setup(&setup::Wanted::guests(&vm::Plan::fetch(&plans)))?;
            let outcomes = vm::test(
                &ready,
                &plans,
                a.tiers(),
                Duration::from_secs(a.vm_timeout),
                a.vm_jobs,
                || (),
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
            setup::setup(&setup::Wanted::default())?;
            fuzz::run(secs, &targets, write_doc)
        }
    }
}

/// `cargo xtask image`: the agent's image for `target`, run as the DaemonSet runs it with
/// `check`.
fn image_command(target: Option<Arch>, check: bool) -> anyhow::Result<bool> {
    let arch = target.unwrap_or_else(Arch::host);
    anyhow::ensure!(
        !check || arch == Arch::host(),
        "--check runs the image here: build it for {} to check it",
        Arch::host()
    );
    anyhow::ensure!(
        !check || cmd::is_root(),
        "--check runs the image as the DaemonSet does (host pid namespace, BPF): run it \
         as root"
    );
    let reference = image::build(arch)?;
    if check {
        image::check::run(&reference)?;
    }
    println!("{reference}");
    Ok(true)
}

/// Builds the release agent and replaces this process with it, so signals (Ctrl-C) and the exit
/// code are the agent's own.
fn run_agent(args: Vec<OsString>) -> anyhow::Result<bool> {
    setup::setup(&setup::Wanted::default())?;
    cmd::run(cmd::cargo().args(["build", "--release", "-p", "sockwatch"]))?;
    let bin = cmd::target_dir().join("release/sockwatch");
    let err = cmd::command(&bin).args(&args).exec();
    Err(err).with_context(|| format!("cannot execute {}", bin.display()))
}

/// How `build` links the C library.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Linking {
    /// This machine's build links glibc dynamically; a cross-build for arm64 statically
    /// (`.cargo/config.toml`).
    Default,
    /// glibc linked in for every architecture: the image's binary, alone on an empty base.
    Static,
}

/// `cargo xtask build` once set up: the release agent for `arch`, its eBPF object built for
/// that architecture by the same build script; the binary's path.
pub fn build(arch: Arch, linking: Linking) -> anyhow::Result<std::path::PathBuf> {
    let mut build = cmd::cargo();
    build.args([
        "build",
        "--release",
        "--locked",
        "-p",
        "sockwatch",
        "--bin",
        "sockwatch",
    ]);
    let mut dir = cmd::target_dir();
    // With `--target`, the flags reach the target's crates only, not the build scripts and
    // proc-macros (which cannot link glibc statically).
    if arch != Arch::host() || linking == Linking::Static {
        build.args(["--target", arch.rust_target()]);
        dir.push(arch.rust_target());
    }
    if linking == Linking::Static {
        let triple = arch.rust_target().to_uppercase().replace('-', "_");
        build.env(
            format!("CARGO_TARGET_{triple}_RUSTFLAGS"),
            "-C target-feature=+crt-static",
        );
    }
    cmd::run(&mut build)?;
    Ok(dir.join("release/sockwatch"))
}
