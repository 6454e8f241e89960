//! `cargo xtask soak`: the release agent under a steady load for minutes, sweeps on and owners
//! churning, sampled every few seconds. It fails unless memory and the engine's tables stay
//! flat after warm-up, every record the kernel submitted reached the agent, and no verdict
//! came from a workload that gives none.
use std::{
    fs,
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::{
    bench::{
        agent::{Agent, Metrics},
        env::{self, Env},
    },
    cmd, setup,
};

/// A socket life cycle is four events (bind, listen, unlink, release).
const EVENTS_PER_CYCLE: u64 = 4;
/// A new owner process every second, each running life cycles for this long.
const OWNER_LIFE_SECS: u64 = 2;
/// Life cycles a second of each short-lived owner.
const OWNER_CYCLES_PER_S: u64 = 250;
/// Directories the short-lived owners take in turn (each runs in one, so no two share a
/// socket name; one ends before its directory comes round again).
const OWNER_DIRS: u64 = 4;
/// Flat: the largest sample after warm-up within this fraction of the smallest.
const FLAT: f64 = 0.05;

#[derive(Debug, clap::Args)]
pub struct SoakArgs {
    /// Minutes under load.
    #[arg(long, default_value_t = 3)]
    mins: u64,
    /// Events a second the steady workload makes (life cycles × 4).
    #[arg(long, default_value_t = 20_000)]
    rate: u64,
    /// Replace the soak table of docs/RELIABILITY.md with this run's figures.
    #[arg(long)]
    write_doc: bool,
}

impl SoakArgs {
    /// The suite's: 3 minutes at 20k events/s, the table not written.
    pub fn suite() -> Self {
        Self {
            mins: 3,
            rate: 20_000,
            write_doc: false,
        }
    }
}

/// One sample of the agent.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    secs: f64,
    rss_kib: u64,
    engine_sockets: f64,
    engine_procs: f64,
    live_entries: f64,
    events: f64,
}

pub fn run(args: &SoakArgs) -> anyhow::Result<bool> {
    if !cmd::is_root() {
        bail!("`cargo xtask soak` needs root: eBPF and a tmpfs mount");
    }
    setup::setup(&setup::Wanted::default())?;
    cmd::run(cmd::cargo().args(["build", "--release", "-p", "sockwatch", "-p", "bench"]))?;
    env::mount_tracefs()?;
    let env = Env::prepare()?;
    let mut extra = env.watch_watched();
    extra.extend(["--scan-interval".into(), "5s".into()]);
    let (agent, _events) = env.start_agent("soak", "auto", true, &extra)?;
    let samples = load_and_sample(&env, &agent, args)?;
    let end = agent.settle(Duration::from_secs(30))?;
    agent.stop()?;
    let verdict = judge(&samples, &end);
    let table = render(args, &samples, &end, &verdict);
    println!("{table}");
    if args.write_doc {
        write_doc(&table)?;
    }
    for problem in &verdict.problems {
        println!("xtask: soak: FAILED: {problem}");
    }
    Ok(verdict.problems.is_empty())
}

