//! Listener hand-over (S7, S16): A binds and listens, passes the listener to B by SCM_RIGHTS
//! (or forks a child that execs with it, as systemd socket activation does), and exits. B is
//! an owner from then on: A's exit reports no stale file, B's own unlink is quiet, and a
//! third process's unlink is a foreign unlink naming B.
//!
//! The precise tiers see the receipt (`security_file_receive`). The tracepoint tier has no
//! hook for it: when A exits, the agent finds B holding the socket in `/proc/B/fd` and writes
//! a `receive` line seen in /proc. No agent here sweeps, so nothing else could teach it B.
use crate::common;

use std::path::Path;

use common::{actor::Actor, agent::Agent, *};
use serde_json::Value;
use sockwatch::kernel::probes::ProbeMode;
use sockwatch_common::{EventKind, Tier};

fn s(p: &Path) -> String {
    p.to_str().expect("utf-8").to_string()
}

fn tgid(v: &Value, who: &str) -> u32 {
    v[who]["tgid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no {who}.tgid in {v}")) as u32
}

/// A moves its listener (handle `listener`) to B by SCM_RIGHTS, through an abstract inbox
/// named after `what` and B; returns B's handle of it.
fn hand_over(a: &mut Actor, b: &mut Actor, listener: &str, what: &str) -> String {
    let inbox_name = format!("sockwatch-{what}-{}", b.pid);
    let inbox = b.must(&format!("fd-inbox {inbox_name}"));
    a.must(&format!("send-fd {inbox_name} {listener}"));
    b.must(&format!("recv-fd {inbox}"))
}

/// The receipt program fires once per received live socket, in the receiver, with the
/// socket's file and sockfs inode, and makes the receiver the owner the kernel table names at
/// the next unlink.
#[test]
fn receipt_program_reports_the_receiver_and_the_socket() {
    for (mode, tier) in agent_modes() {
        let test = format!("receipt_{}", tier.name());
        if tier == Tier::Tracepoint {
            skip(
                &test,
                "the tracepoint tier has no receipt program (sweeps learn \
                 receivers; see handover_* tests)",
            );
            continue;
        }
        let Some(mut l) = load(&test, mode, tier) else {
            continue;
        };
        let tmp = tempdir();
        let sock = tmp.path().join("handed.sock");
        let (mut a, mut b, mut c) = (Actor::spawn(), Actor::spawn(), Actor::spawn());
        let h = a.must(&format!("listen-on {}", s(&sock)));
        let file = stat_id(&sock);
        let bind = l.expect("bind", |e| e.kind == EventKind::Bind && e.tgid == a.pid);
        hand_over(&mut a, &mut b, &h, "rx");
        let rx = l.expect("receipt", |e| {
            e.kind == EventKind::Receive && e.tgid == b.pid
        });
        assert_eq!((rx.dev, rx.ino), file, "{rx:?}");
        assert_eq!(rx.sock_ino, bind.sock_ino, "{rx:?}");
        // Every forced mode attaches the receive hook at its own tier.
        assert_eq!(rx.tier, tier, "{rx:?}");
        assert_eq!(
            rx.owner.map(|o| o.tgid),
            Some(a.pid),
            "owner before: {rx:?}"
        );
        assert!(rx.flags.listening, "{rx:?}");
        assert_eq!(rx.path, s(&sock));
        // The kernel table names B now: a third process's unlink carries B as the owner.
        c.must(&format!("unlink {}", s(&sock)));
        let un = l.expect("C's unlink", |e| {
            e.kind == EventKind::Unlink && e.tgid == c.pid
        });
        assert_eq!((un.dev, un.ino), file);
        assert!(un.flags.live && !un.flags.holds_fd, "{un:?}");
        assert_eq!(un.owner.map(|o| o.tgid), Some(b.pid), "{un:?}");
    }
}

