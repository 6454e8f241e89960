//! The Debian daemons the production-pattern tests drive (host only), and what pages.
use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use super::{patience, s, skip};

/// The verdicts that page: an on-call engineer would be woken by any of them.
pub fn alerting(v: &Value) -> bool {
    match v["verdict"].as_str() {
        Some("foreign_unlink" | "replaced" | "hijack" | "stale_connect") => true,
        Some("orphan_opened") => v["cause"] != "taken_over",
        _ => false,
    }
}

pub fn assert_nothing_pages(verdicts: &[Value]) {
    let paging: Vec<&Value> = verdicts.iter().filter(|v| alerting(v)).collect();
    assert!(paging.is_empty(), "alerting verdicts: {paging:#?}");
}

/// A Debian program the host-only tests drive, or why they cannot run here (the guests have
/// none; on the host it is a failure when tiers are required, as in CI).
pub fn program(name: &str, test: &str) -> Option<PathBuf> {
    if std::env::var_os("SOCKWATCH_IN_VM").is_some() {
        skip(
            test,
            format_args!("the guest has no {name} (host tier only)"),
        );
        return None;
    }
    let found = ["/usr/sbin", "/usr/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists());
    if found.is_none() {
        assert!(
            std::env::var_os("SOCKWATCH_REQUIRE_TIERS").is_none(),
            "{test}: {name} is missing (cargo xtask setup --vm installs it)"
        );
        skip(test, format_args!("{name} is not installed"));
    }
    found
}

/// A child process killed and reaped when dropped.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + patience();
    while !ready() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// HAProxy's configuration: an HTTP frontend on a UNIX socket and the stats socket.
pub fn haproxy_config(dir: &Path) -> PathBuf {
    let cfg = dir.join("haproxy.cfg");
    let text = format!(
        "global\n  stats socket {dir}/stats.sock mode 600 level admin\n\
         defaults\n  mode http\n  timeout client 5s\n  timeout server 5s\n  timeout connect 1s\n\
         frontend web\n  bind unix@{dir}/web.sock\n  http-request return status 200\n",
        dir = s(dir)
    );
    std::fs::write(&cfg, text).expect("write haproxy.cfg");
    cfg
}

pub fn start_haproxy(haproxy: &Path, cfg: &Path, old: Option<u32>) -> Running {
    let mut c = Command::new(haproxy);
    c.args(["-db", "-f", s(cfg)]);
    if let Some(old) = old {
        c.args(["-sf", &old.to_string()]);
    }
    Running(c.stdin(Stdio::null()).spawn().expect("haproxy"))
}
