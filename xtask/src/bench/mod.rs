//! `cargo xtask bench`: what sockwatch costs on this machine, beside a bpftrace script, auditd
//! and empty programs (the floor), written to docs/BENCHMARKS.md. The host phases measure the
//! tracepoint tier: `overhead` (interleaved rounds of observers), then in `load` the latency,
//! throughput and footprint; `--vm SERIES` measures every tier in a QEMU guest (`vm`) and
//! replaces only the report's VM section, which a host run keeps as it is.
pub mod agent;
pub mod env;
mod load;
mod observers;
mod overhead;
mod report;
mod vm;

use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Args;

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
    let output = args.output.clone().unwrap_or_else(|| match args.quick {
        true => cmd::target_dir().join("bench/BENCHMARKS.md"),
        false => cmd::workspace_root().join("docs/BENCHMARKS.md"),
    });
    let old = fs::read_to_string(&output).unwrap_or_default();
    let command = report::command_line(std::env::args().skip(1));
    if !args.vm.is_empty() {
        // The bench guests are x86-64: the workload is measured where the precise tiers run.
        let ready = setup::setup(&setup::Wanted::guests(&[(Arch::X86_64, args.vm.clone())]))?;
        let (_, busybox) = ready.busybox.first().context("setup fetched no busybox")?;
        let guests = vm::run(&ready.kernels, busybox, args.rounds)?;
        let before = report::vm::section(&old).and_then(report::vm::VmBefore::parse);
        let section = report::vm::render(&guests, &command, &report::date(), before.as_ref());
        return write_report(&output, &report::vm::splice(&old, &section), started);
    }
    setup::setup(&setup::Wanted::default())?;
    Apt::default().ensure_installed(&["bpftrace", "auditd", "linux-perf"])?;
    cmd::run(cmd::cargo().args(["build", "--release", "-p", "sockwatch", "-p", "bench"]))?;
    env::mount_tracefs()?;
    let env = env::Env::prepare()?;
    let plan = Plan::new(args.quick, args.rounds);
    let mut rep = report::Report::new(&plan, command, &env);
    rep.before = report::Before::parse(&old);
    progress(started, "machine and tiers recorded");
    let audit = observers::AuditGuard::prepare()
        .map_err(|e| note(&mut rep.notes, format!("auditd not compared: {e:#}")))
        .ok();
    let o = overhead::overhead(&env, &plan, audit.is_some(), &mut rep.notes, started)?;
    rep.overhead = Some(o);
    drop(audit); // audit off, `-a never,task` kept, our auditd stopped, backlog restored
    rep.load_after_overhead = report::loadavg();
    rep.latency = Some(load::latency(&env, &plan, started)?);
    rep.throughput = Some(load::throughput(&env, &plan, started)?);
    rep.footprint = Some(load::footprint(&env, &plan, started)?);
    rep.finish(started.elapsed());
    let text = match report::vm::section(&old) {
        Some(vm) => report::vm::splice(&rep.render(), vm),
        None => rep.render(),
    };
    write_report(&output, &text, started)
}

/// Writes `text` to `output` (creating its directory) and prints it.
fn write_report(output: &Path, text: &str, started: Instant) -> anyhow::Result<bool> {
    if let Some(dir) = output.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(output, text).with_context(|| format!("writing {}", output.display()))?;
    println!(
        "{text}\nbench: report written to {} in {:.0?}",
        output.display(),
        started.elapsed()
    );
    Ok(true)
}

/// `bench [elapsed] what`, flushed at once.
pub fn progress(started: Instant, what: &str) {
    println!("bench [{:>5.0?}] {what}", started.elapsed());
    let _ = std::io::stdout().flush();
}

/// A remark for the report's "Not measured here" list, printed as it is taken.
pub fn note(notes: &mut Vec<String>, note: String) {
    println!("bench: {note}");
    notes.push(note);
}

