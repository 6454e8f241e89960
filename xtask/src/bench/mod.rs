//! `cargo xtask bench`: what sockwatch costs, measured on this machine, side by side with an
//! equivalent bpftrace script and an auditd watch, written to `docs/BENCHMARKS.md`.
//!
//! Phases, each against a fresh `sockwatch run --probe-mode tracepoint` (the tier this kind of
//! host loads; the precise tiers need a kernel that allows fentry/LSM):
//! 1. overhead: one workload process (`bench/`, release) times four operations while xtask
//!    switches the observers on and off around it, in rotated order each round;
//! 2. latency: bind's return → its line in the events file, and → counted in /metrics;
//! 3. throughput and loss: paced socket life cycles stepped up until loss, then bursts, with
//!    produced = delivered + lost checked per event kind;
//! 4. footprint: idle CPU, RSS with 10,000 live watched sockets, /metrics scrape time with the
//!    most series the label bounds allow.
mod report;
mod stats;
mod tracer;

use std::{
    collections::BTreeMap,
    fs,
    io::{BufRead as _, BufReader, Read as _, Seek as _, Write as _},
    net::{SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Args;

use crate::{apt::Apt, cmd, setup};
use stats::{Spread, median};
use tracer::{Agent, Bpftrace, Metrics};

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Interleaved rounds of the overhead phase; each visits every observer once.
    #[arg(long, default_value_t = 12)]
    rounds: usize,
    /// A short run that exercises the harness (few rounds and samples); its report goes to
    /// target/bench/BENCHMARKS.md unless --output says otherwise.
    #[arg(long)]
    quick: bool,
    /// Where to write the report [default: docs/BENCHMARKS.md].
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// Where the bench works: a tmpfs of its own, so files cost no disk I/O.
const ROOT: &str = "/run/sockwatch-bench";
/// Events the workload's socket life cycle yields: bind, listen, unlink, release.
const CYCLE_KINDS: [&str; 4] = ["bind", "listen", "unlink", "release"];

/// How much of everything: the full run, or `--quick`.
#[derive(Clone, Debug)]
pub struct Plan {
    pub rounds: usize,
    /// Repetitions of each op inside one observer window (their median is the round's value).
    pub reps: usize,
    /// Pause before each batch, so that an observer's work on the previous batch (draining
    /// and writing its events) is done and each batch pays only its own cost.
    pub pause: Duration,
    pub ops: Vec<(Op, u64)>,
    pub latency_samples: u64,
    /// Agent starts timed with the whole probe table.
    pub startup_runs: usize,
    pub metrics_samples: u64,
    /// Sustained rates tried, events per second, and how long each runs.
    pub steps: Vec<u64>,
    pub step_secs: f64,
    /// Bursts start here (life cycles) and double until loss, then bisect this many times.
    pub burst_start: u64,
    pub burst_max: u64,
    pub bisect: usize,
    pub idle_secs: u64,
    pub sockets: u64,
    pub scrapes: usize,
}

impl Plan {
    fn new(args: &BenchArgs) -> Plan {
        if args.quick {
            Plan {
                rounds: args.rounds.min(2),
                reps: 1,
                pause: Duration::from_millis(50),
                ops: vec![
                    (Op::Getppid, 100_000),
                    (Op::Connect, 1_000),
                    (Op::Unlink, 2_000),
                    (Op::SockCycle, 600),
                    (Op::SockCycleGo, 600),
                ],
                latency_samples: 100,
                startup_runs: 3,
                metrics_samples: 30,
                steps: vec![10_000, 50_000],
                step_secs: 1.0,
                burst_start: 1_024,
                burst_max: 32_768,
                bisect: 2,
                idle_secs: 3,
                sockets: 10_000,
                scrapes: 20,
            }
        } else {
            Plan {
                rounds: args.rounds.max(2),
                reps: 3,
                pause: Duration::from_millis(50),
                ops: vec![
                    (Op::Getppid, 400_000),
                    (Op::Connect, 5_000),
                    (Op::Unlink, 10_000),
                    (Op::SockCycle, 3_000),
                    (Op::SockCycleGo, 3_000),
                ],
                latency_samples: 1_000,
                startup_runs: 10,
                metrics_samples: 200,
                steps: vec![
                    10_000, 25_000, 50_000, 75_000, 100_000, 150_000, 200_000, 300_000, 400_000,
                ],
                step_secs: 5.0,
                burst_start: 1_024,
                burst_max: 262_144,
                bisect: 5,
                idle_secs: 30,
                sockets: 10_000,
                scrapes: 100,
            }
        }
    }
}

/// The operations whose cost is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    Unlink,
    SockCycle,
    SockCycleGo,
    Connect,
    Getppid,
}

impl Op {
    /// The workload's name for it.
    fn arg(self) -> &'static str {
        match self {
            Op::Unlink => "unlink",
            Op::SockCycle => "sockcycle",
            Op::SockCycleGo => "sockcycle-go",
            Op::Connect => "connect",
            Op::Getppid => "getppid",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Op::Unlink => "unlink(2) of a regular file in the watched directory",
            Op::SockCycle => {
                "socket life cycle in the watched directory, C order (socket, bind, listen, \
                 socket, connect, accept, 3× close, unlink)"
            }
            Op::SockCycleGo => {
                "socket life cycle in the watched directory, Go order (socket, bind, listen, \
                 socket, connect, accept, unlink, 3× close: the file goes while the socket \
                 lives)"
            }
            Op::Connect => "connect to an unwatched socket (socket, connect, accept, 2× close)",
            Op::Getppid => "getppid(2), a syscall nothing observes",
        }
    }
}

