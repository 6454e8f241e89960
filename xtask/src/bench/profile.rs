//! Where the agent's CPU goes under load: `perf record` (call graphs unwound from DWARF) on the
//! running agent through one more 50,000 events/s step of the throughput phase, read as each
//! stage's share of the agent's samples: the stage's own time and its callees'. The stages
//! are the pipeline's functions an event passes through; the allocator's own time is
//! reported apart, as every stage calls it.
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Stdio},
};

use anyhow::Context as _;

use super::process;
use crate::cmd;

/// A stage of the agent's event path.
pub struct Stage {
    pub name: &'static str,
    /// The symbols whose inclusive share is the stage's; a symbol matches where it occurs.
    symbols: &'static [&'static str],
}

pub const STAGES: [Stage; 6] = [
    Stage {
        name: "correlation engine (`Engine::apply_into`)",
        symbols: &["sockwatch::engine::Engine::apply_into"],
    },
    Stage {
        name: "event lines as JSON (`json::write_line`, `json::stamp`)",
        symbols: &[
            "sockwatch::events::json::write_line",
            "sockwatch::events::json::stamp",
        ],
    },
    Stage {
        name: "write(2) of the events file (`JsonLines::flush`)",
        symbols: &["sockwatch::pipeline::output::JsonLines::flush"],
    },
    Stage {
        name: "records decoded (`decode::decode`)",
        symbols: &["sockwatch::events::decode::decode"],
    },
    Stage {
        name: "completion: attribution, mount namespaces (`Completer::complete`)",
        symbols: &["sockwatch::events::complete::Completer::complete"],
    },
    Stage {
        name: "metrics (`Metrics::event`)",
        symbols: &["Metrics>::event"],
    },
];

/// The C library's allocator: its own time (not inclusive), spread over every stage.
const ALLOCATOR: [&str; 9] = [
    "malloc",
    "_int_malloc",
    "free",
    "_int_free",
    "cfree@GLIBC_2.2.5",
    "malloc_consolidate",
    "realloc",
    "_int_realloc",
    "unlink_chunk.isra.0",
];

/// What the profile found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profile {
    pub samples: u64,
    /// Each of [`STAGES`] (by index) and its share of the samples (0..1); `None` when no
    /// sample named one of its symbols (inlined, or never run).
    pub stages: Vec<Option<f64>>,
    /// The allocator's own share.
    pub allocator: f64,
}

/// A `perf record` attached to the agent, until [`Recording::finish`].
pub struct Recording {
    child: Child,
    data: PathBuf,
}

