//! `cargo xtask test`: every check and test layer in order, continuing past failures, then a
//! step table, a layer table and one closing count line.
use std::{
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::Context as _;

use crate::{
    Linking,
    arch::Arch,
    cmd, fuzz, headroom, healthy, image, setup, soak,
    testrun::{self, Counts},
    vm,
};

/// aya-build's flags for the eBPF crate built for `arch` (`\x1f`-separated, as in
/// `CARGO_ENCODED_RUSTFLAGS`): each architecture compiles its own register accessors.
fn ebpf_rustflags(arch: &str) -> String {
    format!("--cfg=bpf_target_arch=\"{arch}\"\x1f-Cdebuginfo=2\x1f-Clink-arg=--btf")
}

/// Seconds each fuzz target runs in the suite: a smoke run from the corpus, not a campaign
/// (longer campaigns: `cargo xtask fuzz --secs N`; the suite's whole run stays within CI's time).
const FUZZ_SECS: u64 = 20;

struct Step {
    name: &'static str,
    failure: Option<String>,
    elapsed: Duration,
}

/// A test layer's counts; a layer whose run failed without a failing test (build error, crash,
/// timeout, no verdict) counts as one failure so the closing line never hides it.
struct Layer {
    name: String,
    counts: Counts,
    note: Option<String>,
    /// How long the layer ran, where it ran as one piece (a guest, the host's tests).
    time: Option<Duration>,
    /// Boots a guest needed resumed after an emulation fault.
    resumes: usize,
    /// What its tests left untested here, and why (each reason once, with its count).
    skips: Vec<(String, usize)>,
}

impl Layer {
    fn new(name: String, mut counts: Counts, failure: Option<String>) -> Layer {
        let note = match failure {
            Some(why) if counts.failed == 0 => {
                counts.failed = 1;
                Some(format!("+1 failed: {why}"))
            }
            other => other,
        };
        Layer {
            name,
            counts,
            note,
            time: None,
            resumes: 0,
            skips: Vec::new(),
        }
    }

    /// The skip reasons in the layer's output.
    fn skipped(mut self, output: &str) -> Layer {
        self.skips = testrun::skip_reasons(output);
        self
    }

    fn took(mut self, time: Duration) -> Layer {
        self.time = Some(time);
        self
    }
}

/// Each test layer's counts, and the verifier rows its output carried (by layer label).
#[derive(Default)]
struct Results {
    layers: Vec<Layer>,
    headroom: Vec<(String, Vec<headroom::Row>)>,
}

/// The steps run so far, each with its time and failure.
#[derive(Default)]
struct Steps(Vec<Step>);

impl Steps {
    /// Runs one step, printing its name first and its failure, if any, after.
    fn run(&mut self, name: &'static str, f: impl FnOnce() -> anyhow::Result<()>) {
        println!("xtask: ===== {name} =====");
        let started = Instant::now();
        let failure = f().err().map(|e| format!("{e:#}"));
        if let Some(why) = &failure {
            println!("xtask: {name}: FAILED: {why}");
        }
        self.0.push(Step {
            name,
            failure,
            elapsed: started.elapsed(),
        });
    }
}

/// Runs the suite; `true` when everything passed.
pub fn run(plans: &[vm::Plan], tiers: vm::Tiers, vm_timeout: Duration, vm_jobs: usize) -> bool {
    let mut steps = Steps::default();
    let mut results = Results::default();
    let mut ready = None;
    steps.run("setup --vm", || {
        let fetch = vm::Plan::fetch(plans);
        ready = Some(setup::setup(&setup::Wanted {
            image: true,
            ..setup::Wanted::guests(&fetch)
        })?);
        Ok(())
    });
    let healthy = start_the_healthy_node(&mut steps);
    static_checks(&mut steps);
    fuzz_and_soak(&mut steps);
    collect_the_healthy_node(&mut steps, &mut results, healthy);
    // The host layer mostly waits on its agents (a third of a core): the x86-64 guests'
    // initramfs compiles beside it at the lowest priority, then those guests boot beside the
    // rest of it, niced, while the arm64 one compiles, so the host's tests get a core whenever
    // they want one and the guests take the remainder.
    let mut static_agent = None;
    steps.run(
        "host tests (root, host kernel) beside the guests (QEMU), booted once their initramfs is built",
        || {
            let ready = ready.as_ref().context("no kernels: setup --vm failed");
            let (host, guests) = std::thread::scope(|s| {
                let guests = s.spawn(move || {
                    lowest_priority();
                    vm::test(ready?, plans, tiers, vm_timeout, vm_jobs, guest_priority)
                });
                let host = host_tests(&mut results);
                // Built in what the guests leave idle, for the image step after them.
                static_agent = Some(std::thread::spawn(build_static_agent_when_idle));
                (host, guests.join())
            });
            let guests = guests
                .map_err(|_| anyhow::anyhow!("the guests' thread panicked"))
                .and_then(|booted| booted);
            let guests = record_guests(guests, &mut results);
            host.and(guests)
        },
    );
    steps.run(
        "image: built, run under podman as the DaemonSet runs it",
        || image_step(plans, static_agent.take()),
    );
    steps.run("verifier table (docs/VERIFIER.md)", || {
        let guests: usize = plans.iter().map(|p| p.series.len()).sum();
        headroom::update(&cmd::workspace_root(), &results.headroom, 1 + guests)
    });
    print_tables(&steps.0, &results.layers);
    let doc = cmd::workspace_root().join("docs/CI-TIMES.md");
    match std::fs::write(&doc, times_markdown(&steps.0, &results.layers)) {
        Ok(()) => println!("xtask: wrote {}", doc.display()),
        Err(e) => println!("xtask: cannot write {}: {e}", doc.display()),
    }
    steps.0.iter().all(|s| s.failure.is_none())
}

/// docs/CI-TIMES.md: the step and layer tables of this run, as the closing lines print them.
fn times_markdown(steps: &[Step], layers: &[Layer]) -> String {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let wall: Duration = steps.iter().map(|s| s.elapsed).sum();
    let mut md = format!(
        "# CI's time table\n\nWritten by `cargo xtask test` (what `.ci/run` runs) at its end, on \
         the machine it ran on ({cores} cores): every step's seconds, then every layer's counts, \
         seconds and the boots a guest needed resumed. The whole suite took **{:.0} s**.\n\n\
         | step | result | seconds |\n| --- | --- | ---: |\n",
        wall.as_secs_f64()
    );
    for s in steps {
        let result = if s.failure.is_some() { "FAILED" } else { "ok" };
        md.push_str(&format!(
            "| {} | {result} | {:.0} |\n",
            s.name,
            s.elapsed.as_secs_f64()
        ));
    }
    md.push_str(
        "\n| layer | passed | failed | ignored | skips | seconds | resumes |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for l in layers {
        let time = l
            .time
            .map_or("-".to_owned(), |t| format!("{:.0}", t.as_secs_f64()));
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {time} | {} |\n",
            l.name, l.counts.passed, l.counts.failed, l.counts.ignored, l.counts.skips, l.resumes
        ));
    }
    md
}

