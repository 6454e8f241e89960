//! Phases 2 to 4, each against a fresh agent: latency (bind's return → its line in the events
//! file, and → counted in /metrics; the agent's start-up) here, throughput and loss (its
//! profile in `profile`) and footprint in their own modules.
use std::time::Instant;

use anyhow::Context as _;

use super::{Plan, env::Env, progress};

mod footprint;
mod profile;
mod throughput;

pub use footprint::{Footprint, footprint};
use profile::Recording;
pub use profile::{Profile, STAGES};
pub use throughput::{Throughput, throughput};

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
