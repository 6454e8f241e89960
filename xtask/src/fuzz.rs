//! `cargo xtask fuzz`: builds the libFuzzer targets of `fuzz/` with nightly, SanitizerCoverage
//! and AddressSanitizer (the flags cargo-fuzz passes, so no extra tool is installed), then
//! runs each for a fixed time from its committed corpus. New inputs go to a scratch corpus
//! under the target directory, so a run never changes the checkout; a crash fails the run and
//! leaves its input in `target/fuzz/artifacts/<target>/`, to be committed to
//! `fuzz/corpus/<target>/` once fixed (the corpus test replays it on every run).
use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::Context as _;

use crate::cmd;

/// The fuzz targets, as `fuzz/Cargo.toml` names its binaries.
pub const TARGETS: &[&str] = &[
    "record",
    "config",
    "http_head",
    "mountinfo",
    "procfs",
    "sock_diag",
    "replay",
    "text",
];

/// What cargo-fuzz passes to rustc: edge coverage with inline counters and comparison tracing
/// for libFuzzer, AddressSanitizer for the `unsafe` reads, and the checks a debug build has.
const RUSTFLAGS: &[&str] = &[
    "-Cpasses=sancov-module",
    "-Cllvm-args=-sanitizer-coverage-level=4",
    "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters",
    "-Cllvm-args=-sanitizer-coverage-pc-table",
    "-Cllvm-args=-sanitizer-coverage-trace-compares",
    "--cfg=fuzzing",
    "-Cdebug-assertions",
    "-Coverflow-checks",
    "-Cforce-frame-pointers",
    "-Zsanitizer=address",
];

/// One target's run.
pub struct Outcome {
    pub target: &'static str,
    pub runs: u64,
    pub elapsed: Duration,
    pub corpus: usize,
    /// The input that crashed it, if one did.
    pub crash: Option<PathBuf>,
}

/// The table `--write-doc` replaces in docs/RELIABILITY.md: from this line to [`TABLE_END`].
const TABLE_START: &str = "<!-- fuzz table: written by `cargo xtask fuzz --write-doc` -->";
const TABLE_END: &str = "<!-- end of fuzz table -->";

/// Builds every target, runs those in `only` (all when empty) for `secs` each; `true` when
/// none crashed. With `write_doc`, the runs replace the fuzz table of docs/RELIABILITY.md.
pub fn run(secs: u64, only: &[String], write_doc: bool) -> anyhow::Result<bool> {
    let targets = select(only)?;
    build()?;
    // Each target is one single-threaded process with its own corpus: one per core at a time.
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let mut outcomes = Vec::new();
    for batch in targets.chunks(cores) {
        let runs: Vec<_> = std::thread::scope(|s| {
            let started: Vec<_> = batch
                .iter()
                .map(|&target| s.spawn(move || fuzz_one(target, secs)))
                .collect();
            started
                .into_iter()
                .map(|run| run.join().expect("a fuzz run's thread panicked"))
                .collect()
        });
        for o in runs {
            let o = o?;
            println!("{}", summary(&o));
            outcomes.push(o);
        }
    }
    if write_doc {
        let doc = cmd::workspace_root().join("docs/RELIABILITY.md");
        let text = std::fs::read_to_string(&doc).with_context(|| doc.display().to_string())?;
        std::fs::write(&doc, with_table(&text, &table(&outcomes))?)
            .with_context(|| doc.display().to_string())?;
        println!("xtask: wrote the fuzz table of {}", doc.display());
    }
    Ok(outcomes.iter().all(|o| o.crash.is_none()))
}

/// The Markdown rows of these runs.
fn table(outcomes: &[Outcome]) -> String {
    let mut t = String::from(
        "| target | time | inputs run | per second | corpus after | result |\n\
         | --- | ---: | ---: | ---: | ---: | --- |\n",
    );
    for o in outcomes {
        let secs = o.elapsed.as_secs_f64();
        let result = match &o.crash {
            None => "no crash".to_owned(),
            Some(_) => "**crash**".to_owned(),
        };
        t.push_str(&format!(
            "| `{}` | {secs:.0} s | {} | {:.0} | {} | {result} |\n",
            o.target,
            o.runs,
            o.runs as f64 / secs.max(0.001),
            o.corpus
        ));
    }
    t
}

/// `doc` with the text between its table markers replaced by `table`.
fn with_table(doc: &str, table: &str) -> anyhow::Result<String> {
    let (head, rest) = doc
        .split_once(TABLE_START)
        .with_context(|| format!("docs/RELIABILITY.md has no line `{TABLE_START}`"))?;
    let (_, tail) = rest
        .split_once(TABLE_END)
        .with_context(|| format!("docs/RELIABILITY.md has no line `{TABLE_END}`"))?;
    Ok(format!("{head}{TABLE_START}\n{table}{TABLE_END}{tail}"))
}

fn select(only: &[String]) -> anyhow::Result<Vec<&'static str>> {
    if only.is_empty() {
        return Ok(TARGETS.to_vec());
    }
    only.iter()
        .map(|name| {
            TARGETS
                .iter()
                .copied()
                .find(|t| t == name)
                .with_context(|| format!("no fuzz target `{name}` (targets: {TARGETS:?})"))
        })
        .collect()
}

fn triple() -> String {
    format!("{}-unknown-linux-gnu", std::env::consts::ARCH)
}

fn fuzz_dir() -> PathBuf {
    cmd::target_dir().join("fuzz")
}

