//! Command line. Every flag can also come from the environment (`SOCKWATCH_*`).
use std::{net::SocketAddr, path::PathBuf};

use clap::{Args, Parser, Subcommand};

use crate::{
    config::{self, WatchConfig},
    kernel::{attach::StandIns, probes::ProbeMode},
    logging::LogFormat,
};

/// sockwatch: watches UNIX-domain socket files and reports who deletes or replaces a socket
/// that another process still listens on.
#[derive(Debug, Parser)]
#[command(name = "sockwatch", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// The agent's log lines on stderr: text, or json (one object a line: level, time,
    /// target, message). Default: text, or the config file's `log_format`.
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "FORMAT",
        env = "SOCKWATCH_LOG_FORMAT"
    )]
    pub log_format: Option<LogFormat>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Load the kernel probes and stream events as JSON lines (or verdicts as sentences)
    /// until SIGINT or SIGTERM.
    Run(RunArgs),
    /// Print, per hook, which tiers this kernel supports and which one `run` would attach.
    Check(CheckArgs),
    /// One-shot audit of the node without eBPF: orphaned listeners, stale socket files and
    /// stale bind mounts, from sock_diag, /proc/*/fd and /proc/*/mountinfo; and the risk of
    /// live socket files bind-mounted into other mount namespaces. Exit status 0: clean (risks
    /// alone included), 1: problems found, 2: error, 3: nothing found but the scan could not
    /// see everything (not root, missing capabilities, a FUSE or network filesystem not looked
    /// into).
    Scan(ScanArgs),
    /// Run a recorded event log (JSON lines, as `run` writes them) through the correlation
    /// engine again and print its verdicts.
    Replay(ReplayArgs),
    /// Current state and recent history of one socket path, from a running agent's API, or
    /// else from a scan of the node.
    Explain(ExplainArgs),
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The event log; `-` is stdin.
    pub file: PathBuf,
    /// The recording agent's settings file (TOML): its watches and takeover window are
    /// used. Flags override it.
    #[arg(long, value_name = "FILE", env = "SOCKWATCH_CONFIG")]
    pub config: Option<PathBuf>,
    /// The directories the recording agent watched (its `--watch`): as `run`, no verdict
    /// about a path outside them. Default: every path.
    #[arg(
        long = "watch",
        value_name = "[NAME=]DIR",
        env = "SOCKWATCH_WATCH",
        value_delimiter = ','
    )]
    pub watch: Vec<WatchConfig>,
    /// The takeover window the recording agent ran with (its `--takeover-window`). Default
    /// 3s.
    #[arg(long, value_name = "DURATION", value_parser = config::parse_takeover_window, env = "SOCKWATCH_TAKEOVER_WINDOW")]
    pub takeover_window: Option<std::time::Duration>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Which probe tiers may attach: the best available (auto), precise only, or tracepoints.
    #[arg(long, value_enum, default_value = "auto", env = "SOCKWATCH_PROBE_MODE")]
    pub probe_mode: ProbeMode,
    #[command(flatten)]
    pub stand_ins: StandIns,
    /// Where to write events, one JSON object per line; `-` is stdout. A file is appended to,
    /// created if missing, never followed through a symbolic link (one at the path stops the
    /// start); reopened on SIGHUP (logrotate's `postrotate`) and by itself within a second
    /// once renamed or removed.
    #[arg(long, default_value = "-", env = "SOCKWATCH_EVENTS")]
    pub events: PathBuf,
    /// The mode of an events file the agent creates (config key `events_file_mode`): `0600`,
    /// or `0640` for a log shipper in the file's group. A file that exists keeps its mode.
    /// Default 0600.
    #[arg(long, value_name = "MODE", value_parser = config::parse_events_file_mode, env = "SOCKWATCH_EVENTS_FILE_MODE")]
    pub events_file_mode: Option<config::EventsFileMode>,
    /// Settings file (TOML): watches, listen address, intervals. Flags override it.
    #[arg(long, value_name = "FILE", env = "SOCKWATCH_CONFIG")]
    pub config: Option<PathBuf>,
    /// Watch only sockets in (or below, up to 8 levels) this directory; repeatable; `NAME=DIR`
    /// names it in metrics. A directory that does not exist yet is waited for. Without any,
    /// every path socket on the node is watched.
    #[arg(
        long = "watch",
        value_name = "[NAME=]DIR",
        env = "SOCKWATCH_WATCH",
        value_delimiter = ','
    )]
    pub watch: Vec<WatchConfig>,
    /// Serve /metrics, /healthz, /readyz and the API here (`127.0.0.1:9469` for loopback
    /// only; `:9469` on every interface). Off unless given here or in the config file.
    #[arg(long, value_name = "ADDR", value_parser = config::parse_listen, env = "SOCKWATCH_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Time between reconciliation sweeps (sock_diag + /proc), which repair the picture after
    /// lost events, e.g. `30s` or `1m30s`; `0s` disables them (the startup scan always runs).
    /// Default 30s.
    #[arg(long, value_name = "DURATION", value_parser = config::parse_scan_interval, env = "SOCKWATCH_SCAN_INTERVAL")]
    pub scan_interval: Option<std::time::Duration>,
    /// How often to drain the ring buffer when the kernel has not woken the agent, 1ms to 1s.
    /// Default 10ms.
    #[arg(long, value_name = "DURATION", value_parser = config::parse_drain_interval, env = "SOCKWATCH_DRAIN_INTERVAL")]
    pub drain_interval: Option<std::time::Duration>,
    /// How long a live socket's file removed by a process outside its owner set waits for
    /// that process (or its cgroup or pod) to bind the path again: a takeover, not a foreign
    /// unlink. Such foreign unlinks are reported this late (a stale owner's at once);
    /// `0s` reports every one at once. Default 3s, at most 60s.
    #[arg(long, value_name = "DURATION", value_parser = config::parse_takeover_window, env = "SOCKWATCH_TAKEOVER_WINDOW")]
    pub takeover_window: Option<std::time::Duration>,
    /// Exit 2 when any hook gets no probe tier, instead of running without it (config key
    /// `require_all_hooks`).
    #[arg(long, env = "SOCKWATCH_REQUIRE_ALL_HOOKS")]
    pub require_all_hooks: bool,
    /// Live sockets the kernel's table holds (config key `live_capacity`): past it new binds
    /// are counted as `map_full` and left to the sweeps. Default 65536.
    #[arg(long, value_name = "ENTRIES", env = "SOCKWATCH_LIVE_CAPACITY")]
    pub live_capacity: Option<u32>,
    /// Serve /api (pids, paths and pods of the node) to clients beyond loopback too (config
    /// key `api_remote`); by default only loopback clients get it, others a 403. /metrics
    /// and the health routes answer every client either way.
    #[arg(long, env = "SOCKWATCH_API_REMOTE")]
    pub api_remote: bool,
    /// Look into FUSE and network filesystems (NFS, CIFS, Ceph, 9p...) too: connect targets,
    /// renamed files, the scans' walk and `stat`s. Off by default: such a server may never
    /// answer, and lookups there are skipped (counted in `sockwatch_lookup_skips_total`).
    #[arg(long, env = "SOCKWATCH_LOOKUP_NETWORK_FILESYSTEMS")]
    pub lookup_network_filesystems: bool,
    /// Which lines go to --events (config key `events_filter`): `all`, a line per kernel event,
    /// per verdict and per notice, or `verdicts`: verdicts and notices (hooks missing, records
    /// lost, scans failing). The engine sees every event either way. Default all.
    #[arg(
        long,
        value_enum,
        value_name = "LINES",
        env = "SOCKWATCH_EVENTS_FILTER"
    )]
    pub events_filter: Option<config::EventsFilter>,
    /// Guard mode (config key `guard`; per watch in the config file): `stale_owner` refuses,
    /// on the BPF LSM tier, a removal of a live listener's file by a stale owner (a process
    /// whose own listener at that path was already replaced); `foreign` any removal by a
    /// process outside the owner set but the allow-list; `off` (default) refuses nothing.
    /// SIGUSR1 pauses it, SIGUSR2 resumes it.
    #[arg(long, value_name = "POLICY", value_parser = parse_guard, env = "SOCKWATCH_GUARD")]
    pub guard: Option<config::GuardPolicy>,
    /// What the guard does with a removal its policy refuses (config key `guard_mode`):
    /// `enforce` (default) refuses it with EPERM; `audit` lets it through, counts it and
    /// reports an `unlink_would_deny` verdict, to try a policy before it refuses anything.
    #[arg(long, value_enum, value_name = "MODE", env = "SOCKWATCH_GUARD_MODE")]
    pub guard_mode: Option<config::GuardMode>,
    /// How --events is written: `json`, a JSON object per line, or `text`, one sentence per
    /// verdict for people (its time, the node, who did what to which socket file, the likely
    /// cause and the fix) and no kernel event lines, whatever --events-filter says. Default:
    /// text when --events is stdout and stdout is a terminal (a person reads it), else json.
    #[arg(long, value_enum, env = "SOCKWATCH_FORMAT")]
    pub format: Option<crate::text::Format>,
}

