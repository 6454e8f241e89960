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
//! - Rolling restarts whose old generation's close unlinks the successor's file (host only):
//!   Node.js `server.close()` (libuv) and socat on SIGTERM (`unlink-close`), each a stale
//!   owner's foreign unlink whose sentence names the runtime's fix; a Python asyncio server's
//!   close leaves the successor's file (a takeover, nothing pages).
use crate::common;

use std::{
    io::{BufRead, BufReader},
    os::unix::net::UnixStream,
    path::Path,
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
use sockwatch::{engine::Verdict, text::verdict::sentence};

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

/// A daemon run by `program` that prints `listening` once it listens and, on SIGTERM, closes
/// its server and exits.
fn start_daemon(program: &Path, args: &[&str]) -> Running {
    let mut child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read");
    assert_eq!(line.trim(), "listening", "{}", program.display());
    Running(child)
}

/// SIGTERM to `daemon`, then reaped: it has closed its server by the time this returns. It
/// exits with 0, or 128 + SIGTERM as socat does.
fn terminate(daemon: &mut Running) {
    // SAFETY: kill(2) takes no pointers; the pid is our own child's, not yet reaped.
    unsafe { libc::kill(daemon.0.id() as i32, libc::SIGTERM) };
    let status = daemon.0.wait().expect("wait");
    assert!(
        status.success() || status.code() == Some(128 + libc::SIGTERM),
        "{status}"
    );
}

/// The listening sockets bound at `path`, from /proc/net/unix (flag `__SO_ACCEPTCON`).
fn listeners_at(path: &Path) -> usize {
    let table = std::fs::read_to_string("/proc/net/unix").expect("/proc/net/unix");
    table
        .lines()
        .filter(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            fields.get(3) == Some(&"00010000") && fields.get(7) == Some(&s(path))
        })
        .count()
}

/// Waits until the agent has written process `pid`'s bind: its program was read then (a
/// daemon gone before the agent completed its events would not be recognised).
fn bind_seen(agent: &Agent, pid: u32) {
    agent.expect_line("the daemon's bind", |l| {
        l["kind"] == "bind" && l["tgid"] == pid
    });
}

/// A rolling restart the test drove: the old and the new daemon, and the new one's file.
struct Restart {
    old: u32,
    new: u32,
    new_file: (u64, u64),
}

/// The new daemon took the path over from the old one, then the old one's exit removed the
/// new one's file: one takeover, then the stale owner's foreign unlink naming `runtime`
/// (in the agent's verdict and in a replay of its events) and its `fix`.
fn assert_stale_owner_unlink(agent: Agent, sock: &Path, r: &Restart, runtime: &str, fix: &str) {
    let t = agent.expect_verdict("the new daemon's takeover", |v| v["verdict"] == "takeover");
    assert_eq!(
        (tgid(&t, "remover"), tgid(&t, "predecessor")),
        (u64::from(r.new), u64::from(r.old)),
        "{t}"
    );
    let v = agent.expect_verdict("the old daemon's unlink", |v| {
        v["verdict"] == "foreign_unlink"
    });
    assert_eq!(
        (tgid(&v, "actor"), tgid(&v, "victim")),
        (u64::from(r.old), u64::from(r.new)),
        "{v}"
    );
    assert_eq!(
        (&v["file"]["dev"], &v["file"]["ino"], &v["stale_owner"]),
        (&r.new_file.0.into(), &r.new_file.1.into(), &true.into()),
        "{v}"
    );
    assert_eq!(v["actor"]["runtime"], runtime, "{v}");
    let verdict: Verdict = serde_json::from_value(v.clone()).expect("a verdict");
    let text = sentence(&verdict);
    assert!(text.ends_with(&format!("; fix: {fix}.")), "{text}");
    let events = agent.events.clone();
    let verdicts = agent.stop();
    let foreign: Vec<&Value> = verdicts
        .iter()
        .filter(|v| v["verdict"] == "foreign_unlink")
        .collect();
    assert_eq!(foreign, [&v], "one foreign unlink");
    let replayed = common::replay::verdicts(&events, &[]);
    let again: Vec<&Value> = replayed
        .iter()
        .filter(|v| v["verdict"] == "foreign_unlink")
        .collect();
    assert_eq!(again.len(), 1, "{replayed:#?}");
    assert_eq!(again[0]["actor"]["runtime"], runtime, "{}", again[0]);
    assert!(
        !sock.exists(),
        "the old daemon's exit left the new one's file"
    );
}

/// A Node.js server on a UNIX path; the new one removes a file left at the path before it
/// listens; SIGTERM closes the server (libuv's close unlinks the path).
const NODE_SERVER: &str = "const fs = require('fs'), net = require('net'), p = process.argv[1];\n\
    try { fs.unlinkSync(p); } catch (e) {}\n\
    const s = net.createServer((c) => c.end());\n\
    process.on('SIGTERM', () => s.close(() => process.exit(0)));\n\
    s.listen(p, () => console.log('listening'));\n";

