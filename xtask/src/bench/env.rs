//! Where the bench runs: its own tmpfs (files cost no disk I/O), the release binaries, and the
//! agents it starts there.
use std::{
    fs,
    net::TcpListener,
    path::{Path, PathBuf},
};

use anyhow::Context as _;

use super::agent::Agent;
use crate::cmd;

/// Paths and binaries of one bench run. Dropping it unmounts the bench's tmpfs.
pub struct Env {
    pub root: PathBuf,
    pub watched: PathBuf,
    pub unwatched: PathBuf,
    /// Where the workload of the operations that concern no watched socket works.
    pub elsewhere: PathBuf,
    pub sockwatch: PathBuf,
    pub workload: PathBuf,
    mounted: bool,
}

impl Env {
    pub fn prepare() -> anyhow::Result<Env> {
        let root = PathBuf::from("/run/sockwatch-bench");
        fs::create_dir_all(&root)?;
        let mounted = !is_mountpoint(&root)?;
        if mounted {
            let tmpfs = ["-t", "tmpfs", "-o", "size=4g", "sockwatch-bench"];
            cmd::run(cmd::command("mount").args(tmpfs).arg(&root))?;
        }
        for e in fs::read_dir(&root)? {
            let p = e?.path(); // whatever an earlier run left
            let _ = fs::remove_dir_all(&p).or_else(|_| fs::remove_file(&p));
        }
        for d in ["w", "u", "f", "n"] {
            fs::create_dir_all(root.join(d))?;
        }
        let release = cmd::target_dir().join("release");
        Ok(Env {
            watched: root.join("w"),
            unwatched: root.join("u"),
            elsewhere: root.join("n"),
            sockwatch: release.join("sockwatch"),
            workload: release.join("sockwatch-bench"),
            root,
            mounted,
        })
    }

    /// A one-shot workload subcommand; its JSON result.
    pub fn workload(&self, args: &[&str]) -> anyhow::Result<serde_json::Value> {
        let out = cmd::output(cmd::command(&self.workload).args(args))?;
        serde_json::from_str(out.trim()).with_context(|| format!("workload printed {out:?}"))
    }

    /// `sockwatch run --probe-mode MODE` with `args` for `phase`: its events file (emptied
    /// first) and log in the bench's root, /metrics on a free loopback port if `metrics`.
    pub fn start_agent(
        &self,
        phase: &str,
        mode: &str,
        metrics: bool,
        args: &[String],
    ) -> anyhow::Result<(Agent, PathBuf)> {
        let events = self.root.join(format!("{phase}-events.jsonl"));
        fs::write(&events, "")?;
        let log = self.root.join(format!("{phase}-agent.log"));
        let listen = match metrics {
            true => Some(TcpListener::bind("127.0.0.1:0")?.local_addr()?),
            false => None,
        };
        let agent = Agent::start(&self.sockwatch, mode, &events, &log, listen, args)?;
        Ok((agent, events))
    }

    /// `--watch DIR` of the watched directory.
    pub fn watch_watched(&self) -> Vec<String> {
        vec!["--watch".into(), self.watched.display().to_string()]
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if self.mounted {
            let _ = cmd::output(cmd::command("umount").arg(&self.root));
        }
    }
}

fn is_mountpoint(p: &Path) -> anyhow::Result<bool> {
    let want = p.display().to_string();
    let mounts = fs::read_to_string("/proc/self/mounts")?;
    Ok(mounts
        .lines()
        .any(|l| l.split_whitespace().nth(1) == Some(want.as_str())))
}

pub fn mount_tracefs() -> anyhow::Result<()> {
    let p = Path::new("/sys/kernel/tracing");
    if !is_mountpoint(p)? {
        cmd::run(cmd::command("mount").args(["-t", "tracefs", "none"]).arg(p))?;
    }
    Ok(())
}
