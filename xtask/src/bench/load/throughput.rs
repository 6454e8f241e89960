//! The throughput phase: paced steps, a perf profile of the agent through one more 50,000
//! events/s step, the ring buffer alone, and bursts.
use std::{
    collections::BTreeMap,
    fs,
    io::{Read as _, Seek as _},
    time::{Duration, Instant},
};

use anyhow::Context as _;

use super::{Load, Profile, Recording};
use crate::bench::{
    Plan,
    agent::{self, Agent, CYCLE_KINDS, Metrics},
    env::Env,
    progress,
};

/// Counters that must add up, per life-cycle kind: submitted, lost, delivered, file lines.
type Tally = BTreeMap<&'static str, [u64; 4]>;

fn tally(m: &Metrics, lines: &BTreeMap<String, u64>) -> Tally {
    let of = |k: &'static str| {
        let sum = |name| m.sum(name, &[("kind", k)]) as u64;
        let counted = [
            "sockwatch_kernel_events_submitted_total",
            "sockwatch_events_lost_total",
            "sockwatch_events_total",
        ];
        let [s, l, d] = counted.map(sum);
        (k, [s, l, d, lines.get(k).copied().unwrap_or(0)])
    };
    CYCLE_KINDS.into_iter().map(of).collect()
}

#[derive(Debug)]
pub struct Throughput {
    pub calibration: Load,
    pub steps: Vec<Load>,
    pub bursts: Vec<Load>,
    /// A burst made while the agent was stopped (SIGSTOP): what the ring buffer alone holds.
    pub ring: Load,
    pub verdicts: u64,
    /// The perf profile through one more 50,000 events/s step, and that step; or why not.
    pub profile: Result<(Profile, Load), String>,
}

impl Throughput {
    pub fn at_50k(&self) -> Option<&Load> {
        self.steps.iter().find(|l| l.target == 50_000)
    }

    /// The highest sustained step that reached its rate with no loss.
    pub fn highest_lossless(&self) -> Option<&Load> {
        let clean = |l: &&Load| l.lost == 0 && l.exact && l.rate() >= 0.95 * l.target as f64;
        self.steps.iter().filter(clean).max_by_key(|l| l.target)
    }
}

/// The throughput phase's agent, its events file followed (lines by kind, `verdict` for
/// verdicts), and where and with how many threads the workload makes life cycles.
struct Meter<'a> {
    env: &'a Env,
    agent: Agent,
    file: fs::File,
    partial: String,
    lines: BTreeMap<String, u64>,
    dir: String,
    threads: String,
}

