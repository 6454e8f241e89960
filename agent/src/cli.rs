//! Command line. Every flag can also come from the environment (`SOCKWATCH_*`).
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::probes::ProbeMode;

/// sockwatch: watches UNIX-domain socket files and reports who deletes or replaces a socket
/// that another process still listens on.
#[derive(Debug, Parser)]
#[command(name = "sockwatch", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Load the kernel probes and stream events as JSON lines until SIGINT or SIGTERM.
    Run(RunArgs),
    /// Print, per hook, which tiers this kernel supports and which one `run` would attach.
    Check(CheckArgs),
    /// One-shot audit of the node without eBPF: orphaned listeners, stale socket files and
    /// stale bind mounts, from sock_diag, /proc/*/fd and /proc/*/mountinfo. Exit status 0:
    /// clean, 1: problems found, 2: error.
    Scan(ScanArgs),
    /// Run a recorded event log (JSON lines, as `run` writes them) through the correlation
    /// engine again and print its verdicts.
    Replay(ReplayArgs),
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The event log; `-` is stdin.
    pub file: PathBuf,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Which probe tiers may attach: the best available (auto), precise only, or tracepoints.
    #[arg(long, value_enum, default_value = "auto", env = "SOCKWATCH_PROBE_MODE")]
    pub probe_mode: ProbeMode,
    /// Where to write events, one JSON object per line; `-` is stdout.
    #[arg(long, default_value = "-", env = "SOCKWATCH_EVENTS")]
    pub events: PathBuf,
    /// Watch only sockets in (or below, up to 8 levels) this directory; repeatable. Without
    /// it every path socket on the node is watched.
    #[arg(
        long = "watch",
        value_name = "DIR",
        env = "SOCKWATCH_WATCH",
        value_delimiter = ','
    )]
    pub watch: Vec<PathBuf>,
    /// Seconds between reconciliation sweeps (sock_diag + /proc), which repair the picture
    /// after lost events; 0 disables them (the startup scan always runs).
    #[arg(long, default_value_t = 30, env = "SOCKWATCH_SCAN_INTERVAL_SECS")]
    pub scan_interval_secs: u64,
    /// How often to drain the ring buffer when the kernel has not woken the agent.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1000), env = "SOCKWATCH_DRAIN_INTERVAL_MS")]
    pub drain_interval_ms: u64,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The mode whose choice to report.
    #[arg(long, value_enum, default_value = "auto", env = "SOCKWATCH_PROBE_MODE")]
    pub probe_mode: ProbeMode,
}

#[derive(Debug, Args)]
pub struct ScanArgs {
    /// Look for stale socket files below this directory (or at this socket file), and report
    /// only findings about paths below it; repeatable. Without it the whole node is audited,
    /// and stale files are looked for only at the paths of existing sockets.
    #[arg(
        long = "watch",
        value_name = "PATH",
        env = "SOCKWATCH_WATCH",
        value_delimiter = ','
    )]
    pub watch: Vec<PathBuf>,
    /// Output: one line per finding (summary and warnings on stderr), or one JSON object.
    #[arg(
        long,
        value_enum,
        default_value = "table",
        env = "SOCKWATCH_SCAN_FORMAT"
    )]
    pub format: crate::scan::report::Format,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("sockwatch").chain(args.iter().copied()))
    }

    #[test]
    fn definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_defaults() {
        let Command::Run(a) = parse(&["run"]).expect("parses").command else {
            panic!("not run")
        };
        assert_eq!(a.probe_mode, ProbeMode::Auto);
        assert_eq!(a.events, PathBuf::from("-"));
        assert_eq!(a.drain_interval_ms, 10);
        assert!(a.watch.is_empty());
    }

    #[test]
    fn replay_takes_a_file() {
        let Command::Replay(a) = parse(&["replay", "/tmp/log.jsonl"])
            .expect("parses")
            .command
        else {
            panic!("not replay")
        };
        assert_eq!(a.file, PathBuf::from("/tmp/log.jsonl"));
        assert!(parse(&["replay"]).is_err());
    }

    #[test]
    fn watch_is_repeatable() {
        let Command::Run(a) = parse(&["run", "--watch", "/run/a", "--watch", "/run/b"])
            .expect("parses")
            .command
        else {
            panic!("not run")
        };
        assert_eq!(
            a.watch,
            vec![PathBuf::from("/run/a"), PathBuf::from("/run/b")]
        );
    }

    #[test]
    fn run_flags() {
        let Command::Run(a) =
            parse(&["run", "--probe-mode", "precise", "--events", "/tmp/e.jsonl"])
                .expect("parses")
                .command
        else {
            panic!("not run")
        };
        assert_eq!(a.probe_mode, ProbeMode::Precise);
        assert_eq!(a.events, PathBuf::from("/tmp/e.jsonl"));
    }

    #[test]
    fn scan_flags() {
        let Command::Scan(a) = parse(&["scan"]).expect("parses").command else {
            panic!("not scan")
        };
        assert!(a.watch.is_empty());
        assert_eq!(a.format, crate::scan::report::Format::Table);
        let Command::Scan(a) = parse(&[
            "scan", "--watch", "/a,/b", "--watch", "/c", "--format", "json",
        ])
        .expect("parses")
        .command
        else {
            panic!("not scan")
        };
        assert_eq!(
            a.watch,
            vec![
                PathBuf::from("/a"),
                PathBuf::from("/b"),
                PathBuf::from("/c")
            ]
        );
        assert_eq!(a.format, crate::scan::report::Format::Json);
        let e = parse(&["scan", "--format", "xml"]).unwrap_err().to_string();
        assert!(e.contains("--format"), "{e}");
    }

    #[test]
    fn bad_flags_are_rejected_with_the_flag_named() {
        let e = parse(&["run", "--probe-mode", "magic"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--probe-mode"), "{e}");
        let e = parse(&["run", "--drain-interval-ms", "0"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--drain-interval-ms"), "{e}");
        assert!(parse(&["frobnicate"]).is_err());
        assert!(parse(&[]).is_err());
    }
}
