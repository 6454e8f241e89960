//! `--config FILE`: the agent's settings in TOML, each also settable by flag or environment.
//!
//! ```toml
//! listen = "0.0.0.0:9469"        # HOST:PORT, :PORT or PORT
//! scan_interval = "30s"          # ms, s, m, h and sums (1m30s); "0s": no periodic sweeps
//! drain_interval = "10ms"
//! takeover_window = "3s"         # a foreign removal re-bound by its remover this soon is a
//!                                # takeover; "0s": every foreign removal at once
//! require_all_hooks = false      # true: exit 2 when any hook gets no probe tier
//! live_capacity = 65536          # live sockets the kernel tracks (16 to 1048576)
//! api_remote = false             # true: /api (pids, paths) answers clients beyond loopback
//! events_filter = "all"          # lines written to --events: "all", or "verdicts" (and notices)
//! events_file_mode = "0600"      # mode of an events file the agent creates: "0600", or "0640"
//!                                # (group-readable, for a log shipper in the file's group)
//! guard = "off"                  # "off", "stale_owner" or "foreign" (BPF LSM only): refuse
//!                                # removals of a live listener's file (docs/guard.md)
//! guard_allow_comms = []         # foreign: these commands (comm, up to 15 bytes) pass
//! guard_allow_cgroups = []       # foreign: processes of these cgroup v2 directories pass,
//!                                # from the cgroup2 root ("/system.slice/kubelet.service")
//! guard_mode = "enforce"         # "enforce": refuse; "audit": let through, report would-deny
//! log_format = "text"            # the agent's log lines: "text", or "json" (one object a
//!                                # line); --log-format replaces it
//!
//! [[watches]]
//! name = "multus"                # the `watch` label; defaults to the directory's name
//! path = "/run/multus"
//! guard = "stale_owner"          # this watch's own guard keys; unset ones are the top level's
//! guard_allow_comms = []
//! guard_allow_cgroups = []
//! ```
//!
//! Unknown fields and bad values are errors that name the field and the problem, e.g.
//! `config /etc/sockwatch.toml: watches[1].path: must be absolute`.
use std::{
    fmt,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Component, Path, PathBuf},
    str::FromStr,
    time::Duration,
};

use serde::Deserialize;

use crate::logging::LogFormat;

mod guard;
mod values;

use values::check_range;
pub use values::{
    parse_drain_interval, parse_duration, parse_listen, parse_scan_interval, parse_takeover_window,
};

use guard::RawGuard;
pub use guard::{GuardConfig, GuardMode, GuardOverride};
pub use sockwatch_common::GuardPolicy;

/// Entries the live-socket table may be given: room for a test's few sockets, up to a node's
/// million (48 bytes each, and as many for the name index).
pub const LIVE_CAPACITY_RANGE: std::ops::RangeInclusive<u32> = 16..=1 << 20;

/// The port `/metrics` and the API are served on unless told otherwise.
pub const DEFAULT_PORT: u16 = 9469;
/// Every interface, [`DEFAULT_PORT`] (what the DaemonSet uses; `127.0.0.1:9469` for loopback).
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), DEFAULT_PORT);
/// As `--scan-interval`; zero disables the periodic sweeps (the start-up scan still runs).
pub const DEFAULT_SCAN_INTERVAL: Duration = Duration::from_secs(30);
pub const DEFAULT_DRAIN_INTERVAL: Duration = Duration::from_millis(10);
/// As `--takeover-window`: how long a foreign removal waits for its remover's bind.
pub const DEFAULT_TAKEOVER_WINDOW: Duration =
    Duration::from_nanos(crate::engine::DEFAULT_TAKEOVER_WINDOW_NS);
/// Upper bound of the takeover window (zero is accepted: no waiting). A foreign unlink that
/// is no takeover is reported only after the window, so it stays short.
pub const TAKEOVER_WINDOW_MAX: Duration = Duration::from_secs(60);
/// Bounds of the intervals (`--drain-interval`'s too); a zero scan
/// interval is accepted besides (no periodic sweeps).
pub const SCAN_INTERVAL_RANGE: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(24 * 3600));
pub const DRAIN_INTERVAL_RANGE: (Duration, Duration) =
    (Duration::from_millis(1), Duration::from_millis(1000));
