//! The real agent, real processes, the verdicts it writes: the scenarios of
//! ../shared/brief/scenarios.md end to end, on whichever tier this kernel gives `run`.
use crate::common;

use std::path::Path;

use common::{
    actor::Actor,
    agent::Agent,
    go::{go_listen, go_or_skip, go_stop},
    shared::SharedAgent,
    *,
};
use serde_json::Value;
use sockwatch::attribution::runtime::is_go_binary;

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

fn file_is(v: &Value, key: &str, (dev, ino): (u64, u64)) -> bool {
    v[key]["dev"].as_u64() == Some(dev) && v[key]["ino"].as_u64() == Some(ino)
}

/// S1: B removes A's live socket with its directory, re-creates it and listens: a takeover.
/// A's shutdown then unlinks B's socket: the stale owner's foreign unlink, reported at once
/// (not after the takeover window), and B's listener orphaned until B exits.
#[test]
fn s1_rolling_restart() {
    if !root("s1") {
        return;
    }
    let tmp = tempdir();
    let dir = tmp.path().join("multus");
    std::fs::create_dir(&dir).expect("mkdir");
    let sock = dir.join("multus.sock");
    // A long window, so that "at once" is told from "after the window" even in a slow guest.
    let agent = Agent::start(tmp.path(), tmp.path(), &["--takeover-window", "10s"]);
    let (mut a, mut b) = (Actor::spawn(), Actor::spawn());
    a.must(&format!("listen-on {}", s(&sock)));
    let a_file = stat_id(&sock);
    b.must(&format!("rmtree {}", s(&dir)));
    b.must(&format!("mkdir {}", s(&dir)));
    b.must(&format!("listen-on {}", s(&sock)));
    let b_file = stat_id(&sock);

    let t = agent.expect_verdict("B's takeover", |v| is(v, "takeover"));
    assert_eq!(
        (
            tgid(&t, "remover"),
            tgid(&t, "predecessor"),
            tgid(&t, "successor")
        ),
        (u64::from(b.pid), u64::from(a.pid), u64::from(b.pid)),
        "{t}"
    );
    assert!(
        file_is(&t, "old_file", a_file) && file_is(&t, "new_file", b_file),
        "{t}"
    );
    assert_eq!(t["successor_relation"], "same_process", "{t}");
    let a_orphan = agent.expect_verdict("A taken over", |v| {
        is(v, "orphan_opened") && tgid(v, "owner") == u64::from(a.pid)
    });
    assert_eq!(a_orphan["cause"], "taken_over", "{a_orphan}");
    assert_eq!(tgid(&a_orphan, "successor"), u64::from(b.pid), "{a_orphan}");

    let unlinked = std::time::Instant::now();
    a.must(&format!("unlink {}", s(&sock)));
    let by_a = agent.expect_verdict("A's foreign unlink", |v| {
        is(v, "foreign_unlink") && tgid(v, "actor") == u64::from(a.pid)
    });
    let latency = unlinked.elapsed();
    assert!(
        latency < std::time::Duration::from_secs(5),
        "the stale owner's unlink waited {latency:?}, as if for a takeover (10 s window)"
    );
    assert_eq!(tgid(&by_a, "victim"), u64::from(b.pid), "{by_a}");
    // The actors are this Rust test binary: no runtime known, so the neutral cause.
    assert_eq!(by_a["stale_owner"], true, "{by_a}");
    assert_eq!(by_a["actor"].get("runtime"), None, "{by_a}");
    assert_eq!(by_a["path"], s(&sock));
    assert!(file_is(&by_a, "file", b_file), "{by_a}");
    let orphan = agent.expect_verdict("B orphaned", |v| {
        is(v, "orphan_opened") && tgid(v, "owner") == u64::from(b.pid)
    });
    assert_eq!(orphan["cause"], "unlinked", "{orphan}");
    assert_eq!(orphan["file"]["ino"], by_a["file"]["ino"]);
    drop(b); // B exits: its orphan closes
    agent.expect_verdict("B's orphan closed", |v| {
        is(v, "orphan_closed") && v["file"] == orphan["file"]
    });
    let verdicts = agent.stop();
    let count = |name| verdicts.iter().filter(|v| is(v, name)).count();
    assert_eq!(
        (count("takeover"), count("foreign_unlink")),
        (1, 1),
        "one takeover, one foreign unlink: {verdicts:#?}"
    );
}

