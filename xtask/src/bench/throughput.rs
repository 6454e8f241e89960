//! Phase 3, throughput and loss: paced socket life cycles stepped up until loss, then bursts,
//! with produced = submitted + lost and submitted = delivered = lines checked per event kind.
use std::{
    collections::BTreeMap,
    fs,
    io::{Read as _, Seek as _},
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Context as _;

use super::{
    agent::{Agent, Metrics},
    env::Env,
    log::progress,
    plan::{CYCLE_KINDS, Plan},
    process,
    profile::{Profile, Recording},
};

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

    /// Agent CPU per event delivered, microseconds; none when nothing was delivered.
    pub fn cpu_us_per_event(&self) -> Option<f64> {
        (self.delivered > 0).then(|| self.cpu_secs / self.delivered as f64 * 1e6)
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

#[derive(Debug)]
pub struct Throughput {
    pub calibration: Load,
    pub steps: Vec<Load>,
    pub bursts: Vec<Load>,
    /// A burst made while the agent was stopped (SIGSTOP): what the ring buffer alone holds.
    pub ring: Load,
    pub verdicts: u64,
    /// Where the agent's CPU went through one more step at 50,000 events/s, and that step
    /// (under perf); why not, when perf could not profile it.
    pub profile: Result<(Profile, Load), String>,
}

impl Throughput {
    /// The sustained step at 50,000 events/s, if the phase got that far.
    pub fn at_50k(&self) -> Option<&Load> {
        self.steps.iter().find(|l| l.target == 50_000)
    }

    /// The highest sustained step that reached its rate with no loss.
    pub fn highest_lossless(&self) -> Option<&Load> {
        self.steps
            .iter()
            .filter(|l| l.lost == 0 && l.exact && l.rate() >= 0.95 * l.target as f64)
            .max_by_key(|l| l.target)
    }
}

/// The throughput phase's agent, its events file followed, and where and with how many threads
/// the workload makes life cycles.
struct Meter<'a> {
    env: &'a Env,
    agent: Agent,
    tail: Tail,
    dir: String,
    threads: String,
}

impl Meter<'_> {
    /// Runs a workload subcommand that makes life cycles (with the agent stopped throughout if
    /// `paused`); a [`Load`] from the counters around it.
    fn load(&mut self, target: u64, args: &[&str], paused: bool) -> anyhow::Result<Load> {
        let agent = &self.agent;
        let before = tally(&agent.settle(Duration::from_secs(10))?, self.tail.read()?);
        let cpu0 = process::cpu_seconds(agent.pid())?;
        if paused {
            process::signal(agent.pid(), libc::SIGSTOP);
        }
        let v = self.env.workload(args);
        if paused {
            process::signal(agent.pid(), libc::SIGCONT);
        }
        let v = v?;
        let m = agent.settle(Duration::from_secs(30))?;
        let cpu = process::cpu_seconds(agent.pid())? - cpu0;
        // The agent flushes its file after each batch it drains: the lines are there once the
        // counters settled; read twice to be sure nothing is in flight.
        std::thread::sleep(Duration::from_millis(50));
        let after = tally(&m, self.tail.read()?);
        let cycles = v["cycles"].as_u64().context("cycles")?;
        let secs = v["seconds"].as_f64().context("seconds")?;
        let threads = args.last().and_then(|t| t.parse().ok()).unwrap_or(1);
        Ok(Load {
            threads,
            ..Load::of(target, cycles, secs, &before, &after, cpu)
        })
    }

    /// 1,000 life cycles a second for a second from one thread: produced against counted.
    fn calibrate(&mut self) -> anyhow::Result<Load> {
        let dir = self.dir.clone();
        self.load(4_000, &["rate", &dir, "1000", "1", "1"], false)
    }

    /// `rate` events a second for `secs` seconds, from every producer thread.
    fn sustained(&mut self, rate: u64, secs: f64) -> anyhow::Result<Load> {
        let (dir, threads) = (self.dir.clone(), self.threads.clone());
        let cycles_per_s = (rate / CYCLE_KINDS.len() as u64).to_string();
        let secs = secs.to_string();
        let args = ["rate", &dir, &cycles_per_s, &secs, &threads];
        self.load(rate, &args, false)
    }

    /// `cycles` life cycles back to back from every producer thread, after a 300 ms rest.
    fn burst(&mut self, cycles: u64, paused: bool) -> anyhow::Result<Load> {
        std::thread::sleep(Duration::from_millis(300));
        let (dir, threads) = (self.dir.clone(), self.threads.clone());
        let args = ["burst", &dir, &cycles.to_string(), &threads];
        self.load(cycles * CYCLE_KINDS.len() as u64, &args, paused)
    }
}

/// The sustained steps, up to the first that loses events or falls short of its rate by more
/// than a tenth.
fn steps(meter: &mut Meter, plan: &Plan, started: Instant) -> anyhow::Result<Vec<Load>> {
    let mut out = Vec::new();
    for &rate in &plan.steps {
        let l = meter.sustained(rate, plan.step_secs)?;
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
        out.push(l);
        if stop {
            break;
        }
    }
    Ok(out)
}

/// Bursts: double until loss, then bisect between the last clean size and the first lossy.
fn bursts(meter: &mut Meter, plan: &Plan) -> anyhow::Result<Vec<Load>> {
    let mut out = Vec::new();
    let mut n = plan.burst_start;
    let mut clean = 0;
    let mut lossy = None;
    while n <= plan.burst_max {
        let l = meter.burst(n, false)?;
        let lost = l.lost > 0;
        out.push(l);
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
            let l = meter.burst(mid, false)?;
            if l.lost > 0 {
                hi = mid;
            } else {
                lo = mid;
            }
            out.push(l);
        }
    }
    Ok(out)
}

pub fn throughput(env: &Env, plan: &Plan, started: Instant) -> anyhow::Result<Throughput> {
    let dir = env.root.join("f");
    let watch = ["--watch".into(), dir.display().to_string()];
    let (agent, events) = env.start_agent("throughput", "tracepoint", true, &watch)?;
    let mut meter = Meter {
        env,
        tail: Tail::open(&events)?,
        agent,
        dir: dir.display().to_string(),
        // As many producers as CPUs: one thread alone cannot make the higher rates.
        threads: std::thread::available_parallelism()
            .map_or(2, std::num::NonZero::get)
            .to_string(),
    };
    let calibration = meter.calibrate()?;
    let steps = steps(&mut meter, plan, started)?;
    let profile = profiled(&mut meter, &env.root, plan.step_secs).map_err(|e| format!("{e:#}"));
    progress(started, "agent profiled");
    // The ring alone: a burst of more records than it holds, with the agent stopped.
    let ring = meter.burst(plan.burst_start * 16, true)?;
    let bursts = bursts(&mut meter, plan)?;
    progress(started, "bursts measured");
    let verdicts = meter.tail.read()?.get("verdict").copied().unwrap_or(0);
    meter.agent.stop()?;
    Ok(Throughput {
        calibration,
        steps,
        bursts,
        ring,
        verdicts,
        profile,
    })
}

/// One more step at 50,000 events/s with `perf record` on the agent.
fn profiled(meter: &mut Meter, dir: &Path, secs: f64) -> anyhow::Result<(Profile, Load)> {
    let recording = Recording::start(meter.agent.pid(), dir)?;
    let load = meter.sustained(50_000, secs);
    let profile = recording.finish()?;
    Ok((profile, load?))
}