/// The `watch` label of a socket outside every watch (or of every socket, without watches).
pub const NO_WATCH: &str = "none";
/// The `watch` label once [`WATCH_LABELS`] distinct names have been seen.
pub const OTHER_WATCH: &str = "other";
/// Distinct `watch` label values the metrics keep, the two reserved ones included.
pub const WATCH_LABELS: usize = 64;
/// At most this many watches: each name is a label value (see [`WATCH_LABELS`], which
/// keeps room for `none` and `other`).
pub const MAX_WATCHES: usize = WATCH_LABELS - 2;
/// Names the metrics reserve for sockets outside every watch and for overflow.
pub const RESERVED_NAMES: [&str; 2] = [NO_WATCH, OTHER_WATCH];

/// One watched directory and the name its metrics carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchConfig {
    pub name: String,
    pub path: PathBuf,
    /// Its own guard settings (the top level's where unset).
    pub guard: GuardOverride,
}

/// Which lines `run` writes to its events output. The engine sees every event either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum EventsFilter {
    /// Verdict and notice lines (hooks missing, records lost, scans failing), no event line.
    Verdicts,
    /// A line per kernel event, and one per verdict.
    #[default]
    All,
}

/// The mode an events file the agent creates gets (`--events-file-mode`, config key
/// `events_file_mode`): set exactly, whatever the umask. A file that already exists keeps its
/// own (logrotate's `create MODE OWNER GROUP` made it so).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EventsFileMode {
    /// `0600`: the agent's user alone reads it.
    #[default]
    Private,
    /// `0640`: its group too (a log shipper in the file's group: the directory's, when the
    /// directory is set-group-ID, else the agent's).
    GroupReadable,
}

impl EventsFileMode {
    pub const ALL: [EventsFileMode; 2] = [EventsFileMode::Private, EventsFileMode::GroupReadable];

    /// The permission bits.
    pub fn bits(self) -> u32 {
        match self {
            EventsFileMode::Private => 0o600,
            EventsFileMode::GroupReadable => 0o640,
        }
    }

    /// As the flag and the config file write it.
    pub fn name(self) -> &'static str {
        match self {
            EventsFileMode::Private => "0600",
            EventsFileMode::GroupReadable => "0640",
        }
    }
}

impl fmt::Display for EventsFileMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `0600` or `0640` (the leading zero may be left out).
pub fn parse_events_file_mode(s: &str) -> Result<EventsFileMode, String> {
    let s = s.trim();
    EventsFileMode::ALL
        .into_iter()
        .find(|m| m.name() == s || &m.name()[1..] == s)
        .ok_or_else(|| {
            format!("`{s}` is no events file mode: 0600 (owner only) or 0640 (and its group)")
        })
}

/// The agent's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Empty: every path socket on the node is watched.
    pub watches: Vec<WatchConfig>,
    /// Where to serve `/metrics` and the API; `None` when neither file nor flag said.
    pub listen: Option<SocketAddr>,
    pub scan_interval: Duration,
    pub drain_interval: Duration,
    pub takeover_window: Duration,
    /// Refuse to run when any hook gets no probe tier (by default the agent runs degraded as
    /// long as bind and a removal hook attach).
    pub require_all_hooks: bool,
    /// Entries of the kernel's live-socket table (and its name index): past it, binds are
    /// counted as `map_full` and left to the sweeps.
    pub live_capacity: u32,
    /// Serve `/api` to clients beyond loopback too (its answers name processes and paths);
    /// `/metrics` and the health routes answer everyone who reaches `listen` either way.
    pub api_remote: bool,
    /// The lines written to the events output.
    pub events_filter: EventsFilter,
    /// The mode of an events file the agent creates.
    pub events_file_mode: EventsFileMode,
    /// Guard mode outside every watch, and every watch's default.
    pub guard: GuardConfig,
    /// Whether the guard refuses or only reports what it would refuse, node-wide.
    pub guard_mode: GuardMode,
    /// The file's `log_format` (`--log-format` replaces it, in [`crate::logging`]).
    pub log_format: Option<LogFormat>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            watches: Vec::new(),
            listen: None,
            scan_interval: DEFAULT_SCAN_INTERVAL,
            drain_interval: DEFAULT_DRAIN_INTERVAL,
            takeover_window: DEFAULT_TAKEOVER_WINDOW,
            require_all_hooks: false,
            live_capacity: sockwatch_common::maps::LIVE_CAPACITY,
            api_remote: false,
            events_filter: EventsFilter::All,
            events_file_mode: EventsFileMode::Private,
            guard: GuardConfig::default(),
            guard_mode: GuardMode::default(),
            log_format: None,
        }
    }
}

