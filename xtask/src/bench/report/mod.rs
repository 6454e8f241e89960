//! docs/BENCHMARKS.md: the machine, the exact command, every figure, and the targets. Every
//! sentence is either the method (what was measured and how) or a figure of this run.
mod before;
mod footprint;
mod format;
mod latency;
mod machine;
mod missed;
mod overhead;
mod targets;
#[cfg(test)]
mod tests;
mod throughput;
pub mod vm;

use std::{fmt::Write as _, time::Duration};

pub use self::before::Before;
pub use self::machine::{date, loadavg};
use self::targets::Target;
use super::{
    env::Env, footprint::Footprint, latency::Latency, log::Notes, overhead::Overhead, plan::Plan,
    throughput::Throughput,
};

/// `cargo xtask` and `args`, as the report names the command that wrote it.
pub fn command_line(args: impl IntoIterator<Item = String>) -> String {
    std::iter::once("cargo xtask".to_string())
        .chain(args)
        .collect::<Vec<_>>()
        .join(" ")
}

pub struct Report {
    plan: Plan,
    command: String,
    date: String,
    machine: Vec<(&'static str, String)>,
    check: String,
    load_start: String,
    pub load_after_overhead: String,
    load_end: String,
    duration: Duration,
    pub notes: Notes,
    pub overhead: Option<Overhead>,
    pub latency: Option<Latency>,
    pub throughput: Option<Throughput>,
    pub footprint: Option<Footprint>,
    /// The report this one replaces: its figures are shown beside the new ones.
    pub before: Option<Before>,
}

impl Report {
    /// Records the machine, the command (`cargo xtask` and `args`) and the load now.
    pub fn new(plan: &Plan, args: Vec<String>, env: &Env) -> anyhow::Result<Report> {
        Ok(Report {
            plan: plan.clone(),
            command: command_line(args),
            date: machine::date(),
            machine: machine::facts(env),
            check: machine::check(env),
            load_start: loadavg(),
            load_after_overhead: String::new(),
            load_end: String::new(),
            duration: Duration::ZERO,
            notes: Notes::default(),
            overhead: None,
            latency: None,
            throughput: None,
            footprint: None,
            before: None,
        })
    }

    pub fn finish(&mut self, took: Duration) {
        self.load_end = loadavg();
        self.duration = took;
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = self.render_into(&mut s);
        s
    }

    fn targets(&self) -> Vec<Target> {
        targets::all(
            self.overhead.as_ref(),
            self.throughput.as_ref(),
            self.footprint.as_ref(),
            self.latency.as_ref(),
        )
    }

    fn render_into(&self, s: &mut String) -> std::fmt::Result {
        self.render_header(s)?;
        let targets = self.targets();
        targets::render(s, &targets, self.before.as_ref())?;
        if let Some(o) = &self.overhead {
            overhead::render(s, &self.plan, o)?;
        }
        if let Some(t) = &self.throughput {
            throughput::render(s, &self.plan, t)?;
        }
        if let Some(f) = &self.footprint {
            footprint::render(s, f, self.throughput.as_ref())?;
        }
        if let Some(l) = &self.latency {
            latency::render(s, l)?;
        }
        let overhead = self
            .overhead
            .as_ref()
            .filter(|_| targets::overhead_missed(&targets));
        let agent_cpu = self.throughput.as_ref().and_then(|t| {
            let us = t.at_50k()?.cpu_us_per_event()?;
            (us > targets::AGENT_CPU_US).then_some((us, t))
        });
        if overhead.is_some() || agent_cpu.is_some() {
            writeln!(s, "## Missed targets: the measured breakdown\n")?;
        }
        if let Some(o) = overhead {
            missed::render(s, o)?;
        }
        if let Some((us, t)) = agent_cpu {
            missed::agent_cpu(s, us, t)?;
        }
        self.render_not_measured(s)
    }

    /// The title, the command, the machine and `sockwatch check`.
    fn render_header(&self, s: &mut String) -> std::fmt::Result {
        writeln!(s, "# sockwatch benchmarks\n")?;
        writeln!(
            s,
            "<!-- Written by `cargo xtask bench` (xtask/src/bench/, workload in bench/) from a \
             real run; rerun it rather than editing the figures. -->\n"
        )?;
        writeln!(
            s,
            "Run `{}` as root on {}; it took {:.1} min. Host figures, native (no emulation). \
             Probe tier: **tracepoint** (`--probe-mode tracepoint`); the tiers this host offers \
             are in `sockwatch check` below.\n",
            self.command,
            self.date,
            self.duration.as_secs_f64() / 60.0
        )?;
        writeln!(s, "| machine | |\n| --- | --- |")?;
        for (k, v) in &self.machine {
            writeln!(s, "| {k} | {v} |")?;
        }
        writeln!(
            s,
            "| load average (1, 5, 15 min) | start {}; after the overhead phase {}; end {} |\n",
            self.load_start, self.load_after_overhead, self.load_end
        )?;
        writeln!(
            s,
            "The load average above says how busy the machine was during the run. The \
             overhead phase interleaves observers round by round, so drift in background load \
             falls on every observer alike; the other phases are single runs and carry that \
             noise.\n"
        )?;
        writeln!(
            s,
            "`sockwatch check` on this host:\n\n```\n{}```\n",
            self.check
        )
    }

    /// What this run did not measure, and the notes taken on the way.
    fn render_not_measured(&self, s: &mut String) -> std::fmt::Result {
        writeln!(s, "## Not measured here\n")?;
        writeln!(
            s,
            "- **Precise tiers (fentry/fexit, BPF LSM, kprobes).** This host cannot load them, \
             so this run measures the tracepoint tier only. `cargo xtask bench --vm SERIES` \
             measures every tier in a QEMU guest, with their targets (≤ 3 % per socket life \
             cycle, ≤ 1 % per regular-file unlink and per unrelated syscall); its section, \
             when it has run, follows this one and is kept as it is by a host run."
        )?;
        if let Some(f) = &self.footprint {
            writeln!(
                s,
                "- **10,000 /metrics series.** The scrape was timed with {} configured \
                 watches, which gave {} series (see the scrape section).",
                f.watches, f.series
            )?;
        }
        for n in self.notes.iter() {
            writeln!(s, "- {n}")?;
        }
        writeln!(s)
    }
}
