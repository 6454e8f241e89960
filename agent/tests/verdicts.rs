//! The real agent, real processes, the verdicts it writes: the scenarios of
//! ../shared/brief/scenarios.md end to end, on whichever tier this kernel gives `run`.
mod common;

use std::{
    io::{BufRead, BufReader},
    path::Path,
    process::{Command, Stdio},
};

use common::{actor::Actor, agent::Agent, *};
use serde_json::Value;

#[test]
#[ignore = "helper process for the other tests, started by them"]
fn actor() {
    actor::serve();
}

fn s(p: &Path) -> String {
    p.to_str().expect("utf-8").to_string()
}

fn tgid(v: &Value, who: &str) -> u64 {
    v[who]["tgid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no {who}.tgid in {v}"))
}

fn is(v: &Value, verdict: &str) -> bool {
    v["verdict"] == verdict
}

/// Root only: these drive the real agent.
fn root(test: &str) -> bool {
    if !is_root() {
        eprintln!("SKIP {test}: needs root");
    }
    is_root()
}

/// S1: B removes A's live socket with its directory and re-creates it; A's shutdown then
/// unlinks B's. Two foreign unlinks, each naming both parties, and B's orphaned listener.
#[test]
fn s1_rolling_restart() {
    if !root("s1") {
        return;
    }
    let tmp = tempdir();
    let dir = tmp.path().join("multus");
    std::fs::create_dir(&dir).expect("mkdir");
    let sock = dir.join("multus.sock");
    let agent = Agent::start(tmp.path(), tmp.path(), &[]);
    let (mut a, mut b) = (Actor::spawn(), Actor::spawn());
    a.must(&format!("listen-on {}", s(&sock)));
    b.must(&format!("rmtree {}", s(&dir)));
    b.must(&format!("mkdir {}", s(&dir)));
    b.must(&format!("listen-on {}", s(&sock)));
    a.must(&format!("unlink {}", s(&sock)));

    let by_b = agent.expect_verdict("B's foreign unlink", |v| {
        is(v, "foreign_unlink") && tgid(v, "actor") == u64::from(b.pid)
    });
    assert_eq!(tgid(&by_b, "victim"), u64::from(a.pid), "{by_b}");
    assert_eq!(by_b["listening"], true);
    let by_a = agent.expect_verdict("A's foreign unlink", |v| {
        is(v, "foreign_unlink") && tgid(v, "actor") == u64::from(a.pid)
    });
    assert_eq!(tgid(&by_a, "victim"), u64::from(b.pid), "{by_a}");
    assert_eq!(by_a["path"], s(&sock));
    let orphan = agent.expect_verdict("B orphaned", |v| {
        is(v, "orphan_opened") && tgid(v, "owner") == u64::from(b.pid)
    });
    assert_eq!(orphan["file"]["ino"], by_a["file"]["ino"]);
    drop(b); // B exits: its orphan closes
    agent.expect_verdict("B's orphan closed", |v| {
        is(v, "orphan_closed") && v["file"] == orphan["file"]
    });
    let verdicts = agent.stop();
    let foreign = verdicts.iter().filter(|v| is(v, "foreign_unlink")).count();
    assert_eq!(foreign, 2, "exactly two foreign unlinks: {verdicts:#?}");
}