/// How much of everything: the full run, or `--quick`.
#[derive(Clone, Debug)]
pub struct Plan {
    pub rounds: usize,
    /// Repetitions of each batch inside one observer window (their median is the round's).
    pub reps: usize,
    /// Pause before each batch, so an observer's work on the previous one is not charged.
    pub pause: Duration,
    pub ops: Vec<(Op, u64)>,
    pub latency_samples: u64,
    pub startup_runs: usize,
    pub metrics_samples: u64,
    /// Sustained rates tried (events per second), each for `step_secs`.
    pub steps: Vec<u64>,
    pub step_secs: f64,
    /// Bursts (events) double from `burst_start` until loss, then bisect `bisect` times.
    pub burst_start: u64,
    pub burst_max: u64,
    pub bisect: usize,
    pub idle_secs: u64,
    pub sockets: u64,
    pub scrapes: usize,
}

impl Plan {
    pub fn new(quick: bool, rounds: usize) -> Plan {
        let size = |full, short| if quick { short } else { full };
        let full_steps = vec![
            10_000, 25_000, 50_000, 75_000, 100_000, 150_000, 200_000, 300_000,
        ];
        Plan {
            rounds: if quick { rounds.min(2) } else { rounds.max(2) },
            reps: size(3, 1) as usize,
            pause: Duration::from_millis(50),
            ops: Op::ALL
                .map(|op| (op, size(op.batch(), op.quick_batch())))
                .to_vec(),
            latency_samples: size(1_000, 100),
            startup_runs: size(10, 3) as usize,
            metrics_samples: size(200, 30),
            steps: if quick {
                vec![10_000, 50_000]
            } else {
                [full_steps, vec![400_000]].concat()
            },
            step_secs: if quick { 1.0 } else { 5.0 },
            burst_start: 1_024,
            burst_max: size(262_144, 32_768),
            bisect: size(5, 2) as usize,
            idle_secs: size(30, 3),
            sockets: 10_000,
            scrapes: size(100, 20) as usize,
        }
    }
}

/// The operations whose cost is compared, in the report's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    Getppid,
    Connect,
    Unlink,
    SockCycle,
    SockCycleGo,
    Open,
    Pipe,
    SocketPair,
    SockCycleUnwatched,
    Fork,
}

const C_CYCLE: &str = "C order (socket, bind, listen, socket, connect, accept, 3× close, unlink)";

impl Op {
    pub const ALL: [Op; 10] = [
        Op::Getppid,
        Op::Connect,
        Op::Unlink,
        Op::SockCycle,
        Op::SockCycleGo,
        Op::Open,
        Op::Pipe,
        Op::SocketPair,
        Op::SockCycleUnwatched,
        Op::Fork,
    ];

    /// The workload's name for it, its full batch, and what it is.
    fn spec(self) -> (&'static str, u64, &'static str) {
        match self {
            Op::Getppid => ("getppid", 400_000, "getppid(2), a syscall nothing observes"),
            Op::Connect => (
                "connect",
                5_000,
                "connect to an unwatched socket (socket, connect, accept, 2× close)",
            ),
            Op::Unlink => (
                "unlink",
                10_000,
                "unlink(2) of a regular file in the watched directory",
            ),
            Op::SockCycle => (
                "sockcycle",
                3_000,
                "socket life cycle in the watched directory, ",
            ),
            Op::SockCycleGo => (
                "sockcycle-go",
                3_000,
                "socket life cycle in the watched directory, Go order (socket, bind, listen, \
                 socket, connect, accept, unlink, 3× close: the file goes while the socket lives)",
            ),
            Op::Open => (
                "open",
                50_000,
                "open(2) and close(2) of a regular file outside the watched directory",
            ),
            Op::Pipe => ("pipe", 40_000, "pipe(2) and two closes"),
            Op::SocketPair => (
                "socketpair",
                20_000,
                "socketpair(2) of unnamed UNIX sockets and two closes",
            ),
            Op::SockCycleUnwatched => (
                "sockcycle-unwatched",
                3_000,
                "socket life cycle outside the watched directory, ",
            ),
            Op::Fork => (
                "fork",
                1_000,
                "fork(2) of a child that exits at once, and waitpid(2)",
            ),
        }
    }

