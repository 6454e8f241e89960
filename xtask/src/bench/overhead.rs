//! Phase 1, overhead: three workload processes time every operation while the observers are
//! switched on and off around them, in rotated order each round; then three more passes with the
//! kernel's BPF run-time statistics on, under sockwatch and under the floor.
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
    Op, Plan, Runner, Spread, Variant, agent,
    env::Env,
    median, note,
    observers::{self, Bpftrace, Observer},
    progress,
};
use crate::cmd;

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

/// One `sockwatch-bench serve WATCHED UNWATCHED` process, answering `op KIND N` lines.
struct Serve {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Serve {
    fn start(env: &Env, watched: &Path, unwatched: &Path) -> anyhow::Result<Serve> {
        let mut child = cmd::command(&env.workload)
            .arg("serve")
            .args([watched, unwatched])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("cannot start the workload")?;
        let stdin = child.stdin.take().context("stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("stdout")?);
        Ok(Serve {
            child,
            stdin,
            stdout,
        })
    }

    /// Wall-clock and thread CPU nanoseconds per op of `n` ops, and per syscall for the ops
    /// timed step by step.
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
            .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect());
        Ok((get("ns")?, get("cpu_ns")?, steps.unwrap_or_default()))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "quit");
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }
}

/// The phase's workload processes, one per [`Runner`].
struct Workload {
    watched: Serve,
    unrelated: Serve,
    cycles: Serve,
}

impl Workload {
    fn op(&mut self, op: Op, n: u64) -> anyhow::Result<(f64, f64, Vec<f64>)> {
        match op.runner() {
            Runner::Watched => self.watched.op(op, n),
            Runner::Unrelated => self.unrelated.op(op, n),
            Runner::Cycles => self.cycles.op(op, n),
        }
    }
}

/// (program, runs, average ns per run), costliest in total first.
pub type Programs = Vec<(String, u64, f64)>;

/// The ns per run of the empty program, among `floor`, on the tracepoint `program` runs on.
fn floor_in(floor: &Programs, program: &str) -> Option<f64> {
    let on = observers::floor_of(program)?;
    floor
        .iter()
        .find(|p| observers::same_program(&p.0, &on))
        .map(|p| p.2)
}

/// Per-op nanoseconds by (observer, op), one value per round.
#[derive(Debug, Default)]
pub struct Overhead {
    pub variants: Vec<Variant>,
    /// Wall-clock ns per op; NaN for a window whose observer did not see everything.
    pub ns: BTreeMap<(Variant, Op), Vec<f64>>,
    /// The workload thread's CPU time per op, likewise.
    pub cpu_ns: BTreeMap<(Variant, Op), Vec<f64>>,
    /// The Go-order life cycle: per observer, per round, ns per call of each step.
    pub steps: BTreeMap<Variant, Vec<Vec<f64>>>,
    /// sockwatch's programs during the pass with BPF run-time statistics on.
    pub programs: Programs,
    /// The floor's empty programs during the same pass, named after their tracepoints.
    pub floor_programs: Programs,
    /// The same two, through a pass of only the operations that concern no watched socket
    /// (issue 38's cold paths).
    pub cold_programs: Programs,
    pub cold_floor: Programs,
    pub problems: Vec<String>,
    pub rounds: usize,
    pub secs: f64,
}

impl Overhead {
    /// The floor's ns per run on the tracepoint `program` runs on, if it was measured.
    pub fn floor_of(&self, program: &str) -> Option<f64> {
        floor_in(&self.floor_programs, program)
    }

    /// The same, in the cold-path pass.
    pub fn cold_floor_of(&self, program: &str) -> Option<f64> {
        floor_in(&self.cold_floor, program)
    }

    /// Observer `v`'s wall-clock (or, with `cpu`, thread CPU) time over the same round's `off`.
    pub fn ratios(&self, v: Variant, op: Op, cpu: bool) -> Vec<f64> {
        let m = if cpu { &self.cpu_ns } else { &self.ns };
        let (Some(on), Some(off)) = (m.get(&(v, op)), m.get(&(Variant::Off, op))) else {
            return Vec::new();
        };
        on.iter().zip(off).map(|(a, b)| a / b).collect()
    }

    /// Per round, what `v` adds to `op` beyond the floor, in points of `off`'s time.
    pub fn points_above_floor(&self, v: Variant, op: Op) -> Vec<f64> {
        let of = |v| self.ns.get(&(v, op)).map_or(&[][..], Vec::as_slice);
        let (on, floor, off) = (of(v), of(Variant::Floor), of(Variant::Off));
        let rounds = on.iter().zip(floor).zip(off);
        rounds.map(|((a, f), o)| (a - f) / o * 100.0).collect()
    }

    /// The p50 over rounds of `v`'s ns per op.
    pub fn p50(&self, v: Variant, op: Op) -> Option<f64> {
        Some(Spread::of(self.ns.get(&(v, op))?)?.p50)
    }

    /// Median added nanoseconds per op (observer's p50 − off's p50).
    pub fn added_ns(&self, v: Variant, op: Op) -> Option<f64> {
        Some(self.p50(v, op)? - self.p50(Variant::Off, op)?)
    }

