//! The auditd observer: the kernel's audit status, the bench's watch switched on and off, and
//! the guard that leaves auditing as the bench found it.
use std::{
    collections::BTreeMap,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::bail;

use super::process;
use crate::cmd;

/// The kernel's audit status (`auditctl -s`), as key → value.
pub fn status() -> anyhow::Result<BTreeMap<String, String>> {
    let out = cmd::output(cmd::command("auditctl").arg("-s"))?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().to_string()))
        })
        .collect())
}

pub fn auditctl(args: &[&str]) -> anyhow::Result<()> {
    cmd::output(cmd::command("auditctl").args(args)).map(drop)
}

/// The audit rule key the bench's watch carries.
const AUDIT_KEY: &str = "sockwatch-bench";

/// Audit switched on: the watch on `dir` (`-w DIR -p wa`), auditing enabled. Threads created
/// from now on get the kernel's per-task audit context.
pub fn on(dir: &Path) -> anyhow::Result<()> {
    auditctl(&["-D"])?;
    let dir = dir.display().to_string();
    auditctl(&["-w", &dir, "-p", "wa", "-k", AUDIT_KEY])?;
    auditctl(&["-e", "1"])
}

/// Audit switched off: no watch, auditing disabled, and `-a never,task` so that threads created
/// from now on carry no audit context (once auditing has been enabled since boot, the kernel
/// gives every new task one unless a task rule says never).
pub fn off() -> anyhow::Result<()> {
    auditctl(&["-D"])?;
    auditctl(&["-a", "never,task"])?;
    auditctl(&["-e", "0"])
}

/// Records the kernel's audit has lost since boot (`lost` in `auditctl -s`).
pub fn lost() -> anyhow::Result<u64> {
    Ok(status()?
        .get("lost")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0))
}

/// auditd for the comparison; dropping it leaves auditing off with `-a never,task` (see
/// [`off`]), stops the auditd this bench started and restores the backlog limit.
pub struct AuditGuard {
    started_pid: Option<u32>,
    backlog: String,
}

impl AuditGuard {
    pub fn prepare() -> anyhow::Result<AuditGuard> {
        let rules = cmd::output(cmd::command("auditctl").arg("-l"))?;
        let foreign: Vec<&str> = rules
            .lines()
            .filter(|l| *l != "No rules" && *l != "-a never,task" && !l.is_empty())
            .collect();
        if !foreign.is_empty() {
            bail!(
                "this machine has audit rules of its own ({}); the bench does not touch them",
                foreign.join("; ")
            );
        }
        let st = status()?;
        let backlog = st.get("backlog_limit").cloned().unwrap_or("64".into());
        let mut started_pid = None;
        if st.get("pid").is_none_or(|p| p == "0") {
            cmd::run(&mut cmd::command("auditd"))?;
            let t = Instant::now();
            loop {
                let pid = status()?
                    .get("pid")
                    .and_then(|p| p.parse::<u32>().ok())
                    .unwrap_or(0);
                if pid != 0 {
                    started_pid = Some(pid);
                    break;
                }
                if t.elapsed() > Duration::from_secs(10) {
                    bail!("auditd did not register with the kernel in 10 s");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let g = AuditGuard {
            started_pid,
            backlog,
        };
        // Debian's default rules (/etc/audit/rules.d/audit.rules) raise the backlog to 8192.
        auditctl(&["-b", "8192"])?;
        off()?;
        Ok(g)
    }
}

impl Drop for AuditGuard {
    fn drop(&mut self) {
        let _ = off();
        let _ = auditctl(&["-b", &self.backlog]);
        if let Some(pid) = self.started_pid {
            process::signal(pid, libc::SIGTERM);
        }
    }
}