/// Runs the steady workload for the whole soak and a new owner every second; samples the
/// agent every `interval`.
fn load_and_sample(env: &Env, agent: &Agent, args: &SoakArgs) -> anyhow::Result<Vec<Sample>> {
    let secs = args.mins * 60;
    let cycles_per_s = (args.rate / EVENTS_PER_CYCLE).to_string();
    let mut steady = workload(
        env,
        "steady",
        &["rate", &cycles_per_s, &secs.to_string(), "2"],
    )?;
    let interval = Duration::from_secs(10.min(secs.max(1)));
    let started = Instant::now();
    let mut owners: Vec<Child> = Vec::new();
    let mut samples = vec![sample(agent, Duration::ZERO)?];
    let mut next_sample = interval;
    let owner_args = [
        "rate",
        &OWNER_CYCLES_PER_S.to_string(),
        &OWNER_LIFE_SECS.to_string(),
        "1",
    ];
    for n in 0.. {
        if started.elapsed() >= Duration::from_secs(secs) {
            break;
        }
        owners.retain_mut(|c| !matches!(c.try_wait(), Ok(Some(_))));
        let dir = format!("owner{}", n % OWNER_DIRS);
        owners.push(workload(env, &dir, &owner_args)?);
        if started.elapsed() >= next_sample {
            samples.push(sample(agent, started.elapsed())?);
            next_sample += interval;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    for mut c in owners {
        c.wait().context("a short-lived owner")?;
    }
    let st = steady.wait().context("the steady workload")?;
    if !st.success() {
        bail!("the steady workload failed: {st}");
    }
    samples.push(sample(agent, started.elapsed())?);
    Ok(samples)
}

/// `sockwatch-bench MODE DIR ARGS…`, DIR being `sub` below the watched directory.
fn workload(env: &Env, sub: &str, args: &[&str]) -> anyhow::Result<Child> {
    let dir = env.watched.join(sub);
    fs::create_dir_all(&dir)?;
    let (mode, rest) = args.split_first().context("a workload mode")?;
    cmd::command(&env.workload)
        .arg(mode)
        .arg(&dir)
        .args(rest)
        .stdout(Stdio::null())
        .spawn()
        .context("cannot start the workload")
}

fn sample(agent: &Agent, at: Duration) -> anyhow::Result<Sample> {
    let m = agent.metrics()?;
    Ok(Sample {
        secs: at.as_secs_f64(),
        rss_kib: rss_kib(agent.pid())?,
        engine_sockets: m.sum("sockwatch_engine_sockets", &[]),
        engine_procs: m.sum("sockwatch_engine_processes", &[]),
        live_entries: m.sum("sockwatch_map_entries", &[("map", "LIVE")]),
        events: m.sum("sockwatch_events_total", &[]),
    })
}

/// `VmRSS` of `pid`, in KiB.
fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS in /proc/PID/status")
}

/// What the run shows, and what it should not.
struct Verdict {
    rss_growth: f64,
    sockets_spread: f64,
    procs_spread: f64,
    submitted: f64,
    received: f64,
    lost: f64,
    verdicts: f64,
    problems: Vec<String>,
}

/// How far the last third's peak rises above the middle third's. A leak keeps growing to the
/// end; a high-water mark reached once after warm-up rises in one step and stays. The engine
/// begins forgetting exited owners 60 s in, where a 3-minute run's warm-up ends: one CI run's
/// RSS stepped 2.6 MiB at 70 s, then stayed within 0.5 % for 110 s.
fn growth(samples: &[Sample], value: impl Fn(&Sample) -> f64) -> f64 {
    let third = samples.len() / 3;
    let peak = |part: &[Sample]| part.iter().map(&value).fold(0.0, f64::max);
    let (middle, last) = (
        peak(&samples[third..2 * third]),
        peak(&samples[2 * third..]),
    );
    if middle > 0.0 {
        (last - middle) / middle
    } else {
        0.0
    }
}

/// (max - min) / min over the samples after the first third (warm-up).
fn spread(samples: &[Sample], value: impl Fn(&Sample) -> f64) -> f64 {
    let after: Vec<f64> = samples[samples.len() / 3..].iter().map(value).collect();
    let min = after.iter().copied().fold(f64::INFINITY, f64::min);
    let max = after.iter().copied().fold(0.0, f64::max);
    if min > 0.0 { (max - min) / min } else { 0.0 }
}

fn judge(samples: &[Sample], end: &Metrics) -> Verdict {
    let mut v = Verdict {
        rss_growth: growth(samples, |s| s.rss_kib as f64),
        // One more than the count: an empty table is flat too.
        sockets_spread: spread(samples, |s| s.engine_sockets + 1.0),
        procs_spread: spread(samples, |s| s.engine_procs + 1.0),
        submitted: end.sum("sockwatch_kernel_events_submitted_total", &[]),
        received: end.sum("sockwatch_events_total", &[]),
        lost: end.sum("sockwatch_events_lost_total", &[]),
        verdicts: end.sum("sockwatch_verdicts_total", &[]),
        problems: Vec::new(),
    };
    if v.rss_growth > FLAT {
        v.problems.push(format!(
            "RSS still growing: the last third's peak {:.1} % above the middle third's (at most \
             {:.0} %)",
            v.rss_growth * 100.0,
            FLAT * 100.0
        ));
    }
    for (what, s) in [
        ("engine sockets", v.sockets_spread),
        ("engine processes", v.procs_spread),
    ] {
        if s > FLAT {
            v.problems.push(format!(
                "{what} not flat after warm-up: spread {:.1} % (at most {:.0} %)",
                s * 100.0,
                FLAT * 100.0
            ));
        }
    }
    if v.received != v.submitted {
        v.problems.push(format!(
            "{} records submitted, {} received: some vanished uncounted",
            v.submitted, v.received
        ));
    }
    if v.verdicts != 0.0 {
        v.problems.push(format!(
            "{} verdicts from a workload that gives none",
            v.verdicts
        ));
    }
    v
}

fn render(args: &SoakArgs, samples: &[Sample], end: &Metrics, v: &Verdict) -> String {
    let secs = samples.last().map_or(0.0, |s| s.secs);
    let events = samples.last().map_or(0.0, |s| s.events);
    let mut t = format!(
        "{} min at {} events/s asked ({:.0} received/s), sweeps every 5 s, a new owner \
         process every second; {} records submitted, {} received, {} lost (counted), {} \
         verdicts, decode errors {}.\n\n",
        args.mins,
        args.rate,
        events / secs.max(1.0),
        v.submitted,
        v.received,
        v.lost,
        v.verdicts,
        end.sum("sockwatch_decode_errors_total", &[]),
    );
    t.push_str("| s | RSS MiB | engine sockets | engine processes | LIVE entries | events |\n");
    t.push_str("| ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for s in samples {
        t.push_str(&format!(
            "| {:.0} | {:.1} | {} | {} | {} | {} |\n",
            s.secs,
            s.rss_kib as f64 / 1024.0,
            s.engine_sockets,
            s.engine_procs,
            s.live_entries,
            s.events.abs()
        ));
    }
    t.push_str(&format!(
        "\nRSS growth, the last third's peak over the middle third's: {:.1} %; spread after \
         warm-up (the first third): engine sockets {:.1} %, engine processes {:.1} % (each at \
         most {:.0} %).\n",
        v.rss_growth * 100.0,
        v.sockets_spread * 100.0,
        v.procs_spread * 100.0,
        FLAT * 100.0
    ));
    t
}

const TABLE_START: &str = "<!-- soak table: written by `cargo xtask soak --write-doc` -->";
const TABLE_END: &str = "<!-- end of soak table -->";

fn write_doc(table: &str) -> anyhow::Result<()> {
    let doc = cmd::workspace_root().join("docs/RELIABILITY.md");
    let text = fs::read_to_string(&doc).with_context(|| doc.display().to_string())?;
    let (head, rest) = text
        .split_once(TABLE_START)
        .with_context(|| format!("{} has no `{TABLE_START}`", doc.display()))?;
    let (_, tail) = rest
        .split_once(TABLE_END)
        .with_context(|| format!("{} has no `{TABLE_END}`", doc.display()))?;
    fs::write(
        &doc,
        format!("{head}{TABLE_START}\n{table}{TABLE_END}{tail}"),
    )?;
    println!("xtask: wrote the soak table of {}", doc.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(rss_kib: u64) -> Sample {
        Sample {
            rss_kib,
            ..Sample::default()
        }
    }

    #[test]
    fn spread_ignores_the_warm_up_third() {
        let s: Vec<Sample> = [10, 50, 100, 100, 102, 101].map(at).to_vec();
        let got = spread(&s, |s| s.rss_kib as f64);
        assert!((got - 0.02).abs() < 1e-9, "{got}");
    }

    /// One step after warm-up that then stays is no growth; a rise into the last third is.
    #[test]
    fn growth_is_the_last_thirds_peak_over_the_middle_thirds() {
        let rss = |s: &Sample| s.rss_kib as f64;
        let step: Vec<Sample> = [10, 90, 90, 90, 100, 100, 100, 100, 100].map(at).to_vec();
        assert_eq!(growth(&step, rss), 0.0);
        assert!(spread(&step, rss) > FLAT, "the spread would call it a leak");
        let leak: Vec<Sample> = [10, 90, 92, 94, 96, 98, 100, 102, 104].map(at).to_vec();
        assert!((growth(&leak, rss) - 6.0 / 98.0).abs() < 1e-9);
    }

    #[test]
    fn growth_vanished_records_and_verdicts_are_problems() {
        let s: Vec<Sample> = [100, 100, 100, 110, 120, 130].map(at).to_vec();
        let end = Metrics::parse(
            "sockwatch_kernel_events_submitted_total{kind=\"bind\"} 10\n\
             sockwatch_events_total{kind=\"bind\",tier=\"tracepoint\"} 9\n\
             sockwatch_verdicts_total{verdict=\"foreign_unlink\",watch=\"w\"} 1\n",
        );
        let v = judge(&s, &end);
        assert_eq!(v.problems.len(), 3, "{:?}", v.problems);
        assert!(
            v.problems[0].starts_with("RSS still growing"),
            "{:?}",
            v.problems
        );
    }
}
