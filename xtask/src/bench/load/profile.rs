//! Where the agent's CPU goes: `perf record` on it, and its samples split by stage of the
//! event path.
use std::{fs, path::Path, process::Stdio, time::Duration};

use anyhow::Context as _;

use crate::{bench::agent, cmd};

/// A stage of the agent's event path: its name, and the symbols whose inclusive share
/// (own time and callees') is the stage's.
pub const STAGES: [(&str, &[&str]); 6] = [
    (
        "correlation engine (`Engine::apply_into`)",
        &["sockwatch::engine::Engine::apply_into"],
    ),
    (
        "event lines as JSON (`json::write_line`, `json::stamp`)",
        &[
            "sockwatch::events::json::write_line",
            "sockwatch::events::json::stamp",
        ],
    ),
    (
        "write(2) of the events file (`JsonLines::flush`)",
        &["sockwatch::pipeline::output::JsonLines::flush"],
    ),
    (
        "records decoded (`decode::decode`)",
        &["sockwatch::events::decode::decode"],
    ),
    (
        "completion: attribution, mount namespaces (`Completer::complete`)",
        &["sockwatch::events::complete::Completer::complete"],
    ),
    ("metrics (`Metrics::event`)", &["Metrics>::event"]),
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

/// Where the agent's CPU went: samples, each of [`STAGES`]' share (none when no sample named
/// one of its symbols: inlined, or never run), and the allocator's own share.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profile {
    pub samples: u64,
    pub stages: Vec<Option<f64>>,
    pub allocator: f64,
}

impl Profile {
    /// The stage with the largest share, and that share.
    pub fn largest(&self) -> Option<(&'static str, f64)> {
        let seen = STAGES
            .iter()
            .zip(&self.stages)
            .filter_map(|(st, share)| Some((st.0, (*share)?)));
        seen.max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// The profile from `perf report`'s samples per command (`counts`) and its table of
    /// inclusive and own shares per symbol (`shares`).
    pub fn parse(counts: &str, shares: &str) -> Profile {
        let count = |l: &str| l.split_whitespace().next()?.parse::<u64>().ok();
        let samples = counts
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(count)
            .sum();
        let rows: Vec<(f64, f64, &str)> = shares.lines().filter_map(share_row).collect();
        // A stage sums its symbols (none calls another); a symbol listed twice (two instances
        // of a generic) counts at its largest.
        let of = |sym: &str| {
            rows.iter()
                .filter(|r| r.2.contains(sym))
                .map(|r| r.0)
                .reduce(f64::max)
        };
        let stages = STAGES
            .iter()
            .map(|st| st.1.iter().filter_map(|s| of(s)).reduce(|a, b| a + b))
            .collect();
        let allocator = rows
            .iter()
            .filter(|r| ALLOCATOR.contains(&r.2))
            .map(|r| r.1)
            .sum();
        Profile {
            samples,
            stages,
            allocator,
        }
    }
}

/// `  47.50%     2.25%  [.] symbol`: (inclusive, own, symbol), as fractions.
fn share_row(line: &str) -> Option<(f64, f64, &str)> {
    let mut w = line.split_whitespace();
    let pct = |t: Option<&str>| t?.strip_suffix('%')?.parse::<f64>().ok().map(|x| x / 100.0);
    let (children, own, marker) = (pct(w.next())?, pct(w.next())?, w.next()?);
    let at = line.find(marker).filter(|_| marker.starts_with('['))? + marker.len();
    Some((children, own, line[at..].trim()))
}

/// `perf record` (4,999 samples a second, call graphs unwound from DWARF) on the agent.
pub struct Recording {
    child: std::process::Child,
    data: std::path::PathBuf,
}

impl Recording {
    pub fn start(pid: u32, dir: &Path) -> anyhow::Result<Recording> {
        let data = dir.join("agent.perf");
        let child = cmd::command("perf")
            .args([
                "record",
                "-q",
                "-F",
                "4999",
                "--call-graph",
                "dwarf,16384",
                "-p",
                &pid.to_string(),
                "-o",
            ])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start perf (apt-get install linux-perf)")?;
        // perf attaches within a few ms; the load must not start before it does.
        std::thread::sleep(Duration::from_millis(300));
        Ok(Recording { child, data })
    }

    /// Stops the recording (SIGINT, as perf expects: its exit status then says nothing) and
    /// reads it.
    pub fn finish(mut self) -> anyhow::Result<Profile> {
        agent::signal(self.child.id(), libc::SIGINT);
        self.child.wait().context("waiting for perf record")?;
        let report = |args: &[&str]| {
            cmd::output(
                cmd::command("perf")
                    .args(["report", "--stdio", "-i"])
                    .arg(&self.data)
                    .args(args),
            )
        };
        let counts = report(&["-g", "none", "--sort", "comm", "-F", "sample,comm"])?;
        let columns = "overhead_children,overhead,symbol";
        let shares = report(&[
            "--children",
            "-g",
            "none",
            "--percent-limit",
            "0",
            "-F",
            columns,
        ])?;
        let _ = fs::remove_file(&self.data);
        Ok(Profile::parse(&counts, &shares))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_are_inclusive_shares_and_the_allocator_its_own() {
        let shares = "# Children  Overhead  Symbol\n#\n\
            100.00%  0.00%  [.] std::thread::local::LocalKey<T>::with\n\
             47.50%  2.25%  [.] sockwatch::engine::Engine::apply_into\n\
             10.12%  1.38%  [.] sockwatch::events::json::write_line\n\
              2.50%  1.00%  [.] sockwatch::events::json::stamp\n\
             13.62%  0.00%  [.] sockwatch::pipeline::output::JsonLines::flush\n\
              6.25%  2.12%  [.] sockwatch::events::decode::decode\n\
              2.12%  0.75%  [.] sockwatch::metrics::hot::<impl sockwatch::metrics::Metrics>::event\n\
              1.00%  0.50%  [.] sockwatch::metrics::hot::<impl sockwatch::metrics::Metrics>::event\n\
              2.38%  0.75%  [.] _int_malloc\n  2.12%  2.12%  [.] _int_free\n  1.88%  1.88%  [.] malloc\n\
              4.25%  0.00%  [.] __GI___libc_malloc (inlined)\n 12.38%  0.00%  [k] shmem_file_write_iter\n";
        let p = Profile::parse("# Samples\n  2400  sockwatch\n   12  tokio-rt\n", shares);
        assert_eq!(p.samples, 2412);
        let near = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
        // write_line + stamp; no sample named Completer::complete; the larger instance of event.
        let want = [
            Some(0.475),
            Some(0.1262),
            Some(0.1362),
            Some(0.0625),
            None,
            Some(0.0212),
        ];
        for (got, want) in p.stages.iter().zip(want) {
            assert!(want.map_or(got.is_none(), |w| near(*got, w)), "{p:?}");
        }
        assert!(near(Some(p.allocator), 0.0475), "own shares only: {p:?}");
        assert_eq!(p.largest().map(|l| l.0), Some(STAGES[0].0));
        assert_eq!(
            share_row("  9.00%  1.00%  [k] do_syscall_64"),
            Some((0.09, 0.01, "do_syscall_64"))
        );
        assert_eq!(share_row("# Samples: 3K of event 'cpu-clock'"), None);
        assert_eq!(share_row("  9.00%  [k] do_syscall_64"), None);
    }
}
