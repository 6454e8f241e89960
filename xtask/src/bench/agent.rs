//! A running `sockwatch run` and its /metrics.
use std::{
    fs,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use sockwatch_bench::http;

use super::{plan::CYCLE_KINDS, process};

/// A running `sockwatch run`.
pub struct Agent {
    child: Child,
    log: PathBuf,
    pub listen: Option<SocketAddr>,
    /// Spawn → "running;" in its log.
    pub startup: Duration,
}

impl Agent {
    /// `sockwatch run --probe-mode MODE --events EVENTS [extra...]`, its log in `log`;
    /// returns once it logs that it runs.
    pub fn start(
        bin: &Path,
        mode: &str,
        events: &Path,
        log: &Path,
        listen: Option<SocketAddr>,
        extra: &[String],
    ) -> anyhow::Result<Agent> {
        let mut cmd = Command::new(bin);
        cmd.args(["run", "--probe-mode", mode, "--events"])
            .arg(events)
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(log).context("agent log")?);
        if let Some(a) = listen {
            cmd.arg("--listen").arg(a.to_string());
        }
        let t = Instant::now();
        let child = cmd.spawn().context("cannot start sockwatch")?;
        let mut agent = Agent {
            child,
            log: log.to_path_buf(),
            listen,
            startup: Duration::ZERO,
        };
        while !agent.log_text().contains("running;") {
            if let Some(st) = agent.child.try_wait()? {
                bail!("sockwatch exited ({st}): {}", agent.log_text());
            }
            if t.elapsed() > Duration::from_secs(60) {
                bail!("sockwatch did not start in 60 s: {}", agent.log_text());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        agent.startup = t.elapsed();
        Ok(agent)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The whole /metrics exposition, parsed.
    pub fn metrics(&self) -> anyhow::Result<Metrics> {
        let addr = self.listen.context("the agent serves no /metrics")?;
        Ok(Metrics::parse(&scrape(addr)?))
    }

    /// Waits until the agent has delivered every record the kernel submitted (per life-cycle
    /// kind) and the counts hold still for 150 ms; the metrics then.
    pub fn settle(&self, limit: Duration) -> anyhow::Result<Metrics> {
        let t = Instant::now();
        let mut last: Option<(f64, f64)> = None;
        loop {
            let m = self.metrics()?;
            let sub: f64 = CYCLE_KINDS
                .iter()
                .map(|k| m.sum("sockwatch_kernel_events_submitted_total", &[("kind", k)]))
                .sum();
            let got: f64 = CYCLE_KINDS
                .iter()
                .map(|k| m.sum("sockwatch_events_total", &[("kind", k)]))
                .sum();
            if sub == got && last == Some((sub, got)) {
                return Ok(m);
            }
            if t.elapsed() > limit {
                return Ok(m);
            }
            last = Some((sub, got));
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    /// SIGINT, then waits (10 s, then SIGKILL); fails unless it exited cleanly.
    pub fn stop(mut self) -> anyhow::Result<()> {
        let st = process::interrupt(&mut self.child, "sockwatch", Duration::from_secs(10))?;
        if !st.success() {
            bail!("sockwatch exited with {st}: {}", self.log_text());
        }
        Ok(())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        process::kill(&mut self.child);
    }
}

/// A scrape of the agent's `/metrics`.
pub use sockwatch_bench::prom::Exposition as Metrics;

/// The body of `addr`'s /metrics.
pub fn scrape(addr: SocketAddr) -> anyhow::Result<String> {
    http::get(addr, "/metrics", Duration::from_secs(10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_sum_by_labels() {
        let m = Metrics::parse(
            "# HELP x y\nsockwatch_events_total{kind=\"bind\",tier=\"tracepoint\"} 3\n\
             sockwatch_events_total{kind=\"listen\",tier=\"tracepoint\"} 2\n\
             sockwatch_events_total_other 9\nsockwatch_decode_errors_total 1\n",
        );
        assert_eq!(m.sum("sockwatch_events_total", &[("kind", "bind")]), 3.0);
        assert_eq!(m.sum("sockwatch_events_total", &[]), 5.0);
        assert_eq!(m.sum("sockwatch_decode_errors_total", &[]), 1.0);
        assert_eq!(m.series.len(), 4);
    }
}
