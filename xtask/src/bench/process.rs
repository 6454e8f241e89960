//! The processes the bench started: signalling, stopping and reaping them, and their /proc
//! figures.
use std::{
    fs,
    process::{Child, ExitStatus},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

/// Sends `sig` to `pid`, a process the bench started.
pub fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill takes no pointers and touches no memory of this process; any pid and signal
    // number are sound to pass (a wrong one is an error return).
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// SIGINT to `child` (`what`, for the error), then waits up to `limit` for it to exit; kills
/// it after that.
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

/// utime + stime of a process, in seconds (/proc/PID/stat, clock-tick resolution).
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesised comm: state is field 3; utime and stime are 14 and 15.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed /proc/PID/stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>()? + f[12].parse::<u64>()?;
    Ok(ticks as f64 / clock_ticks())
}

pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf takes no pointers; an unknown name is an error return (-1, clamped here).
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    ticks.max(1) as f64
}

/// A `/proc/PID/status` field in KiB (VmRSS, VmHWM).
pub fn status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

/// The ids of the BPF programs a process holds (from /proc/PID/fdinfo).
pub fn prog_ids(pid: u32) -> anyhow::Result<Vec<u64>> {
    let mut ids = Vec::new();
    for e in fs::read_dir(format!("/proc/{pid}/fdinfo"))? {
        let info = fs::read_to_string(e?.path()).unwrap_or_default();
        if let Some(id) = info
            .lines()
            .find_map(|l| l.strip_prefix("prog_id:"))
            .and_then(|v| v.trim().parse().ok())
        {
            ids.push(id);
        }
    }
    if ids.is_empty() {
        bail!("sockwatch (pid {pid}) holds no BPF program descriptors");
    }
    Ok(ids)
}