impl<'a> Meter<'a> {
    /// An agent watching a directory of its own, its events file followed from its end.
    fn new(env: &'a Env) -> anyhow::Result<Meter<'a>> {
        let dir = env.root.join("f").display().to_string();
        let (agent, events) = env.start_agent(
            "throughput",
            "tracepoint",
            true,
            &["--watch".into(), dir.clone()],
        )?;
        let mut file = fs::File::open(&events)?;
        file.seek(std::io::SeekFrom::End(0))?;
        // As many producers as CPUs: one thread alone cannot make the higher rates.
        let threads = std::thread::available_parallelism()
            .map_or(2, std::num::NonZero::get)
            .to_string();
        Ok(Meter {
            env,
            agent,
            file,
            partial: String::new(),
            lines: BTreeMap::new(),
            dir,
            threads,
        })
    }

    fn read_lines(&mut self) -> anyhow::Result<&BTreeMap<String, u64>> {
        self.file.read_to_string(&mut self.partial)?;
        let complete = self.partial.rfind('\n').map_or(0, |i| i + 1);
        for line in self.partial[..complete].lines() {
            let kind = match line.strip_prefix("{\"kind\":\"") {
                Some(rest) => rest.split('"').next().unwrap_or("?"),
                None if line.starts_with("{\"verdict\"") => "verdict",
                None => "?",
            };
            *self.lines.entry(kind.to_string()).or_insert(0) += 1;
        }
        self.partial.drain(..complete);
        Ok(&self.lines)
    }

    /// Runs `workload ARGS` making life cycles (with the agent stopped throughout if
    /// `paused`); a [`Load`] from the counters around it.
    fn load(&mut self, target: u64, args: &[&str], paused: bool) -> anyhow::Result<Load> {
        let pid = self.agent.pid();
        let before = tally(
            &self.agent.settle(Duration::from_secs(10))?,
            self.read_lines()?,
        );
        let cpu0 = agent::cpu_seconds(pid)?;
        if paused {
            agent::signal(pid, libc::SIGSTOP);
        }
        let v = self.env.workload(args);
        if paused {
            agent::signal(pid, libc::SIGCONT);
        }
        let v = v?;
        let m = self.agent.settle(Duration::from_secs(30))?;
        let cpu_secs = agent::cpu_seconds(pid)? - cpu0;
        // The agent flushes its file after each batch it drains: the lines are there once the
        // counters settled; a pause makes sure nothing is in flight.
        std::thread::sleep(Duration::from_millis(50));
        let after = tally(&m, self.read_lines()?);
        let cycles = v["cycles"].as_u64().context("cycles")?;
        let mut l = Load {
            threads: args.last().and_then(|t| t.parse().ok()).unwrap_or(1),
            target,
            cycles,
            secs: v["seconds"].as_f64().context("seconds")?,
            produced: cycles * CYCLE_KINDS.len() as u64,
            exact: true,
            cpu_secs,
            ..Load::default()
        };
        for k in CYCLE_KINDS {
            let [s, lost, d, lines] = [0, 1, 2, 3].map(|i| after[k][i] - before[k][i]);
            (l.submitted, l.lost, l.delivered) = (l.submitted + s, l.lost + lost, l.delivered + d);
            l.exact &= cycles == s + lost && s == d && d == lines;
        }
        Ok(l)
    }

    /// `rate` events a second for `secs` seconds, from every producer thread.
    fn sustained(&mut self, rate: u64, secs: f64) -> anyhow::Result<Load> {
        let (dir, threads) = (self.dir.clone(), self.threads.clone());
        let per_s = (rate / CYCLE_KINDS.len() as u64).to_string();
        self.load(
            rate,
            &["rate", &dir, &per_s, &secs.to_string(), &threads],
            false,
        )
    }

    /// `cycles` life cycles back to back from every producer thread, after a 300 ms rest.
    fn burst(&mut self, cycles: u64, paused: bool) -> anyhow::Result<Load> {
        std::thread::sleep(Duration::from_millis(300));
        let (dir, threads) = (self.dir.clone(), self.threads.clone());
        let args = ["burst", &dir, &cycles.to_string(), &threads];
        self.load(cycles * CYCLE_KINDS.len() as u64, &args, paused)
    }
}

pub fn throughput(env: &Env, plan: &Plan, started: Instant) -> anyhow::Result<Throughput> {
    let mut m = Meter::new(env)?;
    // Calibration: 1,000 life cycles a second for a second from one thread.
    let dir = m.dir.clone();
    let calibration = m.load(4_000, &["rate", &dir, "1000", "1", "1"], false)?;
    let steps = steps(&mut m, plan, started)?;
    let profile = (|| {
        let recording = Recording::start(m.agent.pid(), &env.root)?;
        let load = m.sustained(50_000, plan.step_secs);
        Ok::<_, anyhow::Error>((recording.finish()?, load?))
    })()
    .map_err(|e| format!("{e:#}"));
    progress(started, "agent profiled");
    // The ring alone: a burst of more records than it holds, with the agent stopped.
    let ring = m.burst(plan.burst_start * 16, true)?;
    let bursts = bursts(&mut m, plan)?;
    progress(started, "bursts measured");
    let verdicts = m.read_lines()?.get("verdict").copied().unwrap_or(0);
    m.agent.stop()?;
    Ok(Throughput {
        calibration,
        steps,
        bursts,
        ring,
        verdicts,
        profile,
    })
}

/// Sustained steps, up to the first that loses events or falls short of its rate by a tenth.
fn steps(m: &mut Meter, plan: &Plan, started: Instant) -> anyhow::Result<Vec<Load>> {
    let mut steps = Vec::new();
    for &rate in &plan.steps {
        let l = m.sustained(rate, plan.step_secs)?;
        let (achieved, lost, exact) = (l.rate(), l.lost, l.exact);
        progress(
            started,
            &format!(
                "sustained {rate} events/s: {achieved:.0} achieved, {lost} lost, exact: {exact}"
            ),
        );
        steps.push(l);
        if lost > 0 || achieved < 0.9 * rate as f64 {
            break;
        }
    }
    Ok(steps)
}

/// Bursts: double until loss, then bisect between the last clean size and the first lossy.
fn bursts(m: &mut Meter, plan: &Plan) -> anyhow::Result<Vec<Load>> {
    let mut bursts = Vec::new();
    let (mut clean, mut n) = (0, plan.burst_start);
    while n <= plan.burst_max {
        let l = m.burst(n, false)?;
        let lost = l.lost > 0;
        bursts.push(l);
        if lost {
            break;
        }
        (clean, n) = (n, n * 2);
    }
    if n <= plan.burst_max {
        let (mut lo, mut hi) = (clean, n);
        for _ in 0..plan.bisect {
            let mid = (lo + hi) / 2;
            if mid <= lo {
                break;
            }
            let l = m.burst(mid, false)?;
            *(if l.lost > 0 { &mut hi } else { &mut lo }) = mid;
            bursts.push(l);
        }
    }
    Ok(bursts)
}