/// Who observes the workload during a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Variant {
    Off,
    Sockwatch,
    Bpftrace,
    Auditd,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Off => "off",
            Variant::Sockwatch => "sockwatch (tracepoint)",
            Variant::Bpftrace => "bpftrace",
            Variant::Auditd => "auditd",
        }
    }
}

/// Paths and binaries of one bench run. Dropping it unmounts the bench's tmpfs.
pub struct Env {
    pub root: PathBuf,
    pub watched: PathBuf,
    pub unwatched: PathBuf,
    pub sockwatch: PathBuf,
    pub workload: PathBuf,
    mounted: bool,
}

impl Env {
    fn prepare() -> anyhow::Result<Env> {
        let root = PathBuf::from(ROOT);
        fs::create_dir_all(&root)?;
        let mounted = !is_mountpoint(&root)?;
        if mounted {
            cmd::run(
                cmd::command("mount")
                    .args(["-t", "tmpfs", "-o", "size=4g", "sockwatch-bench"])
                    .arg(&root),
            )?;
        }
        // Whatever an earlier run left here (the directory is the bench's own).
        for e in fs::read_dir(&root)? {
            let p = e?.path();
            let _ = fs::remove_dir_all(&p).or_else(|_| fs::remove_file(&p));
        }
        for d in ["w", "u", "f"] {
            fs::create_dir_all(root.join(d))?;
        }
        let release = cmd::target_dir().join("release");
        Ok(Env {
            watched: root.join("w"),
            unwatched: root.join("u"),
            sockwatch: release.join("sockwatch"),
            workload: release.join("sockwatch-bench"),
            root,
            mounted,
        })
    }

    /// A one-shot workload subcommand; its JSON result.
    fn workload(&self, args: &[&str]) -> anyhow::Result<serde_json::Value> {
        let out = cmd::output(cmd::command(&self.workload).args(args))?;
        serde_json::from_str(out.trim()).with_context(|| format!("workload printed {out:?}"))
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if self.mounted {
            let _ = cmd::output(cmd::command("umount").arg(&self.root));
        }
    }
}

fn is_mountpoint(p: &Path) -> anyhow::Result<bool> {
    let mounts = fs::read_to_string("/proc/self/mounts")?;
    let want = p.display().to_string();
    Ok(mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(want.as_str())))
}

/// A loopback port free at the moment.
fn free_port() -> anyhow::Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

fn progress(started: Instant, what: &str) {
    println!("bench [{:>5.0?}] {what}", started.elapsed());
    let _ = std::io::stdout().flush();
}

pub fn run(args: &BenchArgs) -> anyhow::Result<bool> {
    if !cmd::is_root() {
        bail!("`cargo xtask bench` needs root: eBPF, auditctl and a tmpfs mount");
    }
    let started = Instant::now();
    let plan = Plan::new(args);
    let output = args.output.clone().unwrap_or_else(|| {
        if args.quick {
            cmd::target_dir().join("bench/BENCHMARKS.md")
        } else {
            cmd::workspace_root().join("docs/BENCHMARKS.md")
        }
    });
    setup::setup(false, &[])?;
    Apt::default().ensure_installed(&["bpftrace", "auditd"])?;
    cmd::run(cmd::cargo().args(["build", "--release", "-p", "agent", "-p", "bench"]))?;
    mount_tracefs()?;
    let env = Env::prepare()?;
    let mut rep = report::Report::new(&plan, std::env::args().skip(1).collect(), &env)?;
    progress(started, "machine and tiers recorded");

    let audit = match AuditGuard::prepare() {
        Ok(g) => Some(g),
        Err(e) => {
            rep.note(format!("auditd not compared: {e:#}"));
            None
        }
    };
    rep.overhead = Some(overhead(&env, &plan, audit.as_ref(), &mut rep, started)?);
    drop(audit); // audit off, `-a never,task` kept, our auditd stopped, backlog restored
    rep.load_after_overhead = report::loadavg();

    rep.latency = Some(latency(&env, &plan, started)?);
    rep.throughput = Some(throughput(&env, &plan, started)?);
    rep.footprint = Some(footprint(&env, &plan, started)?);
    rep.finish(started.elapsed());

    let text = rep.render();
    if let Some(dir) = output.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(&output, &text).with_context(|| format!("writing {}", output.display()))?;
    println!("{text}");
    println!(
        "bench: report written to {} in {:.0?}",
        output.display(),
        started.elapsed()
    );
    Ok(true)
}