/// Values from flags or the environment; each one set replaces the file's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// Non-empty: replaces the file's watches.
    pub watches: Vec<WatchConfig>,
    pub listen: Option<SocketAddr>,
    pub scan_interval: Option<Duration>,
    pub drain_interval: Option<Duration>,
    pub takeover_window: Option<Duration>,
    /// `--require-all-hooks`: only ever turns the setting on.
    pub require_all_hooks: bool,
    pub live_capacity: Option<u32>,
    /// `--api-remote`: only ever turns the setting on.
    pub api_remote: bool,
    pub events_filter: Option<EventsFilter>,
    pub events_file_mode: Option<EventsFileMode>,
    /// `--guard`: the top-level policy.
    pub guard: Option<GuardPolicy>,
    /// `--guard-mode`.
    pub guard_mode: Option<GuardMode>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file's error is the message's own: no source, or `{:#}` would print it twice.
    #[error("config {}: {}", file.display(), without_code(error))]
    Read {
        file: PathBuf,
        error: std::io::Error,
    },
    /// TOML syntax, an unknown field or a value of the wrong type.
    #[error("config {}: {}{message}", file.display(), at.as_deref().map(|a| format!("{a}: ")).unwrap_or_default())]
    Parse {
        file: PathBuf,
        /// The field (`watches[1].path`) or the place (`line 3, column 7`), when known.
        at: Option<String>,
        message: String,
    },
    /// A value of the right type that is not acceptable.
    #[error("config {origin}: {field}: {problem}")]
    Invalid {
        /// The file, or `flags` for values from flags and the environment.
        origin: String,
        field: String,
        problem: String,
    },
}

/// An I/O error's text without its " (os error N)" suffix: `No such file or directory`.
fn without_code(error: &std::io::Error) -> String {
    let text = error.to_string();
    match text.rfind(" (os error ") {
        Some(at) if text.ends_with(')') => text[..at].to_string(),
        _ => text,
    }
}

/// Reads and checks a config file.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
        file: path.to_path_buf(),
        error,
    })?;
    parse(&text, path)
}

/// Parses and checks config text; `file` only names it in errors.
pub fn parse(text: &str, file: &Path) -> Result<Config, ConfigError> {
    let parse_error = |at: Option<String>, message: String| ConfigError::Parse {
        file: file.to_path_buf(),
        at,
        message,
    };
    let de = toml::Deserializer::parse(text)
        .map_err(|e| parse_error(place(text, e.span()), e.message().to_string()))?;
    let raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let at = if path.is_empty() || path == "." {
            place(text, inner.span())
        } else {
            Some(path)
        };
        parse_error(at, inner.message().to_string())
    })?;
    let origin = file.display().to_string();
    let invalid = |field: String, problem: String| ConfigError::Invalid {
        origin: origin.clone(),
        field,
        problem,
    };
    let mut config = Config::default();
    for (i, w) in raw.watches.into_iter().enumerate() {
        let path = PathBuf::from(&w.path);
        check_watch_path(&path).map_err(|p| invalid(format!("watches[{i}].path"), p))?;
        let name = match w.name {
            Some(name) => name,
            None => default_name(&path).map_err(|p| invalid(format!("watches[{i}].name"), p))?,
        };
        let guard = RawGuard::new(w.guard, w.guard_allow_comms, w.guard_allow_cgroups)
            .check(&format!("watches[{i}]."))
            .map_err(|(f, p)| invalid(f, p))?;
        config.watches.push(WatchConfig { name, path, guard });
    }
    if let Some(l) = raw.listen {
        config.listen = Some(parse_listen(&l).map_err(|p| invalid("listen".into(), p))?);
    }
    if let Some(s) = raw.scan_interval {
        config.scan_interval =
            parse_scan_interval(&s).map_err(|p| invalid("scan_interval".into(), p))?;
    }
    if let Some(s) = raw.drain_interval {
        config.drain_interval =
            parse_drain_interval(&s).map_err(|p| invalid("drain_interval".into(), p))?;
    }
    if let Some(s) = raw.takeover_window {
        config.takeover_window =
            parse_takeover_window(&s).map_err(|p| invalid("takeover_window".into(), p))?;
    }
    config.require_all_hooks = raw.require_all_hooks.unwrap_or(false);
    config.api_remote = raw.api_remote.unwrap_or(false);
    config.events_filter = raw.events_filter.unwrap_or_default();
    if let Some(m) = raw.events_file_mode {
        config.events_file_mode =
            parse_events_file_mode(&m).map_err(|p| invalid("events_file_mode".into(), p))?;
    }
    let top = RawGuard::new(raw.guard, raw.guard_allow_comms, raw.guard_allow_cgroups)
        .check("")
        .map_err(|(f, p)| invalid(f, p))?;
    config.guard = top.over(&GuardConfig::default());
    config.guard_mode = raw.guard_mode.unwrap_or_default();
    config.log_format = raw.log_format;
    if let Some(n) = raw.live_capacity {
        config.live_capacity = n;
    }
    config.validate(&origin)?;
    Ok(config)
}