/// A rolling restart of a Node.js daemon: the old one's `server.close()` after its successor
/// listens unlinks the successor's file (libuv's `uv__pipe_close`).
#[test]
fn node_server_close_after_the_successor_bound_is_a_stale_owners_unlink() {
    let test = "node_restart";
    if !root(test) {
        return;
    }
    let Some(node) = program("node", test) else {
        return;
    };
    let tmp = tempdir();
    let agent = Agent::start(tmp.path(), tmp.path(), &[]);
    let sock = tmp.path().join("api.sock");
    let mut old = start_daemon(&node, &["-e", NODE_SERVER, s(&sock)]);
    bind_seen(&agent, old.0.id());
    let old_file = stat_id(&sock);
    let new = start_daemon(&node, &["-e", NODE_SERVER, s(&sock)]);
    let new_file = stat_id(&sock);
    assert_ne!(old_file, new_file, "the successor bound a new file");
    terminate(&mut old);
    let restart = Restart {
        old: old.0.id(),
        new: new.0.id(),
        new_file,
    };
    let fix = "do not rely on server.close() to remove the socket file: exit without it, and \
               remove the path only before listen, after checking its inode";
    assert_stale_owner_unlink(agent, &sock, &restart, "node", fix);
    drop(new);
}

/// A rolling restart of socat (`UNIX-LISTEN:…,fork`): the old one, killed with SIGTERM after
/// its successor listens, unlinks the successor's file on its way out (`unlink-close`).
#[test]
fn socat_sigterm_after_the_successor_bound_is_a_stale_owners_unlink() {
    let test = "socat_restart";
    if !root(test) {
        return;
    }
    let Some(socat) = program("socat", test) else {
        return;
    };
    let tmp = tempdir();
    let agent = Agent::start(tmp.path(), tmp.path(), &[]);
    let sock = tmp.path().join("api.sock");
    let listen = format!("UNIX-LISTEN:{},fork,unlink-early", s(&sock));
    let spawn = || {
        let child = Command::new(&socat)
            .args([listen.as_str(), "/dev/null"])
            .spawn()
            .expect("socat");
        Running(child)
    };
    let mut old = spawn();
    wait_for("the old socat listens", || listeners_at(&sock) == 1);
    bind_seen(&agent, old.0.id());
    let new = spawn();
    wait_for("the new socat listens", || listeners_at(&sock) == 2);
    let new_file = stat_id(&sock);
    terminate(&mut old);
    let restart = Restart {
        old: old.0.id(),
        new: new.0.id(),
        new_file,
    };
    let fix = "give the listener unlink-close=0, and use unlink-early only on a path it owns";
    assert_stale_owner_unlink(agent, &sock, &restart, "socat", fix);
    drop(new);
}

/// An asyncio server: `start_unix_server` removes a socket file left at the path before it
/// binds; SIGTERM closes the server.
const ASYNCIO_SERVER: &str = "import asyncio, signal, sys\n\
    async def main():\n\
    \x20   s = await asyncio.start_unix_server(lambda r, w: w.close(), path=sys.argv[1])\n\
    \x20   stop = asyncio.Event()\n\
    \x20   asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)\n\
    \x20   print('listening', flush=True)\n\
    \x20   await stop.wait()\n\
    \x20   s.close()\n\
    \x20   await s.wait_closed()\n\
    asyncio.run(main())\n";

/// A rolling restart of a Python asyncio daemon: the successor's `start_unix_server` removes
/// the old socket file (a takeover); the old server's close leaves the successor's file (before
/// 3.13 asyncio never unlinks on close, since 3.13 only its own inode): nothing pages.
#[test]
fn asyncio_server_close_after_the_successor_bound_leaves_its_file() {
    let test = "asyncio_restart";
    if !root(test) {
        return;
    }
    let Some(python) = program("python3", test) else {
        return;
    };
    let tmp = tempdir();
    let agent = Agent::start(tmp.path(), tmp.path(), &[]);
    let sock = tmp.path().join("api.sock");
    let mut old = start_daemon(&python, &["-c", ASYNCIO_SERVER, s(&sock)]);
    bind_seen(&agent, old.0.id());
    let old_file = stat_id(&sock);
    let new = start_daemon(&python, &["-c", ASYNCIO_SERVER, s(&sock)]);
    let new_file = stat_id(&sock);
    assert_ne!(old_file, new_file, "the successor bound a new file");
    terminate(&mut old);
    let t = agent.expect_verdict("the new daemon's takeover", |v| v["verdict"] == "takeover");
    assert_eq!(
        (tgid(&t, "remover"), tgid(&t, "predecessor")),
        (u64::from(new.0.id()), u64::from(old.0.id())),
        "{t}"
    );
    assert_eq!(
        (&t["old_file"]["ino"], &t["new_file"]["ino"]),
        (&old_file.1.into(), &new_file.1.into()),
        "{t}"
    );
    assert_eq!(
        stat_id(&sock),
        new_file,
        "the successor's file is still at the path"
    );
    let closed = agent.expect_verdict("the old listener's close", |v| {
        v["verdict"] == "orphan_closed" && v["file"]["ino"] == old_file.1
    });
    assert_eq!(closed["reason"], "released", "{closed}");
    drop(new);
    let verdicts = agent.stop();
    assert_nothing_pages(&verdicts);
}
