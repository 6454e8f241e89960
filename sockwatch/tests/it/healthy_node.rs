//! Ten minutes of a healthy node, as root on the host, under the agent as the DaemonSet runs
//! it and a real Prometheus with the shipped rules (production `for:` durations):
//! - Debian's HAProxy reloaded with `-sf` every 20 s (an HTTP frontend on a UNIX socket and
//!   the stats socket: a rename hand-over each);
//! - a kubelet restart every 60 s with two device plugins re-registering (actors play kubelet
//!   from its documented behaviour: common/scenes.rs; kubelet cannot run here);
//! - a rolling restart every 30 s of a Go daemon carrying the seed's fix (its successor
//!   removes the socket's directory and listens; the old one exits);
//! - a rolling restart every 30 s of a Debian Node.js server (the old one's `server.close()`
//!   unlinks its own path; the new one listens).
//!
//! Throughout, no warning or critical alert is pending or firing; at the end no verdict pages,
//! and the takeovers are exactly one per listener per reload or restart. Then seed 001 played
//! once fires SockwatchForeignUnlink: the same rules still see the incident.
//!
//! It is ignored by a plain `cargo test`: `cargo xtask test` runs it beside the fuzz and soak
//! steps, which leave a core idle. `SOCKWATCH_HEALTHY_SECS` shortens it for a local run.
use crate::common;

use std::{
    collections::BTreeSet,
    io::{BufRead, BufReader},
    net::SocketAddr,
    os::unix::net::UnixStream,
    path::{Path, PathBuf},
    process::{Child, ChildStdout, Command, Stdio},
    time::{Duration, Instant},
};

use common::{
    daemons::{Running, alerting, haproxy_config, program, start_haproxy, wait_for},
    go::{GoDaemon, go_or_skip},
    prom::{Stack, query, runs_here, wait_until},
    s,
    scenes::{Kubelet, seed_001},
};
use serde_json::Value;

/// HAProxy, reloaded the way its packaging does (`-sf OLD`).
struct Haproxy {
    bin: PathBuf,
    cfg: PathBuf,
    listeners: [PathBuf; 2],
    current: Running,
}

impl Haproxy {
    fn start(bin: PathBuf, dir: &Path) -> Haproxy {
        let cfg = haproxy_config(dir);
        let listeners = [dir.join("web.sock"), dir.join("stats.sock")];
        let current = start_haproxy(&bin, &cfg, None);
        wait_for("haproxy listens", || {
            listeners.iter().all(|l| UnixStream::connect(l).is_ok())
        });
        Haproxy {
            bin,
            cfg,
            listeners,
            current,
        }
    }

    fn reload(&mut self) {
        let next = start_haproxy(&self.bin, &self.cfg, Some(self.current.0.id()));
        let mut old = std::mem::replace(&mut self.current, next);
        wait_for("the old haproxy exits after -sf", || {
            old.0.try_wait().expect("wait").is_some()
        });
        for l in &self.listeners {
            UnixStream::connect(l)
                .unwrap_or_else(|e| panic!("{} not served after the reload: {e}", s(l)));
        }
    }
}

/// A Node.js server on a UNIX socket whose SIGTERM handler closes it (libuv unlinks the
/// path on close) and exits.
struct NodeServer {
    child: Child,
    out: BufReader<ChildStdout>,
}

const NODE_SERVER: &str = "const net = require('net');\n\
    const server = net.createServer((c) => c.end());\n\
    server.listen(process.argv[1], () => console.log('listening'));\n\
    process.on('SIGTERM', () => server.close(() => { console.log('closed'); process.exit(0); }));\n";

impl NodeServer {
    fn start(node: &Path, sock: &Path) -> NodeServer {
        let mut child = Command::new(node)
            .args(["-e", NODE_SERVER, s(sock)])
            .stdout(Stdio::piped())
            .spawn()
            .expect("node");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        assert_eq!(read_line(&mut out), "listening");
        NodeServer { child, out }
    }

    fn stop(mut self) {
        // SAFETY: kill(2) takes no pointers; the pid is our own child's, not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        assert_eq!(read_line(&mut self.out), "closed");
        assert!(self.child.wait().expect("wait").success());
    }
}

/// A server the test did not stop (it failed first) is killed, never left listening: a
/// node-wide test would take it for an orphaned listener.
impl Drop for NodeServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_line(out: &mut BufReader<ChildStdout>) -> String {
    let mut line = String::new();
    out.read_line(&mut line).expect("read");
    line.trim().to_string()
}

/// Alerts of severity warning or critical in `ALERTS`, pending or firing: (name, state, watch).
fn serious_alerts(prom: SocketAddr) -> BTreeSet<(String, String, String)> {
    query(prom, r#"ALERTS{severity=~"warning|critical"}"#)
        .iter()
        .map(|a| {
            let m = &a["metric"];
            let field = |k: &str| m[k].as_str().unwrap_or("").to_string();
            (field("alertname"), field("alertstate"), field("watch"))
        })
        .collect()
}

/// The verdicts the agent wrote (the DaemonSet writes verdicts only).
fn verdicts(events: &Path) -> Vec<Value> {
    std::fs::read_to_string(events)
        .expect("events")
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("verdict").is_some())
        .collect()
}