/// S1 with the incident's mechanism: a Go daemon's `net.Listen("unix", …)`, whose Close
/// unlinks the path — by then its successor's live socket. The successor's removal is a
/// takeover; the Close's unlink the foreign unlink, and the successor's listener orphaned.
#[test]
fn s1_go_listener_close_unlinks_successor() {
    if !root("s1_go") {
        return;
    }
    let Some(go) = go_or_skip("s1_go") else {
        return;
    };
    let agent = SharedAgent::join();
    let dir = agent.dir().join("multus");
    std::fs::create_dir(&dir).expect("mkdir");
    let sock = dir.join("multus.sock");
    let (mut old, mut out) = go_listen(&go, &[], &sock);
    // The old daemon's program is read as the agent completes its bind: it ran for longer
    // than that in the incident, and must here too.
    agent.expect_line("the old daemon's bind", |l| {
        l["kind"] == "bind" && l["tgid"] == old.id()
    });
    // The successor: the same Go daemon, whose start-up removes the socket's directory.
    let (mut new, mut new_out) = go_listen(&go, &["-keep", "-rmdir"], &sock);
    let b_pid = new.id();
    go_stop(&mut old, &mut out);
    assert!(!sock.exists(), "Go's Close unlinked the successor's socket");

    let t = agent.expect_verdict("B's takeover", |v| is(v, "takeover"));
    assert_eq!(
        (tgid(&t, "remover"), tgid(&t, "predecessor")),
        (u64::from(b_pid), u64::from(old.id())),
        "{t}"
    );
    let v = agent.expect_verdict("Go's foreign unlink", |v| {
        is(v, "foreign_unlink") && tgid(v, "actor") == u64::from(old.id())
    });
    assert_eq!(tgid(&v, "victim"), u64::from(b_pid), "{v}");
    assert_eq!(v["actor"]["comm"], "golistener");
    assert_eq!(
        (&v["stale_owner"], &v["actor"]["runtime"]),
        (&true.into(), &"go".into()),
        "{v}"
    );
    let orphan = agent.expect_verdict("B orphaned", |v| {
        is(v, "orphan_opened") && tgid(v, "owner") == u64::from(b_pid)
    });
    assert_eq!(orphan["cause"], "unlinked", "{orphan}");
    go_stop(&mut new, &mut new_out);
    let verdicts = agent.finish();
    let foreign = verdicts.iter().filter(|v| is(v, "foreign_unlink")).count();
    assert_eq!(
        foreign, 1,
        "only the Close's unlink is foreign: {verdicts:#?}"
    );
}

/// The Go listener is told a Go binary by its build-info section, this Rust test binary not.
#[test]
fn a_go_binary_is_told_by_its_build_info_section() {
    let Some(go) = go_or_skip("go_build_info") else {
        return;
    };
    let is_go = |path: &Path| {
        let mut file = std::fs::File::open(path).expect("open");
        is_go_binary(&mut file).expect("an ELF file")
    };
    assert!(is_go(&go), "{}", go.display());
    let me = std::env::current_exe().expect("the test binary");
    assert!(!is_go(&me), "{}", me.display());
}

