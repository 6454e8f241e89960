//! A watched directory that does not exist when the agent starts (a DaemonSet started before
//! the daemon that creates its directory): the agent starts, says it waits, exports
//! `sockwatch_watch_directory_missing`, and watches the directory from its creation — from
//! the first bind below it where its parent exists (the kernel knows it by parent and name),
//! within a second for a deeper path (the agent's refresh).
use crate::common;

use std::{
    os::unix::fs::MetadataExt,
    path::Path,
    time::{Duration, Instant},
};

use common::{actor::Actor, agent::Agent, *};

/// The value of the missing-directory gauge of watch `name`.
fn missing(addr: std::net::SocketAddr, name: &str) -> Option<String> {
    let series = format!("sockwatch_watch_directory_missing{{watch=\"{name}\"}} ");
    Agent::metrics(addr)
        .lines()
        .find_map(|l| l.strip_prefix(&series).map(str::to_owned))
}

/// Waits until watch `name`'s gauge reads `want`.
fn expect_missing(addr: std::net::SocketAddr, name: &str, want: &str) {
    let deadline = Instant::now() + patience();
    loop {
        let now = missing(addr, name);
        if now.as_deref() == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "sockwatch_watch_directory_missing{{watch=\"{name}\"}}: {now:?}, want {want}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts the agent watching `watch`, which does not exist; checks it says so.
fn start_waiting(tmp: &Path, watch: &Path) -> (Agent, std::net::SocketAddr) {
    assert!(!watch.exists());
    let addr = free_addr();
    let agent = Agent::start(tmp, watch, &["--listen", &addr.to_string()]);
    let said = format!("watch {}: directory does not exist yet", s(watch));
    assert!(
        agent.log_text().contains(&said),
        "{said} in:\n{}",
        agent.log_text()
    );
    let name = watch.file_name().and_then(|n| n.to_str()).expect("name");
    expect_missing(addr, name, "1");
    (agent, addr)
}

/// A listener bound in `dir` by one process, unlinked by another: the agent must report the
/// foreign unlink with the exact file, victim and remover.
fn assert_foreign_unlink_seen(agent: Agent, dir: &Path) {
    let sock = dir.join("daemon.sock");
    let (mut a, mut c) = (Actor::spawn(), Actor::spawn());
    a.must(&format!("listen-on {}", s(&sock)));
    let ino = std::fs::metadata(&sock).expect("stat").ino();
    c.must(&format!("unlink {}", s(&sock)));
    let v = agent.expect_verdict("the foreign unlink in the new directory", |v| {
        v["verdict"] == "foreign_unlink" && v["file"]["ino"] == ino
    });
    assert_eq!(v["victim"]["tgid"], a.pid, "{v}");
    assert_eq!(v["actor"]["tgid"], c.pid, "{v}");
    assert_eq!(v["path"], s(&sock), "{v}");
    drop((a, c));
    agent.stop();
}

/// The parent exists: the first bind in the new directory, made at once after the mkdir
/// (before the agent's one-second refresh, as a rule), is seen: the kernel adopts the
/// directory by parent and name.
#[test]
fn a_missing_directory_is_watched_from_its_first_bind() {
    if !root("waiting_first_bind") {
        return;
    }
    let tmp = tempdir();
    let dir = tmp.path().join("multus");
    let (agent, addr) = start_waiting(tmp.path(), &dir);
    std::fs::create_dir(&dir).expect("mkdir");
    let sock = dir.join("first.sock");
    let mut a = Actor::spawn();
    a.must(&format!("listen-on {}", s(&sock)));
    let bind = agent.expect_line("the first bind in the new directory", |l| {
        l["kind"] == "bind" && l["path"] == s(&sock)
    });
    assert_eq!(bind["tgid"], a.pid, "{bind}");
    expect_missing(addr, "multus", "0");
    assert!(
        agent.log_text().contains("directory created, watching it"),
        "{}",
        agent.log_text()
    );
    assert_foreign_unlink_seen(agent, &dir);
}

/// The parent is missing too: the agent's refresh adds the directory within a second of its
/// creation, and the gauge says so.
#[test]
fn a_missing_path_is_watched_once_created() {
    if !root("waiting_deep") {
        return;
    }
    let tmp = tempdir();
    let dir = tmp.path().join("run").join("daemon");
    let (agent, addr) = start_waiting(tmp.path(), &dir);
    std::fs::create_dir_all(&dir).expect("mkdir -p");
    expect_missing(addr, "daemon", "0");
    assert_foreign_unlink_seen(agent, &dir);
}
