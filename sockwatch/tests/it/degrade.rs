//! Per-hook degradation of the real binary: a hook no tier can load is left out, said in a
//! WARN line and in metrics, and the rest keeps working; too few hooks, or any missing under
//! `--require-all-hooks`, is a one-line error and exit 2. `check` says the same in its exit
//! code. The loader's hidden test flag `--test-refuse-hooks` stands in for a kernel that
//! refuses a hook on every tier.
use crate::common;

use std::{
    os::unix::net::UnixStream,
    process::{Command, Output},
    time::Instant,
};

use common::{
    actor::Actor,
    agent::{Agent, sockwatch_bin},
    *,
};
use serde_json::{Value, json};
use sockwatch::kernel::probes::{Hook, Missed as _, PROBES};
use sockwatch_common::Tier;

const REFUSE: &str = "--test-refuse-hooks";

fn value(metrics: &str, series: &str) -> Option<f64> {
    sockwatch_bench::prom::Exposition::parse(metrics).value(series)
}

/// A scratch directory with a watched directory `w` in it.
fn watched_tempdir() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempdir();
    let watch = dir.path().join("w");
    std::fs::create_dir(&watch).expect("watch dir");
    (dir, watch)
}

/// Runs `sockwatch ARGS` to its end with `refused` hooks refused.
fn run_to_end(args: &[&str], refused: &str) -> Output {
    Command::new(sockwatch_bin())
        .args(args)
        .args([REFUSE, refused])
        .output()
        .expect("run sockwatch")
}

