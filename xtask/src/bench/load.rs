//! Phases 2 to 4, each against a fresh agent: latency (bind's return → its line in the events
//! file, and → counted in /metrics; the agent's start-up), throughput and loss (paced steps,
//! bursts, the ring buffer alone, a perf profile of the agent) and footprint (idle CPU, RSS
//! with many live sockets, /metrics scrape time).
use std::{
    collections::BTreeMap,
    fs,
    io::{BufRead as _, BufReader, Read as _, Seek as _},
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::Context as _;

use super::{
    Plan,
    agent::{self, Agent, CYCLE_KINDS, Metrics},
    env::Env,
    progress,
};
use crate::cmd;

/// Latency samples (ns), and the agent's start-ups with the whole probe table (s).
#[derive(Debug, Default)]
pub struct Latency {
    pub to_line: Vec<f64>,
    pub line_missed: u64,
    pub to_metrics: Vec<f64>,
    pub metrics_missed: u64,
    pub startup: Vec<f64>,
}

pub fn latency(env: &Env, plan: &Plan, started: Instant) -> anyhow::Result<Latency> {
    let (agent, events) = env.start_agent("latency", "tracepoint", true, &env.watch_watched())?;
    let addr = agent.listen.context("listen")?.to_string();
    let w = env.watched.display().to_string();
    let samples = |args: &[&str]| -> anyhow::Result<(Vec<f64>, u64)> {
        let v = env.workload(args)?;
        let ns = v["ns"]
            .as_array()
            .context("no samples")?
            .iter()
            .filter_map(serde_json::Value::as_f64);
        Ok((ns.collect(), v["missed"].as_u64().unwrap_or(0)))
    };
    let n = plan.latency_samples.to_string();
    let (to_line, line_missed) = samples(&["latency", &w, &events.display().to_string(), &n])?;
    progress(started, "latency to the events file measured");
    let n = plan.metrics_samples.to_string();
    let (to_metrics, metrics_missed) = samples(&["metrics-latency", &w, &addr, &n])?;
    progress(started, "latency to /metrics measured");
    agent.stop()?;
    // Spawn → running with `--probe-mode auto`: every tier of every hook this kernel offers.
    let mut startup = Vec::new();
    for _ in 0..plan.startup_runs {
        let (agent, _) = env.start_agent("startup", "auto", false, &env.watch_watched())?;
        startup.push(agent.startup.as_secs_f64());
        agent.stop()?;
    }
    progress(started, "agent start-up measured");
    Ok(Latency {
        to_line,
        line_missed,
        to_metrics,
        metrics_missed,
        startup,
    })
}

/// One load: life cycles run, events produced (4 per cycle), and what became of them.
#[derive(Clone, Debug, Default)]
pub struct Load {
    pub threads: usize,
    /// Requested events per second (sustained steps) or events in the burst.
    pub target: u64,
    pub cycles: u64,
    pub secs: f64,
    pub produced: u64,
    pub submitted: u64,
    pub lost: u64,
    pub delivered: u64,
    /// produced = submitted + lost and submitted = delivered = file lines, for every kind.
    pub exact: bool,
    pub cpu_secs: f64,
}

impl Load {
    pub fn rate(&self) -> f64 {
        self.produced as f64 / self.secs.max(1e-9)
    }

    /// Agent CPU per event delivered, µs.
    pub fn cpu_us_per_event(&self) -> Option<f64> {
        (self.delivered > 0).then(|| self.cpu_secs / self.delivered as f64 * 1e6)
    }
}

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

impl Meter<'_> {
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
    let mut m = Meter {
        env,
        agent,
        file,
        partial: String::new(),
        lines: BTreeMap::new(),
        dir,
        threads,
    };
    // Calibration: 1,000 life cycles a second for a second from one thread.
    let dir = m.dir.clone();
    let calibration = m.load(4_000, &["rate", &dir, "1000", "1", "1"], false)?;
    // Sustained steps, up to the first that loses events or falls short of its rate by a tenth.
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
    let profile = (|| {
        let recording = Recording::start(m.agent.pid(), &env.root)?;
        let load = m.sustained(50_000, plan.step_secs);
        Ok::<_, anyhow::Error>((recording.finish()?, load?))
    })()
    .map_err(|e| format!("{e:#}"));
    progress(started, "agent profiled");
    // The ring alone: a burst of more records than it holds, with the agent stopped.
    let ring = m.burst(plan.burst_start * 16, true)?;
    // Bursts: double until loss, then bisect between the last clean size and the first lossy.
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

/// A stage of the agent's event path: its name, and the symbols whose inclusive share
/// (own time and callees') is the stage's.
pub const STAGES: [(&str, &[&str]); 6] = [
    (
        "correlation engine (`Engine::apply_into`)",
        &["sockwatch::engine::Engine::apply_into"],
    ),
    (
        "event lines as JSON (`json::write_line`, `json::stamp`)",
        &[
            "sockwatch::events::json::write_line",
            "sockwatch::events::json::stamp",
        ],
    ),
    (
        "write(2) of the events file (`JsonLines::flush`)",
        &["sockwatch::pipeline::output::JsonLines::flush"],
    ),
    (
        "records decoded (`decode::decode`)",
        &["sockwatch::events::decode::decode"],
    ),
    (
        "completion: attribution, mount namespaces (`Completer::complete`)",
        &["sockwatch::events::complete::Completer::complete"],
    ),
    ("metrics (`Metrics::event`)", &["Metrics>::event"]),
];

/// The C library's allocator: its own time (not inclusive), spread over every stage.
const ALLOCATOR: [&str; 9] = [
    "malloc",
    "_int_malloc",
    "free",
    "_int_free",
    "cfree@GLIBC_2.2.5",
    "malloc_consolidate",
    "realloc",
    "_int_realloc",
    "unlink_chunk.isra.0",
];

/// Where the agent's CPU went: samples, each of [`STAGES`]' share (none when no sample named
/// one of its symbols: inlined, or never run), and the allocator's own share.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profile {
    pub samples: u64,
    pub stages: Vec<Option<f64>>,
    pub allocator: f64,
}