fn mount_tracefs() -> anyhow::Result<()> {
    let p = Path::new("/sys/kernel/tracing");
    if !is_mountpoint(p)? {
        cmd::run(cmd::command("mount").args(["-t", "tracefs", "none"]).arg(p))?;
    }
    Ok(())
}

/// auditd for the comparison; dropping it leaves auditing off with `-a never,task` (see
/// [`tracer::audit_off`]), stops the auditd this bench started and restores the backlog limit.
pub struct AuditGuard {
    started_pid: Option<i32>,
    backlog: String,
}

impl AuditGuard {
    fn prepare() -> anyhow::Result<AuditGuard> {
        let rules = cmd::output(cmd::command("auditctl").arg("-l"))?;
        let foreign: Vec<&str> = rules
            .lines()
            .filter(|l| *l != "No rules" && *l != "-a never,task" && !l.is_empty())
            .collect();
        if !foreign.is_empty() {
            bail!(
                "this machine has audit rules of its own ({}); the bench does not touch them",
                foreign.join("; ")
            );
        }
        let st = tracer::audit_status()?;
        let backlog = st.get("backlog_limit").cloned().unwrap_or("64".into());
        let mut started_pid = None;
        if st.get("pid").is_none_or(|p| p == "0") {
            cmd::run(&mut cmd::command("auditd"))?;
            let t = Instant::now();
            loop {
                let pid = tracer::audit_status()?
                    .get("pid")
                    .and_then(|p| p.parse::<i32>().ok())
                    .unwrap_or(0);
                if pid != 0 {
                    started_pid = Some(pid);
                    break;
                }
                if t.elapsed() > Duration::from_secs(10) {
                    bail!("auditd did not register with the kernel in 10 s");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let g = AuditGuard {
            started_pid,
            backlog,
        };
        // Debian's default rules (/etc/audit/rules.d/audit.rules) raise the backlog to 8192.
        tracer::auditctl(&["-b", "8192"])?;
        tracer::audit_off()?;
        Ok(g)
    }
}

impl Drop for AuditGuard {
    fn drop(&mut self) {
        let _ = tracer::audit_off();
        let _ = tracer::auditctl(&["-b", &self.backlog]);
        if let Some(pid) = self.started_pid {
            // SAFETY: signals the auditd this bench started.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }
}

/// The workload's `serve` mode: one process through the whole overhead phase.
struct Serve {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Serve {
    fn start(env: &Env) -> anyhow::Result<Serve> {
        let mut child = cmd::command(&env.workload)
            .arg("serve")
            .arg(&env.watched)
            .arg(&env.unwatched)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot start the workload")?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        Ok(Serve {
            child,
            stdin,
            stdout,
        })
    }

    /// Nanoseconds per op of `n` ops: wall clock, the thread's CPU time, and per syscall for
    /// the ops timed step by step.
    fn op(&mut self, op: Op, n: u64) -> anyhow::Result<(f64, f64, Vec<f64>)> {
        writeln!(self.stdin, "op {} {n}", op.arg())?;
        self.stdin.flush()?;
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            bail!("the workload exited during `op {}`", op.arg());
        }
        let v: serde_json::Value = serde_json::from_str(&line)?;
        let get = |k: &str| v[k].as_f64().with_context(|| format!("no {k} in {line:?}"));
        let steps = v["steps"]
            .as_array()
            .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect())
            .unwrap_or_default();
        Ok((get("ns")?, get("cpu_ns")?, steps))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }
}

/// An observer switched on for one window.
enum Observer {
    Off,
    Sockwatch(Agent),
    Bpftrace(Bpftrace),
    Auditd { lost_before: u64 },
}

fn audit_lost() -> anyhow::Result<u64> {
    Ok(tracer::audit_status()?
        .get("lost")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0))
}

impl Observer {
    fn start(v: Variant, env: &Env) -> anyhow::Result<Observer> {
        Ok(match v {
            Variant::Off => Observer::Off,
            Variant::Sockwatch => {
                let events = env.root.join("overhead-events.jsonl");
                let _ = fs::remove_file(&events);
                Observer::Sockwatch(Agent::start(
                    &env.sockwatch,
                    "tracepoint",
                    &events,
                    &env.root.join("overhead-agent.log"),
                    Some(free_port()?),
                    &["--watch".into(), env.watched.display().to_string()],
                )?)
            }
            Variant::Bpftrace => {
                let script = env.root.join("sockwatch.bt");
                let text = tracer::bpftrace_script(&env.watched);
                fs::write(&script, &text)?;
                Observer::Bpftrace(Bpftrace::start(
                    &script,
                    &env.root.join("bpftrace.out"),
                    tracer::bpftrace_probes(&text),
                )?)
            }
            Variant::Auditd => {
                let lost_before = audit_lost()?;
                tracer::audit_on(&env.watched)?;
                Observer::Auditd { lost_before }
            }
        })
    }