impl Profile {
    /// The stage with the largest share, and that share.
    pub fn largest(&self) -> Option<(&'static Stage, f64)> {
        STAGES
            .iter()
            .zip(&self.stages)
            .filter_map(|(stage, share)| Some((stage, (*share)?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }
}

impl Recording {
    /// Starts recording `pid` into `dir/agent.perf`, 4,999 samples a second.
    pub fn start(pid: u32, dir: &Path) -> anyhow::Result<Recording> {
        let data = dir.join("agent.perf");
        let child = cmd::command("perf")
            .args(["record", "-q", "-F", "4999", "--call-graph", "dwarf,16384"])
            .args(["-p", &pid.to_string(), "-o"])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start perf (apt-get install linux-perf)")?;
        // perf attaches within a few ms; the load must not start before it does.
        std::thread::sleep(std::time::Duration::from_millis(300));
        Ok(Recording { child, data })
    }

    /// Stops the recording (SIGINT, as perf expects) and reads it.
    pub fn finish(mut self) -> anyhow::Result<Profile> {
        process::signal(self.child.id(), libc::SIGINT);
        // Its exit status after SIGINT says nothing (130 from some builds): a recording that
        // failed is one `perf report` cannot read.
        self.child.wait().context("waiting for perf record")?;
        let report = |args: &[&str]| {
            let mut c = cmd::command("perf");
            c.args(["report", "--stdio", "-i"])
                .arg(&self.data)
                .args(args);
            cmd::output(&mut c)
        };
        let counts = report(&["-g", "none", "--sort", "comm", "-F", "sample,comm"])?;
        let shares = report(&[
            "--children",
            "-g",
            "none",
            "--percent-limit",
            "0",
            "-F",
            "overhead_children,overhead,symbol",
        ])?;
        let _ = fs::remove_file(&self.data);
        Ok(parse(&counts, &shares))
    }
}

/// The profile from `perf report`'s sample counts per command (`counts`) and its table of
/// inclusive and own shares per symbol (`shares`).
pub fn parse(counts: &str, shares: &str) -> Profile {
    let samples = counts
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    let rows: Vec<(f64, f64, &str)> = shares.lines().filter_map(share_row).collect();
    let stages = STAGES
        .iter()
        .map(|stage| {
            // A stage of several symbols sums them (none calls another); a symbol listed
            // twice (two instances of a generic) counts at its largest.
            let of = |sym: &str| {
                rows.iter()
                    .filter(|(_, _, s)| s.contains(sym))
                    .map(|(children, _, _)| *children)
                    .reduce(f64::max)
            };
            let found: Vec<f64> = stage.symbols.iter().filter_map(|s| of(s)).collect();
            (!found.is_empty()).then(|| found.iter().sum())
        })
        .collect();
    let allocator = rows
        .iter()
        .filter(|(_, _, s)| ALLOCATOR.contains(s))
        .map(|(_, own, _)| own)
        .sum();
    Profile {
        samples,
        stages,
        allocator,
    }
}

/// `  47.50%     2.25%  [.] symbol`: (inclusive, own, symbol), as fractions.
fn share_row(line: &str) -> Option<(f64, f64, &str)> {
    let mut w = line.split_whitespace();
    let pct = |t: Option<&str>| t?.strip_suffix('%')?.parse::<f64>().ok().map(|x| x / 100.0);
    let (children, own) = (pct(w.next())?, pct(w.next())?);
    let marker = w.next()?;
    if !marker.starts_with('[') {
        return None;
    }
    let at = line.find(marker)? + marker.len();
    Some((children, own, line[at..].trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHARES: &str = "\
# Children  Overhead  Symbol
#
   100.00%     0.00%  [.] std::thread::local::LocalKey<T>::with
    47.50%     2.25%  [.] sockwatch::engine::Engine::apply_into
    10.12%     1.38%  [.] sockwatch::events::json::write_line
     2.50%     1.00%  [.] sockwatch::events::json::stamp
    13.62%     0.00%  [.] sockwatch::pipeline::output::JsonLines::flush
     6.25%     2.12%  [.] sockwatch::events::decode::decode
     2.12%     0.75%  [.] sockwatch::metrics::hot::<impl sockwatch::metrics::Metrics>::event
     1.00%     0.50%  [.] sockwatch::metrics::hot::<impl sockwatch::metrics::Metrics>::event
     2.38%     0.75%  [.] _int_malloc
     2.12%     2.12%  [.] _int_free
     1.88%     1.88%  [.] malloc
     4.25%     0.00%  [.] __GI___libc_malloc (inlined)
    12.38%     0.00%  [k] shmem_file_write_iter
";

    #[test]
    fn stages_are_inclusive_shares_and_the_allocator_its_own() {
        let p = parse("# Samples\n  2400  sockwatch\n   12  tokio-rt\n", SHARES);
        assert_eq!(p.samples, 2412);
        let share = |i: usize| p.stages[i].expect("seen");
        assert!((share(0) - 0.475).abs() < 1e-9, "{p:?}");
        assert!(
            (share(1) - 0.1262).abs() < 1e-9,
            "write_line + stamp: {p:?}"
        );
        assert!((share(2) - 0.1362).abs() < 1e-9);
        assert!((share(3) - 0.0625).abs() < 1e-9);
        assert_eq!(p.stages[4], None, "no sample named Completer::complete");
        assert!(
            (share(5) - 0.0212).abs() < 1e-9,
            "the larger instance: {p:?}"
        );
        assert!(
            (p.allocator - 0.0475).abs() < 1e-9,
            "own shares only: {p:?}"
        );
        let (stage, share) = p.largest().expect("stages seen");
        assert!(stage.name.contains("Engine::apply_into") && (share - 0.475).abs() < 1e-9);
    }

    #[test]
    fn rows_need_two_shares_and_a_symbol_kind() {
        assert_eq!(
            share_row("  9.00%  1.00%  [k] do_syscall_64"),
            Some((0.09, 0.01, "do_syscall_64"))
        );
        assert_eq!(share_row("# Samples: 3K of event 'cpu-clock'"), None);
        assert_eq!(share_row("  9.00%  [k] do_syscall_64"), None);
    }
}
