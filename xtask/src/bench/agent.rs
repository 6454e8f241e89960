//! A running `sockwatch run` and its /metrics; and the /proc figures and signals of the
//! processes the bench starts.
use std::{
    fs,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
/// A scrape of the agent's `/metrics`.
pub use sockwatch_bench::prom::Exposition as Metrics;

/// Events the workload's socket life cycle yields.
pub const CYCLE_KINDS: [&str; 4] = ["bind", "listen", "unlink", "release"];

/// A running `sockwatch run`.
pub struct Agent {
    child: Child,
    log: PathBuf,
    pub listen: Option<SocketAddr>,
    /// Spawn → "running;" in its log.
    pub startup: Duration,
}

impl Agent {
    /// `sockwatch run --probe-mode MODE --events EVENTS [extra...]`, logging to `log`; returns
    /// once it logs that it runs.
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
            .args(extra);
        cmd.env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        cmd.stderr(fs::File::create(log).context("agent log")?);
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
        Ok(Metrics::parse(&scrape(
            self.listen.context("the agent serves no /metrics")?,
        )?))
    }

    /// Waits (at most `limit`) until the agent delivered every record the kernel submitted
    /// (life-cycle kinds) and the counts held still for 150 ms; the metrics then.
    pub fn settle(&self, limit: Duration) -> anyhow::Result<Metrics> {
        let t = Instant::now();
        let mut last = None;
        loop {
            let m = self.metrics()?;
            let sum = |name| {
                CYCLE_KINDS
                    .iter()
                    .map(|k| m.sum(name, &[("kind", k)]))
                    .sum::<f64>()
            };
            let now = (
                sum("sockwatch_kernel_events_submitted_total"),
                sum("sockwatch_events_total"),
            );
            if (now.0 == now.1 && last == Some(now)) || t.elapsed() > limit {
                return Ok(m);
            }
            last = Some(now);
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    /// SIGINT, then waits (10 s, then SIGKILL); fails unless it exited cleanly.
    pub fn stop(mut self) -> anyhow::Result<()> {
        let st = interrupt(&mut self.child, "sockwatch", Duration::from_secs(10))?;
        if !st.success() {
            bail!("sockwatch exited with {st}: {}", self.log_text());
        }
        Ok(())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        kill(&mut self.child);
    }
}

/// The body of `addr`'s /metrics.
pub fn scrape(addr: SocketAddr) -> anyhow::Result<String> {
    sockwatch_bench::http::get(addr, "/metrics", Duration::from_secs(10))
}

/// Sends `sig` to `pid`, a process the bench started.
pub fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill takes no pointers; a wrong pid or signal is an error return.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// SIGINT to `child`, then waits up to `limit` for it to exit; kills it after that.
pub fn interrupt(child: &mut Child, what: &str, limit: Duration) -> anyhow::Result<ExitStatus> {
    signal(child.id(), libc::SIGINT);
    let t = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if t.elapsed() > limit {
            kill(child);
            bail!("{what} did not stop on SIGINT in {} s", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kills and reaps `child`, unless it has exited already.
pub fn kill(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// utime + stime of a process, seconds (/proc/PID/stat fields 14 and 15, clock ticks).
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = stat.rsplit_once(')').context("malformed /proc/PID/stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Ok((f[11].parse::<u64>()? + f[12].parse::<u64>()?) as f64 / clock_ticks())
}

pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf takes no pointers; an unknown name is an error return (-1, clamped).
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

/// A `/proc/PID/status` field in KiB (VmRSS, VmHWM).
pub fn status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    fs::read_to_string(format!("/proc/{pid}/status"))?
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .strip_prefix(':')?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

/// The ids of the BPF programs a process holds (from /proc/PID/fdinfo).
pub fn prog_ids(pid: u32) -> anyhow::Result<Vec<u64>> {
    let mut ids = Vec::new();
    for e in fs::read_dir(format!("/proc/{pid}/fdinfo"))? {
        let info = fs::read_to_string(e?.path()).unwrap_or_default();
        ids.extend(
            info.lines()
                .find_map(|l| l.strip_prefix("prog_id:")?.trim().parse::<u64>().ok()),
        );
    }
    if ids.is_empty() {
        bail!("pid {pid} holds no BPF program descriptors");
    }
    Ok(ids)
}
