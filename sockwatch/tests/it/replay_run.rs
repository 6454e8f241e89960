//! `sockwatch replay` of a run's events file decides what the run decided, byte for byte (the
//! stream's own `schema`, `time` and `node` aside): the facts the run checked on its host,
//! written as `check` lines, decide the replay's verdicts as they decided the run's, where
//! they withheld one and where they let one stand.
use crate::common;

use std::path::Path;

use common::{actor::Actor, agent::Agent, *};
use serde_json::Value;

/// The run's flags the replay is given too: the run's takeover window and watch.
const WINDOW: [&str; 2] = ["--takeover-window", "0s"];

/// `sockwatch replay` of `events` as the run was configured: its verdict lines.
fn replay(events: &Path, watch: &Path) -> Vec<String> {
    common::replay::lines(events, &[&["--watch", s(watch)][..], &WINDOW].concat())
}

/// A run's verdict line without the fields every written line ends with (`schema`, `time`,
/// `node`), which a replay does not write.
fn unstamped(line: &str) -> String {
    let at = line.rfind(",\"schema\":").expect("a stamped line");
    format!("{}}}", &line[..at])
}

#[test]
fn a_replay_of_the_events_file_writes_the_runs_verdicts_byte_for_byte() {
    if !root("a_replay_of_the_events_file_writes_the_runs_verdicts_byte_for_byte") {
        return;
    }
    let dir = tempdir();
    let watch = dir.path().join("w");
    std::fs::create_dir(&watch).expect("watch dir");
    // Without the release hook, a verdict that calls a socket open is checked against its
    // holder's descriptors: the checks this test is about.
    let flags = [&WINDOW[..], &["--test-refuse-hooks", "release"]].concat();
    let agent = Agent::start(dir.path(), &watch, &flags);
    let (closed, open, left) = (
        watch.join("closed.sock"),
        watch.join("open.sock"),
        watch.join("left.sock"),
    );
    let mut a = Actor::spawn();
    let h = a.must(&format!("listen-on {}", s(&closed)));
    a.must(&format!("listen-on {}", s(&open)));
    a.must(&format!("close {h}"));
    let mut b = Actor::spawn();
    b.must(&format!("unlink {}", s(&closed)));
    b.must(&format!("unlink {}", s(&open)));
    // A binder that exits without unlinking: a stale socket file, checked on disk.
    let mut c = Actor::spawn();
    c.must(&format!("listen-on {}", s(&left)));
    c.must("exit");
    agent.expect_verdict("the stale socket file", |v| {
        v["verdict"] == "stale_socket_file" && v["path"] == s(&left)
    });
    agent.expect_verdict("the open socket's foreign unlink", |v| {
        v["verdict"] == "foreign_unlink" && v["path"] == s(&open)
    });
    let a_pid = a.pid;
    drop((a, b));
    let recorded = agent.stop_text();
    let events = dir.path().join("events.jsonl");

    let checks: Vec<Value> = recorded
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).expect("JSON"))
        .filter(|v| v.get("check").is_some())
        .map(|mut v| {
            for stamp in ["schema", "time", "node", "ts_ns"] {
                v.as_object_mut().expect("object").remove(stamp);
            }
            v
        })
        .collect();
    let bound = |path: &Path| -> Value {
        recorded
            .iter()
            .map(|l| serde_json::from_str::<Value>(l).expect("JSON"))
            .find(|v| v["kind"] == "bind" && v["path"] == s(path))
            .map_or(Value::Null, |v| v["sock_ino"].clone())
    };
    let (dev, ino) = stat_id(&left);
    for (check, what) in [
        (
            serde_json::json!({"check": "socket_open", "tgid": a_pid, "sock_ino": bound(&closed), "holds": false}),
            "the closed socket's",
        ),
        (
            serde_json::json!({"check": "socket_open", "tgid": a_pid, "sock_ino": bound(&open), "holds": true}),
            "the open socket's",
        ),
        (
            serde_json::json!({"check": "file_on_disk", "path": s(&left), "file": {"dev": dev, "ino": ino}, "holds": true}),
            "the stale file's",
        ),
    ] {
        let n = checks.iter().filter(|c| **c == check).count();
        assert_eq!(n, 1, "{what} check, once: {checks:#?}");
    }

    let run: Vec<String> = recorded
        .iter()
        .filter(|l| l.starts_with("{\"verdict\":"))
        .map(|l| unstamped(l))
        .collect();
    // An orphan_closed about it may still come (here when left.sock reuses its inode): the
    // engine withholds what a false claim denies and keeps its state, which sweeps settle.
    let about_closed = |lines: &[String], verdict: &str| {
        let tag = format!("{{\"verdict\":\"{verdict}\"");
        let path = format!("\"path\":\"{}\"", s(&closed));
        lines
            .iter()
            .any(|l| l.starts_with(&tag) && l.contains(&path))
    };
    for withheld in ["foreign_unlink", "orphan_opened"] {
        assert!(
            !about_closed(&run, withheld),
            "{withheld} withheld: {run:#?}"
        );
    }
    let replayed = replay(&events, &watch);
    assert_eq!(replayed, run, "replay and run, line by line");

    // The check lines decided: without them the replay calls the closed socket open.
    let unchecked = dir.path().join("unchecked.jsonl");
    let kept: Vec<&String> = recorded
        .iter()
        .filter(|l| !l.starts_with("{\"check\":"))
        .collect();
    let text: String = kept.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&unchecked, text).expect("write");
    let blind = replay(&unchecked, &watch);
    assert!(about_closed(&blind, "foreign_unlink"), "{blind:#?}");
}
