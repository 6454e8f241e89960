//! No false alarm: the agent watching every path socket on the node, with sweeps on, while
//! healthy daemons start, serve, restart gracefully and hand work to forked workers, raises
//! no alerting verdict and no alerting metric.
use crate::common;

use std::time::{Duration, Instant};

use common::{actor::Actor, agent::Agent, *};
use serde_json::Value;

/// How long the agent runs: a minute on the host (its own daemons' sockets are part of the
/// test); the guest has only the test's processes, so a shorter run says as much there.
fn idle_run() -> Duration {
    if std::env::var_os("SOCKWATCH_IN_VM").is_some() {
        Duration::from_secs(15)
    } else {
        Duration::from_secs(60)
    }
}

/// The verdicts that page or warn (`takeover`, `orphan_closed` and the like are not here).
fn alerting(v: &Value) -> bool {
    match v["verdict"].as_str() {
        Some("foreign_unlink" | "stale_connect" | "stale_socket_file") => true,
        Some("replaced") => v["foreign"] == true,
        Some("orphan_opened") => v["cause"] != "taken_over",
        _ => false,
    }
}

/// The series the alert rules fire on: each must stay 0.
const ALERTING_SERIES: [&str; 4] = [
    "sockwatch_orphaned_listeners",
    "sockwatch_foreign_unlinks_total",
    "sockwatch_stale_connects_total",
    "sockwatch_stale_bind_mounts",
];

/// One healthy round: a daemon binds, listens and serves a client; a forked worker unlinks
/// the socket (S6); the daemon closes. Then a daemon that removes its own file on shutdown
/// (S2). Then a rolling restart done right (S22): the successor removes the directory and
/// listens again at once, the predecessor closes without unlinking and exits.
fn healthy_round(dir: &std::path::Path, round: usize) {
    serve_and_shut_down(dir, round);
    roll_over(dir, round);
}

fn roll_over(dir: &std::path::Path, round: usize) {
    let run = dir.join(format!("r{round}"));
    std::fs::create_dir(&run).expect("mkdir");
    let sock = run.join("daemon.sock");
    let (dir_s, path) = (run.to_str().expect("utf-8"), sock.to_str().expect("utf-8"));
    let mut old = Actor::spawn();
    old.must(&format!("listen-on {path}"));
    let mut new = Actor::spawn();
    new.must(&format!("rmtree {dir_s}"));
    new.must(&format!("mkdir {dir_s}"));
    let h = new.must(&format!("listen-on {path}"));
    drop(old);
    let mut client = Actor::spawn();
    assert_eq!(client.must(&format!("connect {path}")), "0");
    new.must(&format!("unlink {path}"));
    new.must(&format!("close {h}"));
}

fn serve_and_shut_down(dir: &std::path::Path, round: usize) {
    let sock = dir.join(format!("d{round}.sock"));
    let path = sock.to_str().expect("utf-8");
    let mut daemon = Actor::spawn();
    let h = daemon.must(&format!("listen-on {path}"));
    let mut client = Actor::spawn();
    assert_eq!(client.must(&format!("connect {path}")), "0");
    daemon.must(&format!("fork-unlink {path}"));
    daemon.must(&format!("close {h}"));
    let h = daemon.must(&format!("listen-on {path}"));
    assert_eq!(client.must(&format!("connect {path}")), "0");
    daemon.must(&format!("unlink {path}"));
    daemon.must(&format!("close {h}"));
}

#[test]
fn a_node_wide_run_of_healthy_daemons_raises_no_alert() {
    if !root("idle") {
        return;
    }
    let tmp = tempdir();
    let addr = free_addr();
    let listen = addr.to_string();
    let agent = Agent::start_node_wide(tmp.path(), &["--listen", &listen, "--scan-interval", "5s"]);
    let started = Instant::now();
    let mut rounds = 0;
    while started.elapsed() < idle_run() {
        healthy_round(tmp.path(), rounds);
        rounds += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
    let metrics = Agent::metrics(addr);
    let ours = |l: &&Value| {
        l["path"]
            .as_str()
            .is_some_and(|p| p.starts_with(tmp.path().to_str().expect("utf-8")))
    };
    let binds = agent
        .lines()
        .iter()
        .filter(ours)
        .filter(|l| l["kind"] == "bind")
        .count();
    let verdicts = agent.stop();
    assert_eq!(
        binds,
        4 * rounds,
        "the agent saw every bind of the healthy daemons"
    );
    let takeovers = verdicts
        .iter()
        .filter(ours)
        .filter(|v| v["verdict"] == "takeover")
        .count();
    assert_eq!(
        takeovers, rounds,
        "one takeover per rolling restart: {verdicts:#?}"
    );
    let alerts: Vec<&Value> = verdicts.iter().filter(|v| alerting(v)).collect();
    assert!(
        alerts.is_empty(),
        "alerting verdicts on a healthy node: {alerts:#?}"
    );
    let exposition = sockwatch_bench::prom::Exposition::parse(&metrics);
    for series in ALERTING_SERIES {
        assert_eq!(exposition.sum(series, &[]), 0.0, "{series}:\n{metrics}");
    }
    eprintln!(
        "{rounds} healthy rounds in {:?}, {} verdicts, none alerting",
        idle_run(),
        verdicts.len()
    );
}
