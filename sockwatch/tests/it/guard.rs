//! Guard mode, end to end: the real agent with `--guard`, real processes removing real
//! socket files, and what the kernel let through or refused (EPERM), with the verdicts and
//! metrics that say so. Refusing needs the BPF LSM tier: the guest kernels load it, the
//! host cannot (its LSM tests skip with the reason; an error where the tier is required).
//! The test without LSM runs everywhere: there the guard is unavailable and only observes.
use crate::common;

use std::{
    net::SocketAddr,
    path::Path,
    time::{Duration, Instant},
};

use common::{
    actor::Actor,
    agent::{Agent, wait_bound},
    go::{GoDaemon, go_listen, go_or_skip, go_stop},
    *,
};
use serde_json::Value;
use sockwatch::kernel::probes::ProbeMode;
use sockwatch_bench::prom::Exposition;
use sockwatch_common::Tier;

/// `unlink(2)`'s errno when the guard refuses.
const EPERM: i32 = 1;

fn tgid(v: &Value, who: &str) -> u64 {
    v[who]["tgid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no {who}.tgid in {v}"))
}

fn file_of(v: &Value) -> (u64, u64) {
    let f = &v["file"];
    (
        f["dev"].as_u64().expect("file.dev"),
        f["ino"].as_u64().expect("file.ino"),
    )
}

fn is(v: &Value, verdict: &str) -> bool {
    v["verdict"] == verdict
}

fn metric(addr: SocketAddr, name: &str, labels: &[(&str, &str)]) -> f64 {
    Exposition::parse(&Agent::metrics(addr)).sum(name, labels)
}

fn guard_state(addr: SocketAddr, state: &str) -> f64 {
    metric(addr, "sockwatch_guard_state", &[("state", state)])
}

/// Waits for a line of the agent's log containing `needle`.
fn expect_log(agent: &Agent, needle: &str) {
    let deadline = Instant::now() + patience();
    while !agent.log_text().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in the agent's log:\n{}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn signal(agent: &Agent, sig: i32) {
    // SAFETY: kill(2) takes no pointers; the pid is our own child's, still running.
    assert_eq!(unsafe { libc::kill(agent.pid() as i32, sig) }, 0);
}

/// Whether this kernel can refuse (BPF LSM loads); a printed SKIP when not, an error where
/// the LSM tier is required (the guests).
fn lsm_loads(test: &str) -> bool {
    root(test) && tier_loads(test, ProbeMode::Lsm, Tier::Lsm)
}

/// The Go listener where this kernel can refuse; `None` after a printed SKIP.
fn lsm_and_go(test: &str) -> Option<std::path::PathBuf> {
    if !lsm_loads(test) {
        return None;
    }
    go_or_skip(test)
}

/// Starts the agent on `tmp` with `args` and `--listen` on a free port; returns that port.
fn start_listening(tmp: &Path, args: &[&str]) -> (Agent, SocketAddr) {
    let addr = free_addr();
    let listen = addr.to_string();
    let all = [args, &["--listen", listen.as_str()]].concat();
    (Agent::start(tmp, tmp, &all), addr)
}

fn assert_nothing_refused(verdicts: &[Value]) {
    assert!(
        !verdicts.iter().any(|v| is(v, "unlink_denied")),
        "{verdicts:#?}"
    );
}

/// The Multus incident at `dir/multus.sock`: a Go daemon listens, its successor (the same Go
/// daemon, `-rmdir`) removes the directory, re-creates it and listens there, then the old
/// daemon shuts down (its Close unlinks the path). Returns the old daemon's pid, the
/// successor's file and the successor, which serves until dropped.
fn incident(go: &Path, dir: &Path, addr: SocketAddr) -> (u32, (u64, u64), GoDaemon) {
    std::fs::create_dir(dir).expect("mkdir");
    let sock = dir.join("multus.sock");
    let (mut old, mut out) = go_listen(go, &[], &sock);
    wait_bound(addr, &sock, old.id());
    let new = GoDaemon::listen(go, &["-keep", "-rmdir"], &sock);
    let successor = stat_id(&sock);
    let old_pid = old.id();
    go_stop(&mut old, &mut out);
    (old_pid, successor, new)
}

