//! docs/BENCHMARKS.md: the machine, the command, every figure, and the targets. Every sentence
//! is the method (what was measured and how) or a figure of this run; every table is written
//! by [`table::table`].
use std::time::Duration;

use super::{
    Plan,
    env::Env,
    load::{Footprint, Latency, Throughput},
    overhead::Overhead,
};
use crate::cmd;

/// Appends `format!(…)` and a blank line: one paragraph.
macro_rules! para {
    ($s:expr, $($t:tt)*) => {{ $s.push_str(&format!($($t)*)); $s.push_str("\n\n"); }};
}

mod load;
mod machine;
mod overhead;
mod table;
mod targets;
pub mod vm;

use load::{footprint_section, latency_section, throughput_section};
use machine::machine;
pub use machine::{command_line, date, loadavg};
use overhead::overhead_section;
use table::table;
pub use targets::Before;

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
    pub notes: Vec<String>,
    pub overhead: Option<Overhead>,
    pub latency: Option<Latency>,
    pub throughput: Option<Throughput>,
    pub footprint: Option<Footprint>,
    /// The report this one replaces: its figures are shown beside the new ones.
    pub before: Option<Before>,
}

impl Report {
    /// Records the machine, `sockwatch check`, the command and the load now.
    pub fn new(plan: &Plan, command: String, env: &Env) -> Report {
        let check = cmd::output(cmd::command(&env.sockwatch).arg("check"));
        Report {
            plan: plan.clone(),
            command,
            date: date(),
            machine: machine(env),
            check: check.unwrap_or_else(|e| format!("sockwatch check failed: {e:#}")),
            load_start: loadavg(),
            load_after_overhead: String::new(),
            load_end: String::new(),
            duration: Duration::ZERO,
            notes: Vec::new(),
            overhead: None,
            latency: None,
            throughput: None,
            footprint: None,
            before: None,
        }
    }

    pub fn finish(&mut self, took: Duration) {
        (self.load_end, self.duration) = (loadavg(), took);
    }

    pub fn render(&self) -> String {
        let mut s = String::from("# sockwatch benchmarks\n\n");
        self.intro(&mut s);
        let targets = self.targets();
        self.targets_table(&mut s, &targets);
        if let Some(o) = &self.overhead {
            overhead_section(&mut s, &self.plan, o);
        }
        if let Some(t) = &self.throughput {
            throughput_section(&mut s, &self.plan, t);
        }
        if let Some(f) = &self.footprint {
            footprint_section(&mut s, f, self.throughput.as_ref());
        }
        if let Some(l) = &self.latency {
            latency_section(&mut s, l);
        }
        self.missed_section(&mut s, &targets);
        self.not_measured(&mut s);
        s + "\n"
    }

    /// How the report was written, the run, the machine and `sockwatch check`.
    fn intro(&self, s: &mut String) {
        para!(
            s,
            "<!-- Written by `cargo xtask bench` (xtask/src/bench/, workload in bench/) from a real run; \
             rerun it rather than editing the figures. -->"
        );
        para!(
            s,
            "Run `{}` as root on {}; it took {:.1} min. Host figures, native (no emulation). Probe tier: \
             **tracepoint** (`--probe-mode tracepoint`); the tiers this host offers are in `sockwatch check` below.",
            self.command,
            self.date,
            self.duration.as_secs_f64() / 60.0
        );
        let loads = format!(
            "start {}; after the overhead phase {}; end {}",
            self.load_start, self.load_after_overhead, self.load_end
        );
        let rows = self.machine.iter().map(|(k, v)| (*k, v.clone()));
        let rows = rows.chain([("load average (1, 5, 15 min)", loads)]);
        table(
            s,
            &["machine", ""],
            "ll",
            rows.map(|(k, v)| vec![k.to_owned(), v]),
        );
        para!(
            s,
            "The overhead phase interleaves observers round by round, so drift in background load falls on \
             every observer alike; the other phases are single runs and carry that noise."
        );
        para!(
            s,
            "`sockwatch check` on this host:\n\n```\n{}```",
            self.check
        );
    }

    /// What this run leaves out, and the run's notes.
    fn not_measured(&self, s: &mut String) {
        *s += "## Not measured here\n\n";
        *s += "- **Precise tiers (fentry/fexit, BPF LSM, kprobes).** This host cannot load them, so this run \
              measures the tracepoint tier only. `cargo xtask bench --vm SERIES` measures every tier in a QEMU \
              guest, with their targets (≤ 3 % per socket life cycle, ≤ 1 % per regular-file unlink and per \
              unrelated syscall); its section, when it has run, follows this one and is kept by a host run.\n";
        if let Some(f) = &self.footprint {
            *s += &format!(
                "- **10,000 /metrics series.** The scrape was timed with {} configured watches, which gave {} \
                 series (see the scrape section).\n",
                f.watches, f.series
            );
        }
        for n in &self.notes {
            *s += &format!("- {n}\n");
        }
    }
}

#[cfg(test)]
mod tests;