    /// The p50 over rounds of `v`'s ns per call of Go-order step `i`.
    pub fn step_p50(&self, v: Variant, i: usize) -> Option<f64> {
        let xs: Vec<f64> = self
            .steps
            .get(&v)?
            .iter()
            .filter_map(|r| r.get(i).copied())
            .collect();
        Some(Spread::of(&xs)?.p50)
    }

    /// Keeps one window's repetitions as their medians, NaN unless `valid`.
    fn record(&mut self, v: Variant, w: &Window, valid: bool) {
        let keep = |xs: &Vec<f64>| if valid { median(xs) } else { f64::NAN };
        for (op, reps) in &w.ns {
            self.ns.entry((v, *op)).or_default().push(keep(&reps.0));
            self.cpu_ns.entry((v, *op)).or_default().push(keep(&reps.1));
        }
        self.steps
            .entry(v)
            .or_default()
            .push(w.steps.iter().map(keep).collect());
    }
}

/// One window's repetitions: (wall-clock, CPU) ns per op by op, and ns per Go-order step.
#[derive(Default)]
struct Window {
    ns: BTreeMap<Op, (Vec<f64>, Vec<f64>)>,
    steps: Vec<Vec<f64>>,
}

/// Every batch of the plan, `plan.reps` times, each after the plan's pause.
fn run_batches(w: &mut Workload, plan: &Plan) -> anyhow::Result<Window> {
    let mut out = Window::default();
    for _ in 0..plan.reps {
        for &(op, n) in &plan.ops {
            std::thread::sleep(plan.pause);
            let (ns, cpu, steps) = w.op(op, n)?;
            let e = out.ns.entry(op).or_default();
            e.0.push(ns);
            e.1.push(cpu);
            out.steps
                .resize(out.steps.len().max(steps.len()), Vec::new());
            steps
                .into_iter()
                .zip(&mut out.steps)
                .for_each(|(x, s)| s.push(x));
        }
    }
    Ok(out)
}

pub fn overhead(
    env: &Env,
    plan: &Plan,
    audit: bool,
    notes: &mut Vec<String>,
    started: Instant,
) -> anyhow::Result<Overhead> {
    let t = Instant::now();
    // off and sockwatch always; bpftrace and the floor if they start here; auditd if prepared.
    let mut variants = vec![Variant::Off, Variant::Sockwatch, Variant::SockwatchDefault];
    for (v, what) in [
        (Variant::Bpftrace, "bpftrace not compared"),
        (Variant::Floor, "the empty-program floor not measured"),
    ] {
        match Observer::start(v, env).and_then(|o| o.stop(0)) {
            Ok(_) => variants.push(v),
            Err(e) => note(notes, format!("{what}: {e:#}")),
        }
    }
    if audit {
        variants.push(Variant::Auditd);
    }
    let mut w = Workload {
        watched: Serve::start(env, &env.watched, &env.unwatched)?,
        unrelated: Serve::start(env, &env.elsewhere, &env.elsewhere)?,
        cycles: Serve::start(env, &env.elsewhere, &env.elsewhere)?,
    };
    // Binds in one window: every watched life cycle, and the n / 10 untimed before each batch.
    let cycles = plan
        .ops
        .iter()
        .filter(|(op, _)| matches!(op, Op::SockCycle | Op::SockCycleGo));
    let binds = cycles.map(|(_, n)| plan.reps as u64 * (n + n / 10)).sum();
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
            let window = run_batches(&mut w, plan)?;
            // A window whose observer missed events would look cheap: it does not count.
            let problem = obs.stop(binds)?;
            if let Some(p) = &problem {
                out.problems
                    .push(format!("round {}, {}: {p}", round + 1, v.name()));
            }
            out.record(v, &window, problem.is_none());
        }
        progress(
            started,
            &format!("overhead round {}/{} done", round + 1, plan.rounds),
        );
    }
    out.secs = t.elapsed().as_secs_f64();
    let floor = variants.contains(&Variant::Floor);
    let every: Vec<(Op, u64)> = plan.ops.clone();
    let cold: Vec<(Op, u64)> = every
        .iter()
        .copied()
        .filter(|(op, _)| op.unrelated())
        .collect();
    (out.programs, out.floor_programs) = program_pass(env, plan, &every, floor, &mut w, notes)?;
    (out.cold_programs, out.cold_floor) = program_pass(env, plan, &cold, floor, &mut w, notes)?;
    Ok(out)
}

/// sockwatch's programs, then the floor's empty ones (when `floor`), each on a fresh start
/// through one pass of `ops`; a pass that fails is a note.
fn program_pass(
    env: &Env,
    plan: &Plan,
    ops: &[(Op, u64)],
    floor: bool,
    w: &mut Workload,
    notes: &mut Vec<String>,
) -> anyhow::Result<(Programs, Programs)> {
    let agent = observers::start_sockwatch(env)?;
    let programs = profile_pass(agent.pid(), plan, ops, w).unwrap_or_else(|e| {
        note(
            notes,
            format!("per-program BPF run times not measured: {e:#}"),
        );
        Programs::new()
    });
    agent.stop()?;
    if !floor {
        return Ok((programs, Programs::new()));
    }
    let ran = Bpftrace::start(env, "floor", &observers::floor_script()).and_then(|b| {
        let p = profile_pass(b.pid(), plan, ops, w);
        b.stop_floor();
        p
    });
    let floor = ran.unwrap_or_else(|e| {
        note(notes, format!("per-program floor not measured: {e:#}"));
        Programs::new()
    });
    Ok((programs, floor))
}