    pub fn arg(self) -> &'static str {
        self.spec().0
    }

    pub fn batch(self) -> u64 {
        self.spec().1
    }

    fn quick_batch(self) -> u64 {
        if self == Op::Getppid {
            100_000
        } else {
            self.batch() / 5
        }
    }

    pub fn label(self) -> String {
        let text = self.spec().2;
        if text.ends_with(", ") {
            format!("{text}{C_CYCLE}")
        } else {
            text.to_owned()
        }
    }

    /// The workload process it runs in.
    pub fn runner(self) -> Runner {
        match self {
            Op::Getppid | Op::Open | Op::Pipe | Op::SocketPair | Op::Fork => Runner::Unrelated,
            Op::SockCycleUnwatched => Runner::Cycles,
            _ => Runner::Watched,
        }
    }

    /// Whether it concerns no watched socket: what every workload on the node pays (issue
    /// 38's node tax), measured in processes that never bind a watched socket.
    pub fn unrelated(self) -> bool {
        self.runner() != Runner::Watched
    }

    /// Whether it concerns no watched socket with every directory watched (the DaemonSet's
    /// default), where a life cycle anywhere is a watched one.
    pub fn unrelated_by_default(self) -> bool {
        self.runner() == Runner::Unrelated
    }

    /// The names of the [`unrelated`](Self::unrelated) operations, in order.
    pub fn unrelated_names() -> Vec<&'static str> {
        Op::ALL
            .into_iter()
            .filter(|op| op.unrelated())
            .map(Op::arg)
            .collect()
    }
}

/// The workload processes. The kernel tracks a process that bound a watched socket, and its
/// children, for the rest of its life (its closes and exits are looked at); with every
/// directory watched, any path socket is a watched one. So the operations that concern no
/// watched socket run in a process that never binds a path socket, as the node's other
/// workloads, and the life cycles outside the watched directory in one of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runner {
    Watched,
    Unrelated,
    Cycles,
}

/// Who observes the workload during a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Variant {
    Off,
    Sockwatch,
    /// sockwatch as the DaemonSet runs it by default: no `--watch`, every directory watched.
    SockwatchDefault,
    Bpftrace,
    Auditd,
    /// Empty programs where sockwatch's tracepoint tier attaches: the attachments' own cost.
    Floor,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Off => "off",
            Variant::Sockwatch => "sockwatch (tracepoint)",
            Variant::SockwatchDefault => "sockwatch (tracepoint, no --watch)",
            Variant::Bpftrace => "bpftrace",
            Variant::Auditd => "auditd",
            Variant::Floor => "empty programs (floor)",
        }
    }
}

/// The `q` quantile (0..=1) of the finite `values`, linearly interpolated; none for none.
pub fn quantile(values: &[f64], q: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let pos = q.clamp(0.0, 1.0) * (v.len().checked_sub(1)? as f64);
    let (lo, hi) = (v[pos.floor() as usize], v[pos.ceil() as usize]);
    Some(lo + (hi - lo) * pos.fract())
}

/// The median (NaN for no values): a round's value from its repetitions.
pub fn median(values: &[f64]) -> f64 {
    quantile(values, 0.5).unwrap_or(f64::NAN)
}

/// Median and interquartile range of a sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub p25: f64,
    pub p50: f64,
    pub p75: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Option<Spread> {
        let q = |q| quantile(values, q);
        Some(Spread {
            p25: q(0.25)?,
            p50: q(0.5)?,
            p75: q(0.75)?,
        })
    }
}

/// A median with a distribution-free confidence interval: the k-th smallest and k-th largest
/// values hold the median between them with `coverage` = 1 − 2·P(Binomial(n, ½) < k).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    pub low: f64,
    pub p50: f64,
    pub high: f64,
    pub coverage: f64,
}

impl Interval {
    /// The narrowest such interval of the finite `values` that covers at least 90 %; none for
    /// fewer than five values, whose widest one covers less.
    pub fn of(values: &[f64]) -> Option<Interval> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let coverage = |k: usize| {
            let below: f64 = (0..k).map(|i| choose(n, i)).sum();
            1.0 - 2.0 * below / 2f64.powi(n as i32)
        };
        let k = (1..=n / 2).take_while(|&k| coverage(k) >= 0.9).last()?;
        Some(Interval {
            low: v[k - 1],
            p50: median(&v),
            high: v[n - k],
            coverage: coverage(k),
        })
    }
}