/// S1 with the incident's mechanism: a Go daemon's `net.Listen("unix", …)`, whose Close
/// unlinks the path — by then its successor's live socket.
#[test]
fn s1_go_listener_close_unlinks_successor() {
    if !root("s1_go") {
        return;
    }
    let Some(go) = agent::go_listener() else {
        assert!(
            std::env::var_os("SOCKWATCH_REQUIRE_TIERS").is_none(),
            "the Go listener is required in CI"
        );
        eprintln!("SKIP s1_go: no Go toolchain and no SOCKWATCH_GO_LISTENER");
        return;
    };
    let tmp = tempdir();
    let dir = tmp.path().join("multus");
    std::fs::create_dir(&dir).expect("mkdir");
    let sock = dir.join("multus.sock");
    let agent = Agent::start(tmp.path(), tmp.path(), &[]);
    let mut old = Command::new(&go)
        .arg(&sock)
        .stdout(Stdio::piped())
        .spawn()
        .expect("go listener");
    let mut out = BufReader::new(old.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "listening");
    let mut b = Actor::spawn();
    b.must(&format!("rmtree {}", s(&dir)));
    b.must(&format!("mkdir {}", s(&dir)));
    b.must(&format!("listen-on {}", s(&sock)));
    // SAFETY: kill(2) takes no pointers; the pid is our own child's, not yet reaped.
    unsafe { libc::kill(old.id() as i32, libc::SIGTERM) };
    line.clear();
    out.read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "closed");
    assert!(old.wait().expect("wait").success());
    assert!(!sock.exists(), "Go's Close unlinked the successor's socket");

    let v = agent.expect_verdict("Go's foreign unlink", |v| {
        is(v, "foreign_unlink") && tgid(v, "actor") == u64::from(old.id())
    });
    assert_eq!(tgid(&v, "victim"), u64::from(b.pid), "{v}");
    assert_eq!(v["actor"]["comm"], "golistener");
    agent.expect_verdict("B orphaned", |v| {
        is(v, "orphan_opened") && tgid(v, "owner") == u64::from(b.pid)
    });
    agent.stop();
}

/// S2 and S6: the owner, or a worker it forked, unlinking its own socket stays quiet.
#[test]
fn s2_s6_owner_and_worker_unlinks_are_quiet() {
    if !root("s2_s6") {
        return;
    }
    let tmp = tempdir();
    let agent = Agent::start(tmp.path(), tmp.path(), &[]);
    let mut a = Actor::spawn();
    let own = tmp.path().join("own.sock");
    a.must(&format!("listen-on {}", s(&own)));
    a.must(&format!("unlink {}", s(&own)));
    let worker = tmp.path().join("worker.sock");
    a.must(&format!("listen-on {}", s(&worker)));
    assert!(
        a.must(&format!("fork-unlink {}", s(&worker)))
            .ends_with(" 0")
    );
    // A foreign unlink as a marker: once it is reported, the quiet ones were processed.
    let marker = tmp.path().join("marker.sock");
    a.must(&format!("listen-on {}", s(&marker)));
    let mut m = Actor::spawn();
    m.must(&format!("unlink {}", s(&marker)));
    agent.expect_verdict("marker", |v| {
        is(v, "foreign_unlink") && tgid(v, "actor") == u64::from(m.pid)
    });
    let verdicts = agent.stop();
    let foreign: Vec<&Value> = verdicts
        .iter()
        .filter(|v| is(v, "foreign_unlink") || is(v, "replaced"))
        .collect();
    assert_eq!(
        foreign.len(),
        1,
        "only the marker is foreign: {verdicts:#?}"
    );
}

/// S5: B renames its fresh socket over A's live one: reported as replaced, A orphaned.
#[test]
fn s5_rename_over_is_replaced() {
    if !root("s5") {
        return;
    }
    let tmp = tempdir();
    let sock = tmp.path().join("svc.sock");
    let agent = Agent::start(tmp.path(), tmp.path(), &[]);
    let (mut a, mut b) = (Actor::spawn(), Actor::spawn());
    a.must(&format!("listen-on {}", s(&sock)));
    b.must(&format!(
        "listen-on {}",
        s(&tmp.path().join("svc.sock.new"))
    ));
    let (dev, ino) = stat_id(&tmp.path().join("svc.sock.new"));
    b.must(&format!(
        "rename {} {}",
        s(&tmp.path().join("svc.sock.new")),
        s(&sock)
    ));
    let v = agent.expect_verdict("replaced", |v| is(v, "replaced"));
    assert_eq!(
        (tgid(&v, "actor"), tgid(&v, "victim")),
        (u64::from(b.pid), u64::from(a.pid)),
        "{v}"
    );
    // The file moved into place: B's socket, found in B's view of the path after the rename.
    assert_eq!(
        (v["new_file"]["dev"].as_u64(), v["new_file"]["ino"].as_u64()),
        (Some(dev), Some(ino)),
        "{v}"
    );
    agent.expect_verdict("A orphaned", |v| {
        is(v, "orphan_opened") && tgid(v, "owner") == u64::from(a.pid)
    });
    agent.stop();
}