impl Profile {
    /// The stage with the largest share, and that share.
    pub fn largest(&self) -> Option<(&'static str, f64)> {
        let seen = STAGES
            .iter()
            .zip(&self.stages)
            .filter_map(|(st, share)| Some((st.0, (*share)?)));
        seen.max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// The profile from `perf report`'s samples per command (`counts`) and its table of
    /// inclusive and own shares per symbol (`shares`).
    pub fn parse(counts: &str, shares: &str) -> Profile {
        let count = |l: &str| l.split_whitespace().next()?.parse::<u64>().ok();
        let samples = counts
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(count)
            .sum();
        let rows: Vec<(f64, f64, &str)> = shares.lines().filter_map(share_row).collect();
        // A stage sums its symbols (none calls another); a symbol listed twice (two instances
        // of a generic) counts at its largest.
        let of = |sym: &str| {
            rows.iter()
                .filter(|r| r.2.contains(sym))
                .map(|r| r.0)
                .reduce(f64::max)
        };
        let stages = STAGES
            .iter()
            .map(|st| st.1.iter().filter_map(|s| of(s)).reduce(|a, b| a + b))
            .collect();
        let allocator = rows
            .iter()
            .filter(|r| ALLOCATOR.contains(&r.2))
            .map(|r| r.1)
            .sum();
        Profile {
            samples,
            stages,
            allocator,
        }
    }
}

/// `  47.50%     2.25%  [.] symbol`: (inclusive, own, symbol), as fractions.
fn share_row(line: &str) -> Option<(f64, f64, &str)> {
    let mut w = line.split_whitespace();
    let pct = |t: Option<&str>| t?.strip_suffix('%')?.parse::<f64>().ok().map(|x| x / 100.0);
    let (children, own, marker) = (pct(w.next())?, pct(w.next())?, w.next()?);
    let at = line.find(marker).filter(|_| marker.starts_with('['))? + marker.len();
    Some((children, own, line[at..].trim()))
}

/// `perf record` (4,999 samples a second, call graphs unwound from DWARF) on the agent.
struct Recording {
    child: std::process::Child,
    data: std::path::PathBuf,
}

impl Recording {
    fn start(pid: u32, dir: &Path) -> anyhow::Result<Recording> {
        let data = dir.join("agent.perf");
        let child = cmd::command("perf")
            .args([
                "record",
                "-q",
                "-F",
                "4999",
                "--call-graph",
                "dwarf,16384",
                "-p",
                &pid.to_string(),
                "-o",
            ])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start perf (apt-get install linux-perf)")?;
        // perf attaches within a few ms; the load must not start before it does.
        std::thread::sleep(Duration::from_millis(300));
        Ok(Recording { child, data })
    }