impl RunArgs {
    /// --format, or its default: text for a person at a terminal, JSON for everything else.
    pub fn events_format(&self) -> crate::text::Format {
        use std::io::IsTerminal as _;
        let to_terminal =
            self.events == std::path::Path::new("-") && std::io::stdout().is_terminal();
        self.format.unwrap_or(match to_terminal {
            true => crate::text::Format::Text,
            false => crate::text::Format::Json,
        })
    }
}

impl From<&RunArgs> for config::Overrides {
    /// The flags (and environment) of `run` that override the config file.
    fn from(args: &RunArgs) -> Self {
        Self {
            watches: args.watch.clone(),
            listen: args.listen,
            scan_interval: args.scan_interval,
            drain_interval: args.drain_interval,
            takeover_window: args.takeover_window,
            require_all_hooks: args.require_all_hooks,
            live_capacity: args.live_capacity,
            api_remote: args.api_remote,
            events_filter: args.events_filter,
            events_file_mode: args.events_file_mode,
            guard: args.guard,
            guard_mode: args.guard_mode,
        }
    }
}

/// `off`, `stale_owner` or `foreign`.
fn parse_guard(s: &str) -> Result<config::GuardPolicy, String> {
    config::GuardPolicy::ALL
        .into_iter()
        .find(|p| p.name() == s)
        .ok_or_else(|| format!("`{s}` is no guard policy: off, stale_owner or foreign"))
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The socket path to explain.
    pub path: PathBuf,
    /// A running agent's API address; when none answers there, a scan of the node is used.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9469", value_parser = config::parse_listen, env = "SOCKWATCH_AGENT")]
    pub agent: SocketAddr,
    /// `text`: the path's timeline and what holds now, as lines for people; `json`: the
    /// agent's answer (or the scan's) as it is, for machines.
    #[arg(
        long,
        value_enum,
        default_value = "text",
        env = "SOCKWATCH_EXPLAIN_FORMAT"
    )]
    pub format: crate::text::Format,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The mode whose choice to report.
    #[arg(long, value_enum, default_value = "auto", env = "SOCKWATCH_PROBE_MODE")]
    pub probe_mode: ProbeMode,
    #[command(flatten)]
    pub stand_ins: StandIns,
    /// Also print every program's verifier cost: processed instructions (share of the
    /// 1,000,000 limit) and load time, in each flavor.
    #[arg(long, short)]
    pub verbose: bool,
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
    /// Look into FUSE and network filesystems (NFS, CIFS, Ceph, 9p...) too: connect targets,
    /// renamed files, the scans' walk and `stat`s. Off by default: such a server may never
    /// answer, and lookups there are skipped (counted in `sockwatch_lookup_skips_total`).
    #[arg(long, env = "SOCKWATCH_LOOKUP_NETWORK_FILESYSTEMS")]
    pub lookup_network_filesystems: bool,
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
        assert_eq!(
            (a.drain_interval, a.scan_interval, a.listen),
            (None, None, None)
        );
        assert!(a.watch.is_empty());
        assert_eq!(a.format, None);
    }

    #[test]
    fn events_to_a_file_are_json_unless_the_flag_says_text() {
        let Command::Run(a) = parse(&["run", "--events", "/var/log/e.jsonl"])
            .expect("parses")
            .command
        else {
            panic!("not run")
        };
        assert_eq!(a.events_format(), crate::text::Format::Json);
        let Command::Run(a) = parse(&["run", "--events", "/var/log/e.jsonl", "--format", "text"])
            .expect("parses")
            .command
        else {
            panic!("not run")
        };
        assert_eq!(a.events_format(), crate::text::Format::Text);
    }

    #[test]
    fn log_format_is_a_flag_of_every_command() {
        for args in [
            &["--log-format", "json", "scan"][..],
            &["scan", "--log-format", "json"],
        ] {
            assert_eq!(
                parse(args).expect("parses").log_format,
                Some(LogFormat::Json)
            );
        }
        assert_eq!(parse(&["scan"]).expect("parses").log_format, None);
        assert!(parse(&["scan", "--log-format", "xml"]).is_err());
    }

    #[test]
    fn text_is_a_format_of_run_and_the_default_of_explain() {
        let Command::Run(a) = parse(&["run", "--format", "text"]).expect("parses").command else {
            panic!("not run")
        };
        assert_eq!(a.format, Some(crate::text::Format::Text));
        let e = parse(&["run", "--format", "xml"]).unwrap_err().to_string();
        assert!(e.contains("--format"), "{e}");
        let Command::Explain(a) = parse(&["explain", "/run/x.sock"]).expect("parses").command
        else {
            panic!("not explain")
        };
        assert_eq!(a.format, crate::text::Format::Text);
        let Command::Explain(a) = parse(&["explain", "/run/x.sock", "--format", "json"])
            .expect("parses")
            .command
        else {
            panic!("not explain")
        };
        assert_eq!(a.format, crate::text::Format::Json);
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
        assert_eq!(a.takeover_window, None);
        assert!(a.watch.is_empty());
        let Command::Replay(a) = parse(&["replay", "-", "--watch", "/run/a"])
            .expect("parses")
            .command
        else {
            panic!("not replay")
        };
        assert_eq!(a.watch[0].path, PathBuf::from("/run/a"));
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
        let paths: Vec<PathBuf> = a.watch.iter().map(|w| w.path.clone()).collect();
        assert_eq!(
            paths,
            vec![PathBuf::from("/run/a"), PathBuf::from("/run/b")]
        );
        let Command::Run(a) = parse(&[
            "run",
            "--watch",
            "multus=/run/multus",
            "--listen",
            "127.0.0.1:9469",
        ])
        .expect("parses")
        .command
        else {
            panic!("not run")
        };
        assert_eq!(a.watch[0].name, "multus");
        assert_eq!(a.listen, Some("127.0.0.1:9469".parse().expect("addr")));
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
        let Command::Run(a) = parse(&["run", "--takeover-window", "300ms"])
            .expect("parses")
            .command
        else {
            panic!("not run")
        };
        assert_eq!(
            a.takeover_window,
            Some(std::time::Duration::from_millis(300))
        );
        let e = parse(&["run", "--takeover-window", "2m"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--takeover-window"), "{e}");
        let Command::Run(a) = parse(&["run", "--events-filter", "verdicts"])
            .expect("parses")
            .command
        else {
            panic!("not run")
        };
        assert_eq!(
            config::Overrides::from(&a).events_filter,
            Some(config::EventsFilter::Verdicts)
        );
        for (given, want) in [
            ("0640", config::EventsFileMode::GroupReadable),
            ("600", config::EventsFileMode::Private),
        ] {
            let Command::Run(a) = parse(&["run", "--events-file-mode", given])
                .expect("parses")
                .command
            else {
                panic!("not run")
            };
            assert_eq!(config::Overrides::from(&a).events_file_mode, Some(want));
        }
        let e = parse(&["run", "--events-file-mode", "0644"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--events-file-mode") && e.contains("0640"),
            "{e}"
        );
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
        let e = parse(&["run", "--drain-interval", "0ms"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--drain-interval"), "{e}");
        let e = parse(&["run", "--scan-interval", "30"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--scan-interval") && e.contains("no unit"),
            "{e}"
        );
        let Command::Run(a) = parse(&["run", "--scan-interval", "1m30s"])
            .expect("parses")
            .command
        else {
            panic!("not run")
        };
        assert_eq!(a.scan_interval, Some(std::time::Duration::from_secs(90)));
        assert!(parse(&["frobnicate"]).is_err());
        assert!(parse(&[]).is_err());
    }
}