/// n choose k, as a float.
fn choose(n: usize, k: usize) -> f64 {
    (0..k).fold(1.0, |c, i| c * (n - i) as f64 / (i + 1) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_and_quick_sizes() {
        let full = Plan::new(false, 12);
        assert_eq!((full.rounds, full.reps, full.startup_runs), (12, 3, 10));
        let batches: Vec<u64> = full.ops.iter().map(|o| o.1).collect();
        assert_eq!(
            batches,
            [
                400_000, 5_000, 10_000, 3_000, 3_000, 50_000, 40_000, 20_000, 3_000, 1_000
            ]
        );
        assert_eq!(
            (full.steps.len(), full.step_secs, full.burst_max),
            (9, 5.0, 262_144)
        );
        assert_eq!((full.bisect, full.idle_secs, full.scrapes), (5, 30, 100));
        let quick = Plan::new(true, 12);
        assert_eq!((quick.rounds, quick.reps, quick.startup_runs), (2, 1, 3));
        let batches: Vec<u64> = quick.ops.iter().map(|o| o.1).collect();
        assert_eq!(
            batches,
            [
                100_000, 1_000, 2_000, 600, 600, 10_000, 8_000, 4_000, 600, 200
            ]
        );
        assert_eq!(
            (quick.steps, quick.latency_samples, quick.metrics_samples),
            (vec![10_000, 50_000], 100, 30)
        );
        assert_eq!(
            (quick.burst_start, quick.burst_max, quick.sockets),
            (1_024, 32_768, 10_000)
        );
        assert_eq!(
            Plan::new(false, 1).rounds,
            2,
            "at least two rounds to interleave"
        );
        let by_default: Vec<&str> = Op::ALL
            .into_iter()
            .filter(|op| op.unrelated_by_default())
            .map(Op::arg)
            .collect();
        assert_eq!(
            by_default,
            ["getppid", "open", "pipe", "socketpair", "fork"]
        );
        assert_eq!(Op::SockCycleUnwatched.runner(), Runner::Cycles);
        assert_eq!(
            Op::unrelated_names(),
            [
                "getppid",
                "open",
                "pipe",
                "socketpair",
                "sockcycle-unwatched",
                "fork"
            ]
        );
        assert!(
            Op::SockCycleUnwatched
                .label()
                .ends_with("3× close, unlink)")
        );
    }

    #[test]
    fn quantiles_interpolate_and_spreads_hold_the_quartiles() {
        let v = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(
            (quantile(&v, 0.0), quantile(&v, 1.0), quantile(&v, 0.5)),
            (Some(1.0), Some(4.0), Some(2.5))
        );
        assert_eq!(
            (quantile(&[7.0], 0.99), quantile(&[], 0.5)),
            (Some(7.0), None)
        );
        assert_eq!(median(&[3.0, 1.0, 2.0, f64::NAN]), 2.0);
        let v: Vec<f64> = (1..=101).map(f64::from).collect();
        assert_eq!(
            Spread::of(&v),
            Some(Spread {
                p25: 26.0,
                p50: 51.0,
                p75: 76.0
            })
        );
        assert!(Spread::of(&[f64::NAN]).is_none());
    }

    #[test]
    fn a_median_interval_is_order_statistics_of_known_coverage() {
        // n = 12: the 3rd smallest and largest cover 1 − 2·(1 + 12 + 66)/4096; the 4th less.
        let v: Vec<f64> = (1..=12).rev().map(f64::from).collect();
        let i = Interval::of(&v).expect("twelve values");
        assert_eq!((i.low, i.p50, i.high), (3.0, 6.5, 10.0));
        assert!((i.coverage - (1.0 - 158.0 / 4096.0)).abs() < 1e-12);
        // n = 8: the 2nd (93 %); NaNs are left out; four values are too few.
        let v = [5.0, 1.0, 7.0, f64::NAN, 3.0, 2.0, 8.0, 4.0, 6.0];
        let i = Interval::of(&v).expect("eight values");
        assert_eq!((i.low, i.high), (2.0, 7.0));
        assert!((i.coverage - (1.0 - 18.0 / 256.0)).abs() < 1e-12);
        assert_eq!(Interval::of(&[1.0, 2.0, 3.0, 4.0]), None);
        assert_eq!(choose(12, 2), 66.0);
    }
}