/// S1 with the guard on: the old daemon's Close is refused, the successor keeps its path and
/// a client reaches it; the denial names both. Paused (SIGUSR1), the incident happens as
/// without the guard; resumed (SIGUSR2), it is refused again.
#[test]
fn s1_go_stale_owner_is_refused_and_the_successor_stays_reachable() {
    let test = "guard_s1";
    let Some(go) = lsm_and_go(test) else {
        return;
    };
    let tmp = tempdir();
    let args = ["--probe-mode", "lsm", "--guard", "stale_owner"];
    let (agent, addr) = start_listening(tmp.path(), &args);
    expect_log(&agent, "guard: on (top level stale_owner");
    assert_eq!(guard_state(addr, "on"), 1.0);
    let mut client = Actor::spawn();

    let dir = tmp.path().join("multus");
    let (old, successor, b) = incident(&go, &dir, addr);
    let sock = dir.join("multus.sock");
    assert_eq!(
        stat_id(&sock),
        successor,
        "the successor's socket keeps its path"
    );
    assert_eq!(client.must(&format!("connect {}", s(&sock))), "0");
    let d = agent.expect_verdict("the Close's unlink refused", |v| is(v, "unlink_denied"));
    assert_eq!(
        (tgid(&d, "actor"), tgid(&d, "victim")),
        (u64::from(old), u64::from(b.pid())),
        "{d}"
    );
    assert_eq!(
        (&d["policy"], &d["operation"], file_of(&d)),
        (
            &Value::from("stale_owner"),
            &Value::from("unlink"),
            successor
        ),
        "{d}"
    );
    assert_eq!(d["path"], s(&sock), "{d}");
    assert_eq!(d["actor"]["comm"], "golistener", "{d}");
    let t = agent.expect_verdict("the successor's takeover", |v| is(v, "takeover"));
    assert_eq!(tgid(&t, "remover"), u64::from(b.pid()), "{t}");
    let denials = [("policy", "stale_owner")];
    assert_eq!(metric(addr, "sockwatch_guard_denials_total", &denials), 1.0);
    let kernel = [("decision", "denied")];
    assert_eq!(
        metric(addr, "sockwatch_guard_kernel_decisions_total", &kernel),
        1.0
    );

    signal(&agent, libc::SIGUSR1);
    expect_log(&agent, "guard: paused (signal)");
    assert_eq!(guard_state(addr, "paused"), 1.0);
    let paused_dir = tmp.path().join("paused");
    let (old2, _, _b2) = incident(&go, &paused_dir, addr);
    assert!(
        !paused_dir.join("multus.sock").exists(),
        "paused, the Close unlinks the successor's socket as without the guard"
    );
    agent.expect_verdict("the paused incident's foreign unlink", |v| {
        is(v, "foreign_unlink") && tgid(v, "actor") == u64::from(old2)
    });

    signal(&agent, libc::SIGUSR2);
    expect_log(&agent, "guard: on (signal)");
    let resumed_dir = tmp.path().join("resumed");
    let (old3, successor3, b3) = incident(&go, &resumed_dir, addr);
    assert_eq!(stat_id(&resumed_dir.join("multus.sock")), successor3);
    agent.expect_verdict("the resumed guard's refusal", |v| {
        is(v, "unlink_denied") && tgid(v, "actor") == u64::from(old3)
    });

    let verdicts = agent.stop();
    let count = |name| verdicts.iter().filter(|v| is(v, name)).count();
    assert_eq!(
        (count("unlink_denied"), count("foreign_unlink")),
        (2, 1),
        "refused on, let through paused: {verdicts:#?}"
    );
    let orphaned: Vec<(u64, u64)> = verdicts
        .iter()
        .filter(|v| {
            is(v, "orphan_opened") && [b.pid(), b3.pid()].contains(&(tgid(v, "owner") as u32))
        })
        .map(file_of)
        .collect();
    assert!(
        !orphaned.contains(&successor) && !orphaned.contains(&successor3),
        "a guarded successor is never orphaned: {verdicts:#?}"
    );
}