    /// Switches it off; checks that it saw the window's `binds` socket binds (a tracer that
    /// saw nothing would make a cheap-looking figure). Returns a problem, if any.
    fn stop(self, binds: u64) -> anyhow::Result<Option<String>> {
        Ok(match self {
            Observer::Off => None,
            Observer::Sockwatch(agent) => {
                let m = settle(&agent, Duration::from_secs(10))?;
                agent.stop()?;
                let got = m.sum("sockwatch_events_total", &[("kind", "bind")]) as u64;
                let lost = m.sum("sockwatch_events_lost_total", &[]) as u64;
                (got != binds || lost != 0)
                    .then(|| format!("sockwatch saw {got} of {binds} binds, {lost} events lost"))
            }
            Observer::Bpftrace(b) => {
                let err = b.stderr();
                let lines = b.stop()?;
                let got = lines.get("bind").copied().unwrap_or(0);
                let lost = lines.get("Lost").copied().unwrap_or(0);
                (got != binds || lost != 0).then(|| {
                    format!(
                        "bpftrace printed {got} of {binds} binds, {lost} `Lost` lines; \
                         its lines by first word: {lines:?}; stderr: {err:?}"
                    )
                })
            }
            Observer::Auditd { lost_before } => {
                tracer::audit_off()?;
                let lost = audit_lost()?.saturating_sub(lost_before);
                (lost != 0).then(|| format!("audit lost {lost} records"))
            }
        })
    }
}

/// Per-op nanoseconds by (observer, op), one value per round, and the notes of the windows.
#[derive(Debug, Default)]
pub struct Overhead {
    pub variants: Vec<Variant>,
    /// Wall-clock ns per op; NaN for a window whose observer did not see everything.
    pub ns: BTreeMap<(Variant, Op), Vec<f64>>,
    /// The workload thread's CPU time per op, likewise.
    pub cpu_ns: BTreeMap<(Variant, Op), Vec<f64>>,
    /// The Go-order life cycle syscall by syscall: per observer, per round, ns per step.
    pub steps: BTreeMap<Variant, Vec<Vec<f64>>>,
    /// sockwatch's kernel programs during one extra pass of every op with the kernel's BPF
    /// run-time statistics on: (program, runs, average ns per run).
    pub programs: Vec<(String, u64, f64)>,
    pub problems: Vec<String>,
    pub rounds: usize,
    pub secs: f64,
}

impl Overhead {
    /// This observer's time over the same round's `off` time, one ratio per round.
    pub fn ratios(&self, v: Variant, op: Op) -> Vec<f64> {
        Self::ratios_of(&self.ns, v, op)
    }

    /// The same, of the workload thread's CPU time.
    pub fn cpu_ratios(&self, v: Variant, op: Op) -> Vec<f64> {
        Self::ratios_of(&self.cpu_ns, v, op)
    }

    fn ratios_of(m: &BTreeMap<(Variant, Op), Vec<f64>>, v: Variant, op: Op) -> Vec<f64> {
        let (Some(on), Some(off)) = (m.get(&(v, op)), m.get(&(Variant::Off, op))) else {
            return Vec::new();
        };
        on.iter().zip(off).map(|(a, b)| a / b).collect()
    }