impl Config {
    /// Applies flags and environment over the file's values, and checks the result.
    pub fn merge(mut self, o: Overrides) -> Result<Config, ConfigError> {
        if !o.watches.is_empty() {
            self.watches = o.watches;
        }
        self.listen = o.listen.or(self.listen);
        self.scan_interval = o.scan_interval.unwrap_or(self.scan_interval);
        self.drain_interval = o.drain_interval.unwrap_or(self.drain_interval);
        self.takeover_window = o.takeover_window.unwrap_or(self.takeover_window);
        self.require_all_hooks |= o.require_all_hooks;
        self.api_remote |= o.api_remote;
        self.events_filter = o.events_filter.unwrap_or(self.events_filter);
        self.events_file_mode = o.events_file_mode.unwrap_or(self.events_file_mode);
        self.live_capacity = o.live_capacity.unwrap_or(self.live_capacity);
        self.guard.policy = o.guard.unwrap_or(self.guard.policy);
        self.guard_mode = o.guard_mode.unwrap_or(self.guard_mode);
        self.validate("flags")?;
        Ok(self)
    }

    /// Checks what no single value can: names, counts, ranges, duplicates.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let invalid = |field: String, problem: String| ConfigError::Invalid {
            origin: origin.to_string(),
            field,
            problem,
        };
        if self.watches.len() > MAX_WATCHES {
            return Err(invalid(
                "watches".into(),
                format!(
                    "{} watches, at most {MAX_WATCHES} (each name is a metric label)",
                    self.watches.len()
                ),
            ));
        }
        for (i, w) in self.watches.iter().enumerate() {
            check_name(&w.name).map_err(|p| invalid(format!("watches[{i}].name"), p))?;
            check_watch_path(&w.path).map_err(|p| invalid(format!("watches[{i}].path"), p))?;
            if let Some(j) = self.watches[..i].iter().position(|o| o.name == w.name) {
                return Err(invalid(
                    format!("watches[{i}].name"),
                    format!("`{}` is already the name of watches[{j}]", w.name),
                ));
            }
            if let Some(j) = self.watches[..i].iter().position(|o| o.path == w.path) {
                return Err(invalid(
                    format!("watches[{i}].path"),
                    format!("{} is already watched by watches[{j}]", w.path.display()),
                ));
            }
        }
        if !self.scan_interval.is_zero() {
            check_range(self.scan_interval, SCAN_INTERVAL_RANGE)
                .map_err(|p| invalid("scan_interval".into(), p))?;
        }
        check_range(self.drain_interval, DRAIN_INTERVAL_RANGE)
            .map_err(|p| invalid("drain_interval".into(), p))?;
        check_range(self.takeover_window, (Duration::ZERO, TAKEOVER_WINDOW_MAX))
            .map_err(|p| invalid("takeover_window".into(), p))?;
        if !LIVE_CAPACITY_RANGE.contains(&self.live_capacity) {
            return Err(invalid(
                "live_capacity".into(),
                format!(
                    "{} entries, want {} to {}",
                    self.live_capacity,
                    LIVE_CAPACITY_RANGE.start(),
                    LIVE_CAPACITY_RANGE.end()
                ),
            ));
        }
        Ok(())
    }

    /// The name of the watch `path` lies in (the deepest one), or `""` for none. Paths are
    /// compared by components, so `/run/multus2/x` is not in `/run/multus`.
    pub fn watch_of(&self, path: &str) -> &str {
        let path = Path::new(path);
        self.watches
            .iter()
            .filter(|w| path.starts_with(&w.path))
            .max_by_key(|w| w.path.components().count())
            .map_or("", |w| w.name.as_str())
    }

    /// The engine's scope: the watched directories (none: the whole node).
    pub fn scope(&self) -> crate::engine::Scope {
        crate::engine::Scope::watching(self.watches.iter().map(|w| w.path.clone()))
    }

    /// The takeover window in the engine's unit (boot-clock ns).
    pub fn takeover_window_ns(&self) -> u64 {
        u64::try_from(self.takeover_window.as_nanos()).unwrap_or(u64::MAX)
    }

    /// The guard settings of each guard slot: slot 0 is the top level, slot `i + 1` watch `i`.
    pub fn guard_slots(&self) -> Vec<GuardConfig> {
        let watches = self.watches.iter().map(|w| w.guard.over(&self.guard));
        std::iter::once(self.guard.clone()).chain(watches).collect()
    }

    /// The watch names, for `Metrics::watches`.
    pub fn watch_names(&self) -> impl Iterator<Item = &str> {
        self.watches.iter().map(|w| w.name.as_str())
    }
}