/// The incident script's check, as a test: with `--format text`, the successor survives (a
/// client connects) and the agent writes the denial sentence naming both processes.
#[test]
fn the_text_output_says_the_incident_was_prevented() {
    let test = "guard_text";
    let Some(go) = lsm_and_go(test) else {
        return;
    };
    let tmp = tempdir();
    let args = [
        "--probe-mode",
        "lsm",
        "--guard",
        "stale_owner",
        "--format",
        "text",
    ];
    let (agent, addr) = start_listening(tmp.path(), &args);
    let mut client = Actor::spawn();
    let dir = tmp.path().join("multus");
    let (old, (dev, ino), b) = incident(&go, &dir, addr);
    let sock = dir.join("multus.sock");
    assert_eq!(client.must(&format!("connect {}", s(&sock))), "0");
    let want = format!(
        "UNLINK DENIED: golistener (pid {old}) tried to remove {} (inode {dev}:{ino}), the file \
         of the listening socket of golistener (pid {}); the guard refused it with EPERM (policy \
         stale_owner: the remover's own listener at this path had already been replaced), so \
         the listener stays reachable; fix the remover: call SetUnlinkOnClose(false) or remove \
         only your own inode.",
        s(&sock),
        b.pid()
    );
    agent.expect_text("the denial sentence", |l| l.ends_with(&want));
    let lines = agent.stop_text();
    assert!(
        !lines.iter().any(|l| l.contains("FOREIGN UNLINK")),
        "{lines:#?}"
    );
}

/// The owner set is never refused, whatever the policy: the owner's own unlink (S2), a
/// forked worker's (S6), a process holding the socket by SCM_RIGHTS. An outsider with no
/// listener of its own at the path passes `stale_owner` and is refused by `foreign`.
#[test]
fn owners_pass_every_policy_and_an_outsider_only_stale_owner() {
    let test = "guard_owners";
    if !lsm_loads(test) {
        return;
    }
    for policy in ["stale_owner", "foreign"] {
        let tmp = tempdir();
        let args = ["--probe-mode", "lsm", "--guard", policy];
        let agent = Agent::start(tmp.path(), tmp.path(), &args);
        let (mut a, mut holder, mut outsider) = (Actor::spawn(), Actor::spawn(), Actor::spawn());
        let path = |name: &str| s(&tmp.path().join(name)).to_owned();

        a.must(&format!("listen-on {}", path("own.sock")));
        a.must(&format!("unlink {}", path("own.sock")));

        a.must(&format!("listen-on {}", path("worker.sock")));
        let reply = a.must(&format!("fork-unlink {}", path("worker.sock")));
        assert!(
            reply.ends_with(" 0"),
            "{policy}: the worker's unlink: {reply}"
        );

        let handed = a.must(&format!("listen-on {}", path("handed.sock")));
        let inbox = holder.must(&format!("fd-inbox guard-{policy}-{}", a.pid));
        a.must(&format!("send-fd guard-{policy}-{} {handed}", a.pid));
        holder.must(&format!("recv-fd {inbox}"));
        holder.must(&format!("unlink {}", path("handed.sock")));
        for name in ["own.sock", "worker.sock", "handed.sock"] {
            assert!(
                !tmp.path().join(name).exists(),
                "{policy}: {name} was removed"
            );
        }

        a.must(&format!("listen-on {}", path("other.sock")));
        let outsider_unlink = outsider.try_do(&format!("unlink {}", path("other.sock")));
        let verdicts = agent.stop();
        let denied: Vec<&Value> = verdicts.iter().filter(|v| is(v, "unlink_denied")).collect();
        match policy {
            "foreign" => {
                assert_eq!(outsider_unlink, Err(EPERM), "foreign refuses the outsider");
                assert!(tmp.path().join("other.sock").exists());
                assert_eq!(denied.len(), 1, "{verdicts:#?}");
                assert_eq!(
                    (tgid(denied[0], "actor"), tgid(denied[0], "victim")),
                    (u64::from(outsider.pid), u64::from(a.pid)),
                    "{}",
                    denied[0]
                );
                assert_eq!(denied[0]["policy"], "foreign");
            }
            _ => {
                assert_eq!(
                    outsider_unlink,
                    Ok(String::new()),
                    "no listener of the outsider's own was replaced at that path"
                );
                assert_nothing_refused(&verdicts);
            }
        }
    }
}