fn stderr_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| !l.contains(" INFO ") && !l.contains(" WARN "))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_hook_no_tier_loads_is_left_out_and_the_rest_runs() {
    if !root("a_hook_no_tier_loads_is_left_out_and_the_rest_runs") {
        return;
    }
    let (dir, watch) = watched_tempdir();
    let addr = free_addr();
    let listen = addr.to_string();
    let agent = Agent::start(dir.path(), &watch, &["--listen", &listen, REFUSE, "exit"]);
    let log = agent.log_text();
    let warn: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("exit: no probe tier attached"))
        .collect();
    assert_eq!(warn.len(), 1, "one WARN line for the missing hook: {log}");
    assert!(
        warn[0].contains(sockwatch::kernel::probes::Missed::missed_without(
            sockwatch::kernel::probes::Hook::Exit
        )),
        "{}",
        warn[0]
    );

    let m = Agent::metrics(addr);
    let v = |s: &str| value(&m, s);
    assert_eq!(
        v(r#"sockwatch_probe_attached{hook="exit",tier="tracepoint"}"#),
        Some(0.0)
    );
    assert_eq!(v(r#"sockwatch_hook_missing{hook="exit"}"#), Some(1.0));
    assert_eq!(v(r#"sockwatch_hook_missing{hook="bind"}"#), Some(0.0));
    assert_eq!(v(r#"sockwatch_hook_missing{hook="unlink"}"#), Some(0.0));

    // The other hooks still report: a real bind by another process.
    let path = watch.join("still.sock");
    let mut a = Actor::spawn();
    a.must(&format!("listen-on {}", path.display()));
    let (dev, ino) = stat_id(&path);
    let bind = agent.expect_line("bind event", |l| {
        l["kind"] == "bind" && l["path"] == path.to_str().expect("utf-8")
    });
    assert_eq!(bind["tgid"], a.pid, "{bind}");
    assert_eq!(
        (bind["dev"].as_u64(), bind["ino"].as_u64()),
        (Some(dev), Some(ino))
    );
    drop(a);
    agent.stop();
}

/// The notice `run` writes for `hook` refused on every tier by [`REFUSE`], stamped as `line`
/// is (its time is checked by the schema, its `ts_ns` by the caller).
fn refused_hook_notice(hook: Hook, line: &Value) -> Value {
    let spec = PROBES
        .iter()
        .find(|h| h.hook == hook)
        .expect("in the probe table");
    let refused: Vec<Value> = spec
        .tiers
        .iter()
        .map(|t| json!({"tier": t.tier.name(), "reason": format!("refused by {REFUSE}")}))
        .collect();
    json!({
        "notice": "hook_missing",
        "hook": hook.name(),
        "missed": hook.missed_without(),
        "refused": refused,
        "ts_ns": line["ts_ns"],
        "schema": 1,
        "time": line["time"],
        "node": "notice-node",
    })
}

/// Each hook no tier attached is said in the event stream itself, once, before anything
/// else, under either events filter: a log pipeline reading only the stream knows what the
/// agent cannot see. Fork and exit keep the same tiers under every probe mode, so their
/// notices are the same on every kernel; a foreign unlink shows the filter still applies.
#[test]
fn each_missing_hook_is_a_notice_line_under_either_filter() {
    if !root("each_missing_hook_is_a_notice_line_under_either_filter") {
        return;
    }
    for filter in ["all", "verdicts"] {
        let (dir, watch) = watched_tempdir();
        let env = [
            ("NODE_NAME", "notice-node"),
            ("SOCKWATCH_TAKEOVER_WINDOW", "0s"),
        ];
        let before = sockwatch::host::clock::boot_ns();
        let extra = ["--events-filter", filter, REFUSE, "fork,exit"];
        let agent = Agent::start_with_env(dir.path(), &watch, &extra, &env);
        let started = sockwatch::host::clock::boot_ns();
        let path = watch.join("a.sock");
        let (mut a, mut b) = (Actor::spawn(), Actor::spawn());
        a.must(&format!("listen-on {}", path.display()));
        b.must(&format!("unlink {}", path.display()));
        agent.expect_verdict("B's foreign unlink", |v| {
            v["verdict"] == "foreign_unlink" && v["actor"]["tgid"] == b.pid
        });
        drop((a, b));
        let lines = agent.lines();
        assert!(lines.len() > 2, "{filter}: {lines:#?}");
        let want: Vec<Value> = [Hook::Fork, Hook::Exit]
            .iter()
            .zip(&lines)
            .map(|(hook, line)| refused_hook_notice(*hook, line))
            .collect();
        assert_eq!(lines[..2], want[..], "{filter}: {lines:#?}");
        for n in &want {
            let ts = n["ts_ns"].as_u64().expect("ts_ns");
            assert!(
                (before..=started).contains(&ts),
                "{filter}: {ts} at start: {n}"
            );
        }
        assert_eq!(agent.notices(), want, "{filter}: no other notice");
        let events = lines.iter().filter(|l| l.get("kind").is_some()).count();
        match filter {
            "all" => assert!(events >= 3, "bind, listen, unlink: {lines:#?}"),
            _ => assert_eq!(events, 0, "{lines:#?}"),
        }
        agent.stop();
    }
}

#[test]
fn require_all_hooks_makes_a_missing_hook_fatal() {
    if !root("require_all_hooks_makes_a_missing_hook_fatal") {
        return;
    }
    let dir = tempdir();
    let out = run_to_end(
        &[
            "run",
            "--require-all-hooks",
            "--watch",
            dir.path().to_str().expect("utf-8"),
        ],
        "exit",
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 1, "one line: {lines:#?}");
    assert!(
        lines[0].starts_with("sockwatch: cannot run") && lines[0].contains("--require-all-hooks"),
        "{}",
        lines[0]
    );
    assert!(lines[0].contains("exit ("), "{}", lines[0]);
}

#[test]
fn without_bind_or_both_removal_hooks_it_refuses_to_run() {
    if !root("without_bind_or_both_removal_hooks_it_refuses_to_run") {
        return;
    }
    let dir = tempdir();
    let watch = dir.path().to_str().expect("utf-8");
    for refused in ["unlink,rename", "bind"] {
        let out = run_to_end(&["run", "--watch", watch], refused);
        assert_eq!(out.status.code(), Some(2), "{refused}: {out:?}");
        let lines = stderr_lines(&out);
        assert_eq!(lines.len(), 1, "{refused}: one line: {lines:#?}");
        assert!(
            lines[0].contains("bind and unlink or rename must attach"),
            "{}",
            lines[0]
        );
    }
    // One removal hook is enough.
    let out = run_to_end(&["check"], "unlink");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

#[test]
fn check_exit_code_says_complete_degraded_or_refused() {
    if !root("check_exit_code_says_complete_degraded_or_refused") {
        return;
    }
    let cases = [
        ("", 0, "check: run would attach every hook"),
        ("exit", 1, "check: run would run degraded, without exit"),
        (
            "connect,fork",
            1,
            "check: run would run degraded, without connect, fork",
        ),
        ("unlink,rename", 2, "check: run would refuse to start"),
    ];
    for (refused, code, last) in cases {
        let started = Instant::now();
        let out = run_to_end(&["check"], refused);
        let took = started.elapsed();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(code), "{refused:?}: {stdout}");
        let final_line = stdout.lines().last().unwrap_or_default();
        assert!(final_line.starts_with(last), "{refused:?}: {final_line}");
        // One progress line per tier of every hook, before the summary.
        let table_lines = stdout
            .lines()
            .filter(|l| {
                l.split_whitespace()
                    .nth(2)
                    .is_some_and(|s| ["yes", "no", "partial"].contains(&s))
            })
            .count();
        let tiers: usize = sockwatch::kernel::probes::PROBES
            .iter()
            .map(|h| h.tiers.len())
            .sum();
        assert_eq!(table_lines, tiers, "{stdout}");
        eprintln!("check with {refused:?} refused: exit {code} in {took:.1?}");
    }
}

/// Without the release hook a socket closed since the last sweep still looks live: a removal
/// of its file must not be reported as the removal of an open socket. The same removal of a
/// socket that is open still is.
#[test]
fn without_the_release_hook_a_closed_socket_is_not_called_open() {
    if !root("without_the_release_hook_a_closed_socket_is_not_called_open") {
        return;
    }
    let (dir, watch) = watched_tempdir();
    let agent = Agent::start(dir.path(), &watch, &[REFUSE, "release"]);
    assert!(
        agent.log_text().contains("release: no probe tier attached"),
        "{}",
        agent.log_text()
    );
    let (closed, open) = (watch.join("closed.sock"), watch.join("open.sock"));
    let mut a = Actor::spawn();
    let h = a.must(&format!("listen-on {}", closed.display()));
    a.must(&format!("listen-on {}", open.display()));
    a.must(&format!("close {h}"));
    let mut b = Actor::spawn();
    b.must(&format!("unlink {}", closed.display()));
    b.must(&format!("unlink {}", open.display()));
    let path_of = |p: &std::path::Path| p.to_str().expect("utf-8").to_owned();
    let v = agent.expect_verdict("foreign_unlink of the open socket", |v| {
        v["verdict"] == "foreign_unlink" && v["path"] == path_of(&open)
    });
    assert_eq!(v["victim"]["tgid"], a.pid, "{v}");
    assert_eq!(v["actor"]["tgid"], b.pid, "{v}");
    // Verdicts are written in event order: the closed socket's unlink came first.
    let about_closed: Vec<_> = agent
        .verdicts()
        .into_iter()
        .filter(|v| v["path"] == path_of(&closed))
        .collect();
    assert!(about_closed.is_empty(), "{about_closed:#?}");
    assert!(
        agent.log_text().contains("withheld: its socket is closed"),
        "{}",
        agent.log_text()
    );
    drop((a, b));
    agent.stop();
}

/// The bounded twins (what kernels without `bpf_loop` get) on this kernel: the release of a
/// socket at its holder's exit, found by the bounded fd walk, a foreign unlink, named by the
/// file's own name and completed from its directory, and refused connects and sendtos seen
/// by the syscalls' entry/exit pairs.
#[test]
fn bounded_programs_report_exits_and_foreign_unlinks() {
    if !root("bounded_programs_report_exits_and_foreign_unlinks") {
        return;
    }
    let (dir, watch) = watched_tempdir();
    let agent = Agent::start(dir.path(), &watch, &["--test-bounded-programs"]);
    assert!(
        agent.log_text().contains(": bounded programs"),
        "{}",
        agent.log_text()
    );
    let path_of = |p: &std::path::Path| p.to_str().expect("utf-8").to_owned();

    let held = watch.join("held.sock");
    let mut a = Actor::spawn();
    a.must(&format!("listen-on {}", held.display()));
    let (dev, ino) = stat_id(&held);
    let a_pid = a.pid;
    drop(a); // exits holding the listener: released by the exit, not by close(2)
    let rel = agent.expect_line("release at exit", |l| {
        l["kind"] == "release" && l["path"] == path_of(&held)
    });
    assert_eq!(rel["tgid"], a_pid, "{rel}");
    assert_eq!(
        (rel["dev"].as_u64(), rel["ino"].as_u64()),
        (Some(dev), Some(ino))
    );

    let live = watch.join("live.sock");
    let mut owner = Actor::spawn();
    owner.must(&format!("listen-on {}", live.display()));
    let mut other = Actor::spawn();
    other.must(&format!("unlink {}", live.display()));
    let v = agent.expect_verdict("foreign unlink", |v| {
        v["verdict"] == "foreign_unlink" && v["path"] == path_of(&live)
    });
    assert_eq!(v["victim"]["tgid"], owner.pid, "{v}");
    assert_eq!(v["actor"]["tgid"], other.pid, "{v}");

    // The tracepoint tier's connect and sendto, by their entry/exit pairs: refused by the file
    // the exited holder left.
    if agent.log_text().contains("connect: tracepoint") {
        let refused = libc::ECONNREFUSED.to_string();
        for (call, flag) in [("connect", None), ("sendto", Some("sendto"))] {
            let mut client = Actor::spawn();
            assert_eq!(client.must(&format!("{call} {}", held.display())), refused);
            let c = agent.expect_line(call, |l| {
                l["kind"] == "connect" && l["path"] == path_of(&held) && l["tgid"] == client.pid
            });
            assert_eq!(c["ret"], -libc::ECONNREFUSED, "{c}");
            if let Some(flag) = flag {
                assert_eq!(c[flag], true, "{c}");
            }
        }
    } else {
        skip(
            "bounded_programs_report_exits_and_foreign_unlinks",
            "connect is not on the tracepoint tier: its pairs are not loaded",
        );
    }
    drop((owner, other));
    agent.stop();
}

/// Without the exit hook, a listener's process exits unseen: the process stays in the kernel's
/// tracked table (and, on the tracepoint tier, its socket in the live table) until a sweep
/// finds it gone and prunes each entry, once, counted per table.
#[test]
fn sweeps_prune_what_an_unseen_exit_left_in_the_kernel_tables() {
    if !root("sweeps_prune_what_an_unseen_exit_left_in_the_kernel_tables") {
        return;
    }
    let (dir, watch) = watched_tempdir();
    let addr = free_addr();
    let listen = addr.to_string();
    let agent = Agent::start(
        dir.path(),
        &watch,
        &["--listen", &listen, "--scan-interval", "1s", REFUSE, "exit"],
    );
    let sock = watch.join("gone.sock");
    let mut a = Actor::spawn();
    a.must(&format!("listen-on {}", sock.display()));
    let pruned = |table: &str| {
        value(
            &Agent::metrics(addr),
            &format!(r#"sockwatch_kernel_pruned_total{{table="{table}"}}"#),
        )
    };
    assert_eq!((pruned("live"), pruned("tracked")), (Some(0.0), Some(0.0)));
    // The precise tiers' release hook (`unix_release`) sees the exit's close and empties the
    // live entry itself; the tracepoint tier's (`close(2)`) does not.
    let live_left = if agent.log_text().contains("] attached release: tracepoint") {
        1.0
    } else {
        0.0
    };
    let want = (Some(live_left), Some(1.0));
    drop(a); // exits holding the listener, with no exit hook to see it
    let deadline = std::time::Instant::now() + common::patience();
    while (pruned("live"), pruned("tracked")) != want {
        assert!(
            std::time::Instant::now() < deadline,
            "live {:?}, tracked {:?}: {}",
            pruned("live"),
            pruned("tracked"),
            agent.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    std::thread::sleep(std::time::Duration::from_secs(2)); // two more sweeps: nothing more
    assert_eq!((pruned("live"), pruned("tracked")), want);
    agent.stop();
}

/// A listener whose backlog of 0 is full (one connection queued): the next stream connect to
/// `path` blocks in the kernel until it is killed.
fn full_listener(path: &std::path::Path) -> (std::os::unix::net::UnixListener, UnixStream) {
    let l = std::os::unix::net::UnixListener::bind(path).expect("bind");
    // SAFETY: listen(2) takes no pointers; the descriptor is the listener's own.
    let rc = unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&l), 0) };
    assert_eq!(rc, 0, "listen with backlog 0");
    let queued = UnixStream::connect(path).expect("the one connection the backlog admits");
    (l, queued)
}

/// A forked child, killed and reaped when dropped: a test that fails before its end must not
/// leave it holding the descriptors it inherited (a listener whose file is gone, which a later
/// node-wide test would rightly call an orphan).
struct Child(libc::pid_t);

impl Drop for Child {
    fn drop(&mut self) {
        // SAFETY: signals and reaps this test's own child.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            libc::waitpid(self.0, std::ptr::null_mut(), 0);
        }
    }
}

/// A child process blocked in `connect(path)` (a full backlog), its entry hooks run and its
/// exit not yet; returned once its `/proc` says it is in that syscall.
fn blocked_connector(path: &std::path::Path) -> Child {
    let addr = std::os::unix::net::SocketAddr::from_pathname(path).expect("address");
    let name = addr
        .as_pathname()
        .expect("path")
        .as_os_str()
        .as_encoded_bytes();
    // SAFETY: an all-zero sockaddr_un is valid; the path fits (checked above by `from_pathname`).
    let mut sun: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sun.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in sun.sun_path.iter_mut().zip(name) {
        *d = *s as libc::c_char;
    }
    // SAFETY: the child calls only async-signal-safe functions (socket, connect, _exit) on
    // memory prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: as above; `sun` is a valid sockaddr_un of the size passed.
        unsafe {
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            libc::connect(
                fd,
                (&raw const sun).cast(),
                size_of::<libc::sockaddr_un>() as libc::socklen_t,
            );
            libc::_exit(0);
        }
    }
    assert!(pid > 0, "fork: {}", std::io::Error::last_os_error());
    let child = Child(pid);
    let deadline = Instant::now() + common::patience();
    let syscall = format!("/proc/{pid}/syscall");
    // The line starts with the syscall's number, this architecture's.
    let connect = format!("{} ", libc::SYS_connect);
    while !std::fs::read_to_string(&syscall).is_ok_and(|s| s.starts_with(&connect)) {
        assert!(
            Instant::now() < deadline,
            "child {pid} never blocked in connect"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child
}

/// A connect blocked past the pending bound leaves its entry's record unclaimed in the
/// kernel's `PENDING` (one per hook pair kept: the kprobe tier keeps the connect's address
/// and its target, the others one): a sweep prunes it once it is older than the bound, not
/// before, counted under `table="pending"`; the connect's late exit then finds nothing. On
/// every tier this kernel loads.
#[test]
fn sweeps_prune_pending_records_no_exit_took() {
    let test = "sweeps_prune_pending_records_no_exit_took";
    if !root(test) {
        return;
    }
    let modes: Vec<_> = agent_modes()
        .into_iter()
        .filter(|(mode, tier)| tier_loads(&format!("{test}_{}", tier.name()), *mode, *tier))
        .collect();
    for (mode, tier) in modes {
        let kept = if tier == Tier::Kprobe { 2.0 } else { 1.0 };
        // Where the kernel has bpf_task_pt_regs the tracepoint tier's connect is one program
        // that keeps nothing: its entry/exit pair (the bounded programs) keeps the record.
        let extra: &[&str] = match tier {
            Tier::Tracepoint => &["--test-bounded-programs"],
            _ => &[],
        };
        stale_pending_record_is_pruned(mode.name(), kept, extra);
    }
}

/// Blocks a connect under `--probe-mode mode` (and `extra` flags) and waits for the sweep to
/// prune the `kept` records its hooks left.
fn stale_pending_record_is_pruned(mode: &str, kept: f64, extra: &[&str]) {
    let (dir, watch) = watched_tempdir();
    let addr = free_addr();
    let listen = addr.to_string();
    let agent = Agent::start(
        dir.path(),
        &watch,
        &[
            &[
                "--listen",
                &listen,
                "--scan-interval",
                "1s",
                "--probe-mode",
                mode,
            ],
            extra,
        ]
        .concat(),
    );
    let pruned = || {
        value(
            &Agent::metrics(addr),
            r#"sockwatch_kernel_pruned_total{table="pending"}"#,
        )
    };
    assert_eq!(pruned(), Some(0.0), "{mode}");
    let sock = watch.join("full.sock");
    let _listener = full_listener(&sock);
    let began = Instant::now();
    let child = blocked_connector(&sock);
    let bound = std::time::Duration::from_nanos(sockwatch::kernel::live::PENDING_STALE_NS);
    let deadline = began + bound + common::patience();
    loop {
        let p = pruned();
        // Read after the count: a record is pruned no sooner than the bound after its stash.
        let waited = began.elapsed();
        if p == Some(kept) {
            break;
        }
        assert!(
            p == Some(0.0) || (waited >= bound && p.is_some_and(|n| n < kept)),
            "{mode}: pruned {p:?} after {waited:?}, want {kept} after {bound:?}"
        );
        assert!(
            Instant::now() < deadline,
            "{mode}: pruned {p:?}: {}",
            agent.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(
        agent
            .log_text()
            .contains("stale entries removed from the kernel's pending table"),
        "{mode}: {}",
        agent.log_text()
    );
    drop(child);
    std::thread::sleep(std::time::Duration::from_secs(2)); // two more sweeps: nothing more
    assert_eq!(pruned(), Some(kept), "{mode}");
    agent.stop();
}
