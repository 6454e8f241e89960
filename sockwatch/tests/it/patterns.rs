//! Socket patterns of real nodes beyond the lab scenarios: a second hard link (S20); releases
//! that are not a close(2) — close_range(2), close-on-exec, the last reference of a thread
//! blocked in accept(2) — which must not leave the socket counted as live (the next refused
//! connect is a dead listener, S4); and a close(2) that is not the release (that thread still
//! holds the socket, which serves on).
use crate::common;

use std::{
    os::unix::fs::MetadataExt,
    path::Path,
    time::{Duration, Instant},
};

use common::{
    actor::Actor,
    agent::{Agent, AgentLines},
    shared::SharedAgent,
    *,
};
use serde_json::Value;

fn tgid(v: &Value, who: &str) -> u64 {
    v[who]["tgid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no {who}.tgid in {v}"))
}

/// S20: removing a second name of a live socket leaves it reachable: no verdict. Removing its
/// last name is a foreign unlink and orphans the listener.
#[test]
fn s20_removing_a_hard_link_is_not_an_orphan() {
    if !root("s20") {
        return;
    }
    let agent = SharedAgent::join();
    let (sock, other) = (
        agent.dir().join("app.sock"),
        agent.dir().join("second-name"),
    );
    let (mut a, mut c) = (Actor::spawn(), Actor::spawn());
    a.must(&format!("listen-on {}", s(&sock)));
    a.must(&format!("link {} {}", s(&sock), s(&other)));
    let ino = std::fs::metadata(&sock).expect("stat").ino();
    c.must(&format!("unlink {}", s(&other)));
    c.must(&format!("unlink {}", s(&sock)));
    let v = agent.expect_verdict("the last name's foreign unlink", |v| {
        v["verdict"] == "foreign_unlink" && v["path"] == s(&sock)
    });
    assert_eq!(tgid(&v, "actor"), u64::from(c.pid), "{v}");
    assert_eq!(tgid(&v, "victim"), u64::from(a.pid), "{v}");
    assert_eq!(v["file"]["ino"], ino, "{v}");
    agent.expect_verdict("A orphaned", |v| {
        v["verdict"] == "orphan_opened" && tgid(v, "owner") == u64::from(a.pid)
    });
    drop((a, c));
    let verdicts = agent.finish();
    let of_link: Vec<&Value> = verdicts.iter().filter(|v| v["path"] == s(&other)).collect();
    assert!(
        of_link.is_empty(),
        "the second name's removal: {of_link:#?}"
    );
    let orphans = verdicts
        .iter()
        .filter(|v| v["verdict"] == "orphan_opened")
        .count();
    assert_eq!(orphans, 1, "{verdicts:#?}");
}

/// After `release` closed A's listener without close(2), clients are refused: a stale
/// connect of kind dead_listener naming A's file and A. Where releases come from syscall
/// tracepoints, a release that is not a close(2) is repaired by the sweeps: the test gets an
/// agent of its own sweeping every second there, and says so; on the precise tiers the
/// kernel's release hook sees it, and the shared agent (no sweeps at all) serves.
fn released_without_close_is_a_dead_listener(test: &str, release: &str) {
    if !root(test) {
        return;
    }
    let shared = SharedAgent::join();
    if !shared.log_text().contains("] attached release: tracepoint") {
        refused_after_release(&shared, shared.dir(), test, release);
        shared.finish();
        return;
    }
    eprintln!("release on the tracepoint tier: these releases are seen by 1 s sweeps");
    let tmp = tempdir();
    let agent = Agent::start(tmp.path(), tmp.path(), &["--scan-interval", "1s"]);
    refused_after_release(&agent, tmp.path(), test, release);
    agent.stop();
}

