//! Phase 1, overhead: one workload process times every operation while the observers are
//! switched on and off around it, in rotated order each round.
use std::{
    collections::BTreeMap,
    fs,
    io::{BufRead as _, BufReader, Write as _},
    path::Path,
    process::{Child, ChildStdin, ChildStdout, Stdio},
    time::Instant,
};

use anyhow::{Context as _, bail};

use super::{
    audit::AuditGuard,
    bpftrace,
    env::Env,
    log::{Notes, progress},
    observer::{Observer, start_sockwatch},
    plan::{Op, Plan, UNRELATED, Variant},
    process,
    stats::{Spread, median},
};
use crate::cmd;

/// The workload's `serve` mode: two processes through the whole overhead phase, one for the
/// operations on watched sockets and one for those that concern none ([`UNRELATED`]). The
/// kernel tracks a process that bound a watched socket, and its children, for the rest of its
/// life (its closes and exit are looked at): the second stands for the node's other
/// workloads, which never did.
struct Workload {
    watched: Serve,
    unrelated: Serve,
}

impl Workload {
    fn start(env: &Env) -> anyhow::Result<Workload> {
        Ok(Workload {
            watched: Serve::start(env, &env.watched, &env.unwatched)?,
            unrelated: Serve::start(env, &env.elsewhere, &env.elsewhere)?,
        })
    }

    fn op(&mut self, op: Op, n: u64) -> anyhow::Result<(f64, f64, Vec<f64>)> {
        match UNRELATED.contains(&op) {
            true => self.unrelated.op(op, n),
            false => self.watched.op(op, n),
        }
    }
}

/// One `serve` process.
struct Serve {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Serve {
    /// `serve WATCHED UNWATCHED`: the directories of its watched and unwatched operations.
    fn start(env: &Env, watched: &Path, unwatched: &Path) -> anyhow::Result<Serve> {
        let mut child = cmd::command(&env.workload)
            .arg("serve")
            .arg(watched)
            .arg(unwatched)
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

/// The syscalls of the workload's Go-order life cycle, in the order it times them.
pub const GO_STEPS: [&str; 10] = [
    "socket",
    "bind",
    "listen",
    "socket",
    "connect",
    "accept",
    "unlink",
    "close (accepted)",
    "close (client)",
    "close (listener)",
];

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
    pub programs: Programs,
    /// The empty programs of the floor during the same pass, named by bpftrace after their
    /// tracepoints (`sys_enter_bind`).
    pub floor_programs: Programs,
    pub problems: Vec<String>,
    pub rounds: usize,
    pub secs: f64,
}

impl Overhead {
    /// The floor's ns per run on the tracepoint `program` runs on, if it was measured.
    pub fn floor_of(&self, program: &str) -> Option<f64> {
        let floor = bpftrace::floor_of(program)?;
        self.floor_programs
            .iter()
            .find(|(name, _, _)| bpftrace::same_program(name, &floor))
            .map(|p| p.2)
    }

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

    /// The p50 over rounds of observer `v`'s ns per call of Go-order step `i`.
    pub fn step_p50(&self, v: Variant, i: usize) -> Option<f64> {
        let rounds = self.steps.get(&v)?;
        let xs: Vec<f64> = rounds.iter().filter_map(|r| r.get(i).copied()).collect();
        Spread::of(&xs).map(|sp| sp.p50)
    }