/// `foreign` with an allow-list (a config file): a listed comm and a process of a listed
/// cgroup pass; another process is refused.
#[test]
fn foreign_lets_the_allow_list_through() {
    let test = "guard_allow";
    if !lsm_loads(test) {
        return;
    }
    let cgroup = Path::new("/sys/fs/cgroup/sockwatch-guard-test");
    let _ = std::fs::remove_dir(cgroup);
    std::fs::create_dir(cgroup).expect("a cgroup v2 directory");
    let tmp = tempdir();
    let config = tmp.path().join("sockwatch.toml");
    std::fs::write(
        &config,
        "guard = \"foreign\"\nguard_allow_comms = [\"cleaner\"]\n\
         guard_allow_cgroups = [\"/sockwatch-guard-test\"]\n",
    )
    .expect("config");
    let args = ["--probe-mode", "lsm", "--config", s(&config)];
    let agent = Agent::start(tmp.path(), tmp.path(), &args);
    expect_log(&agent, "guard: on (top level foreign");
    let (mut owner, mut cleaner, mut boxed, mut other) = (
        Actor::spawn(),
        Actor::spawn(),
        Actor::spawn(),
        Actor::spawn(),
    );
    cleaner.must("set-comm cleaner");
    std::fs::write(cgroup.join("cgroup.procs"), boxed.pid.to_string()).expect("move to cgroup");
    for name in ["a.sock", "b.sock", "c.sock"] {
        owner.must(&format!("listen-on {}", s(&tmp.path().join(name))));
    }
    let unlink =
        |who: &mut Actor, name: &str| who.try_do(&format!("unlink {}", s(&tmp.path().join(name))));
    assert_eq!(
        unlink(&mut cleaner, "a.sock"),
        Ok(String::new()),
        "a listed comm"
    );
    assert_eq!(
        unlink(&mut boxed, "b.sock"),
        Ok(String::new()),
        "a listed cgroup"
    );
    assert_eq!(unlink(&mut other, "c.sock"), Err(EPERM), "anyone else");
    let (c, tmp_file) = (tmp.path().join("c.sock"), tmp.path().join("c.tmp"));
    let c_file = stat_id(&c);
    other.must(&format!("touch {}", s(&tmp_file)));
    assert_eq!(
        other.try_do(&format!("rename {} {}", s(&tmp_file), s(&c))),
        Err(EPERM),
        "a rename over the listener's file is a removal too"
    );
    assert_eq!(stat_id(&c), c_file);
    let by_other = |v: &Value, op: &str| {
        is(v, "unlink_denied") && tgid(v, "actor") == u64::from(other.pid) && v["operation"] == op
    };
    for op in ["unlink", "rename"] {
        let d = agent.expect_verdict(&format!("the {op} refused"), |v| by_other(v, op));
        assert_eq!(
            (tgid(&d, "victim"), file_of(&d), &d["policy"]),
            (u64::from(owner.pid), c_file, &Value::from("foreign")),
            "{d}"
        );
    }
    let verdicts = agent.stop();
    assert_eq!(
        verdicts.iter().filter(|v| is(v, "unlink_denied")).count(),
        2,
        "{verdicts:#?}"
    );
    drop(boxed);
    let _ = std::fs::remove_dir(cgroup);
}

/// Fail open: with the live table full, the guard cannot know a new listener, so its removal
/// passes even under `foreign`, counted as a bind the table lost and a removal it let through.
#[test]
fn a_full_live_table_fails_open_and_is_counted() {
    let test = "guard_full";
    if !lsm_loads(test) {
        return;
    }
    let tmp = tempdir();
    let args = [
        "--probe-mode",
        "lsm",
        "--guard",
        "foreign",
        "--live-capacity",
        "16",
    ];
    let (agent, addr) = start_listening(tmp.path(), &args);
    let (mut filler, mut outsider) = (Actor::spawn(), Actor::spawn());
    for i in 0..20 {
        filler.must(&format!(
            "listen-on {}",
            s(&tmp.path().join(format!("f{i}.sock")))
        ));
    }
    let victim = tmp.path().join("f19.sock");
    assert_eq!(
        outsider.try_do(&format!("unlink {}", s(&victim))),
        Ok(String::new()),
        "a listener the full table lost is not guarded"
    );
    let full = metric(
        addr,
        "sockwatch_kernel_errors_total",
        &[("reason", "map_full")],
    );
    let unknown = [("decision", "unknown")];
    let let_through = metric(addr, "sockwatch_guard_kernel_decisions_total", &unknown);
    assert!(
        full >= 1.0 && let_through >= 1.0,
        "map_full {full}, unknown {let_through}"
    );
    assert_nothing_refused(&agent.stop());
}