/// The body of [`released_without_close_is_a_dead_listener`], in `dir`, watched by `agent`.
fn refused_after_release(agent: &impl AgentLines, dir: &Path, test: &str, release: &str) {
    let sock = dir.join("app.sock");
    let mut a = Actor::spawn();
    let h = a.must(&format!("listen-on {}", s(&sock)));
    let ino = std::fs::metadata(&sock).expect("stat").ino();
    a.must(&release.replace("{h}", &h));
    if release.starts_with("exec-sleep") {
        wait_for_exec(a.pid, "sleep");
    }
    let mut client = Actor::spawn();
    if release.starts_with("exec-sleep") {
        // exec names the task before it closes the close-on-exec descriptors, and the last
        // fput of the listener is deferred past that: a connect in between is still served.
        wait_until_refused(&mut client, &sock);
    }
    if release.starts_with("close-while-accepting") {
        // Served after the close(2): this connect is the accept that lets go of the socket.
        assert_eq!(client.must(&format!("connect {}", s(&sock))), "0");
        wait_until_refused(&mut client, &sock);
    }
    let deadline = Instant::now() + patience();
    let v = loop {
        assert_eq!(client.must(&format!("connect {}", s(&sock))), "111");
        let found = agent
            .lines()
            .into_iter()
            .find(|v| v["verdict"] == "stale_connect");
        if let Some(v) = found {
            break v;
        }
        assert!(
            Instant::now() < deadline,
            "{test}: no stale_connect: {:#?}\n{}",
            agent.lines(),
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(v["kind"], "dead_listener", "{v}");
    assert_eq!(v["file"]["ino"], ino, "{v}");
    assert_eq!(tgid(&v, "binder"), u64::from(a.pid), "{v}");
    assert_eq!(tgid(&v, "actor"), u64::from(client.pid), "{v}");
}

/// The accepting thread lets go of the listener just after the connect it accepted returned:
/// a connect in between still queues on the backlog.
fn wait_until_refused(client: &mut Actor, sock: &Path) {
    let deadline = Instant::now() + patience();
    while client.must(&format!("connect {}", s(sock))) == "0" {
        assert!(Instant::now() < deadline, "{sock:?} still served");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The actor replies before it execs: wait until `pid` runs `comm` (its close-on-exec
/// descriptors may still be closing).
fn wait_for_exec(pid: u32, comm: &str) {
    let deadline = Instant::now() + patience();
    let runs =
        || std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm);
    while !runs() {
        assert!(Instant::now() < deadline, "{pid} did not exec {comm}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn close_range_release_then_a_refused_connect_is_a_dead_listener() {
    released_without_close_is_a_dead_listener("close_range", "close-range {h}");
}

#[test]
fn close_on_exec_release_then_a_refused_connect_is_a_dead_listener() {
    released_without_close_is_a_dead_listener("cloexec", "exec-sleep 5");
}

#[test]
fn the_last_reference_of_an_accepting_thread_then_a_refused_connect_is_a_dead_listener() {
    released_without_close_is_a_dead_listener("thread_held", "close-while-accepting {h}");
}

/// A close(2) while another thread of A is blocked in accept(2) does not release the socket:
/// it still serves, so B's unlink of its path is a foreign unlink with victim A.
#[test]
fn a_close_while_a_thread_accepts_is_not_a_release() {
    if !root("close_while_accepting") {
        return;
    }
    let agent = SharedAgent::join();
    let sock = agent.dir().join("app.sock");
    let mut a = Actor::spawn();
    let h = a.must(&format!("listen-on {}", s(&sock)));
    let ino = std::fs::metadata(&sock).expect("stat").ino();
    a.must(&format!("close-while-accepting {h}"));
    let mut b = Actor::spawn();
    b.must(&format!("unlink {}", s(&sock)));
    let b_pid = b.pid;
    drop(b); // B exits: its removal is decided without waiting for a takeover
    let v = agent.expect_verdict("B's foreign unlink", |v| {
        v["verdict"] == "foreign_unlink" && tgid(v, "actor") == u64::from(b_pid)
    });
    assert_eq!(tgid(&v, "victim"), u64::from(a.pid), "{v}");
    assert_eq!(v["file"]["ino"], ino, "{v}");
    assert_eq!(v["path"], s(&sock), "{v}");
    drop(a);
    agent.finish();
}