/// S22: the seed's fix. A Go listener with `SetUnlinkOnClose(false)` is rolled over by a Go
/// successor that removes the directory (`os.RemoveAll`) and listens again; the old one gets
/// SIGTERM, closes and exits. One takeover naming both processes and both inodes, no foreign
/// unlink, and a client connects after every step.
#[test]
fn s22_go_rollout_with_the_fix_is_one_takeover() {
    if !root("s22") {
        return;
    }
    let Some(go) = go_or_skip("s22") else {
        return;
    };
    let agent = SharedAgent::join();
    let dir = agent.dir().join("multus");
    std::fs::create_dir(&dir).expect("mkdir");
    let sock = dir.join("multus.sock");
    let mut client = Actor::spawn();
    let connects = |c: &mut Actor, step: &str| {
        assert_eq!(
            c.must(&format!("connect {}", s(&sock))),
            "0",
            "connect after {step}"
        );
    };
    let (mut old, mut old_out) = go_listen(&go, &["-keep"], &sock);
    let old_file = stat_id(&sock);
    connects(&mut client, "the old daemon listens");
    let (mut new, mut new_out) = go_listen(&go, &["-keep", "-rmdir"], &sock);
    let new_file = stat_id(&sock);
    assert_ne!(old_file, new_file);
    connects(&mut client, "the successor listens");
    go_stop(&mut old, &mut old_out);
    assert!(
        sock.exists(),
        "the fixed Close leaves the successor's socket alone"
    );
    connects(&mut client, "the old daemon exited");

    let t = agent.expect_verdict("takeover", |v| is(v, "takeover"));
    assert_eq!(
        (
            tgid(&t, "remover"),
            tgid(&t, "predecessor"),
            tgid(&t, "successor")
        ),
        (
            u64::from(new.id()),
            u64::from(old.id()),
            u64::from(new.id())
        ),
        "{t}"
    );
    assert!(
        file_is(&t, "old_file", old_file) && file_is(&t, "new_file", new_file),
        "{t}"
    );
    assert_eq!(t["path"], s(&sock), "{t}");
    let orphan = agent.expect_verdict("the predecessor's orphan", |v| {
        is(v, "orphan_opened") && tgid(v, "owner") == u64::from(old.id())
    });
    assert_eq!(orphan["cause"], "taken_over", "{orphan}");
    agent.expect_verdict("its end at the old daemon's exit", |v| {
        is(v, "orphan_closed") && v["file"] == orphan["file"]
    });
    // Finishing decides whatever still waited for a successor: nothing may. (The successor
    // stops after: its fixed Close would leave a stale socket file behind.)
    let verdicts = agent.finish();
    go_stop(&mut new, &mut new_out);
    let names: Vec<&str> = verdicts
        .iter()
        .filter_map(|v| v["verdict"].as_str())
        .collect();
    assert_eq!(
        names,
        ["takeover", "orphan_opened", "orphan_closed"],
        "{verdicts:#?}"
    );
}

/// A removal after which nobody serves the path is a foreign unlink, reported once the
/// takeover window has passed (300 ms here) with the removal's own time, not before.
#[test]
fn a_removal_nobody_rebinds_is_a_foreign_unlink_after_the_window() {
    if !root("foreign_after_window") {
        return;
    }
    let tmp = tempdir();
    let sock = tmp.path().join("svc.sock");
    let agent = Agent::start(tmp.path(), tmp.path(), &["--takeover-window", "300ms"]);
    let (mut a, mut b) = (Actor::spawn(), Actor::spawn());
    a.must(&format!("listen-on {}", s(&sock)));
    // Taken before the command: the unlink happens after it, so a verdict seen less than the
    // window after this instant is early for certain. After B's reply (under emulation, up to
    // a window later) it failed a verdict that was on time.
    let removed = std::time::Instant::now();
    b.must(&format!("unlink {}", s(&sock)));
    let event = agent.expect_line("B's unlink event", |l| {
        l["kind"] == "unlink" && l["tgid"] == b.pid
    });
    std::thread::sleep(std::time::Duration::from_millis(200).saturating_sub(removed.elapsed()));
    let early: Vec<Value> = agent
        .verdicts()
        .into_iter()
        .filter(|v| is(v, "foreign_unlink"))
        .collect();
    assert!(
        early.is_empty() || removed.elapsed() >= std::time::Duration::from_millis(300),
        "reported within the window: {early:#?}"
    );
    let v = agent.expect_verdict("foreign unlink", |v| is(v, "foreign_unlink"));
    assert_eq!(
        (tgid(&v, "actor"), tgid(&v, "victim")),
        (u64::from(b.pid), u64::from(a.pid)),
        "{v}"
    );
    assert_eq!(v["ts_ns"], event["ts_ns"], "the removal's own time: {v}");
    let orphan = agent.expect_verdict("A orphaned", |v| is(v, "orphan_opened"));
    assert_eq!(orphan["cause"], "unlinked", "{orphan}");
    assert_eq!(
        orphan["ts_ns"]
            .as_u64()
            .zip(orphan["since_ns"].as_u64())
            .map(|(t, s)| t - s),
        Some(300_000_000),
        "decided at the window's end: {orphan}"
    );
    let verdicts = agent.stop();
    assert!(!verdicts.iter().any(|v| is(v, "takeover")), "{verdicts:#?}");
}