    /// Median added nanoseconds per op (observer's median − off's median).
    pub fn added_ns(&self, v: Variant, op: Op) -> Option<f64> {
        let on = Spread::of(self.ns.get(&(v, op))?)?;
        let off = Spread::of(self.ns.get(&(Variant::Off, op))?)?;
        Some(on.p50 - off.p50)
    }
}

fn overhead(
    env: &Env,
    plan: &Plan,
    audit: Option<&AuditGuard>,
    rep: &mut report::Report,
    started: Instant,
) -> anyhow::Result<Overhead> {
    let t = Instant::now();
    let mut variants = vec![Variant::Off, Variant::Sockwatch];
    match Observer::start(Variant::Bpftrace, env).and_then(|o| o.stop(0)) {
        Ok(_) => variants.push(Variant::Bpftrace),
        Err(e) => rep.note(format!("bpftrace not compared: {e:#}")),
    }
    if audit.is_some() {
        variants.push(Variant::Auditd);
    }
    let mut serve = Serve::start(env)?;
    // Binds in one window: every socket life cycle, and the n / 10 untimed ones before each batch.
    let binds: u64 = plan
        .ops
        .iter()
        .filter(|(op, _)| matches!(op, Op::SockCycle | Op::SockCycleGo))
        .map(|(_, n)| plan.reps as u64 * (n + n / 10))
        .sum();
    let mut out = Overhead {
        variants: variants.clone(),
        rounds: plan.rounds,
        ..Default::default()
    };
    for round in 0..plan.rounds {
        let mut order = variants.clone();
        order.rotate_left(round % variants.len());
        for v in order {
            let obs = Observer::start(v, env).with_context(|| format!("starting {}", v.name()))?;
            let mut reps: BTreeMap<Op, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
            let mut steps: Vec<Vec<f64>> = Vec::new();
            for _ in 0..plan.reps {
                for &(op, n) in &plan.ops {
                    std::thread::sleep(plan.pause);
                    let (ns, cpu, s) = serve.op(op, n)?;
                    let r = reps.entry(op).or_default();
                    r.0.push(ns);
                    r.1.push(cpu);
                    for (i, x) in s.into_iter().enumerate() {
                        if steps.len() <= i {
                            steps.push(Vec::new());
                        }
                        steps[i].push(x);
                    }
                }
            }
            // A window whose observer missed events would look cheap: it does not count.
            let valid = match obs.stop(binds)? {
                Some(p) => {
                    out.problems
                        .push(format!("round {}, {}: {p}", round + 1, v.name()));
                    false
                }
                None => true,
            };
            let keep = |x: f64| if valid { x } else { f64::NAN };
            for (op, (ns, cpu)) in reps {
                out.ns.entry((v, op)).or_default().push(keep(median(&ns)));
                out.cpu_ns
                    .entry((v, op))
                    .or_default()
                    .push(keep(median(&cpu)));
            }
            out.steps
                .entry(v)
                .or_default()
                .push(steps.iter().map(|s| keep(median(s))).collect());
        }
        progress(
            started,
            &format!("overhead round {}/{} done", round + 1, plan.rounds),
        );
    }
    out.secs = t.elapsed().as_secs_f64();
    match profile_programs(env, plan, &mut serve) {
        Ok(p) => out.programs = p,
        Err(e) => rep.note(format!("per-program BPF run times not measured: {e:#}")),
    }
    Ok(out)
}

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// One more pass of every op under sockwatch with `kernel.bpf_stats_enabled` on (outside the
/// measured rounds: the statistics add two clock reads per program run), then each of the
/// agent's programs with its run count and average run time.
fn profile_programs(
    env: &Env,
    plan: &Plan,
    serve: &mut Serve,
) -> anyhow::Result<Vec<(String, u64, f64)>> {
    let Observer::Sockwatch(agent) = Observer::start(Variant::Sockwatch, env)? else {
        unreachable!("a sockwatch observer")
    };
    let ids = prog_ids(agent.pid())?;
    let before = fs::read_to_string(BPF_STATS)?;
    fs::write(BPF_STATS, "1")?;
    let ran = plan.ops.iter().try_for_each(|&(op, n)| {
        std::thread::sleep(plan.pause);
        serve.op(op, n).map(drop)
    });
    fs::write(BPF_STATS, before.trim())?;
    ran?;
    let shown = cmd::output(cmd::command("bpftool").args(["prog", "show", "--json"]))?;
    agent.stop()?;
    let progs: Vec<serde_json::Value> = serde_json::from_str(&shown)?;
    let mut out: Vec<(String, u64, f64)> = progs
        .iter()
        .filter(|p| p["id"].as_u64().is_some_and(|id| ids.contains(&id)))
        .filter_map(|p| {
            let runs = p["run_cnt"].as_u64()?;
            let ns = p["run_time_ns"].as_u64()?;
            (runs > 0).then(|| {
                (
                    p["name"].as_str().unwrap_or("?").to_string(),
                    runs,
                    ns as f64 / runs as f64,
                )
            })
        })
        .collect();
    out.sort_by(|a, b| (b.1 as f64 * b.2).total_cmp(&(a.1 as f64 * a.2)));
    Ok(out)
}

/// The ids of the BPF programs a process holds (from /proc/PID/fdinfo).
fn prog_ids(pid: u32) -> anyhow::Result<Vec<u64>> {
    let mut ids = Vec::new();
    for e in fs::read_dir(format!("/proc/{pid}/fdinfo"))? {
        let info = fs::read_to_string(e?.path()).unwrap_or_default();
        if let Some(id) = info
            .lines()
            .find_map(|l| l.strip_prefix("prog_id:"))
            .and_then(|v| v.trim().parse().ok())
        {
            ids.push(id);
        }
    }
    if ids.is_empty() {
        bail!("sockwatch (pid {pid}) holds no BPF program descriptors");
    }
    Ok(ids)
}

/// Waits until the agent has delivered every record the kernel submitted (per life-cycle
/// kind) and the counts hold still for 150 ms; the metrics then.
fn settle(agent: &Agent, limit: Duration) -> anyhow::Result<Metrics> {
    let t = Instant::now();
    let mut last: Option<(f64, f64)> = None;
    loop {
        let m = agent.metrics()?;
        let sub: f64 = CYCLE_KINDS
            .iter()
            .map(|k| m.sum("sockwatch_kernel_events_submitted_total", &[("kind", k)]))
            .sum();
        let got: f64 = CYCLE_KINDS
            .iter()
            .map(|k| m.sum("sockwatch_events_total", &[("kind", k)]))
            .sum();
        if sub == got && last == Some((sub, got)) {
            return Ok(m);
        }
        if t.elapsed() > limit {
            return Ok(m);
        }
        last = Some((sub, got));
        std::thread::sleep(Duration::from_millis(150));
    }
}

/// Latency samples, nanoseconds.
#[derive(Debug, Default)]
pub struct Latency {
    pub to_line: Vec<f64>,
    pub line_missed: u64,
    pub to_metrics: Vec<f64>,
    pub metrics_missed: u64,
    /// Agent start-ups with the whole probe table, seconds.
    pub startup: Vec<f64>,
}

fn samples(v: &serde_json::Value) -> anyhow::Result<(Vec<f64>, u64)> {
    let ns = v["ns"]
        .as_array()
        .context("no samples")?
        .iter()
        .filter_map(serde_json::Value::as_f64)
        .collect();
    Ok((ns, v["missed"].as_u64().unwrap_or(0)))
}

fn latency(env: &Env, plan: &Plan, started: Instant) -> anyhow::Result<Latency> {
    let events = env.root.join("latency-events.jsonl");
    fs::write(&events, "")?;
    let addr = free_port()?;
    let agent = Agent::start(
        &env.sockwatch,
        "tracepoint",
        &events,
        &env.root.join("latency-agent.log"),
        Some(addr),
        &["--watch".into(), env.watched.display().to_string()],
    )?;
    let w = env.watched.display().to_string();
    let (to_line, line_missed) = samples(&env.workload(&[
        "latency",
        &w,
        &events.display().to_string(),
        &plan.latency_samples.to_string(),
    ])?)?;
    progress(started, "latency to the events file measured");
    let (to_metrics, metrics_missed) = samples(&env.workload(&[
        "metrics-latency",
        &w,
        &addr.to_string(),
        &plan.metrics_samples.to_string(),
    ])?)?;
    progress(started, "latency to /metrics measured");
    agent.stop()?;
    let startup = startup(env, plan)?;
    progress(started, "agent start-up measured");
    Ok(Latency {
        to_line,
        line_missed,
        to_metrics,
        metrics_missed,
        startup,
    })
}

/// Spawn → running (probes attached, startup scan done), seconds, with the whole probe table:
/// `--probe-mode auto` tries every tier of every hook this kernel offers.
fn startup(env: &Env, plan: &Plan) -> anyhow::Result<Vec<f64>> {
    let events = env.root.join("startup-events.jsonl");
    let mut secs = Vec::new();
    for _ in 0..plan.startup_runs {
        let agent = Agent::start(
            &env.sockwatch,
            "auto",
            &events,
            &env.root.join("startup-agent.log"),
            None,
            &["--watch".into(), env.watched.display().to_string()],
        )?;
        secs.push(agent.startup.as_secs_f64());
        agent.stop()?;
    }
    Ok(secs)
}

/// Follows the events file: lines by kind (`verdict` for verdict lines).
struct Tail {
    file: fs::File,
    partial: String,
    counts: BTreeMap<String, u64>,
}

impl Tail {
    fn open(path: &Path) -> anyhow::Result<Tail> {
        let mut file = fs::File::open(path)?;
        file.seek(std::io::SeekFrom::End(0))?;
        Ok(Tail {
            file,
            partial: String::new(),
            counts: BTreeMap::new(),
        })
    }