/// Formatting, lints and the deployment's own checks.
fn static_checks(steps: &mut Steps) {
    steps.run("cargo fmt --check", || {
        cmd::run(cmd::cargo().args(["fmt", "--all", "--", "--check"]))
    });
    steps.run("clippy (host crates)", clippy_host);
    steps.run(
        "deploy checks (schemas, promtool rules and tests, dashboards)",
        || cmd::run(cmd::command("bash").arg(cmd::workspace_root().join("deploy/check.sh"))),
    );
    steps.run("clippy (eBPF crate)", clippy_ebpf);
}

/// The healthy node's ten minutes start first, mostly waiting: the static checks, fuzz and
/// soak keep the cores busy meanwhile.
fn start_the_healthy_node(steps: &mut Steps) -> Option<healthy::Running> {
    let mut healthy = None;
    steps.run(
        "healthy node: build and start (runs beside the static checks, fuzz and soak)",
        || {
            healthy = Some(healthy::start()?);
            Ok(())
        },
    );
    healthy
}

fn fuzz_and_soak(steps: &mut Steps) {
    steps.run(
        "fuzz (each parser 20 s, one per core, committed corpus)",
        || {
            anyhow::ensure!(fuzz::run(FUZZ_SECS, &[], false)?, "a fuzz target crashed");
            Ok(())
        },
    );
    steps.run(
        "soak (3 min at 20k events/s, sweeps, churning owners)",
        || {
            anyhow::ensure!(
                soak::run(&soak::SoakArgs::suite())?,
                "the soak found problems"
            );
            Ok(())
        },
    );
}

fn collect_the_healthy_node(
    steps: &mut Steps,
    results: &mut Results,
    healthy: Option<healthy::Running>,
) {
    steps.run("healthy node: ten minutes, collected", || {
        let Some(run) = healthy else {
            results.layers.push(Layer::new(
                "healthy node".into(),
                Counts::default(),
                Some("it did not start".into()),
            ));
            anyhow::bail!("the healthy-node run did not start");
        };
        let done = run.finish();
        results.layers.push(
            Layer::new("healthy node".into(), done.counts, done.failure.clone())
                .took(done.took)
                .skipped(&done.output),
        );
        done.failure.map_or(Ok(()), |f| Err(anyhow::anyhow!(f)))
    });
}

