//! Renames of live socket files by real processes: `RENAME_EXCHANGE` swaps two names and
//! removes nothing (one `moved` per live socket swapped, never a `replaced`), a live socket's
//! file renamed away is `moved` and its new path is the one that leads to it, and S5's
//! rename-over still gives `replaced`. Run once per tier (`SOCKWATCH_PROBE_MODE`, the VM suite).
use crate::common;

use std::{os::unix::fs::MetadataExt, path::Path, time::Duration};

use common::{actor::Actor, shared::SharedAgent, *};
use serde_json::Value;

fn tgid(v: &Value, who: &str) -> u64 {
    v[who]["tgid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no {who}.tgid in {v}"))
}

fn ino(p: &Path) -> u64 {
    std::fs::metadata(p).expect("stat").ino()
}

/// The `moved` verdict of the socket file `file` (inode).
fn moved_of(agent: &SharedAgent, what: &str, file: u64) -> Value {
    agent.expect_verdict(what, |v| {
        v["verdict"] == "moved" && v["file"]["ino"] == file
    })
}

/// Finishes the test's share of the agent and fails on any verdict of the given kinds.
fn assert_none_of(agent: &SharedAgent, kinds: &[&str]) -> Vec<Value> {
    // Events come through a 10 ms drain: give the last ones time to arrive.
    std::thread::sleep(Duration::from_millis(500));
    let verdicts = agent.finish();
    let bad: Vec<&Value> = verdicts
        .iter()
        .filter(|v| kinds.iter().any(|k| v["verdict"] == *k))
        .collect();
    assert!(bad.is_empty(), "unexpected verdicts: {bad:#?}");
    verdicts
}

/// An exchange of a live listener's file with a regular file, by another process: the
/// listener is `moved` to the regular file's name (and connectable there), nothing is
/// replaced or orphaned; the exchange back (the regular file now named first) moves it home.
#[test]
fn exchange_with_a_regular_file_moves_the_listener_and_replaces_nothing() {
    if !root("exchange_with_a_regular_file") {
        return;
    }
    let agent = SharedAgent::join();
    let (sock, plain) = (agent.dir().join("app.sock"), agent.dir().join("plain"));
    let (mut a, mut c) = (Actor::spawn(), Actor::spawn());
    a.must(&format!("listen-on {}", s(&sock)));
    c.must(&format!("touch {}", s(&plain)));
    let file = ino(&sock);

    c.must(&format!("exchange {} {}", s(&sock), s(&plain)));
    assert_eq!(
        ino(&plain),
        file,
        "the exchange put the socket at the other name"
    );
    assert_eq!(c.must(&format!("connect {}", s(&plain))), "0");
    let v = moved_of(&agent, "the listener moved by the exchange", file);
    assert_eq!(tgid(&v, "actor"), u64::from(c.pid), "{v}");
    assert_eq!(tgid(&v, "owner"), u64::from(a.pid), "{v}");
    assert_eq!(
        (v["from"].as_str(), v["to"].as_str()),
        (Some(s(&sock)), Some(s(&plain))),
        "{v}"
    );
    assert_eq!(
        (v["foreign"].as_bool(), v["listening"].as_bool()),
        (Some(true), Some(true)),
        "{v}"
    );

    // The regular file (now at app.sock) named first: the socket is the exchange's target.
    c.must(&format!("exchange {} {}", s(&sock), s(&plain)));
    assert_eq!(ino(&sock), file, "the exchange back");
    let back = agent.expect_verdict("the listener moved back", |v| {
        v["verdict"] == "moved" && v["file"]["ino"] == file && v["to"] == s(&sock)
    });
    assert_eq!(back["from"], s(&plain), "{back}");
    assert_eq!(tgid(&back, "actor"), u64::from(c.pid), "{back}");
    assert_eq!(c.must(&format!("connect {}", s(&sock))), "0");
    drop((a, c));
    let verdicts = assert_none_of(&agent, &["replaced", "foreign_unlink", "orphan_opened"]);
    let moves = verdicts.iter().filter(|v| v["verdict"] == "moved").count();
    assert_eq!(moves, 2, "{verdicts:#?}");
}

/// An exchange of two live listeners' files: one `moved` for each, naming the other file,
/// and each path now leads to the other listener: an unlink at A's old path is a foreign
/// unlink of B's socket.
#[test]
fn exchange_of_two_live_listeners_swaps_their_paths() {
    if !root("exchange_of_two_live_listeners") {
        return;
    }
    let agent = SharedAgent::join();
    let (pa, pb) = (agent.dir().join("a.sock"), agent.dir().join("b.sock"));
    let (mut a, mut b, mut c) = (Actor::spawn(), Actor::spawn(), Actor::spawn());
    a.must(&format!("listen-on {}", s(&pa)));
    b.must(&format!("listen-on {}", s(&pb)));
    let (fa, fb) = (ino(&pa), ino(&pb));

    c.must(&format!("exchange {} {}", s(&pa), s(&pb)));
    assert_eq!((ino(&pa), ino(&pb)), (fb, fa), "swapped");
    let va = moved_of(&agent, "A's socket moved to b.sock", fa);
    let vb = moved_of(&agent, "B's socket moved to a.sock", fb);
    for (v, owner, from, to, other) in [(&va, &a, &pa, &pb, fb), (&vb, &b, &pb, &pa, fa)] {
        assert_eq!(tgid(v, "actor"), u64::from(c.pid), "{v}");
        assert_eq!(tgid(v, "owner"), u64::from(owner.pid), "{v}");
        assert_eq!(
            (v["from"].as_str(), v["to"].as_str()),
            (Some(s(from)), Some(s(to))),
            "{v}"
        );
        assert_eq!(v["exchanged_with"]["ino"], other, "{v}");
    }

    // a.sock now leads to B's listener: removing it is B's foreign unlink.
    c.must(&format!("unlink {}", s(&pa)));
    let v = agent.expect_verdict("B's file unlinked at its new name", |v| {
        v["verdict"] == "foreign_unlink" && v["file"]["ino"] == fb
    });
    assert_eq!(tgid(&v, "victim"), u64::from(b.pid), "{v}");
    assert_eq!(tgid(&v, "actor"), u64::from(c.pid), "{v}");
    assert_eq!(v["path"], s(&pa), "{v}");
    drop((a, b, c));
    let verdicts = assert_none_of(&agent, &["replaced"]);
    // A's socket only moved; its file at b.sock outlives it (`stale_socket_file` at its close).
    let of_a: Vec<&Value> = verdicts
        .iter()
        .filter(|v| v["file"]["ino"] == fa)
        .filter(|v| !matches!(v["verdict"].as_str(), Some("moved" | "stale_socket_file")))
        .collect();
    assert!(of_a.is_empty(), "A's socket lost its path: {of_a:#?}");
}