    /// Stops the recording (SIGINT, as perf expects: its exit status then says nothing) and
    /// reads it.
    fn finish(mut self) -> anyhow::Result<Profile> {
        agent::signal(self.child.id(), libc::SIGINT);
        self.child.wait().context("waiting for perf record")?;
        let report = |args: &[&str]| {
            cmd::output(
                cmd::command("perf")
                    .args(["report", "--stdio", "-i"])
                    .arg(&self.data)
                    .args(args),
            )
        };
        let counts = report(&["-g", "none", "--sort", "comm", "-F", "sample,comm"])?;
        let columns = "overhead_children,overhead,symbol";
        let shares = report(&[
            "--children",
            "-g",
            "none",
            "--percent-limit",
            "0",
            "-F",
            columns,
        ])?;
        let _ = fs::remove_file(&self.data);
        Ok(Profile::parse(&counts, &shares))
    }
}

/// The most watches the agent accepts (`MAX_WATCHES` in sockwatch/src/config.rs): the scrape
/// is timed with every `watch` label value the agent can have.
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
    /// Scrape times (ms) with the held sockets, and before any was held.
    pub scrape_ms: Vec<f64>,
    pub scrape_idle_ms: Vec<f64>,
    pub series: usize,
    pub bytes: usize,
    pub watches: usize,
}