/// `NAME=PATH` or `PATH` (named after its last component), as `--watch` takes it.
impl FromStr for WatchConfig {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (name, path) = match s.split_once('=') {
            Some((name, path)) if !name.contains('/') => (Some(name.to_string()), path),
            _ => (None, s),
        };
        let path = PathBuf::from(path);
        check_watch_path(&path)?;
        let name = match name {
            Some(n) => n,
            None => default_name(&path)?,
        };
        check_name(&name)?;
        Ok(WatchConfig {
            name,
            path,
            guard: GuardOverride::default(),
        })
    }
}

impl fmt::Display for WatchConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.name, self.path.display())
    }
}

fn check_watch_path(path: &Path) -> Result<(), String> {
    if path.as_os_str().is_empty() {
        return Err("must not be empty".into());
    }
    if !path.is_absolute() {
        return Err(format!("must be absolute, not `{}`", path.display()));
    }
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(format!(
            "must not contain `.` or `..` components: `{}`",
            path.display()
        ));
    }
    Ok(())
}

/// Watch names are label values: short, plain, and not one the metrics reserve.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 63 {
        return Err(format!("`{name}` must be 1 to 63 characters long"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(format!(
            "`{name}` may only contain letters, digits, `_`, `-` and `.`"
        ));
    }
    if RESERVED_NAMES.contains(&name) {
        return Err(format!("`{name}` is reserved by the metrics"));
    }
    Ok(())
}

/// The last component of `path`, made into a name (`/run/multus` → `multus`).
fn default_name(path: &Path) -> Result<String, String> {
    let base = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| {
            format!(
                "{} has no last component to name it after: set a name",
                path.display()
            )
        })?;
    let name: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    check_name(&name).map(|()| name)
}

/// `line L, column C` of a byte span's start.
fn place(text: &str, span: Option<std::ops::Range<usize>>) -> Option<String> {
    let at = span?.start.min(text.len());
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    Some(format!("line {line}, column {column}"))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    watches: Vec<RawWatch>,
    listen: Option<String>,
    scan_interval: Option<String>,
    drain_interval: Option<String>,
    takeover_window: Option<String>,
    require_all_hooks: Option<bool>,
    live_capacity: Option<u32>,
    api_remote: Option<bool>,
    events_filter: Option<EventsFilter>,
    events_file_mode: Option<String>,
    guard: Option<GuardPolicy>,
    guard_allow_comms: Option<Vec<String>>,
    guard_allow_cgroups: Option<Vec<String>>,
    guard_mode: Option<GuardMode>,
    log_format: Option<LogFormat>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWatch {
    name: Option<String>,
    path: String,
    guard: Option<GuardPolicy>,
    guard_allow_comms: Option<Vec<String>>,
    guard_allow_cgroups: Option<Vec<String>>,
}

#[cfg(test)]
mod tests;
