//! End to end against a real Prometheus (Debian's `prometheus`), as root: the agent runs with
//! the DaemonSet's command line and the ConfigMap's configuration, Prometheus scrapes it every
//! second with the PrometheusRule's rules loaded (as they ship: production `for:` durations),
//! and scenarios S22 and S1 happen for real. Then:
//! - S22 (a Go daemon with the seed's fix rolled over by a Go successor: a takeover) puts no
//!   alert of its watch in `ALERTS`, neither pending nor firing;
//! - after S1, SockwatchOrphanedListener and SockwatchForeignUnlink reach `firing`;
//! - `promtool check metrics` has nothing to say about the agent's scrape;
//! - every PromQL expression of every dashboard returns data from that Prometheus.
//!
//! What differs from the pod: the binary is the one cargo built, `--listen` is a free
//! loopback port instead of 0.0.0.0:9469, `--config` is a copy of the ConfigMap's
//! `sockwatch.toml` plus one watch per scenario (so each scenario's alerts carry its own
//! `watch` label, and activity elsewhere on the node is not mistaken for it); the DaemonSet's
//! hostPath mounts are checked to be the host paths
//! themselves (so the agent sees here what it sees in the pod).
//!
//! Takes about 100 s: the orphaned-listener alert holds for one minute before it fires.
use crate::common;