/// Runs `sockwatch run` under `mode`, with no sweeps (skips, saying why, when this kernel
/// refuses the tier).
fn start_agent(test: &str, dir: &Path, mode: ProbeMode, tier: Tier) -> Option<Agent> {
    if tier != Tier::Tracepoint {
        // The same check the kernel tests make: skips with the reason where the tier is refused.
        if !tier_loads(test, mode, tier) {
            return None;
        }
    } else if !is_root() {
        skip(test, "needs root");
        return None;
    }
    let args = ["--probe-mode", mode.name()];
    Some(Agent::start_sweeping(dir, dir, 0, &args, &[]))
}

/// The receipt line for B: the kernel's on the exact tiers; on the tracepoint tier the one
/// the agent wrote from `/proc/B/fd` when A exited, just before A's exit line.
fn expect_receipt(agent: &Agent, tier: Tier, b: u32, a: u32, file: (u64, u64), test: &str) {
    let rx = agent.expect_line("B's receipt", |l| l["kind"] == "receive" && l["tgid"] == b);
    assert_eq!(
        (rx["dev"].as_u64(), rx["ino"].as_u64()),
        (Some(file.0), Some(file.1)),
        "{test}: {rx}"
    );
    if tier == Tier::Tracepoint {
        assert_eq!(rx["seen_in"], "proc", "{test}: {rx}");
        let lines = agent.lines();
        let at = |want: &dyn Fn(&Value) -> bool| lines.iter().position(want);
        let rx_at = at(&|l| l["kind"] == "receive" && l["tgid"] == b);
        let exit_at = at(&|l| l["kind"] == "exit" && l["tgid"] == a);
        assert!(rx_at < exit_at, "{test}: the receipt comes before A's exit");
    } else {
        assert_eq!(rx.get("seen_in"), None, "{test}: {rx}");
    }
}

/// Verdicts about the socket file `file` (other tests on the machine may cause their own).
fn verdicts_about(verdicts: Vec<Value>, file: (u64, u64)) -> Vec<Value> {
    verdicts
        .into_iter()
        .filter(|v| v["file"]["dev"] == file.0 && v["file"]["ino"] == file.1)
        .collect()
}

fn no_stale_file(agent: &Agent, file: (u64, u64), test: &str) {
    let stale: Vec<Value> = verdicts_about(agent.verdicts(), file)
        .into_iter()
        .filter(|v| v["verdict"] == "stale_socket_file")
        .collect();
    assert!(stale.is_empty(), "{test}: {stale:#?}");
}

/// S7/S16 by SCM_RIGHTS: A's exit is quiet, B's own unlink is quiet.
#[test]
fn handover_receiver_unlink_is_quiet() {
    for (mode, tier) in agent_modes() {
        let test = format!("handover_quiet_{}", tier.name());
        let tmp = tempdir();
        let Some(agent) = start_agent(&test, tmp.path(), mode, tier) else {
            continue;
        };
        let sock = tmp.path().join("served.sock");
        let (mut a, mut b) = (Actor::spawn(), Actor::spawn());
        let h = a.must(&format!("listen-on {}", s(&sock)));
        let file = stat_id(&sock);
        hand_over(&mut a, &mut b, &h, "quiet");
        let a_pid = a.pid;
        drop(a);
        agent.expect_line("A's exit", |l| l["kind"] == "exit" && l["tgid"] == a_pid);
        expect_receipt(&agent, tier, b.pid, a_pid, file, &test);
        b.must(&format!("unlink {}", s(&sock)));
        agent.expect_line("B's unlink", |l| {
            l["kind"] == "unlink" && l["tgid"] == b.pid && l["path"] == s(&sock)
        });
        drop(b);
        let verdicts = verdicts_about(agent.stop(), file);
        assert!(
            verdicts.is_empty(),
            "{test}: quiet hand-over of {file:?}: {verdicts:#?}"
        );
    }
}