/// Where the unlink hook is not on BPF LSM (here forced off it), `--guard` says it is
/// unavailable (log, metric) and the agent only observes: S1 happens and is reported.
#[test]
fn without_bpf_lsm_the_guard_is_unavailable_and_only_observes() {
    let test = "guard_unavailable";
    if !root(test) {
        return;
    }
    let Some(go) = go_or_skip(test) else {
        return;
    };
    // The guests run the precise tiers; the host runs tracepoints natively.
    let mode = match std::env::var_os("SOCKWATCH_IN_VM") {
        Some(_) => "kprobe",
        None => "tracepoint",
    };
    let tmp = tempdir();
    let args = ["--probe-mode", mode, "--guard", "stale_owner"];
    let (agent, addr) = start_listening(tmp.path(), &args);
    expect_log(
        &agent,
        &format!("guard: unavailable: the unlink hook runs on {mode}, not BPF LSM"),
    );
    assert_eq!(guard_state(addr, "unavailable"), 1.0);
    assert_eq!(guard_state(addr, "on"), 0.0);
    let dir = tmp.path().join("multus");
    let (old, _, _b) = incident(&go, &dir, addr);
    assert!(
        !dir.join("multus.sock").exists(),
        "nothing is refused: the incident happens"
    );
    agent.expect_verdict("the foreign unlink", |v| {
        is(v, "foreign_unlink") && tgid(v, "actor") == u64::from(old)
    });
    signal(&agent, libc::SIGUSR1);
    expect_log(&agent, "guard: unavailable cannot be changed by signal");
    assert_nothing_refused(&agent.stop());
}

/// `sockwatch check` names the tier the guard gets under a probe mode: BPF LSM where it
/// loads (under the default mode too), else why not.
#[test]
fn check_names_the_guards_tier() {
    let test = "guard_check";
    if !root(test) {
        return;
    }
    let check = |mode: Option<&str>| {
        let mut cmd = std::process::Command::new(agent::sockwatch_bin());
        cmd.arg("check").env_remove("SOCKWATCH_PROBE_MODE");
        if let Some(mode) = mode {
            cmd.args(["--probe-mode", mode]);
        }
        let out = cmd.output().expect("sockwatch check");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("guard: ").map(str::to_owned))
            .unwrap_or_else(|| panic!("no guard line in:\n{stdout}"))
    };
    assert_eq!(
        check(Some("tracepoint")),
        "unavailable: the unlink hook runs on tracepoint, not BPF LSM (--probe-mode tracepoint \
         attaches no LSM program)"
    );
    match lsm_loads(test) {
        true => {
            assert_eq!(check(Some("lsm")), "lsm (unlink, rename)");
            assert_eq!(check(None), "lsm (unlink, rename)", "the default mode");
        }
        false => assert_unavailable(&check(None)),
    }
}

/// Why the guard is unavailable on a kernel that refuses LSM programs (the host: fentry and
/// LSM loads are EPERM there, there are no kprobes, so the unlink hook runs on tracepoints).
const HOST_UNAVAILABLE: &str = "unavailable: the unlink hook runs on tracepoint, not BPF LSM \
     (lsm refused: unlink_lsm: BPF_PROG_LOAD failed: Operation not permitted (os error 1))";

/// Says the guard is unavailable where BPF LSM does not load: exactly [`HOST_UNAVAILABLE`] on
/// the host; in a guest without BPF LSM (arm64 6.1 gives kprobes) the tier the unlink hook
/// gets and the kernel's reason for refusing LSM differ, only the sentence's shape is known.
fn assert_unavailable(said: &str) {
    if std::env::var_os("SOCKWATCH_IN_VM").is_none() {
        assert_eq!(said, HOST_UNAVAILABLE);
    } else {
        assert!(
            said.starts_with("unavailable: the unlink hook runs on ")
                && said.contains(", not BPF LSM ("),
            "{said}"
        );
    }
}

