//! The real `sockwatch run` binary as a test drives it: started on a watched directory,
//! read back through its JSON-lines event file, every line of which must match
//! docs/events.schema.json (so each end-to-end test on each tier checks the schema).
use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command},
    sync::OnceLock,
    time::{Duration, Instant},
};

use serde_json::Value;

use super::{patience, s};

pub fn sockwatch_bin() -> String {
    std::env::var("SOCKWATCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_sockwatch").to_string())
}

pub struct Agent {
    child: Child,
    pub events: PathBuf,
    pub log: PathBuf,
}

impl Agent {
    /// Starts `sockwatch run` watching `watch`, writing into `dir`, and waits until it runs.
    pub fn start(dir: &Path, watch: &Path, extra: &[&str]) -> Agent {
        Self::start_with_env(dir, watch, extra, &[])
    }

    /// As [`Agent::start`], with these environment variables set for the agent.
    pub fn start_with_env(dir: &Path, watch: &Path, extra: &[&str], env: &[(&str, &str)]) -> Agent {
        let watch = ["--watch", watch.to_str().expect("utf-8 watch path")];
        Self::spawn(dir, &[&watch, extra].concat(), env)
    }

    /// As [`Agent::start_with_env`], with a sweep every `scan_secs` seconds (0: none).
    pub fn start_sweeping(
        dir: &Path,
        watch: &Path,
        scan_secs: u64,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Agent {
        let every = format!("{scan_secs}s");
        let sweeps = ["--scan-interval", every.as_str()];
        Self::start_with_env(dir, watch, &[&sweeps, extra].concat(), env)
    }

    /// Starts `sockwatch run` with no watch: every path socket on the node is watched.
    pub fn start_node_wide(dir: &Path, extra: &[&str]) -> Agent {
        Self::spawn(dir, extra, &[])
    }

    /// As [`Agent::start`], writing its events to `events` (its log still in `dir`), its
    /// command first given to `configure`.
    pub fn start_writing(
        dir: &Path,
        events: &Path,
        watch: &Path,
        extra: &[&str],
        configure: impl FnOnce(&mut Command),
    ) -> Agent {
        let watch = ["--watch", watch.to_str().expect("utf-8 watch path")];
        Self::spawn_with(dir, events, &[&watch, extra].concat(), &[], configure)
    }

    fn spawn(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Agent {
        Self::spawn_with(dir, &dir.join("events.jsonl"), args, env, |_| {})
    }

    fn spawn_with(
        dir: &Path,
        events: &Path,
        args: &[&str],
        env: &[(&str, &str)],
        configure: impl FnOnce(&mut Command),
    ) -> Agent {
        let events = events.to_owned();
        let log = dir.join("agent.log");
        // No sweeps unless the test asks for them: the events alone must give the verdicts.
        let sweeps: &[&str] = if args.contains(&"--scan-interval") {
            &[]
        } else {
            &["--scan-interval", "0s"]
        };
        let mut cmd = Command::new(sockwatch_bin());
        cmd.arg("run")
            .args(sweeps)
            .arg("--events")
            .arg(&events)
            .args(args)
            .envs(env.iter().copied())
            .stderr(std::fs::File::create(&log).expect("log file"));
        configure(&mut cmd);
        let child = cmd.spawn().expect("spawn sockwatch");
        let mut agent = Agent { child, events, log };
        let deadline = Instant::now() + patience();
        while !agent.log_text().contains("running;") {
            assert!(
                agent.child.try_wait().expect("wait").is_none(),
                "sockwatch exited: {}",
                agent.log_text()
            );
            assert!(
                Instant::now() < deadline,
                "sockwatch did not start: {}",
                agent.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_forced_tier(&agent.log_text());
        agent
    }

    /// The body of `GET /metrics` from an agent started with `--listen addr`.
    pub fn metrics(addr: std::net::SocketAddr) -> String {
        sockwatch::http::client::get(addr, "/metrics").expect("GET /metrics from the agent")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Every line written so far, parsed and checked against the schema.
    pub fn lines(&self) -> Vec<serde_json::Value> {
        self.text_lines().iter().map(|l| checked_line(l)).collect()
    }

    /// Every whole line written so far, as it is (`--format text`).
    pub fn text_lines(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.events).unwrap_or_default();
        // The agent may be writing a line as it is read: only whole lines count.
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        whole.lines().map(str::to_owned).collect()
    }

    /// Waits for a line of `--format text` output matching `want`; fails listing every line.
    pub fn expect_text(&self, what: &str, want: impl Fn(&str) -> bool) -> String {
        self.wait_for(what, Agent::text_lines, |l: &String| want(l))
    }

    pub fn verdicts(&self) -> Vec<serde_json::Value> {
        self.lines()
            .into_iter()
            .filter(|v| v.get("verdict").is_some())
            .collect()
    }

    /// The notice lines written so far (what the agent said it could not see).
    pub fn notices(&self) -> Vec<serde_json::Value> {
        self.lines()
            .into_iter()
            .filter(|v| v.get("notice").is_some())
            .collect()
    }

    /// The agent's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for an event or verdict line matching `want`; fails listing every line written.
    pub fn expect_line(
        &self,
        what: &str,
        want: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        self.wait_for(what, Agent::lines, want)
    }

    /// Waits for a verdict matching `want`; fails listing every line written.
    pub fn expect_verdict(
        &self,
        what: &str,
        want: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        self.wait_for(&format!("{what} verdict"), Agent::verdicts, want)
    }

    fn wait_for<T: std::fmt::Debug>(
        &self,
        what: &str,
        lines: fn(&Agent) -> Vec<T>,
        want: impl Fn(&T) -> bool,
    ) -> T {
        wait_for(
            what,
            || lines(self),
            want,
            || format!("{:#?}\nlog: {}", self.text_lines(), self.log_text()),
        )
    }

    /// Sends `signal` to the agent.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) takes no pointers; the pid is our own child's, not yet reaped.
        let rc = unsafe { libc::kill(self.child.id() as i32, signal) };
        assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
    }

    /// Whether the agent still runs (not exited).
    pub fn is_running(&mut self) -> bool {
        self.exit_status().is_none()
    }

    /// How the agent exited, if it has.
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("wait")
    }

    /// Stops the agent with `signal` and returns how it exited.
    pub fn stop_by(mut self, signal: i32) -> std::process::ExitStatus {
        self.signal(signal);
        self.child.wait().expect("wait")
    }

    /// Stops the agent with SIGINT; it must exit cleanly.
    pub fn stop(mut self) -> Vec<serde_json::Value> {
        self.interrupt();
        self.verdicts()
    }

    /// [`Agent::stop`] for `--format text`: every line it wrote.
    pub fn stop_text(mut self) -> Vec<String> {
        self.interrupt();
        self.text_lines()
    }

    pub(super) fn interrupt(&mut self) {
        // SAFETY: kill(2) takes no pointers; the pid is our own child's, not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "exit {status}: {}", self.log_text());
    }
}

/// What a test reads of an agent: one of its own, or its share of the shared one.
pub trait AgentLines {
    fn lines(&self) -> Vec<Value>;
    fn log_text(&self) -> String;
}

impl AgentLines for Agent {
    fn lines(&self) -> Vec<Value> {
        Agent::lines(self)
    }

    fn log_text(&self) -> String {
        Agent::log_text(self)
    }
}

/// Waits for an item of `lines()` matching `want`; fails with `context()` (the lines and
/// the log) after [`patience`].
pub fn wait_for<T>(
    what: &str,
    lines: impl Fn() -> Vec<T>,
    want: impl Fn(&T) -> bool,
    context: impl Fn() -> String,
) -> T {
    let deadline = Instant::now() + patience();
    loop {
        if let Some(v) = lines().into_iter().find(|v| want(v)) {
            return v;
        }
        assert!(Instant::now() < deadline, "no {what}; lines: {}", context());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One line of the agent's output, parsed; a line that is no JSON or does not match
/// docs/events.schema.json fails the test.
pub fn checked_line(line: &str) -> serde_json::Value {
    let value = serde_json::from_str(line).unwrap_or_else(|e| panic!("bad line {line:?}: {e}"));
    let errors: Vec<String> = events_schema()
        .iter_errors(&value)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "line breaks docs/events.schema.json: {line}\n{errors:#?}"
    );
    value
}

#[path = "../../../src/events/tests/schema_validator.rs"]
mod schema_validator;

/// docs/events.schema.json, compiled once.
fn events_schema() -> &'static jsonschema::Validator {
    static SCHEMA: OnceLock<jsonschema::Validator> = OnceLock::new();
    SCHEMA.get_or_init(schema_validator::events_schema)
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The engine's sockets at `path`, from the agent's `GET /api/sockets?path=`.
pub fn sockets_at(addr: SocketAddr, path: &Path) -> Vec<Value> {
    let encoded: String = s(path)
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => char::from(b).into(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let target = format!("/api/sockets?path={encoded}");
    let body = sockwatch::http::client::get(addr, &target).expect("GET /api/sockets");
    let v: Value = serde_json::from_str(&body).expect("JSON");
    v["sockets"].as_array().cloned().unwrap_or_default()
}

/// Waits until the engine knows `tgid` bound `path` (`--listen addr`): the agent read the
/// binder's program then, which it cannot once the process is gone.
pub fn wait_bound(addr: SocketAddr, path: &Path, tgid: u32) {
    let deadline = Instant::now() + patience();
    while !sockets_at(addr, path)
        .iter()
        .any(|s| s["binder"]["tgid"] == tgid)
    {
        assert!(
            Instant::now() < deadline,
            "the agent never saw {tgid} bind {path:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The Go listener (sockwatch/tests/go/golistener.go): `SOCKWATCH_GO_LISTENER`, or built here
/// with `go` when it is installed; `None` when neither.
pub fn go_listener() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("SOCKWATCH_GO_LISTENER") {
        return Some(PathBuf::from(p));
    }
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("golistener");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/go/golistener.go");
    let status = Command::new("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg(&src)
        .env("CGO_ENABLED", "0")
        .env(
            "GOCACHE",
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gocache"),
        )
        .env(
            "GOPATH",
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gopath"),
        )
        .status()
        .ok()?;
    status.success().then_some(out)
}

/// The socket hooks every forced tier must attach (fork and exit have only tracepoints).
const SOCKET_HOOKS: [&str; 6] = ["bind", "listen", "unlink", "rename", "connect", "release"];

/// Under `SOCKWATCH_PROBE_MODE=<tier>` (the VM suite runs the end-to-end tests once per
/// tier) every socket hook must be attached on that tier: an agent that fell back to another
/// tier would let a test pass for a tier it never ran on.
fn assert_forced_tier(log: &str) {
    let Ok(mode) = std::env::var("SOCKWATCH_PROBE_MODE") else {
        return;
    };
    if matches!(mode.as_str(), "auto" | "precise") {
        return;
    }
    let attached: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split_once("] attached ").map(|(_, rest)| rest))
        .collect();
    for hook in SOCKET_HOOKS {
        let want = match (mode.as_str(), hook) {
            ("lsm", "unlink" | "rename") => "lsm",
            ("lsm", _) => "fentry",
            (m, _) => m,
        };
        let prefix = format!("{hook}: {want}");
        assert!(
            attached.iter().any(|l| l.starts_with(&prefix)),
            "SOCKWATCH_PROBE_MODE={mode}: {hook} is not attached on {want}: {log}"
        );
    }
    eprintln!("agent attached every socket hook on the {mode} tier");
}
