//! Phase 4, footprint: the agent's idle CPU, its RSS with many live watched sockets, and the
//! /metrics scrape time with the most watches the agent accepts.
use std::{
    fs,
    io::{BufRead as _, BufReader},
    net::SocketAddr,
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use anyhow::Context as _;

use super::{
    agent::{Agent, Metrics, scrape},
    env::Env,
    log::progress,
    plan::Plan,
    process,
};
use crate::cmd;

/// The most watches the agent accepts (`MAX_WATCHES` in sockwatch/src/config.rs), so that the
/// scrape is timed with every `watch` label value the agent can have.
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

/// [`FOOTPRINT_WATCHES`] empty directories under the bench's root, as `--watch NAME=DIR`
/// arguments.
fn watch_dirs(env: &Env) -> anyhow::Result<Vec<String>> {
    let mut args = Vec::new();
    for i in 0..FOOTPRINT_WATCHES {
        let d = env.root.join(format!("fw{i:02}"));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d)?;
        args.push("--watch".to_string());
        args.push(format!("w{i:02}={}", d.display()));
    }
    Ok(args)
}

/// The share of one CPU process `pid` used over `secs` seconds.
fn idle_cpu(pid: u32, secs: u64) -> anyhow::Result<f64> {
    let c0 = process::cpu_seconds(pid)?;
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    Ok((process::cpu_seconds(pid)? - c0) / t.elapsed().as_secs_f64())
}

/// `n` sequential scrapes: each one's milliseconds, and the last exposition.
fn scrapes(addr: SocketAddr, n: usize) -> anyhow::Result<(Vec<f64>, Metrics)> {
    let mut ms = Vec::with_capacity(n);
    let mut last = Metrics::default();
    for _ in 0..n {
        let t = Instant::now();
        let body = scrape(addr)?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
        last = Metrics::parse(&body);
    }
    Ok((ms, last))
}

/// The workload holding `plan.sockets` listening sockets in the first watched directory, made
/// at 5,000 a second; the child (it holds them until its stdin closes) and the seconds it took.
fn hold_sockets(env: &Env, plan: &Plan) -> anyhow::Result<(Child, f64)> {
    let mut hold = cmd::command(&env.workload)
        .arg("hold")
        .arg(env.root.join("fw00"))
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
    Ok((hold, v["seconds"].as_f64().unwrap_or(0.0)))
}

/// Waits (at most 60 s) until the agent's engine counts `sockets` live sockets; its count then.
fn wait_live(agent: &Agent, sockets: u64) -> anyhow::Result<f64> {
    let t = Instant::now();
    loop {
        let live = agent.metrics()?.sum("sockwatch_engine_live_sockets", &[]);
        if live >= sockets as f64 || t.elapsed() > Duration::from_secs(60) {
            return Ok(live);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn footprint(env: &Env, plan: &Plan, started: Instant) -> anyhow::Result<Footprint> {
    let (agent, _) = env.start_agent("footprint", "tracepoint", true, &watch_dirs(env)?)?;
    let pid = agent.pid();
    let addr = agent.listen.context("listen")?;
    let mut out = Footprint {
        idle_secs: plan.idle_secs,
        sockets: plan.sockets,
        watches: FOOTPRINT_WATCHES,
        ..Default::default()
    };
    out.idle_cpu = idle_cpu(pid, plan.idle_secs)?;
    out.rss_idle_kib = process::status_kib(pid, "VmRSS")?;
    out.scrape_idle_ms = scrapes(addr, plan.scrapes)?.0;
    progress(started, "idle CPU measured");

    let (mut hold, hold_secs) = hold_sockets(env, plan)?;
    out.hold_secs = hold_secs;
    out.live_in_engine = wait_live(&agent, plan.sockets)?;
    out.rss_kib = process::status_kib(pid, "VmRSS")?;
    out.hwm_kib = process::status_kib(pid, "VmHWM")?;
    progress(started, &format!("{} sockets held", plan.sockets));

    let (ms, m) = scrapes(addr, plan.scrapes)?;
    out.scrape_ms = ms;
    out.series = m.series.len();
    out.bytes = m.bytes;
    progress(started, "scrapes timed");
    out.idle_cpu_loaded = idle_cpu(pid, plan.idle_secs)?;
    drop(hold.stdin.take());
    hold.wait()?;
    agent.stop()?;
    Ok(out)
}