/// A live listener's file renamed away by another process: `moved` names the socket, both
/// paths and who moved it; clients reach it at the new path. A later unlink at the new path is
/// that socket's foreign unlink: the exact tiers follow the inode, the tracepoint tier (which
/// filters removals by base name) the name the agent gave the kernel's table at the move.
#[test]
fn a_listener_renamed_away_is_moved_and_followed_to_its_new_path() {
    if !root("a_listener_renamed_away") {
        return;
    }
    let agent = SharedAgent::join();
    let (sock, away) = (agent.dir().join("app.sock"), agent.dir().join("moved.sock"));
    let (mut a, mut c) = (Actor::spawn(), Actor::spawn());
    a.must(&format!("listen-on {}", s(&sock)));
    let file = ino(&sock);

    c.must(&format!("rename {} {}", s(&sock), s(&away)));
    let v = moved_of(&agent, "the listener renamed away", file);
    assert_eq!(tgid(&v, "actor"), u64::from(c.pid), "{v}");
    assert_eq!(tgid(&v, "owner"), u64::from(a.pid), "{v}");
    assert_eq!(
        (v["from"].as_str(), v["to"].as_str()),
        (Some(s(&sock)), Some(s(&away))),
        "{v}"
    );
    assert_eq!(v["foreign"], true, "{v}");
    assert_eq!(c.must(&format!("connect {}", s(&away))), "0");
    assert_eq!(
        c.must(&format!("connect {}", s(&sock))),
        libc::ENOENT.to_string()
    );

    c.must(&format!("unlink {}", s(&away)));
    let v = agent.expect_verdict("the foreign unlink at the new path", |v| {
        v["verdict"] == "foreign_unlink" && v["file"]["ino"] == file
    });
    assert_eq!(tgid(&v, "victim"), u64::from(a.pid), "{v}");
    assert_eq!(tgid(&v, "actor"), u64::from(c.pid), "{v}");
    assert_eq!(v["path"], s(&away), "{v}");
    drop((a, c));
    assert_none_of(&agent, &["replaced"]);
}

/// S5 by another program: it binds a socket at a temporary name and renames it over the live
/// listener's file: one `hijack` (by rename) naming both files and all three parties, and no
/// `moved` for the socket moved into place (the hijack names it); a later foreign unlink of
/// that socket at its new path is reported.
#[test]
fn s5_rename_over_a_live_listener_by_another_program_is_a_hijack() {
    if !root("s5_rename_over") {
        return;
    }
    let agent = SharedAgent::join();
    let watched = agent.dir();
    let (sock, next) = (watched.join("app.sock"), watched.join("app.sock.new"));
    // B runs from a link of the test binary elsewhere: another program to the agent.
    let tmp = tempdir();
    let other = other_program(tmp.path());
    let (mut a, mut b) = (Actor::spawn(), Actor::spawn_from(&other));
    a.must(&format!("listen-on {}", s(&sock)));
    b.must(&format!("listen-on {}", s(&next)));
    let (old, new) = (ino(&sock), ino(&next));

    b.must(&format!("rename {} {}", s(&next), s(&sock)));
    let v = agent.expect_verdict("A's file hijacked", |v| {
        v["verdict"] == "hijack" && v["old_file"]["ino"] == old
    });
    assert_eq!(v["how"], "rename", "{v}");
    assert_eq!(tgid(&v, "remover"), u64::from(b.pid), "{v}");
    assert_eq!(tgid(&v, "victim"), u64::from(a.pid), "{v}");
    assert_eq!(tgid(&v, "successor"), u64::from(b.pid), "{v}");
    assert_eq!(v["new_file"]["ino"], new, "{v}");
    assert_eq!(v["path"], s(&sock), "{v}");

    // A closes; B's socket bears A's old name now, so a third process's unlink of it is B's
    // foreign unlink on every tier (the tracepoint tier filters by the name the agent gave
    // the kernel's table at the rename, not by the one B bound).
    drop(a);
    let mut c = Actor::spawn();
    c.must(&format!("unlink {}", s(&sock)));
    let v = agent.expect_verdict("the foreign unlink of B's socket", |v| {
        v["verdict"] == "foreign_unlink" && v["file"]["ino"] == new
    });
    assert_eq!(tgid(&v, "victim"), u64::from(b.pid), "{v}");
    assert_eq!(tgid(&v, "actor"), u64::from(c.pid), "{v}");
    drop((b, c));
    assert_none_of(&agent, &["moved"]);
}