/// S16 by SCM_RIGHTS: after A's exit, C's unlink is a foreign unlink of B's socket.
#[test]
fn handover_third_party_unlink_names_the_receiver() {
    for (mode, tier) in agent_modes() {
        let test = format!("handover_foreign_{}", tier.name());
        let tmp = tempdir();
        let Some(agent) = start_agent(&test, tmp.path(), mode, tier) else {
            continue;
        };
        let sock = tmp.path().join("served.sock");
        let (mut a, mut b, mut c) = (Actor::spawn(), Actor::spawn(), Actor::spawn());
        let h = a.must(&format!("listen-on {}", s(&sock)));
        let file = stat_id(&sock);
        hand_over(&mut a, &mut b, &h, "foreign");
        let a_pid = a.pid;
        drop(a);
        agent.expect_line("A's exit", |l| l["kind"] == "exit" && l["tgid"] == a_pid);
        expect_receipt(&agent, tier, b.pid, a_pid, file, &test);
        c.must(&format!("unlink {}", s(&sock)));
        let v = agent.expect_verdict("C's foreign unlink", |v| {
            v["verdict"] == "foreign_unlink" && tgid(v, "actor") == c.pid
        });
        assert_eq!(tgid(&v, "victim"), b.pid, "{test}: {v}");
        assert_eq!(
            (v["file"]["dev"].as_u64(), v["file"]["ino"].as_u64()),
            (Some(file.0), Some(file.1)),
            "{test}: {v}"
        );
        no_stale_file(&agent, file, &test);
        drop(b);
        agent.stop();
    }
}

/// S16, systemd style: the parent binds, a child inherits the listener as fd 3 and execs;
/// the parent exits. Quiet, then a third process's unlink names the child.
#[test]
fn socket_activation_child_is_the_owner() {
    for (mode, tier) in agent_modes() {
        let test = format!("activation_{}", tier.name());
        let tmp = tempdir();
        let Some(agent) = start_agent(&test, tmp.path(), mode, tier) else {
            continue;
        };
        let sock = tmp.path().join("activated.sock");
        let (mut parent, mut c) = (Actor::spawn(), Actor::spawn());
        let h = parent.must(&format!("listen-on {}", s(&sock)));
        let file = stat_id(&sock);
        let child: u32 = parent
            .must(&format!("spawn-inherit {h}"))
            .parse()
            .expect("pid");
        agent.expect_line("the fork", |l| {
            l["kind"] == "fork" && l["tgid"] == parent.pid && l["child_tgid"] == child
        });
        let parent_pid = parent.pid;
        drop(parent);
        agent.expect_line("the parent's exit", |l| {
            l["kind"] == "exit" && l["tgid"] == parent_pid
        });
        c.must(&format!("unlink {}", s(&sock)));
        let v = agent.expect_verdict("C's foreign unlink", |v| {
            v["verdict"] == "foreign_unlink" && tgid(v, "actor") == c.pid
        });
        assert_eq!(tgid(&v, "victim"), child, "{test}: {v}");
        assert_eq!(v["file"]["ino"].as_u64(), Some(file.1), "{test}: {v}");
        no_stale_file(&agent, file, &test);
        // SAFETY: kill(2) takes no pointers; `child` is the sleep this test started.
        unsafe { libc::kill(child as i32, libc::SIGKILL) };
        agent.stop();
    }
}

/// Without any tier of the receive hook (the test switch refuses it on every tier, the sweeps'
/// stand-in included), `check` says what is missed and exits 1: degraded, not refused.
#[test]
fn check_names_a_missing_receive_hook() {
    if !is_root() {
        skip(
            "check_names_a_missing_receive_hook",
            "needs root to load eBPF programs",
        );
        return;
    }
    let out = std::process::Command::new(agent::sockwatch_bin())
        .args(["check", "--test-refuse-hooks", "receive"])
        .output()
        .expect("run sockwatch check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let missed =
        sockwatch::kernel::probes::Missed::missed_without(sockwatch::kernel::probes::Hook::Receive);
    assert!(
        stdout.contains(&format!("run would run without receive: {missed}")),
        "{stdout}"
    );
    assert_eq!(
        stdout.lines().last(),
        Some("check: run would run degraded, without receive"),
        "{stdout}"
    );
}