use std::{
    collections::BTreeSet,
    io::Write as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::{
    prom::{Reaped, Stack, firing, http_get, query, repo, runs_here, tail, wait_until},
    scenes::seed_001,
};
use serde_json::Value;

/// Every panel expression of every dashboard, Grafana variables replaced as
/// deploy/tests/promrules.py does ("All" selected, a 5-minute range).
fn dashboard_exprs() -> Vec<(String, String)> {
    fn walk(v: &Value, file: &str, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(e)) = m.get("expr")
                    && !e.trim().is_empty()
                {
                    let title = m.get("legendFormat").and_then(Value::as_str).unwrap_or("");
                    out.push((format!("{file} ({title})"), substitute(e)));
                }
                for (k, v) in m {
                    if k != "templating" {
                        walk(v, file, out);
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, file, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("dashboards"))
        .expect("dashboards/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    for f in files {
        let d: Value = serde_json::from_str(&std::fs::read_to_string(&f).expect("read"))
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let name = f.file_name().expect("name").to_string_lossy().into_owned();
        walk(&d["panels"], &name, &mut out);
    }
    assert!(!out.is_empty(), "no dashboard expressions found");
    out
}

fn substitute(expr: &str) -> String {
    const VARS: &[(&str, &str)] = &[
        ("__rate_interval", "1m"),
        ("__interval", "1m"),
        ("__range", "5m"),
        ("node", ".*"),
        ("watch", ".+"),
        ("hook", ".+"),
        ("job", ".+"),
    ];
    let mut e = expr.to_string();
    for (name, value) in VARS {
        e = e
            .replace(&format!("${{{name}}}"), value)
            .replace(&format!("${name}"), value);
    }
    assert!(!e.contains('$'), "unknown Grafana variable in {expr}");
    e
}

/// `promtool check metrics` on `scrape`: exit 0 and not one complaint (naming, units, help,
/// counter suffixes, family clashes).
fn assert_promtool_finds_nothing(scrape: &str) {
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "promtool is not installed: `apt-get install prometheus` (deploy/check.sh installs it)",
        );
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(scrape.as_bytes())
        .expect("write the scrape to promtool");
    let out = promtool.wait_with_output().expect("promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics ({}):\n{said}",
        out.status
    );
    eprintln!(
        "promtool check metrics: nothing to say about {} lines",
        scrape.lines().count()
    );
}

/// Every alert of the watch `s22` in `ALERTS`, pending or firing, as (name, state).
fn alerts(prom: SocketAddr) -> BTreeSet<(String, String)> {
    query(prom, r#"ALERTS{watch="s22"}"#)
        .iter()
        .filter_map(|a| {
            let m = &a["metric"];
            Some((
                m["alertname"].as_str()?.to_string(),
                m["alertstate"].as_str()?.to_string(),
            ))
        })
        .collect()
}

/// A Go listener (sockwatch/tests/go/golistener.go) with `flags` on `sock`, once it listens; its
/// stdout stays open (a write to a closed pipe would kill it).
fn go_listen(go: &Path, flags: &[&str], sock: &Path) -> Reaped {
    let (mut child, out) = common::go::go_listen(go, flags, sock);
    child.stdout = Some(out.into_inner());
    Reaped(child, "golistener")
}

/// S22 under Prometheus, in the watch `s22`: the fixed Go daemon is rolled over by a Go
/// successor (os.RemoveAll of the socket's directory, then listen); the old one gets SIGTERM
/// and exits. Returns the successor, still listening. Fails if any alert of the watch appears,
/// pending or firing, while the takeover is counted and scraped.
fn s22_alerts_nothing(prom: SocketAddr, agent: SocketAddr, watched: &Path) -> Reaped {
    let go = common::agent::go_listener().expect(
        "the Go listener: install Go (deploy/check.sh does not) or set SOCKWATCH_GO_LISTENER",
    );
    let dir = watched.join("daemon");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let sock = dir.join("s22.sock");
    let old = go_listen(&go, &["-keep"], &sock);
    let new = go_listen(&go, &["-keep", "-rmdir"], &sock);
    drop(old); // SIGTERM: the fixed Close leaves the path alone, and the process exits
    assert!(
        sock.exists(),
        "the successor's socket survives the old daemon's exit"
    );
    wait_until(
        "Prometheus has scraped the takeover",
        Duration::from_secs(30),
        || {
            (!query(prom, r#"sum(sockwatch_takeovers_total{watch="s22"}) > 0"#).is_empty())
                .then_some(())
        },
    );
    // Several evaluations after the takeover was scraped: no alert, not even pending.
    for _ in 0..10 {
        let raised = alerts(prom);
        assert!(
            raised.is_empty(),
            "S22 (a takeover) raised {raised:?}\nagent metrics:\n{}",
            http_get(agent, "/metrics").unwrap_or_default().1
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let foreign = query(
        prom,
        r#"sum(sockwatch_foreign_unlinks_total{watch="s22"}) > 0"#,
    );
    assert!(
        foreign.is_empty(),
        "S22 counted a foreign unlink: {foreign:?}"
    );
    new
}

#[test]
fn s1_fires_the_alerts_and_every_dashboard_query_has_data() {
    if !runs_here("prometheus_e2e") {
        return;
    }
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let (s22_watch, s1_watch) = (
        tmp.path().join("run").join("s22"),
        tmp.path().join("run").join("s1"),
    );
    let stack = Stack::start(tmp.path(), &[("s22", &s22_watch), ("multus", &s1_watch)]);
    let (agent_addr, prom_addr) = (stack.agent_addr, stack.prom_addr);
    eprintln!("agent and prometheus ready after {:?}", started.elapsed());

    let s22_successor = s22_alerts_nothing(prom_addr, agent_addr, &s22_watch);
    eprintln!("S22 alerted nothing, after {:?}", started.elapsed());

    // S1: A listens on P; its successor B removes P's directory, re-creates it and listens on
    // P (a takeover); A closes its listener and unlinks P, by then B's socket (the incident).
    let (a, b) = seed_001(&s1_watch.join("multus"));
    let s1_done = Instant::now();
    eprintln!("S1 done after {:?}", started.elapsed());

    // The agent's own view first: clearer failures than an alert that never fires.
    wait_until(
        "sockwatch exports an orphaned listener and a foreign unlink",
        Duration::from_secs(30),
        || {
            let orphans = query(prom_addr, "sum(sockwatch_orphaned_listeners) > 0");
            let unlinks = query(prom_addr, "sum(sockwatch_foreign_unlinks_total) > 0");
            (!orphans.is_empty() && !unlinks.is_empty()).then_some(())
        },
    );
    let want: BTreeSet<String> = ["SockwatchOrphanedListener", "SockwatchForeignUnlink"]
        .map(String::from)
        .into();
    let mut last = BTreeSet::new();
    let reached = (|| {
        let deadline = Instant::now() + Duration::from_secs(150);
        while Instant::now() < deadline {
            last = firing(prom_addr);
            if want.is_subset(&last) {
                return true;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        false
    })();
    if !reached {
        let (_, metrics) = http_get(agent_addr, "/metrics").unwrap_or_default();
        let interesting: Vec<&str> = metrics
            .lines()
            .filter(|l| {
                l.starts_with("sockwatch_orphaned")
                    || l.starts_with("sockwatch_foreign")
                    || l.starts_with("sockwatch_verdicts")
            })
            .collect();
        panic!(
            "alerts firing after S1: {last:?}, want {want:?}\nALERTS: {:#?}\nagent metrics:\n{}\nagent log:\n{}\nprometheus log:\n{}",
            query(prom_addr, "ALERTS"),
            interesting.join("\n"),
            tail(&stack.agent_log),
            tail(&stack.prom_log)
        );
    }
    eprintln!(
        "firing {last:?} {:?} after S1 ({:?} in all)",
        s1_done.elapsed(),
        started.elapsed()
    );

    // The agent's API tells who did it.
    let (status, verdicts) = http_get(agent_addr, "/api/verdicts?limit=50").expect("api");
    assert_eq!(status, 200, "{verdicts}");
    assert!(verdicts.contains("foreign_unlink"), "{verdicts}");

    // The exposition as Prometheus' linter reads it, with every family populated by S1.
    let (status, scrape) = http_get(agent_addr, "/metrics").expect("scrape");
    assert_eq!(status, 200, "{scrape}");
    assert_promtool_finds_nothing(&scrape);

    // Every dashboard expression returns data.
    let mut empty = Vec::new();
    let exprs = dashboard_exprs();
    for (panel, e) in &exprs {
        if query(prom_addr, e).is_empty() {
            empty.push(format!("{panel}: {e}"));
        }
    }
    assert!(
        empty.is_empty(),
        "{} of {} dashboard expressions returned no data:\n{}",
        empty.len(),
        exprs.len(),
        empty.join("\n")
    );
    eprintln!(
        "{} dashboard expressions have data; {:?} in all",
        exprs.len(),
        started.elapsed()
    );
    drop((a, b));
    drop(stack);
    drop(s22_successor);
}
