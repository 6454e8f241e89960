//! Healthy production events must not page, and a hijack must: the daemons users run, driven
//! for real under the real agent.
//! - S24, a kubelet restart: kubelet's device manager removes every file in
//!   `device-plugins/` at start (`removeContents`) and listens on `kubelet.sock` anew; each
//!   plugin sees that, stops its gRPC server (Go's Close unlinks its path: ENOENT by then) and
//!   listens again on its own path. kubelet cannot run here: actors play it from that
//!   documented behaviour (the device-plugin API's re-registration).
//! - A hijack: a program other than the victim's removes its live socket's file and binds its
//!   own there. Actors run from a link of the test binary (another executable to the agent),
//!   and on the host Debian's socat (`unlink-early`) against a Python listener.
//! - S23, an HAProxy reload (Debian's haproxy, host only): `haproxy -sf OLD` links the old
//!   file to `P.PID.bak`, binds `P.PID.tmp`, renames it over `P` and unlinks the `.bak`;
//!   clients connect through it.
mod common;

use std::{
    io::{BufRead, BufReader},
    os::unix::net::UnixStream,
    process::{Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use common::{
    actor::Actor,
    agent::Agent,
    daemons::{Running, assert_nothing_pages, haproxy_config, program, start_haproxy, wait_for},
    scenes::Kubelet,
    *,
};
use serde_json::Value;

#[test]
#[ignore = "helper process for the other tests, started by them"]
fn actor() {
    actor::serve();
}

fn tgid(v: &Value, who: &str) -> u64 {
    v[who]["tgid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no {who}.tgid in {v}"))
}

/// S24: kubelet restarts; both plugins re-register. Two takeovers served by their owners,
/// naming kubelet as remover and each plugin as predecessor and successor; nothing pages.
#[test]
fn s24_kubelet_restart_with_plugins_re_registering_pages_nothing() {
    if !root("s24") {
        return;
    }
    let tmp = tempdir();
    let dir = tmp.path().join("device-plugins");
    std::fs::create_dir(&dir).expect("mkdir");
    let agent = Agent::start(tmp.path(), tmp.path(), &[]);
    let mut k = Kubelet::start(&dir);
    k.restart();
    for p in &k.plugins {
        let t = agent.expect_verdict("the plugin's re-registration", |v| {
            v["verdict"] == "takeover" && v["path"] == s(&p.path)
        });
        assert_eq!(t["served_by"], "owner", "{t}");
        assert_eq!(tgid(&t, "remover"), u64::from(k.kubelet.pid), "{t}");
        assert_eq!(
            (tgid(&t, "predecessor"), tgid(&t, "successor")),
            (u64::from(p.actor.pid), u64::from(p.actor.pid)),
            "{t}"
        );
    }
    drop(k);
    let verdicts = agent.stop();
    assert_nothing_pages(&verdicts);
    let takeovers = verdicts.iter().filter(|v| v["verdict"] == "takeover");
    assert_eq!(takeovers.count(), 2, "{verdicts:#?}");
}

/// Another program removes A's live socket's file and binds its own there: a hijack naming
/// the intruder as remover and successor and A as victim, A's listener a `hijacked` orphan.
/// The same program doing so (a rolling restart) stays a takeover.
#[test]
fn another_program_serving_a_removed_path_is_a_hijack() {
    if !root("hijack") {
        return;
    }
    let tmp = tempdir();
    let watched = tmp.path().join("run");
    std::fs::create_dir(&watched).expect("mkdir");
    let agent = Agent::start(tmp.path(), &watched, &[]);
    let (sock, rolled) = (watched.join("app.sock"), watched.join("rolled.sock"));
    let mut a = Actor::spawn();
    a.must(&format!("listen-on {}", s(&sock)));
    let old = stat_id(&sock);
    let mut intruder = Actor::spawn_from(&other_program(tmp.path()));
    intruder.must(&format!("unlink {}", s(&sock)));
    intruder.must(&format!("listen-on {}", s(&sock)));
    let h = agent.expect_verdict("the hijack", |v| v["verdict"] == "hijack");
    assert_eq!(
        (
            tgid(&h, "remover"),
            tgid(&h, "victim"),
            tgid(&h, "successor")
        ),
        (
            u64::from(intruder.pid),
            u64::from(a.pid),
            u64::from(intruder.pid)
        ),
        "{h}"
    );
    assert_eq!(h["old_file"]["ino"], old.1, "{h}");
    assert_eq!(h["new_file"]["ino"], stat_id(&sock).1, "{h}");
    assert_eq!(h["how"], "rebind", "{h}");
    let o = agent.expect_verdict("A hijacked", |v| {
        v["verdict"] == "orphan_opened" && tgid(v, "owner") == u64::from(a.pid)
    });
    assert_eq!(o["cause"], "hijacked", "{o}");

    let mut b = Actor::spawn();
    b.must(&format!("listen-on {}", s(&rolled)));
    let mut successor = Actor::spawn();
    successor.must(&format!("unlink {}", s(&rolled)));
    successor.must(&format!("listen-on {}", s(&rolled)));
    let t = agent.expect_verdict("the same program's takeover", |v| {
        v["verdict"] == "takeover" && v["path"] == s(&rolled)
    });
    assert_eq!(t["served_by"], "workload", "{t}");
    drop((a, b, intruder, successor));
    let verdicts = agent.stop();
    let hijacks = verdicts.iter().filter(|v| v["verdict"] == "hijack").count();
    assert_eq!(hijacks, 1, "{verdicts:#?}");
}

/// Debian's socat (`unlink-early`) replaces a Python listener's socket with its own: a
/// hijack naming socat and python3.
#[test]
fn socat_unlink_early_over_a_python_listener_is_a_hijack() {
    let test = "socat_hijack";
    if !root(test) {
        return;
    }
    let (Some(socat), Some(python)) = (program("socat", test), program("python3", test)) else {
        return;
    };
    let tmp = tempdir();
    let agent = Agent::start(tmp.path(), tmp.path(), &[]);
    let sock = tmp.path().join("api.sock");
    let script = "import socket,sys,time\n\
                  s=socket.socket(socket.AF_UNIX)\ns.bind(sys.argv[1])\ns.listen()\n\
                  print('listening',flush=True)\ntime.sleep(120)\n";
    let mut py = Command::new(&python)
        .args(["-c", script, s(&sock)])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    BufReader::new(py.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read");
    let py = Running(py);
    let listen = format!("UNIX-LISTEN:{},unlink-early", s(&sock));
    let socat = Running(
        Command::new(&socat)
            .args([listen.as_str(), "STDOUT"])
            .stdout(Stdio::null())
            .spawn()
            .expect("socat"),
    );
    let h = agent.expect_verdict("socat's hijack", |v| v["verdict"] == "hijack");
    assert_eq!(
        (
            tgid(&h, "remover"),
            tgid(&h, "victim"),
            tgid(&h, "successor")
        ),
        (
            u64::from(socat.0.id()),
            u64::from(py.0.id()),
            u64::from(socat.0.id())
        ),
        "{h}"
    );
    assert_eq!(
        (&h["remover"]["comm"], &h["victim"]["comm"]),
        (&Value::from("socat"), &Value::from("python3")),
        "{h}"
    );
    drop((socat, py));
    agent.stop();
}

/// S23: `haproxy -sf OLD` reloads while a client connects in a loop: no connect refused,
/// nothing pages, and one takeover per listener (the HTTP frontend and the stats socket) by
/// rename, naming the old process as predecessor and the new one as remover and successor.
#[test]
fn s23_haproxy_reload_is_one_takeover_per_listener_and_pages_nothing() {
    let test = "s23_haproxy";
    if !root(test) {
        return;
    }
    let Some(haproxy) = program("haproxy", test) else {
        return;
    };
    let tmp = tempdir();
    let cfg = haproxy_config(tmp.path());
    let agent = Agent::start(tmp.path(), tmp.path(), &[]);
    let (web, stats) = (tmp.path().join("web.sock"), tmp.path().join("stats.sock"));
    let old = start_haproxy(&haproxy, &cfg, None);
    wait_for("haproxy listens", || {
        UnixStream::connect(&web).is_ok() && UnixStream::connect(&stats).is_ok()
    });
    let (stop, connects, failures) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(Mutex::new(Vec::new())),
    );
    let client = {
        let (stop, connects, failures, web) = (
            stop.clone(),
            connects.clone(),
            failures.clone(),
            web.clone(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match UnixStream::connect(&web) {
                    Ok(_) => {
                        connects.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => failures.lock().expect("failures").push(e.to_string()),
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let (old_pid, new) = (old.0.id(), start_haproxy(&haproxy, &cfg, Some(old.0.id())));
    let mut old = old;
    wait_for("the old haproxy exits after -sf", || {
        old.0.try_wait().expect("wait").is_some()
    });
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    client.join().expect("client");
    let ok = connects.load(Ordering::Relaxed);
    let failed = failures.lock().expect("failures").clone();
    eprintln!(
        "s23: {ok} connects through the reload, {} failed",
        failed.len()
    );
    assert!(ok > 0, "the client never connected");
    assert!(
        failed.is_empty(),
        "connects failed during the reload: {failed:?}"
    );
    for path in [&web, &stats] {
        let t = agent.expect_verdict("the listener's hand-over", |v| {
            v["verdict"] == "takeover" && v["path"] == s(path)
        });
        assert_eq!(
            (&t["how"], &t["served_by"]),
            (&"rename".into(), &"workload".into()),
            "{t}"
        );
        assert_eq!(
            (
                tgid(&t, "remover"),
                tgid(&t, "predecessor"),
                tgid(&t, "successor")
            ),
            (
                u64::from(new.0.id()),
                u64::from(old_pid),
                u64::from(new.0.id())
            ),
            "{t}"
        );
        assert_eq!(t["new_file"]["ino"], stat_id(path).1, "{t}");
    }
    drop(new);
    let verdicts = agent.stop();
    assert_nothing_pages(&verdicts);
    let takeovers = verdicts.iter().filter(|v| v["verdict"] == "takeover");
    assert_eq!(takeovers.count(), 2, "one per listener: {verdicts:#?}");
}