/// S3: a client's bind mount pins the replaced server's inode: its refused connects are
/// stale connects on an unlinked, pinned inode. S8 alongside: a refusal by a bound but not
/// yet listening successor is not a stale connect.
#[test]
fn s3_stale_connect_and_s8_not_listening() {
    if !root("s3_s8") {
        return;
    }
    let tmp = tempdir();
    let sock = tmp.path().join("srv.sock");
    let view = tmp.path().join("client-view.sock");
    let early = tmp.path().join("early.sock");
    let agent = Agent::start(tmp.path(), tmp.path(), &[]);
    let (mut a, mut b, mut c) = (Actor::spawn(), Actor::spawn(), Actor::spawn());
    a.must(&format!("listen-on {}", s(&sock)));
    c.must(&format!("touch {}", s(&view)));
    c.must(&format!("bind-mount {} {}", s(&sock), s(&view)));
    b.must(&format!("unlink {}", s(&sock)));
    b.must(&format!("listen-on {}", s(&sock)));
    let a_pid = u64::from(a.pid);
    drop(a);
    assert_eq!(
        c.must(&format!("connect {}", s(&view))),
        libc::ECONNREFUSED.to_string()
    );
    let v = agent.expect_verdict("stale connect", |v| is(v, "stale_connect"));
    assert_eq!(v["kind"], "unlinked_pinned", "{v}");
    assert_eq!(tgid(&v, "actor"), u64::from(c.pid), "{v}");
    assert_eq!(tgid(&v, "removed_by"), u64::from(b.pid), "{v}");
    assert_eq!(tgid(&v, "binder"), a_pid, "{v}");

    b.must(&format!("bind {}", s(&early)));
    assert_eq!(
        c.must(&format!("connect {}", s(&early))),
        libc::ECONNREFUSED.to_string()
    );
    // Marker after the S8 refusal.
    let mut m = Actor::spawn();
    m.must(&format!("unlink {}", s(&sock)));
    agent.expect_verdict("marker", |v| {
        is(v, "foreign_unlink") && tgid(v, "actor") == u64::from(m.pid)
    });
    let verdicts = agent.stop();
    let stale: Vec<&Value> = verdicts.iter().filter(|v| is(v, "stale_connect")).collect();
    assert_eq!(
        stale.len(),
        1,
        "only the pinned inode's refusal: {stale:#?}"
    );
}

/// S4: the binder exits without unlinking; a client's refusal there is a stale connect on a
/// dead listener's file, and the file is reported stale.
#[test]
fn s4_dead_listener_file() {
    if !root("s4") {
        return;
    }
    let tmp = tempdir();
    let sock = tmp.path().join("dead.sock");
    let agent = Agent::start(tmp.path(), tmp.path(), &[]);
    let mut a = Actor::spawn();
    a.must(&format!("listen-on {}", s(&sock)));
    let a_pid = u64::from(a.pid);
    drop(a);
    let mut c = Actor::spawn();
    assert_eq!(
        c.must(&format!("connect {}", s(&sock))),
        libc::ECONNREFUSED.to_string()
    );
    let stale = agent.expect_verdict("stale socket file", |v| is(v, "stale_socket_file"));
    assert_eq!(tgid(&stale, "binder"), a_pid, "{stale}");
    let v = agent.expect_verdict("stale connect", |v| is(v, "stale_connect"));
    assert_eq!(v["kind"], "dead_listener", "{v}");
    agent.stop();
}