/// Passes whose per-program figures are reduced to their median: `run_time_ns` counts in
/// full an interrupt or a stall of this VM's vCPU inside a run, and one pass of the cold
/// operations runs bind only a few thousand times, so one stall moved a program's mean by
/// a third between runs.
const PROFILE_PASSES: usize = 3;

/// Each of `ops`, [`PROFILE_PASSES`] times, with `kernel.bpf_stats_enabled` on (outside the
/// measured rounds: the statistics add two clock reads per run, and they are off while
/// `bpftool` reads them, whose own syscalls the programs would count); then, per program
/// `pid` holds that ran, its median pass.
fn profile_pass(
    pid: u32,
    plan: &Plan,
    ops: &[(Op, u64)],
    w: &mut Workload,
) -> anyhow::Result<Programs> {
    const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";
    let ids = agent::prog_ids(pid)?;
    let before = fs::read_to_string(BPF_STATS)?;
    let mut totals = vec![prog_stats(&ids)?];
    for _ in 0..PROFILE_PASSES {
        fs::write(BPF_STATS, "1")?;
        let ran = ops.iter().try_for_each(|&(op, n)| {
            std::thread::sleep(plan.pause);
            w.op(op, n).map(drop)
        });
        fs::write(BPF_STATS, before.trim())?;
        ran?;
        totals.push(prog_stats(&ids)?);
    }
    Ok(median_passes(&totals))
}

/// (runs, run time in ns) so far of each program in `ids`, by name.
type ProgStats = BTreeMap<String, (u64, u64)>;

fn prog_stats(ids: &[u64]) -> anyhow::Result<ProgStats> {
    let shown = cmd::output(cmd::command("bpftool").args(["prog", "show", "--json"]))?;
    let progs: Vec<serde_json::Value> = serde_json::from_str(&shown)?;
    Ok(progs
        .iter()
        .filter(|p| p["id"].as_u64().is_some_and(|id| ids.contains(&id)))
        .filter_map(|p| {
            let name = p["name"].as_str().unwrap_or("?").to_string();
            Some((name, (p["run_cnt"].as_u64()?, p["run_time_ns"].as_u64()?)))
        })
        .collect())
}

/// Per program that ran, from the statistics read before and after each pass: its runs in
/// the pass of median ns per run, and that median; costliest in total first.
fn median_passes(totals: &[ProgStats]) -> Programs {
    let Some(last) = totals.last() else {
        return Programs::new();
    };
    let mut out: Programs = last
        .keys()
        .filter_map(|name| {
            let mut passes: Vec<(f64, u64)> = totals
                .windows(2)
                .filter_map(|pair| {
                    let [before, after] = pair else { return None };
                    let (r0, t0) = before.get(name).copied().unwrap_or_default();
                    let (r1, t1) = *after.get(name)?;
                    let runs = r1.checked_sub(r0).filter(|&r| r > 0)?;
                    Some((t1.saturating_sub(t0) as f64 / runs as f64, runs))
                })
                .collect();
            passes.sort_by(|a, b| a.0.total_cmp(&b.0));
            let (ns, runs) = *passes.get(passes.len().checked_sub(1)? / 2)?;
            Some((name.clone(), runs, ns))
        })
        .collect();
    out.sort_by(|a, b| (b.1 as f64 * b.2).total_cmp(&(a.1 as f64 * a.2)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(entries: &[(&str, u64, u64)]) -> ProgStats {
        entries
            .iter()
            .map(|&(name, runs, ns)| (name.to_string(), (runs, ns)))
            .collect()
    }

    /// A pass with a stall in one program's runs moves its mean; the median pass does not.
    /// A program that ran in no pass is left out; one that ran in two is the lower of them.
    #[test]
    fn each_program_is_its_median_pass() {
        let totals = [
            stats(&[("bind_tp_ret", 0, 0), ("open_tp", 0, 0), ("idle", 5, 500)]),
            stats(&[
                ("bind_tp_ret", 100, 100_000),
                ("open_tp", 0, 0),
                ("idle", 5, 500),
            ]),
            stats(&[
                ("bind_tp_ret", 200, 500_000),
                ("open_tp", 10, 200),
                ("idle", 5, 500),
            ]),
            stats(&[
                ("bind_tp_ret", 300, 610_000),
                ("open_tp", 20, 300),
                ("idle", 5, 500),
            ]),
        ];
        assert_eq!(
            median_passes(&totals),
            vec![
                ("bind_tp_ret".to_string(), 100, 1_100.0),
                ("open_tp".to_string(), 10, 10.0)
            ]
        );
        assert!(median_passes(&totals[..1]).is_empty());
    }
}