    fn read(&mut self) -> anyhow::Result<&BTreeMap<String, u64>> {
        let mut buf = String::new();
        self.file.read_to_string(&mut buf)?;
        self.partial.push_str(&buf);
        let complete = self.partial.rfind('\n').map_or(0, |i| i + 1);
        for line in self.partial[..complete].lines() {
            let kind = if let Some(rest) = line.strip_prefix("{\"kind\":\"") {
                rest.split('"').next().unwrap_or("?")
            } else if line.starts_with("{\"verdict\"") {
                "verdict"
            } else {
                "?"
            };
            *self.counts.entry(kind.to_string()).or_insert(0) += 1;
        }
        self.partial.drain(..complete);
        Ok(&self.counts)
    }
}

/// Counters that must add up, per life-cycle kind: (submitted, lost, delivered, file lines).
type Tally = BTreeMap<&'static str, [u64; 4]>;

fn tally(m: &Metrics, file: &BTreeMap<String, u64>) -> Tally {
    CYCLE_KINDS
        .iter()
        .map(|k| {
            let l = [("kind", *k)];
            (
                *k,
                [
                    m.sum("sockwatch_kernel_events_submitted_total", &l) as u64,
                    m.sum("sockwatch_events_lost_total", &l) as u64,
                    m.sum("sockwatch_events_total", &l) as u64,
                    file.get(*k).copied().unwrap_or(0),
                ],
            )
        })
        .collect()
}

/// One load: life cycles run, events produced (4 per cycle), and what became of them.
#[derive(Clone, Debug, Default)]
pub struct Load {
    /// Workload threads making life cycles.
    pub threads: usize,
    /// Requested events per second (sustained steps) or events in the burst.
    pub target: u64,
    pub cycles: u64,
    pub secs: f64,
    pub produced: u64,
    pub submitted: u64,
    pub lost: u64,
    pub delivered: u64,
    pub lines: u64,
    /// produced = submitted + lost and submitted = delivered = lines, for every kind.
    pub exact: bool,
    pub cpu_secs: f64,
}

impl Load {
    pub fn rate(&self) -> f64 {
        self.produced as f64 / self.secs.max(1e-9)
    }