/// S2 and S6: the owner, or a worker it forked, unlinking its own socket stays quiet.
#[test]
fn s2_s6_owner_and_worker_unlinks_are_quiet() {
    if !root("s2_s6") {
        return;
    }
    let agent = SharedAgent::join();
    let mut a = Actor::spawn();
    let own = agent.dir().join("own.sock");
    a.must(&format!("listen-on {}", s(&own)));
    a.must(&format!("unlink {}", s(&own)));
    let worker = agent.dir().join("worker.sock");
    a.must(&format!("listen-on {}", s(&worker)));
    assert!(
        a.must(&format!("fork-unlink {}", s(&worker)))
            .ends_with(" 0")
    );
    // A foreign unlink as a marker: once it is reported, the quiet ones were processed.
    let marker = agent.dir().join("marker.sock");
    a.must(&format!("listen-on {}", s(&marker)));
    let mut m = Actor::spawn();
    m.must(&format!("unlink {}", s(&marker)));
    agent.expect_verdict("marker", |v| {
        is(v, "foreign_unlink") && tgid(v, "actor") == u64::from(m.pid)
    });
    let verdicts = agent.finish();
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

/// S5 and S23: B, the same program as A, renames its fresh socket over A's live one: a
/// hand-over (a takeover by rename), A's listener a `taken_over` orphan.
#[test]
fn s5_rename_over_by_the_same_program_is_a_hand_over() {
    if !root("s5") {
        return;
    }
    let agent = SharedAgent::join();
    let sock = agent.dir().join("svc.sock");
    let (mut a, mut b) = (Actor::spawn(), Actor::spawn());
    a.must(&format!("listen-on {}", s(&sock)));
    b.must(&format!(
        "listen-on {}",
        s(&agent.dir().join("svc.sock.new"))
    ));
    let (dev, ino) = stat_id(&agent.dir().join("svc.sock.new"));
    b.must(&format!(
        "rename {} {}",
        s(&agent.dir().join("svc.sock.new")),
        s(&sock)
    ));
    let v = agent.expect_verdict("the hand-over", |v| is(v, "takeover"));
    assert_eq!(v["how"], "rename", "{v}");
    assert_eq!(
        (tgid(&v, "remover"), tgid(&v, "predecessor")),
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
    agent.finish();
}

/// S3: a client's bind mount pins the replaced server's inode: its refused connects are
/// stale connects on an unlinked, pinned inode. S8 alongside: a refusal by a bound but not
/// yet listening successor is not a stale connect.
#[test]
fn s3_stale_connect_and_s8_not_listening() {
    if !root("s3_s8") {
        return;
    }
    let agent = SharedAgent::join();
    let sock = agent.dir().join("srv.sock");
    let view = agent.dir().join("client-view.sock");
    let early = agent.dir().join("early.sock");
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
    let verdicts = agent.finish();
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
    let agent = SharedAgent::join();
    let sock = agent.dir().join("dead.sock");
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
    agent.finish();
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
    let agent = SharedAgent::join();
    let sock = agent.dir().join("graceful.sock");
    let mut a = Actor::spawn();
    let h = a.must(&format!("bind {}", s(&sock)));
    a.must(&format!("listen {h}"));
    a.must(&format!("close {h}"));
    a.must(&format!("unlink {}", s(&sock)));
    drop(a); // the engine decides staleness when the closer exits
    // A marker after the exit: a dead listener's file left behind.
    let dead = agent.dir().join("dead.sock");
    let mut d = Actor::spawn();
    d.must(&format!("listen-on {}", s(&dead)));
    drop(d);
    agent.expect_verdict("marker", |v| {
        is(v, "stale_socket_file") && v["path"] == s(&dead)
    });
    let verdicts = agent.finish();
    let graceful: Vec<&Value> = verdicts.iter().filter(|v| v["path"] == s(&sock)).collect();
    assert!(graceful.is_empty(), "{graceful:#?}");
}

/// A loop-mounted ext4 filesystem, unmounted (lazily) and detached when dropped.
struct Ext4 {
    mnt: std::path::PathBuf,
}

impl Ext4 {
    /// None, saying why, where there is no `mkfs.ext4` or loop device (the guests).
    fn mount(test: &str, dir: &Path) -> Option<Ext4> {
        if std::env::var_os("SOCKWATCH_IN_VM").is_some() {
            skip(
                test,
                "the guests have no mkfs.ext4 nor loop driver, and their tmpfs \
                 never hands out an inode number twice",
            );
            return None;
        }
        let (image, mnt) = (dir.join("ext4.img"), dir.join("mnt"));
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(32 << 20))
            .expect("image");
        std::fs::create_dir(&mnt).expect("mkdir");
        let run = |cmd: &str, args: &[&str]| {
            let st = std::process::Command::new(cmd)
                .args(args)
                .status()
                .unwrap_or_else(|e| {
                    panic!("{cmd}: {e} (e2fsprogs and mount are in Debian's base)")
                });
            assert!(st.success(), "{cmd} {args:?}: {st}");
        };
        run("mkfs.ext4", &["-q", "-F", s(&image).as_str()]);
        run(
            "mount",
            &["-o", "loop", s(&image).as_str(), s(&mnt).as_str()],
        );
        Some(Ext4 { mnt })
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .args(["-l", "-d", s(&self.mnt).as_str()])
            .status();
    }
}

/// ext4 hands a freed inode number to the next file at once: a socket file removed after
/// its socket closed, then a new socket bound in the same directory, get the same `st_ino`.
/// The new socket is another file: the old one's verdict and history stay with the old one,
/// and the new one's removal by a third process names the new owner.
#[test]
fn a_reused_inode_number_is_another_socket() {
    let test = "inode_reuse";
    if !root(test) {
        return;
    }
    let tmp = tempdir();
    let Some(fs) = Ext4::mount(test, tmp.path()) else {
        return;
    };
    let agent = Agent::start(tmp.path(), &fs.mnt, &[]);
    let (old, new) = (fs.mnt.join("old.sock"), fs.mnt.join("new.sock"));
    let mut a = Actor::spawn();
    a.must(&format!("listen-on {}", s(&old)));
    let (file, a_pid) = (stat_id(&old), u64::from(a.pid));
    drop(a);
    let stale = agent.expect_verdict("the old socket's file left behind", |v| {
        is(v, "stale_socket_file") && file_is(v, "file", file)
    });
    assert_eq!(tgid(&stale, "binder"), a_pid, "{stale}");
    let mut c = Actor::spawn();
    c.must(&format!("unlink {}", s(&old)));
    let mut b = Actor::spawn();
    b.must(&format!("listen-on {}", s(&new)));
    assert_eq!(
        stat_id(&new),
        file,
        "ext4 reuses the freed inode number at once (the premise)"
    );
    c.must(&format!("unlink {}", s(&new)));
    let f = agent.expect_verdict("the new socket's removal", |v| {
        is(v, "foreign_unlink") && file_is(v, "file", file)
    });
    assert_eq!(
        (tgid(&f, "actor"), tgid(&f, "victim")),
        (u64::from(c.pid), u64::from(b.pid)),
        "{f}"
    );
    assert_ne!(f["sock_ino"], stale["sock_ino"], "{f}\n{stale}");
    drop(b);
    let verdicts = agent.stop();
    let about: Vec<&Value> = verdicts
        .iter()
        .filter(|v| file_is(v, "file", file))
        .collect();
    let old_ones = about
        .iter()
        .filter(|v| v.to_string().contains(&format!("\"tgid\":{a_pid}")));
    assert_eq!(
        old_ones.count(),
        1,
        "only the stale file names A: {about:#?}"
    );
    let stales = about.iter().filter(|v| is(v, "stale_socket_file")).count();
    assert_eq!(stales, 1, "{about:#?}");
}