fn clippy_host() -> anyhow::Result<()> {
    // The eBPF crates only build for the BPF target: they get their own clippy below.
    cmd::run(cmd::cargo().args([
        "clippy",
        "--workspace",
        "--exclude",
        "sockwatch-ebpf",
        "--exclude",
        "floor-ebpf",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]))
}

fn clippy_ebpf() -> anyhow::Result<()> {
    for arch in [Arch::X86_64, Arch::Aarch64] {
        let mut c = cmd::cargo();
        c.args([
            "+nightly",
            "clippy",
            "-p",
            "sockwatch-ebpf",
            "-p",
            "floor-ebpf",
        ])
        .args([
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
            "--release",
        ])
        .arg("--target-dir")
        .arg(cmd::target_dir().join("ebpf-clippy").join(arch.to_string()))
        .args(["--", "-D", "warnings"])
        .env("CARGO_ENCODED_RUSTFLAGS", ebpf_rustflags(&arch.to_string()))
        .env_remove("RUSTC")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTUP_TOOLCHAIN");
        cmd::run(&mut c)?;
    }
    Ok(())
}

/// The image's static agent, compiled at the lowest priority while the guests run: it takes
/// the cores they leave idle (the last guest keeps one busy), not their share.
fn build_static_agent_when_idle() -> anyhow::Result<PathBuf> {
    lowest_priority();
    crate::build(Arch::host(), Linking::Static)
}

/// Niceness 19 for the calling thread and the processes it starts from now on.
fn lowest_priority() {
    niceness(19);
}

/// Niceness 10 for the guests: below the host's tests, above the static agent's build.
fn guest_priority() {
    niceness(10);
}

fn niceness(n: i32) {
    // SAFETY: setpriority touches no memory. On Linux `who` 0 is this thread alone, and the
    // processes it starts (cargo, rustc, QEMU) inherit its niceness. Root may lower it again.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, n) };
}

/// The agent's image for this machine (its static build, `built` while the guests ran, else
/// now) run under podman with the DaemonSet's settings, and the arm64 image from the static
/// binary the arm64 guests ran (built, not run: the image layer costs a second).
fn image_step(
    plans: &[vm::Plan],
    built: Option<std::thread::JoinHandle<anyhow::Result<PathBuf>>>,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let bin = match built {
        Some(build) => build
            .join()
            .map_err(|_| anyhow::anyhow!("the static agent's build panicked"))??,
        None => crate::build(Arch::host(), Linking::Static)?,
    };
    let reference = image::build_from(Arch::host(), &bin)?;
    println!(
        "xtask: image: {reference} built in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    image::check::run(&reference)?;
    if plans.iter().any(|p| p.arch == Arch::Aarch64) && Arch::host() != Arch::Aarch64 {
        let guests = cmd::target_dir().join(Arch::Aarch64.rust_target());
        let arm64 = image::build_from(Arch::Aarch64, &guests.join("release/sockwatch"))?;
        println!("xtask: image: {arm64} built from the arm64 guests' agent");
    }
    Ok(())
}

/// The host layer: the workspace's tests as root on this kernel.
fn host_tests(results: &mut Results) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut c = cmd::cargo();
    // --no-fail-fast: every test binary runs and is counted, even after one fails.
    c.args([
        "test",
        "--workspace",
        "--exclude",
        "sockwatch-ebpf",
        "--exclude",
        "floor-ebpf",
        "--no-fail-fast",
    ])
    .env("SOCKWATCH_REQUIRE_TIERS", "tracepoint")
    .env("RUST_TEST_THREADS", "1");
    let (counts, failure, text) = count_tests(c);
    results
        .headroom
        .push(("host".to_owned(), headroom::rows(&text)));
    results.layers.push(
        Layer::new("host".into(), counts, failure.clone())
            .took(started.elapsed())
            .skipped(&text),
    );
    failure.map_or(Ok(()), |f| Err(anyhow::anyhow!(f)))
}