    fn of(target: u64, cycles: u64, secs: f64, before: &Tally, after: &Tally, cpu: f64) -> Load {
        let mut l = Load {
            target,
            cycles,
            secs,
            produced: cycles * CYCLE_KINDS.len() as u64,
            exact: true,
            cpu_secs: cpu,
            ..Default::default()
        };
        for k in CYCLE_KINDS {
            let d: Vec<u64> = (0..4).map(|i| after[k][i] - before[k][i]).collect();
            l.submitted += d[0];
            l.lost += d[1];
            l.delivered += d[2];
            l.lines += d[3];
            l.exact &= cycles == d[0] + d[1] && d[0] == d[2] && d[2] == d[3];
        }
        l
    }
}

#[derive(Debug, Default)]
pub struct Throughput {
    pub calibration: Load,
    pub steps: Vec<Load>,
    pub bursts: Vec<Load>,
    /// A burst made while the agent was stopped (SIGSTOP): what the ring buffer alone holds.
    pub ring: Load,
    pub verdicts: u64,
}

/// Runs a workload subcommand that makes life cycles; a [`Load`] from the counters around it.
fn measure_load(
    env: &Env,
    agent: &Agent,
    tail: &mut Tail,
    target: u64,
    args: &[&str],
    paused: bool,
) -> anyhow::Result<Load> {
    let before = tally(&settle(agent, Duration::from_secs(10))?, tail.read()?);
    let cpu0 = tracer::cpu_seconds(agent.pid())?;
    let signal = |sig| {
        // SAFETY: signals the agent this bench started.
        unsafe { libc::kill(agent.pid() as i32, sig) };
    };
    if paused {
        signal(libc::SIGSTOP);
    }
    let v = env.workload(args);
    if paused {
        signal(libc::SIGCONT);
    }
    let v = v?;
    let m = settle(agent, Duration::from_secs(30))?;
    let cpu = tracer::cpu_seconds(agent.pid())? - cpu0;
    // The agent flushes its file after each batch it drains: the lines are there once the
    // counters settled; read twice to be sure nothing is in flight.
    std::thread::sleep(Duration::from_millis(50));
    let after = tally(&m, tail.read()?);
    let cycles = v["cycles"].as_u64().context("cycles")?;
    let secs = v["seconds"].as_f64().context("seconds")?;
    let threads = args.last().and_then(|t| t.parse().ok()).unwrap_or(1);
    Ok(Load {
        threads,
        ..Load::of(target, cycles, secs, &before, &after, cpu)
    })
}

fn throughput(env: &Env, plan: &Plan, started: Instant) -> anyhow::Result<Throughput> {
    let events = env.root.join("throughput-events.jsonl");
    fs::write(&events, "")?;
    let dir = env.root.join("f");
    let agent = Agent::start(
        &env.sockwatch,
        "tracepoint",
        &events,
        &env.root.join("throughput-agent.log"),
        Some(free_port()?),
        &["--watch".into(), dir.display().to_string()],
    )?;
    let mut tail = Tail::open(&events)?;
    let d = dir.display().to_string();
    // As many producers as CPUs: one thread alone cannot make the higher rates.
    let threads = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .to_string();
    let mut out = Throughput {
        calibration: measure_load(
            env,
            &agent,
            &mut tail,
            4_000,
            &["rate", &d, "1000", "1", "1"],
            false,
        )?,
        ..Default::default()
    };
    for &rate in &plan.steps {
        let cycles_per_s = (rate / CYCLE_KINDS.len() as u64).to_string();
        let secs = plan.step_secs.to_string();
        let l = measure_load(
            env,
            &agent,
            &mut tail,
            rate,
            &["rate", &d, &cycles_per_s, &secs, &threads],
            false,
        )?;
        progress(
            started,
            &format!(
                "sustained {rate} events/s: {:.0} achieved, {} lost, exact: {}",
                l.rate(),
                l.lost,
                l.exact
            ),
        );
        let stop = l.lost > 0 || l.rate() < 0.9 * rate as f64;
        out.steps.push(l);
        if stop {
            break;
        }
    }
    // Bursts: double until loss, then bisect between the last clean size and the first lossy.
    let burst = |n: u64, tail: &mut Tail, paused: bool| {
        std::thread::sleep(Duration::from_millis(300));
        measure_load(
            env,
            &agent,
            tail,
            n * CYCLE_KINDS.len() as u64,
            &["burst", &d, &n.to_string(), &threads],
            paused,
        )
    };
    // The ring alone: a burst of more records than it holds, with the agent stopped.
    out.ring = burst(plan.burst_start * 16, &mut tail, true)?;
    let mut n = plan.burst_start;
    let mut clean = 0;
    let mut lossy = None;
    while n <= plan.burst_max {
        let l = burst(n, &mut tail, false)?;
        let lost = l.lost > 0;
        out.bursts.push(l);
        if lost {
            lossy = Some(n);
            break;
        }
        clean = n;
        n *= 2;
    }
    if let Some(mut hi) = lossy {
        let mut lo = clean;
        for _ in 0..plan.bisect {
            let mid = (lo + hi) / 2;
            if mid <= lo {
                break;
            }
            let l = burst(mid, &mut tail, false)?;
            if l.lost > 0 {
                hi = mid;
            } else {
                lo = mid;
            }
            out.bursts.push(l);
        }
    }
    progress(started, "bursts measured");
    out.verdicts = tail.read()?.get("verdict").copied().unwrap_or(0);
    agent.stop()?;
    Ok(out)
}

/// The most watches a configuration may name (`config::MAX_WATCHES` in agent/src/config.rs:
/// the metrics' 64 `watch` label values less `none` and `other`): the most series there can be.
const FOOTPRINT_WATCHES: usize = 62;

#[derive(Debug, Default)]
pub struct Footprint {
    pub idle_cpu: f64,
    pub idle_secs: u64,
    pub rss_idle_kib: u64,
    pub sockets: u64,
    pub hold_secs: f64,
    pub live_in_engine: f64,
    pub rss_kib: u64,
    pub hwm_kib: u64,
    pub idle_cpu_loaded: f64,
    pub scrape_ms: Vec<f64>,
    /// The same scrapes before any socket was held.
    pub scrape_idle_ms: Vec<f64>,
    pub series: usize,
    pub bytes: usize,
    pub watches: usize,
}

fn footprint(env: &Env, plan: &Plan, started: Instant) -> anyhow::Result<Footprint> {
    let mut watch_args = Vec::new();
    for i in 0..FOOTPRINT_WATCHES {
        let d = env.root.join(format!("fw{i:02}"));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d)?;
        watch_args.push("--watch".to_string());
        watch_args.push(format!("w{i:02}={}", d.display()));
    }
    let held_dir = env.root.join("fw00");
    let events = env.root.join("footprint-events.jsonl");
    fs::write(&events, "")?;
    let agent = Agent::start(
        &env.sockwatch,
        "tracepoint",
        &events,
        &env.root.join("footprint-agent.log"),
        Some(free_port()?),
        &watch_args,
    )?;
    let pid = agent.pid();
    let mut out = Footprint {
        idle_secs: plan.idle_secs,
        sockets: plan.sockets,
        watches: FOOTPRINT_WATCHES,
        ..Default::default()
    };
    let idle = |secs: u64| -> anyhow::Result<f64> {
        let c0 = tracer::cpu_seconds(pid)?;
        let t = Instant::now();
        std::thread::sleep(Duration::from_secs(secs));
        Ok((tracer::cpu_seconds(pid)? - c0) / t.elapsed().as_secs_f64())
    };
    out.idle_cpu = idle(plan.idle_secs)?;
    out.rss_idle_kib = tracer::status_kib(pid, "VmRSS")?;
    let addr = agent.listen.context("listen")?;
    let scrapes = |n: usize| -> anyhow::Result<(Vec<f64>, Metrics)> {
        let mut ms = Vec::with_capacity(n);
        let mut last = Metrics::default();
        for _ in 0..n {
            let t = Instant::now();
            let body = tracer::scrape(addr)?;
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            last = Metrics::parse(&body);
        }
        Ok((ms, last))
    };
    out.scrape_idle_ms = scrapes(plan.scrapes)?.0;
    progress(started, "idle CPU measured");