    /// Keeps one window's batches: each op's median over the repetitions, and each Go-order
    /// step's; NaN for all of them unless `valid`.
    fn record(&mut self, v: Variant, window: Window, valid: bool) {
        let keep = |x: f64| if valid { x } else { f64::NAN };
        for (op, ns) in window.ns {
            self.ns.entry((v, op)).or_default().push(keep(median(&ns)));
        }
        for (op, cpu) in window.cpu_ns {
            self.cpu_ns
                .entry((v, op))
                .or_default()
                .push(keep(median(&cpu)));
        }
        self.steps
            .entry(v)
            .or_default()
            .push(window.steps.iter().map(|s| keep(median(s))).collect());
    }
}

/// One observer window's batches, every repetition: wall-clock and CPU ns per op, by op, and ns
/// per call of each Go-order step.
#[derive(Default)]
struct Window {
    ns: BTreeMap<Op, Vec<f64>>,
    cpu_ns: BTreeMap<Op, Vec<f64>>,
    steps: Vec<Vec<f64>>,
}

/// Runs every batch of the plan `plan.reps` times, each after the plan's pause.
fn run_batches(serve: &mut Workload, plan: &Plan) -> anyhow::Result<Window> {
    let mut w = Window::default();
    for _ in 0..plan.reps {
        for &(op, n) in &plan.ops {
            std::thread::sleep(plan.pause);
            let (ns, cpu, steps) = serve.op(op, n)?;
            w.ns.entry(op).or_default().push(ns);
            w.cpu_ns.entry(op).or_default().push(cpu);
            for (i, x) in steps.into_iter().enumerate() {
                if w.steps.len() <= i {
                    w.steps.push(Vec::new());
                }
                w.steps[i].push(x);
            }
        }
    }
    Ok(w)
}

/// The observers compared: off and sockwatch always, bpftrace and the empty-program floor
/// (bpftrace too) if it starts here, auditd if `audit` is prepared.
fn observers(env: &Env, audit: Option<&AuditGuard>, notes: &mut Notes) -> Vec<Variant> {
    let mut variants = vec![Variant::Off, Variant::Sockwatch];
    match Observer::start(Variant::Bpftrace, env).and_then(|o| o.stop(0)) {
        Ok(_) => variants.push(Variant::Bpftrace),
        Err(e) => notes.push(format!("bpftrace not compared: {e:#}")),
    }
    match Observer::start(Variant::Floor, env).and_then(|o| o.stop(0)) {
        Ok(_) => variants.push(Variant::Floor),
        Err(e) => notes.push(format!("the empty-program floor not measured: {e:#}")),
    }
    if audit.is_some() {
        variants.push(Variant::Auditd);
    }
    variants
}

/// Binds in one window: every socket life cycle, and the n / 10 untimed ones before each batch.
fn binds_per_window(plan: &Plan) -> u64 {
    plan.ops
        .iter()
        .filter(|(op, _)| matches!(op, Op::SockCycle | Op::SockCycleGo))
        .map(|(_, n)| plan.reps as u64 * (n + n / 10))
        .sum()
}

pub fn overhead(
    env: &Env,
    plan: &Plan,
    audit: Option<&AuditGuard>,
    notes: &mut Notes,
    started: Instant,
) -> anyhow::Result<Overhead> {
    let t = Instant::now();
    let variants = observers(env, audit, notes);
    let mut serve = Workload::start(env)?;
    let binds = binds_per_window(plan);
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
            let window = run_batches(&mut serve, plan)?;
            // A window whose observer missed events would look cheap: it does not count.
            let problem = obs.stop(binds)?;
            if let Some(p) = &problem {
                out.problems
                    .push(format!("round {}, {}: {p}", round + 1, v.name()));
            }
            out.record(v, window, problem.is_none());
        }
        progress(
            started,
            &format!("overhead round {}/{} done", round + 1, plan.rounds),
        );
    }
    out.secs = t.elapsed().as_secs_f64();
    match profile_programs(env, plan, &mut serve) {
        Ok(p) => out.programs = p,
        Err(e) => notes.push(format!("per-program BPF run times not measured: {e:#}")),
    }
    if variants.contains(&Variant::Floor) {
        match profile_floor(env, plan, &mut serve) {
            Ok(p) => out.floor_programs = p,
            Err(e) => notes.push(format!("per-program floor not measured: {e:#}")),
        }
    }
    Ok(out)
}

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// One more pass of every op under sockwatch with `kernel.bpf_stats_enabled` on (outside the
/// measured rounds: the statistics add two clock reads per program run), then each of the
/// agent's programs with its run count and average run time.
fn profile_programs(env: &Env, plan: &Plan, serve: &mut Workload) -> anyhow::Result<Programs> {
    let agent = start_sockwatch(env)?;
    let ran = profile_pass(agent.pid(), plan, serve);
    agent.stop()?;
    ran
}

/// The same pass under the empty programs: each one's run time is the floor of the agent's
/// program on its tracepoint.
fn profile_floor(env: &Env, plan: &Plan, serve: &mut Workload) -> anyhow::Result<Programs> {
    let Observer::Floor(b) = Observer::start(Variant::Floor, env)? else {
        bail!("the floor observer is not bpftrace");
    };
    let ran = profile_pass(b.pid(), plan, serve);
    if let Err(e) = b.stop() {
        eprintln!("bench: the floor's bpftrace was killed: {e:#}");
    }
    ran
}

/// (program, runs, average ns per run), costliest in total first.
pub type Programs = Vec<(String, u64, f64)>;

/// Every op once with the statistics on; then the programs `pid` holds that ran.
fn profile_pass(pid: u32, plan: &Plan, serve: &mut Workload) -> anyhow::Result<Programs> {
    let ids = process::prog_ids(pid)?;
    let before = fs::read_to_string(BPF_STATS)?;
    fs::write(BPF_STATS, "1")?;
    let ran = plan.ops.iter().try_for_each(|&(op, n)| {
        std::thread::sleep(plan.pause);
        serve.op(op, n).map(drop)
    });
    fs::write(BPF_STATS, before.trim())?;
    ran?;
    let shown = cmd::output(cmd::command("bpftool").args(["prog", "show", "--json"]))?;
    let progs: Vec<serde_json::Value> = serde_json::from_str(&shown)?;
    let mut out: Programs = progs
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