fn takeovers_under(verdicts: &[Value], dir: &Path) -> usize {
    verdicts
        .iter()
        .filter(|v| v["verdict"] == "takeover")
        .filter(|v| v["path"].as_str().is_some_and(|p| p.starts_with(s(dir))))
        .count()
}

/// How often each healthy event happened.
#[derive(Default, Debug)]
struct Done {
    haproxy_reloads: usize,
    kubelet_restarts: usize,
    go_rollouts: usize,
    node_rollouts: usize,
}

fn run_length() -> Duration {
    let secs = std::env::var("SOCKWATCH_HEALTHY_SECS")
        .ok()
        .map_or(600, |v| v.parse().expect("SOCKWATCH_HEALTHY_SECS: seconds"));
    Duration::from_secs(secs)
}

#[test]
#[ignore = "ten minutes: `cargo xtask test` runs it beside the fuzz and soak steps"]
fn ten_minutes_of_healthy_reloads_and_restarts_page_nothing_and_seed_001_still_does() {
    let test = "healthy_node";
    if !runs_here(test) {
        return;
    }
    let (Some(haproxy), Some(node), Some(go)) = (
        program("haproxy", test),
        program("node", test),
        go_or_skip(test),
    ) else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let run = tmp.path().join("run");
    let dirs: Vec<(&str, PathBuf)> = ["haproxy", "device-plugins", "go", "node", "multus"]
        .into_iter()
        .map(|name| (name, run.join(name)))
        .collect();
    let watches: Vec<(&str, &Path)> = dirs.iter().map(|(n, d)| (*n, d.as_path())).collect();
    let stack = Stack::start(tmp.path(), &watches);
    let dir = |name: &str| run.join(name);

    let mut haproxy = Haproxy::start(haproxy, &dir("haproxy"));
    let mut kubelet = Kubelet::start(&dir("device-plugins"));
    let go_sock = dir("go").join("daemon").join("go.sock");
    std::fs::create_dir_all(go_sock.parent().expect("parent")).expect("mkdir");
    let mut go_daemon = GoDaemon::listen(&go, &["-keep"], &go_sock);
    let node_sock = dir("node").join("node.sock");
    let mut node_server = NodeServer::start(&node, &node_sock);

    // Rules evaluated before Prometheus' first scrape see no `up`: SockwatchDown is pending
    // for a second. The run starts once an evaluation has seen the agent.
    wait_until(
        "no alert pending or firing before the run",
        Duration::from_secs(30),
        || serious_alerts(stack.prom_addr).is_empty().then_some(()),
    );
    let (length, started) = (run_length(), Instant::now());
    let mut done = Done::default();
    let mut second = 0u64;
    while started.elapsed() < length {
        second += 1;
        if second.is_multiple_of(20) {
            haproxy.reload();
            done.haproxy_reloads += 1;
        }
        if second % 60 == 30 {
            kubelet.restart();
            done.kubelet_restarts += 1;
        }
        if second % 30 == 10 {
            // The successor removes the directory and listens; the old one exits.
            let next = GoDaemon::listen(&go, &["-keep", "-rmdir"], &go_sock);
            drop(std::mem::replace(&mut go_daemon, next));
            done.go_rollouts += 1;
        }
        if second % 30 == 25 {
            node_server.stop();
            node_server = NodeServer::start(&node, &node_sock);
            done.node_rollouts += 1;
        }
        let raised = serious_alerts(stack.prom_addr);
        assert!(
            raised.is_empty(),
            "after {:?} ({done:?}): {raised:?}",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    eprintln!("{test}: {done:?} in {:?}, no alert", started.elapsed());

    // The agent decided the takeovers by the time the takeover window ended.
    std::thread::sleep(Duration::from_secs(5));
    let seen = verdicts(&stack.events);
    let paging: Vec<&Value> = seen.iter().filter(|v| alerting(v)).collect();
    assert!(paging.is_empty(), "alerting verdicts: {paging:#?}");
    let expected = [
        ("haproxy", 2 * done.haproxy_reloads),
        ("device-plugins", 2 * done.kubelet_restarts),
        ("go", done.go_rollouts),
        ("node", 0),
    ];
    for (name, want) in expected {
        assert_eq!(
            takeovers_under(&seen, &dir(name)),
            want,
            "takeovers under {name} ({done:?})"
        );
    }
    let others: Vec<&Value> = seen
        .iter()
        .filter(|v| v["verdict"] != "takeover")
        .filter(|v| v["verdict"] != "orphan_closed")
        .collect();
    eprintln!(
        "{test}: {} verdicts, all takeovers as expected; others: {others:#?}",
        seen.len()
    );

    // Seed 001: the stale owner's unlink of its successor's socket still fires.
    let (a, b) = seed_001(&dir("multus").join("multus"));
    let seed = Instant::now();
    wait_until(
        "SockwatchForeignUnlink fires for the multus watch",
        Duration::from_secs(60),
        || {
            serious_alerts(stack.prom_addr)
                .contains(&(
                    "SockwatchForeignUnlink".to_string(),
                    "firing".to_string(),
                    "multus".to_string(),
                ))
                .then_some(())
        },
    );
    eprintln!(
        "{test}: seed 001 fired SockwatchForeignUnlink {:?} after it happened",
        seed.elapsed()
    );
    drop((a, b, haproxy, kubelet, go_daemon));
    node_server.stop();
    drop(stack);
}