    let mut hold = cmd::command(&env.workload)
        .arg("hold")
        .arg(&held_dir)
        .arg(plan.sockets.to_string())
        .arg("5000")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot start the workload")?;
    let mut line = String::new();
    BufReader::new(hold.stdout.take().expect("piped")).read_line(&mut line)?;
    let v: serde_json::Value =
        serde_json::from_str(line.trim()).with_context(|| format!("hold printed {line:?}"))?;
    out.hold_secs = v["seconds"].as_f64().unwrap_or(0.0);
    let t = Instant::now();
    loop {
        let m = agent.metrics()?;
        out.live_in_engine = m.sum("sockwatch_engine_live_sockets", &[]);
        if out.live_in_engine >= plan.sockets as f64 || t.elapsed() > Duration::from_secs(60) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    out.rss_kib = tracer::status_kib(pid, "VmRSS")?;
    out.hwm_kib = tracer::status_kib(pid, "VmHWM")?;
    progress(started, &format!("{} sockets held", plan.sockets));

    let (ms, m) = scrapes(plan.scrapes)?;
    out.scrape_ms = ms;
    out.series = m.series.len();
    out.bytes = m.bytes;
    progress(started, "scrapes timed");
    out.idle_cpu_loaded = idle(plan.idle_secs)?;
    drop(hold.stdin.take());
    hold.wait()?;
    agent.stop()?;
    Ok(out)
}