/// S10: the agent starts after A listens and after an orphan exists: the startup scan knows
/// A as the owner (its later foreign unlink is caught) and reports the orphan.
#[test]
fn s10_late_start() {
    if !root("s10") {
        return;
    }
    let tmp = tempdir();
    let sock = tmp.path().join("early.sock");
    let orphan = tmp.path().join("orphan.sock");
    let (mut a, mut o) = (Actor::spawn(), Actor::spawn());
    a.must(&format!("listen-on {}", s(&sock)));
    o.must(&format!("listen-on {}", s(&orphan)));
    std::fs::remove_file(&orphan).expect("orphan it");
    let agent = Agent::start(tmp.path(), tmp.path(), &[]);
    let v = agent.expect_verdict("pre-existing orphan", |v| {
        is(v, "orphan_opened") && tgid(v, "owner") == u64::from(o.pid)
    });
    assert_eq!(v["since_exact"], false, "{v}");
    let mut b = Actor::spawn();
    b.must(&format!("unlink {}", s(&sock)));
    let f = agent.expect_verdict("foreign unlink", |v| {
        is(v, "foreign_unlink") && tgid(v, "actor") == u64::from(b.pid)
    });
    assert_eq!(tgid(&f, "victim"), u64::from(a.pid), "{f}");
    agent.stop();
}

/// S12: the watched directory is deleted and re-created; watching goes on in the new one.
#[test]
fn s12_recreated_watched_directory() {
    if !root("s12") {
        return;
    }
    let tmp = tempdir();
    let dir = tmp.path().join("run");
    std::fs::create_dir(&dir).expect("mkdir");
    let agent = Agent::start(tmp.path(), &dir, &[]);
    let (mut a, mut b) = (Actor::spawn(), Actor::spawn());
    b.must(&format!("rmtree {}", s(&dir)));
    b.must(&format!("mkdir {}", s(&dir)));
    let sock = dir.join("x.sock");
    a.must(&format!("listen-on {}", s(&sock)));
    b.must(&format!("unlink {}", s(&sock)));
    let v = agent.expect_verdict("foreign unlink in the new directory", |v| {
        is(v, "foreign_unlink")
    });
    assert_eq!(
        (tgid(&v, "actor"), tgid(&v, "victim")),
        (u64::from(b.pid), u64::from(a.pid)),
        "{v}"
    );
    agent.stop();
}

/// A graceful shutdown in C order (close, then unlink) leaves nothing stale, even on the
/// tracepoint tier, which cannot see that unlink (the name is no longer live).
#[test]
fn close_then_unlink_is_not_stale() {
    if !root("close_then_unlink") {
        return;
    }
    let tmp = tempdir();
    let sock = tmp.path().join("graceful.sock");
    let agent = Agent::start(tmp.path(), tmp.path(), &[]);
    let mut a = Actor::spawn();
    let h = a.must(&format!("bind {}", s(&sock)));
    a.must(&format!("listen {h}"));
    a.must(&format!("close {h}"));
    a.must(&format!("unlink {}", s(&sock)));
    drop(a); // the engine decides staleness when the closer exits
    // A marker after the exit: a dead listener's file left behind.
    let dead = tmp.path().join("dead.sock");
    let mut d = Actor::spawn();
    d.must(&format!("listen-on {}", s(&dead)));
    drop(d);
    agent.expect_verdict("marker", |v| {
        is(v, "stale_socket_file") && v["path"] == s(&dead)
    });
    let verdicts = agent.stop();
    let graceful: Vec<&Value> = verdicts.iter().filter(|v| v["path"] == s(&sock)).collect();
    assert!(graceful.is_empty(), "{graceful:#?}");
}