/// One layer per guest kernel; a failed `vm` layer alone when no guest booted (no kernels,
/// no initramfs).
fn record_guests(
    booted: anyhow::Result<Vec<vm::Outcome>>,
    results: &mut Results,
) -> anyhow::Result<()> {
    let outcomes = match booted {
        Ok(o) => o,
        Err(e) => {
            let why = format!("{e:#}");
            results
                .layers
                .push(Layer::new("vm".into(), Counts::default(), Some(why)));
            return Err(e);
        }
    };
    let mut failed = Vec::new();
    for o in outcomes {
        let console = std::fs::read_to_string(&o.log).unwrap_or_default();
        // The last boot that printed them: a guest resumed in the headroom test prints its
        // rows again, whole.
        let rows = console
            .rsplit(vm::BOOT_SEPARATOR)
            .map(headroom::rows)
            .find(|r| !r.is_empty())
            .unwrap_or_default();
        results.headroom.push((o.label.clone(), rows));
        if let Some(why) = &o.failure {
            failed.push(format!("{}: {why}", o.label));
        }
        let mut layer = Layer::new(o.label, o.counts, o.failure)
            .took(o.elapsed)
            .skipped(&console);
        layer.resumes = o.resumed.len();
        results.layers.push(layer);
    }
    if failed.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(failed.join("; "))
    }
}

/// Runs a `cargo test`: what its result lines add up to, why it failed if it did, its output.
fn count_tests(c: Command) -> (Counts, Option<String>, String) {
    let what = cmd::describe(&c);
    match testrun::run_and_count(c) {
        Ok((status, counts, text)) if status.success() => (counts, None, text),
        Ok((status, counts, text)) => (counts, Some(format!("`{what}` failed ({status})")), text),
        Err(e) => (Counts::default(), Some(format!("{e:#}")), String::new()),
    }
}

fn print_tables(steps: &[Step], layers: &[Layer]) {
    println!();
    let w = steps.iter().map(|s| s.name.len()).max().unwrap_or(0).max(4);
    println!("xtask: {:<w$} {:>8}  {:>8}", "step", "result", "time");
    for s in steps {
        println!(
            "xtask: {:<w$} {:>8}  {:>7.1}s",
            s.name,
            if s.failure.is_some() { "FAILED" } else { "ok" },
            s.elapsed.as_secs_f64()
        );
    }
    println!();
    println!(
        "xtask: {:<18} {:>7} {:>7} {:>8} {:>6} {:>8} {:>8}",
        "layer", "passed", "failed", "ignored", "skips", "time", "resumes"
    );
    let mut total = Counts::default();
    for l in layers {
        let time = l
            .time
            .map_or("-".to_owned(), |t| format!("{:.0}s", t.as_secs_f64()));
        println!(
            "xtask: {:<18} {:>7} {:>7} {:>8} {:>6} {:>8} {:>8}{}",
            l.name,
            l.counts.passed,
            l.counts.failed,
            l.counts.ignored,
            l.counts.skips,
            time,
            l.resumes,
            l.note
                .as_deref()
                .map(|n| format!("  ({n})"))
                .unwrap_or_default()
        );
        total += l.counts;
    }
    for l in layers.iter().filter(|l| !l.skips.is_empty()) {
        println!("xtask: skipped in {} (reason, times):", l.name);
        for (reason, n) in &l.skips {
            // The kernel's refusals name every hook: the start says which test and why.
            let short: String = reason.chars().take(160).collect();
            println!("xtask:   {n:>3}  {short}");
        }
    }
    let wall: Duration = steps.iter().map(|s| s.elapsed).sum();
    println!("xtask: the suite took {:.0}s", wall.as_secs_f64());
    println!(
        "xtask: {} passed, {} failed, {} ignored, {} skips (cases or tiers a test could not run \
         here, each with its reason above)",
        total.passed, total.failed, total.ignored, total.skips
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_times_doc_has_every_step_and_layer_and_the_total() {
        let steps = [
            Step {
                name: "clippy (host crates)",
                failure: None,
                elapsed: Duration::from_secs_f64(110.6),
            },
            Step {
                name: "vm tests (QEMU)",
                failure: Some("a guest hung".into()),
                elapsed: Duration::from_secs(2000),
            },
        ];
        let counts = Counts {
            passed: 189,
            ignored: 26,
            skips: 24,
            ..Counts::default()
        };
        let mut guest =
            Layer::new("vm 5.10.251".into(), counts, None).took(Duration::from_secs(1645));
        guest.resumes = 1;
        let healthy = Layer::new(
            "healthy node".into(),
            Counts::default(),
            Some("no start".into()),
        );
        let md = times_markdown(&steps, &[guest, healthy]);
        assert!(md.contains("The whole suite took **2111 s**."), "{md}");
        assert!(md.contains("| clippy (host crates) | ok | 111 |\n"), "{md}");
        assert!(md.contains("| vm tests (QEMU) | FAILED | 2000 |\n"), "{md}");
        assert!(
            md.contains("| vm 5.10.251 | 189 | 0 | 26 | 24 | 1645 | 1 |\n"),
            "{md}"
        );
        // A layer that failed without a failing test counts one failure, and has no time.
        assert!(
            md.contains("| healthy node | 0 | 1 | 0 | 0 | - | 0 |\n"),
            "{md}"
        );
    }
}
