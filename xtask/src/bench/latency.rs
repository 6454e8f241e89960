//! Phase 2, latency: bind's return until its line is in the events file, and until it is
//! counted in /metrics; and the agent's start-up.
use std::time::Instant;

use anyhow::Context as _;

use super::{env::Env, log::progress, plan::Plan};

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

/// The `ns` samples and the `missed` count of a workload latency result.
fn samples(v: &serde_json::Value) -> anyhow::Result<(Vec<f64>, u64)> {
    let ns = v["ns"]
        .as_array()
        .context("no samples")?
        .iter()
        .filter_map(serde_json::Value::as_f64)
        .collect();
    Ok((ns, v["missed"].as_u64().unwrap_or(0)))
}

pub fn latency(env: &Env, plan: &Plan, started: Instant) -> anyhow::Result<Latency> {
    let (agent, events) = env.start_agent("latency", "tracepoint", true, &env.watch_watched())?;
    let addr = agent.listen.context("listen")?;
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
    let mut secs = Vec::new();
    for _ in 0..plan.startup_runs {
        let (agent, _) = env.start_agent("startup", "auto", false, &env.watch_watched())?;
        secs.push(agent.startup.as_secs_f64());
        agent.stop()?;
    }
    Ok(secs)
}