/// `--target` keeps the flags off build scripts and proc macros, as cargo-fuzz does.
fn build() -> anyhow::Result<()> {
    let mut c = cmd::cargo();
    c.args([
        "+nightly",
        "build",
        "--release",
        "-p",
        "sockwatch-fuzz",
        "--bins",
    ])
    .args(["--target", &triple()])
    .arg("--target-dir")
    .arg(fuzz_dir())
    .env("CARGO_ENCODED_RUSTFLAGS", RUSTFLAGS.join("\x1f"))
    .env_remove("RUSTC")
    .env_remove("RUSTC_WORKSPACE_WRAPPER")
    .env_remove("RUSTUP_TOOLCHAIN");
    cmd::run(&mut c).context("building the fuzz targets (nightly)")
}

fn fuzz_one(target: &'static str, secs: u64) -> anyhow::Result<Outcome> {
    let exe = fuzz_dir().join(triple()).join("release").join(target);
    let scratch = fuzz_dir().join("corpus").join(target);
    let artifacts = fuzz_dir().join("artifacts").join(target);
    let seeds = cmd::workspace_root().join("fuzz/corpus").join(target);
    for dir in [&scratch, &artifacts] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let started = Instant::now();
    // The first corpus directory receives new inputs; the committed one is only read.
    let out = Command::new(&exe)
        .arg(&scratch)
        .arg(&seeds)
        .arg(format!("-max_total_time={secs}"))
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .args(["-print_final_stats=1", "-timeout=10", "-rss_limit_mb=2048"])
        .output()
        .with_context(|| format!("cannot start {}", exe.display()))?;
    let log = String::from_utf8_lossy(&out.stderr);
    let crash = (!out.status.success()).then(|| crash_input(&log, &artifacts));
    if crash.is_some() {
        eprintln!("{log}");
    }
    Ok(Outcome {
        target,
        runs: final_stat(&log, "number_of_executed_units").unwrap_or(0),
        elapsed: started.elapsed(),
        corpus: count_files(&scratch) + count_files(&seeds),
        crash,
    })
}

/// libFuzzer's `stat::<name>: N` line at exit.
fn final_stat(log: &str, name: &str) -> Option<u64> {
    let key = format!("stat::{name}:");
    log.lines()
        .find_map(|l| l.strip_prefix(key.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

/// Where libFuzzer wrote the crashing input (`Test unit written to PATH`), else the
/// artifacts directory.
fn crash_input(log: &str, artifacts: &Path) -> PathBuf {
    log.lines()
        .find_map(|l| l.split_once("Test unit written to ").map(|(_, p)| p.trim()))
        .map_or_else(|| artifacts.to_path_buf(), PathBuf::from)
}

fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.filter_map(Result::ok).count())
}

fn summary(o: &Outcome) -> String {
    let secs = o.elapsed.as_secs_f64();
    let result = match &o.crash {
        None => "no crash".to_owned(),
        Some(input) => format!("CRASH, input {}", input.display()),
    };
    format!(
        "xtask: fuzz {:<10} {:>10} runs in {secs:>5.1} s ({:>7.0}/s), corpus {:>5}: {result}",
        o.target,
        o.runs,
        o.runs as f64 / secs.max(0.001),
        o.corpus
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "#1234 DONE   cov: 812 ft: 2301 corp: 211/9812b\n\
        Done 1234 runs in 31 second(s)\n\
        stat::number_of_executed_units: 1234\n\
        stat::average_exec_per_sec:     39\n";

    #[test]
    fn final_stats_are_read_from_the_log() {
        assert_eq!(final_stat(LOG, "number_of_executed_units"), Some(1234));
        assert_eq!(final_stat(LOG, "average_exec_per_sec"), Some(39));
        assert_eq!(final_stat(LOG, "peak_rss_mb"), None);
    }

    #[test]
    fn the_crashing_input_is_found_in_the_log() {
        let log = "==1== ERROR: libFuzzer: deadly signal\n\
            artifact_prefix='/t/a/'; Test unit written to /t/a/crash-0a1b\n";
        assert_eq!(
            crash_input(log, Path::new("/t/a")),
            PathBuf::from("/t/a/crash-0a1b")
        );
        assert_eq!(crash_input("", Path::new("/t/a")), PathBuf::from("/t/a"));
    }

    #[test]
    fn the_table_replaces_only_what_lies_between_its_markers() {
        let doc = format!("# R\n\n{TABLE_START}\nold\n{TABLE_END}\n\nafter\n");
        let o = Outcome {
            target: "record",
            runs: 1000,
            elapsed: Duration::from_secs(10),
            corpus: 7,
            crash: None,
        };
        let new = with_table(&doc, &table(&[o])).expect("markers");
        assert!(new.starts_with("# R\n\n"), "{new}");
        assert!(new.ends_with(&format!("{TABLE_END}\n\nafter\n")), "{new}");
        assert!(
            new.contains("| `record` | 10 s | 1000 | 100 | 7 | no crash |"),
            "{new}"
        );
        assert!(!new.contains("old"), "{new}");
        assert!(with_table("no markers", "").is_err());
    }

    #[test]
    fn the_targets_match_the_fuzz_crate() {
        let manifest = std::fs::read_to_string(cmd::workspace_root().join("fuzz/Cargo.toml"))
            .expect("fuzz/Cargo.toml");
        let bins: Vec<&str> = manifest
            .lines()
            .filter_map(|l| l.strip_prefix("name = \""))
            .filter_map(|l| l.strip_suffix('"'))
            .filter(|n| *n != "sockwatch-fuzz" && *n != "sockwatch_fuzz")
            .collect();
        assert_eq!(bins, TARGETS);
    }
}