pub fn footprint(env: &Env, plan: &Plan, started: Instant) -> anyhow::Result<Footprint> {
    let mut watches = Vec::new();
    for i in 0..FOOTPRINT_WATCHES {
        let d = env.root.join(format!("fw{i:02}"));
        fs::create_dir_all(&d)?;
        watches.extend(["--watch".to_string(), format!("w{i:02}={}", d.display())]);
    }
    let (agent, _) = env.start_agent("footprint", "tracepoint", true, &watches)?;
    let (pid, addr) = (agent.pid(), agent.listen.context("listen")?);
    // The share of one CPU the agent used over the plan's idle seconds.
    let idle_cpu = || -> anyhow::Result<f64> {
        let (c0, t) = (agent::cpu_seconds(pid)?, Instant::now());
        std::thread::sleep(Duration::from_secs(plan.idle_secs));
        Ok((agent::cpu_seconds(pid)? - c0) / t.elapsed().as_secs_f64())
    };
    // The plan's sequential scrapes: each one's milliseconds, and the last exposition.
    let scrapes = || -> anyhow::Result<(Vec<f64>, Metrics)> {
        let (mut ms, mut last) = (Vec::new(), Metrics::default());
        for _ in 0..plan.scrapes {
            let t = Instant::now();
            let body = agent::scrape(addr)?;
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            last = Metrics::parse(&body);
        }
        Ok((ms, last))
    };
    let mut out = Footprint {
        idle_secs: plan.idle_secs,
        sockets: plan.sockets,
        watches: FOOTPRINT_WATCHES,
        ..Default::default()
    };
    out.idle_cpu = idle_cpu()?;
    out.rss_idle_kib = agent::status_kib(pid, "VmRSS")?;
    out.scrape_idle_ms = scrapes()?.0;
    progress(started, "idle CPU measured");
    // The workload holds the sockets in the first watched directory until its stdin closes.
    let mut hold = cmd::command(&env.workload)
        .arg("hold")
        .arg(env.root.join("fw00"))
        .args([plan.sockets.to_string(), "5000".into()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot start the workload")?;
    let mut line = String::new();
    BufReader::new(hold.stdout.take().context("stdout")?).read_line(&mut line)?;
    let v: serde_json::Value =
        serde_json::from_str(line.trim()).with_context(|| format!("hold printed {line:?}"))?;
    out.hold_secs = v["seconds"].as_f64().unwrap_or(0.0);
    let t = Instant::now();
    loop {
        out.live_in_engine = agent.metrics()?.sum("sockwatch_engine_live_sockets", &[]);
        if out.live_in_engine >= plan.sockets as f64 || t.elapsed() > Duration::from_secs(60) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    out.rss_kib = agent::status_kib(pid, "VmRSS")?;
    out.hwm_kib = agent::status_kib(pid, "VmHWM")?;
    progress(started, &format!("{} sockets held", plan.sockets));
    let (ms, m) = scrapes()?;
    (out.scrape_ms, out.series, out.bytes) = (ms, m.series.len(), m.bytes);
    progress(started, "scrapes timed");
    out.idle_cpu_loaded = idle_cpu()?;
    drop(hold.stdin.take());
    hold.wait()?;
    agent.stop()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_are_inclusive_shares_and_the_allocator_its_own() {
        let shares = "# Children  Overhead  Symbol\n#\n\
            100.00%  0.00%  [.] std::thread::local::LocalKey<T>::with\n\
             47.50%  2.25%  [.] sockwatch::engine::Engine::apply_into\n\
             10.12%  1.38%  [.] sockwatch::events::json::write_line\n\
              2.50%  1.00%  [.] sockwatch::events::json::stamp\n\
             13.62%  0.00%  [.] sockwatch::pipeline::output::JsonLines::flush\n\
              6.25%  2.12%  [.] sockwatch::events::decode::decode\n\
              2.12%  0.75%  [.] sockwatch::metrics::hot::<impl sockwatch::metrics::Metrics>::event\n\
              1.00%  0.50%  [.] sockwatch::metrics::hot::<impl sockwatch::metrics::Metrics>::event\n\
              2.38%  0.75%  [.] _int_malloc\n  2.12%  2.12%  [.] _int_free\n  1.88%  1.88%  [.] malloc\n\
              4.25%  0.00%  [.] __GI___libc_malloc (inlined)\n 12.38%  0.00%  [k] shmem_file_write_iter\n";
        let p = Profile::parse("# Samples\n  2400  sockwatch\n   12  tokio-rt\n", shares);
        assert_eq!(p.samples, 2412);
        let near = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
        // write_line + stamp; no sample named Completer::complete; the larger instance of event.
        let want = [
            Some(0.475),
            Some(0.1262),
            Some(0.1362),
            Some(0.0625),
            None,
            Some(0.0212),
        ];
        for (got, want) in p.stages.iter().zip(want) {
            assert!(want.map_or(got.is_none(), |w| near(*got, w)), "{p:?}");
        }
        assert!(near(Some(p.allocator), 0.0475), "own shares only: {p:?}");
        assert_eq!(p.largest().map(|l| l.0), Some(STAGES[0].0));
        assert_eq!(
            share_row("  9.00%  1.00%  [k] do_syscall_64"),
            Some((0.09, 0.01, "do_syscall_64"))
        );
        assert_eq!(share_row("# Samples: 3K of event 'cpu-clock'"), None);
        assert_eq!(share_row("  9.00%  [k] do_syscall_64"), None);
    }
}