/// The documented command, `run --guard stale_owner` under the default probe mode: where BPF
/// LSM loads, the removal hooks go on it and S1's stale owner is refused (the successor's
/// file keeps its inode); elsewhere the guard says exactly why it cannot refuse.
#[test]
fn the_default_probe_mode_guards_where_bpf_lsm_loads() {
    let test = "guard_default_mode";
    if !root(test) {
        return;
    }
    let Some(go) = go_or_skip(test) else {
        return;
    };
    let lsm = lsm_loads(test);
    let tmp = tempdir();
    let (agent, addr) = start_listening(tmp.path(), &["--guard", "stale_owner"]);
    if !lsm {
        expect_log(&agent, "; observing only");
        let log = agent.log_text();
        let said = log
            .lines()
            .find_map(|l| l.split_once("guard: ").map(|(_, g)| g))
            .and_then(|g| g.split_once("; observing only").map(|(why, _)| why))
            .unwrap_or_else(|| panic!("no guard line in the agent's log:\n{log}"));
        assert_unavailable(said);
        assert_eq!(guard_state(addr, "unavailable"), 1.0);
        return;
    }
    // The agent's own watch (the test's directory) takes the top level's policy.
    expect_log(&agent, "guard: on (top level stale_owner, ");
    expect_log(
        &agent,
        " stale_owner; lsm (unlink, rename)); SIGUSR1 pauses it",
    );
    let dir = tmp.path().join("multus");
    let (old, successor, b) = incident(&go, &dir, addr);
    assert_eq!(
        stat_id(&dir.join("multus.sock")),
        successor,
        "the successor's socket file survives"
    );
    let d = agent.expect_verdict("the Close's unlink refused", |v| is(v, "unlink_denied"));
    assert_eq!(
        (tgid(&d, "actor"), tgid(&d, "victim"), file_of(&d)),
        (u64::from(old), u64::from(b.pid()), successor),
        "{d}"
    );
    let kernel = |decision| {
        metric(
            addr,
            "sockwatch_guard_kernel_decisions_total",
            &[("decision", decision)],
        )
    };
    assert_eq!((kernel("denied"), kernel("would_deny")), (1.0, 0.0));
    assert_nothing_let_through(&agent.stop());
}

fn assert_nothing_let_through(verdicts: &[Value]) {
    assert!(
        !verdicts
            .iter()
            .any(|v| is(v, "foreign_unlink") || is(v, "unlink_would_deny")),
        "{verdicts:#?}"
    );
}

/// Audit mode: the same race goes through (the successor's file is gone), the kernel counts
/// one would-deny and no denial, and the verdicts say it would have been refused, then
/// report the foreign unlink it is.
#[test]
fn audit_mode_lets_s1_through_and_says_it_would_have_refused() {
    let test = "guard_audit";
    let Some(go) = lsm_and_go(test) else {
        return;
    };
    let tmp = tempdir();
    let args = ["--guard", "stale_owner", "--guard-mode", "audit"];
    let (agent, addr) = start_listening(tmp.path(), &args);
    expect_log(&agent, "guard: audit (top level stale_owner, ");
    expect_log(
        &agent,
        " stale_owner; lsm (unlink, rename)): removals it would refuse are let through and \
         reported; SIGUSR1 pauses it",
    );
    assert_eq!(guard_state(addr, "audit"), 1.0);
    let dir = tmp.path().join("multus");
    let (old, successor, b) = incident(&go, &dir, addr);
    assert!(
        !dir.join("multus.sock").exists(),
        "audit refuses nothing: the Close removed the successor's file"
    );
    let w = agent.expect_verdict("the audit's would-deny", |v| is(v, "unlink_would_deny"));
    assert_eq!(
        (tgid(&w, "actor"), tgid(&w, "victim"), file_of(&w)),
        (u64::from(old), u64::from(b.pid()), successor),
        "{w}"
    );
    assert_eq!(
        (&w["policy"], &w["operation"]),
        (&Value::from("stale_owner"), &Value::from("unlink"))
    );
    agent.expect_verdict("the foreign unlink that happened", |v| {
        is(v, "foreign_unlink") && tgid(v, "actor") == u64::from(old)
    });
    let kernel = |decision| {
        metric(
            addr,
            "sockwatch_guard_kernel_decisions_total",
            &[("decision", decision)],
        )
    };
    assert_eq!((kernel("would_deny"), kernel("denied")), (1.0, 0.0));
    let verdicts = agent.stop();
    assert_nothing_refused(&verdicts);
    assert_eq!(
        verdicts
            .iter()
            .filter(|v| is(v, "unlink_would_deny"))
            .count(),
        1,
        "{verdicts:#?}"
    );
}
