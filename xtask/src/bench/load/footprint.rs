//! The footprint phase: idle CPU, RSS with many live sockets, and /metrics scrape time.
use std::{
    fs,
    io::{BufRead as _, BufReader},
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::Context as _;

use crate::{
    bench::{
        Plan,
        agent::{self, Metrics},
        env::Env,
        progress, quantile,
    },
    cmd,
};

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

impl Footprint {
    /// The p50 scrape with the held sockets over the p50 with none.
    pub fn scrape_growth(&self) -> Option<f64> {
        let p50 = |v: &[f64]| quantile(v, 0.5).filter(|x| *x > 0.0);
        Some(p50(&self.scrape_ms)? / p50(&self.scrape_idle_ms)?)
    }
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
