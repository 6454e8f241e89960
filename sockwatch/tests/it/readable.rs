//! The real agent as a person reads it: `run --format text` writes each verdict as one exact
//! sentence naming both processes, the path and the inode, and `explain PATH` tells the path's
//! timeline from the running agent's API. S1 (the Go listener's Close) and S3 (a stale
//! connect through a bind-mounted socket file), on whichever tier this kernel gives `run`;
//! and names made to fool a reader (a newline and a forged verdict line, escape sequences),
//! quoted in every text output.
use crate::common;

use std::{net::SocketAddr, os::unix::ffi::OsStrExt as _, path::Path, process::Command};

use common::{
    actor::{Actor, hex},
    agent::{Agent, sockwatch_bin, wait_bound},
    go::{GoDaemon, go_listen, go_or_skip, go_stop},
    *,
};
use sockwatch::{
    attribution::Attributor,
    engine::Proc,
    quote::{inert, quote},
};

const NODE: &str = "readable-node";

/// An agent watching `dir` that writes sentences, with its API on a free loopback port.
fn text_agent(dir: &Path) -> (Agent, SocketAddr) {
    let addr = free_addr();
    let listen = addr.to_string();
    let args = ["--format", "text", "--listen", listen.as_str()];
    let agent = Agent::start_with_env(dir, dir, &args, &[("NODE_NAME", NODE)]);
    (agent, addr)
}

/// `comm (pid N)` as the agent names a live process: with its workload, read as the agent
/// reads it (none on a plain host; a container id where the tests run in one).
fn named(pid: u32, comm: &str) -> String {
    sockwatch::text::who(&Proc {
        tgid: pid,
        pid,
        comm: comm.into(),
        cgroup_id: 0,
        workload: Attributor::default().workload(pid),
        exe: None,
        runtime: None,
    })
}

/// The actor's name as the kernel reports it: the comm of the thread that runs commands.
fn actor_named(a: &mut Actor) -> String {
    let comm = a.must("comm");
    named(a.pid, &comm)
}

fn inode((dev, ino): (u64, u64)) -> String {
    format!("{dev}:{ino}")
}

/// `what` after a line's stamp: `YYYY-MM-DDTHH:MM:SS.mmmZ` and, when `node` is given, it.
fn after_stamp<'a>(line: &'a str, node: Option<&str>) -> &'a str {
    let (time, rest) = line.split_at_checked(24).unwrap_or((line, ""));
    let shape = time.bytes().enumerate().all(|(i, b)| match i {
        4 | 7 => b == b'-',
        10 => b == b'T',
        13 | 16 => b == b':',
        19 => b == b'.',
        23 => b == b'Z',
        _ => b.is_ascii_digit(),
    });
    assert!(shape, "no RFC 3339 time to the millisecond: {line:?}");
    let rest = match node {
        Some(node) => rest.strip_prefix(&format!(" {node} ")),
        None => rest.strip_prefix("  "),
    };
    rest.unwrap_or_else(|| panic!("no {node:?} after the time: {line:?}"))
}

/// The sentence of the first `--format text` line that `want` picks, waiting for it.
fn expect_sentence(agent: &Agent, what: &str, want: impl Fn(&str) -> bool) -> String {
    let line = agent.expect_text(what, |l| want(after_stamp(l, Some(NODE))));
    after_stamp(&line, Some(NODE)).to_owned()
}

/// `text`, what a text output wrote, is whole lines, none holding a control character or
/// anything else that breaks or reorders a line.
fn assert_inert_lines(what: &str, text: &str) {
    let body = text
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("{what}: no final newline: {text:?}"));
    for line in body.split('\n') {
        assert!(
            inert(line),
            "{what} wrote a line that is not inert: {line:?}"
        );
    }
}

/// `sockwatch explain PATH` against the agent at `addr`: its lines, each checked inert.
fn explain(path: &Path, addr: SocketAddr) -> Vec<String> {
    let out = Command::new(sockwatch_bin())
        .arg("explain")
        .arg(path)
        .args(["--agent", &addr.to_string()])
        .output()
        .expect("run sockwatch explain");
    let stdout = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        out.status.success(),
        "explain: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_inert_lines("explain", &stdout);
    stdout.lines().map(str::to_owned).collect()
}

/// What a timeline line must be (after its time), and what it is called in a failure.
type Wanted<'a> = (&'a str, &'a dyn Fn(&str) -> bool);

/// Each of `wanted` matches a line of `lines` (after its time, for a timeline line), in this
/// order.
fn in_order(lines: &[String], wanted: &[Wanted]) {
    let mut rest = lines.iter();
    for (what, want) in wanted {
        let found = rest.any(|l| {
            let text = match l.starts_with("now:") {
                true => l.as_str(),
                false => l.split_once("  ").map_or(l.as_str(), |(_, t)| t),
            };
            want(text)
        });
        assert!(
            found,
            "no {what} (in this order) in the timeline:\n{}",
            lines.join("\n")
        );
    }
}

/// S1 with the Go listener: the successor's takeover, then the old daemon's Close unlinking
/// the successor's socket, one sentence each, exact to the pid and inode; `explain` tells the
/// same path's timeline from the agent.
#[test]
fn s1_sentences_and_the_timeline_explain_tells() {
    if !root("readable_s1") {
        return;
    }
    let Some(go) = go_or_skip("readable_s1") else {
        return;
    };
    let tmp = tempdir();
    let dir = tmp.path().join("multus");
    std::fs::create_dir(&dir).expect("mkdir");
    let sock = dir.join("multus.sock");
    let (agent, addr) = text_agent(tmp.path());
    let (mut old, mut out) = go_listen(&go, &[], &sock);
    let old_pid = old.id();
    wait_bound(addr, &sock, old_pid);
    let old_name = named(old_pid, "golistener");
    let old_file = inode(stat_id(&sock));
    // The successor: the same Go daemon, whose start-up removes the socket's directory.
    let b = GoDaemon::listen(&go, &["-keep", "-rmdir"], &sock);
    let b_name = named(b.pid(), "golistener");
    let new_file = inode(stat_id(&sock));
    go_stop(&mut old, &mut out);
    let sock = s(&sock);

    let takeover = expect_sentence(&agent, "B's takeover", |l| l.starts_with("TAKEOVER: "));
    let (healthy_start, healthy_end) = (
        format!(
            "TAKEOVER: {b_name} removed {sock} (inode {old_file}), the file of the live socket \
             of {old_name}, and bound a new socket there (inode {new_file}) "
        ),
        " later: a healthy rollout of the same workload, nothing to fix; the old listener \
         should close as its process shuts down.",
    );
    assert!(
        takeover.starts_with(&healthy_start) && takeover.ends_with(healthy_end),
        "{takeover}"
    );
    let foreign = expect_sentence(&agent, "the Close's foreign unlink", |l| {
        l.starts_with("FOREIGN UNLINK: ")
    });
    let s1 = format!(
        "FOREIGN UNLINK: {old_name} removed {sock} (inode {new_file}), the file of the \
         listening socket of {b_name}, so clients can no longer reach it by path; likely cause: \
         the remover is a stale owner, its own listener at this path was already replaced, yet \
         its Close unlinked the path (Go's net.UnixListener unlinks its path on Close); fix: \
         call SetUnlinkOnClose(false) or remove only your own inode."
    );
    assert_eq!(foreign, s1);
    let b_orphan = format!(
        "ORPHANED LISTENER: {b_name} listens on inode {new_file}, whose path {sock} was \
         removed by {old_name}: no client can reach it by path until its owner binds again or \
         exits."
    );
    assert_eq!(
        expect_sentence(&agent, "B's orphan", |l| l
            .starts_with(&format!("ORPHANED LISTENER: {b_name}"))),
        b_orphan
    );
    let old_orphan = format!(
        "ORPHANED LISTENER: {old_name} still listens on inode {old_file}, whose path {sock} was \
         taken over by {b_name}: expected while the old process shuts down; if it lingers, its \
         shutdown is stuck."
    );
    assert_eq!(
        expect_sentence(&agent, "the old daemon's orphan", |l| l
            .starts_with(&format!("ORPHANED LISTENER: {old_name}"))),
        old_orphan
    );

    let timeline = explain(Path::new(sock), addr);
    assert_eq!(
        timeline[0],
        format!("{sock}, as the agent on {NODE} saw it:")
    );
    let old_bind = format!("{old_name} bound the path: inode {old_file}");
    let b_bind = format!("{b_name} bound the path: inode {new_file}");
    let now = format!("now: ORPHANED LISTENER: inode {new_file} still listens (owners: {b_name})");
    in_order(
        &timeline,
        &[
            ("the old daemon's bind", &|l| l == old_bind),
            ("the takeover", &|l| l == takeover),
            ("the successor's bind", &|l| l == b_bind),
            ("the Close's removal", &|l| l == s1),
            ("the successor's orphan", &|l| l == b_orphan),
            ("its state now", &|l| l.starts_with(&now)),
        ],
    );
    for line in timeline.iter().skip(1).filter(|l| !l.starts_with("now:")) {
        after_stamp(line, None);
    }
    // The text stream holds verdicts only: no kernel event, no JSON.
    let lines = agent.stop_text();
    eprintln!("run --format text wrote:\n{}\n", lines.join("\n"));
    eprintln!("explain printed:\n{}", timeline.join("\n"));
    assert!(lines.iter().all(|l| !l.contains('{')), "{lines:#?}");
    let count = |label: &str| lines.iter().filter(|l| l.contains(label)).count();
    assert_eq!(
        (count(" TAKEOVER: "), count(" FOREIGN UNLINK: ")),
        (1, 1),
        "{lines:#?}"
    );
    assert_explained_by_a_scan(sock, &new_file, b.pid());
}

/// With the agent gone, `explain` scans the node: no history, but the orphaned listener at
/// `sock` (file `file`, held by `holder`) as it is now.
fn assert_explained_by_a_scan(sock: &str, file: &str, holder: u32) {
    let gone = free_addr();
    let scanned = explain(Path::new(sock), gone);
    eprintln!("explain without an agent printed:\n{}", scanned.join("\n"));
    assert_eq!(
        scanned[0],
        format!("{sock}, as a scan of this node shows it now (no agent answered: no history):")
    );
    let orphan = scanned
        .iter()
        .find(|l| l.starts_with("now: ORPHANED LISTENER: socket:["));
    let orphan = orphan.unwrap_or_else(|| panic!("no orphan in {scanned:#?}"));
    assert!(
        // sock_diag gives the file's inode as 32 bits: said so, not widened.
        orphan.contains(&format!("(inode {file}"))
            && orphan.contains(" listens, held by ")
            && orphan.contains(&format!("(pid {holder})"))
            && orphan.ends_with("but the path no longer leads to it"),
        "{orphan}"
    );
}

/// S3: a client's bind mount of the socket file pins the old inode; its refused connect is
/// one sentence naming the client, the binder, the remover and the fix; `explain` of the
/// server's path tells it too.
#[test]
fn s3_stale_connect_sentence_says_mount_the_directory() {
    if !root("readable_s3") {
        return;
    }
    let tmp = tempdir();
    let sock = tmp.path().join("srv.sock");
    let view = tmp.path().join("client-view.sock");
    let (agent, addr) = text_agent(tmp.path());
    let (mut a, mut b, mut c) = (Actor::spawn(), Actor::spawn(), Actor::spawn());
    let (a_name, b_name, c_name) = (
        actor_named(&mut a),
        actor_named(&mut b),
        actor_named(&mut c),
    );
    a.must(&format!("listen-on {}", s(&sock)));
    let old_file = inode(stat_id(&sock));
    c.must(&format!("touch {}", s(&view)));
    c.must(&format!("bind-mount {} {}", s(&sock), s(&view)));
    b.must(&format!("unlink {}", s(&sock)));
    b.must(&format!("listen-on {}", s(&sock)));
    drop(a);
    assert_eq!(
        c.must(&format!("connect {}", s(&view))),
        libc::ECONNREFUSED.to_string()
    );
    let stale = expect_sentence(&agent, "the stale connect", |l| {
        l.starts_with("STALE CONNECT: ")
    });
    let s3 = format!(
        "STALE CONNECT: {c_name} was refused (ECONNREFUSED) connecting to {}: it reached inode \
         {old_file}, a removed socket file (removed by {b_name}) that no socket listens on (last \
         bound by {a_name}), kept reachable by a bind mount of the file; likely cause: the \
         socket file itself is bind-mounted into the client's mount namespace (a hostPath of \
         type Socket, a volume of the file), so the daemon's new socket stays out of its view; \
         fix: mount the socket's directory, not the file.",
        s(&view)
    );
    assert_eq!(stale, s3);

    let timeline = explain(&sock, addr);
    let a_bind = format!("{a_name} bound the path: inode {old_file}");
    in_order(
        &timeline,
        &[
            ("the old server's bind", &|l| l == a_bind),
            ("the successor's takeover", &|l| {
                l.starts_with(&format!("TAKEOVER: {b_name} removed {}", s(&sock)))
            }),
            ("the stale connect", &|l| l == s3),
            ("the old file now", &|l| {
                l == format!("now: inode {old_file} is gone: its socket closed, its file removed")
            }),
        ],
    );
    drop(c);
    let lines = agent.stop_text();
    eprintln!("run --format text wrote:\n{}\n", lines.join("\n"));
    eprintln!("explain printed:\n{}", timeline.join("\n"));
}

/// A file name made to fool a reader: after a newline, a line shaped like a verdict of this
/// node; then escape sequences that retitle the terminal and clear the screen.
const FORGED: &str =
    "x\n2026-12-02T21:35:27.906Z readable-node FOREIGN UNLINK: forged\x1b]0;title\x07\x1b[2J";

/// The remover's command name, as hostile (the kernel keeps 15 bytes of it).
const HOSTILE_COMM: &str = "rm\n\x1b[2Jx";

/// A socket whose file name is [`FORGED`], listened on by A and removed by B, whose command
/// name holds a newline and an escape too: `run --format text`, `explain` (from the agent, then
/// from a scan) and `scan` write every name quoted, each verdict and finding on one line, and
/// no control byte anywhere; the forged line never becomes a line of its own.
#[test]
fn names_with_a_newline_or_an_escape_are_quoted_on_one_line() {
    if !root("readable_quoted") {
        return;
    }
    let tmp = tempdir();
    let sock = tmp.path().join(FORGED);
    let addr = free_addr();
    let listen = addr.to_string();
    // Reported at once: no takeover window to wait out.
    let args = [
        "--format",
        "text",
        "--listen",
        listen.as_str(),
        "--takeover-window",
        "0s",
    ];
    let agent = Agent::start_with_env(tmp.path(), tmp.path(), &args, &[("NODE_NAME", NODE)]);
    let written = agent.events.clone();
    let (mut a, mut b) = (Actor::spawn(), Actor::spawn());
    let a_name = actor_named(&mut a);
    b.must(&format!("set-comm-hex {}", hex(HOSTILE_COMM.as_bytes())));
    let b_name = named(b.pid, HOSTILE_COMM);
    assert!(b_name.starts_with(r"$'rm\n\e[2Jx' (pid "), "{b_name}");
    let sock_hex = hex(sock.as_os_str().as_bytes());
    a.must(&format!("listen-on-hex {sock_hex}"));
    let file = inode(stat_id(&sock));
    b.must(&format!("unlink-hex {sock_hex}"));
    let quoted = quote(s(&sock)).to_string();
    assert!(
        quoted.ends_with(
            r"/x\n2026-12-02T21:35:27.906Z readable-node FOREIGN UNLINK: forged\e]0;title\a\e[2J'"
        ),
        "{quoted}"
    );

    let foreign = expect_sentence(&agent, "B's foreign unlink", |l| {
        l.starts_with("FOREIGN UNLINK: ")
    });
    let removed = format!(
        "FOREIGN UNLINK: {b_name} removed {quoted} (inode {file}), the file of the listening \
         socket of {a_name}, so clients can no longer reach it by path"
    );
    assert!(foreign.starts_with(&removed), "{foreign}\nnot {removed}");
    let orphan = format!(
        "ORPHANED LISTENER: {a_name} listens on inode {file}, whose path {quoted} was removed \
         by {b_name}: no client can reach it by path until its owner binds again or exits."
    );
    assert_eq!(
        expect_sentence(&agent, "A's orphan", |l| l
            .starts_with("ORPHANED LISTENER: ")),
        orphan
    );

    let timeline = explain(&sock, addr);
    assert_eq!(
        timeline[0],
        format!("{quoted}, as the agent on {NODE} saw it:")
    );
    in_order(
        &timeline,
        &[
            ("the foreign unlink", &|l| l == foreign),
            ("the orphan", &|l| l == orphan),
        ],
    );
    for line in timeline.iter().skip(1).filter(|l| !l.starts_with("now:")) {
        after_stamp(line, None);
    }

    let scan = Command::new(sockwatch_bin())
        .arg("scan")
        .arg("--watch")
        .arg(tmp.path())
        .output()
        .expect("run sockwatch scan");
    let table = String::from_utf8(scan.stdout).expect("utf-8");
    eprintln!("scan printed:\n{table}");
    assert_eq!(
        scan.status.code(),
        Some(1),
        "a finding: {table}\n{}",
        String::from_utf8_lossy(&scan.stderr)
    );
    assert_inert_lines("scan", &table);
    let orphaned = format!("orphaned-listener  {quoted}  unlinked; ");
    assert!(table.lines().any(|l| l.starts_with(&orphaned)), "{table}");

    let lines = agent.stop_text();
    let text = std::fs::read_to_string(&written).expect("the text output");
    eprintln!("run --format text wrote:\n{text}");
    eprintln!("explain printed:\n{}", timeline.join("\n"));
    assert_inert_lines("run --format text", &text);
    // Every line is the agent's own: its time and node, then a verdict; one removal.
    let whats: Vec<&str> = lines.iter().map(|l| after_stamp(l, Some(NODE))).collect();
    let removals = whats.iter().filter(|w| w.starts_with("FOREIGN UNLINK: "));
    assert_eq!(removals.count(), 1, "{lines:#?}");
    let forged = lines
        .iter()
        .any(|l| l.starts_with("2026-12-02T21:35:27.906Z "));
    assert!(!forged, "a forged line: {lines:#?}");

    let scanned = explain(&sock, free_addr());
    eprintln!("explain without an agent printed:\n{}", scanned.join("\n"));
    assert_eq!(
        scanned[0],
        format!("{quoted}, as a scan of this node shows it now (no agent answered: no history):")
    );
    assert!(
        scanned
            .iter()
            .any(|l| l.starts_with("now: ORPHANED LISTENER: socket:[")),
        "{scanned:#?}"
    );
}

/// A daemon closes its listener, then removes its own file: no verdict, a quiet cleanup in the
/// timeline, and `explain` (from the agent, then from a scan) says what the filesystem says
/// now: the path does not exist.
#[test]
fn an_owners_close_then_unlink_is_a_quiet_cleanup_and_explain_says_the_path_is_gone() {
    if !root("readable_cleanup") {
        return;
    }
    let tmp = tempdir();
    let sock = tmp.path().join("daemon.sock");
    let (agent, addr) = text_agent(tmp.path());
    let mut a = Actor::spawn();
    let a_name = actor_named(&mut a);
    let h = a.must(&format!("listen-on {}", s(&sock)));
    let file = inode(stat_id(&sock));
    a.must(&format!("close {h}"));
    a.must(&format!("unlink {}", s(&sock)));

    let cleanup =
        format!("{a_name} removed inode {file}, the file of its own closed socket: a cleanup");
    let deadline = std::time::Instant::now() + patience();
    let timeline = loop {
        let lines = explain(&sock, addr);
        if lines.iter().any(|l| l.ends_with(&cleanup)) || std::time::Instant::now() > deadline {
            break lines;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    eprintln!("explain printed:\n{}", timeline.join("\n"));
    let (bound, listens, closed) = (
        format!("{a_name} bound the path: inode {file}"),
        format!("{a_name} listens on inode {file}"),
        format!("{a_name} closed the socket of inode {file}"),
    );
    let gone = format!("now: inode {file} is gone: its socket closed, its file removed");
    in_order(
        &timeline,
        &[
            ("the bind", &|l| l == bound),
            ("the listen", &|l| l == listens),
            ("the close", &|l| l == closed),
            ("the cleanup", &|l| l == cleanup),
            ("the socket now", &|l| l == gone),
        ],
    );
    assert_eq!(
        timeline.last().map(String::as_str),
        Some("now: the path does not exist")
    );
    let lines = agent.stop_text();
    let about: Vec<&String> = lines.iter().filter(|l| l.contains(s(&sock))).collect();
    assert!(about.is_empty(), "a cleanup is no verdict: {about:#?}");

    let scanned = explain(&sock, free_addr());
    eprintln!("explain without an agent printed:\n{}", scanned.join("\n"));
    assert_eq!(
        scanned[1..],
        [
            "now: no socket is bound at the path",
            "now: the path does not exist"
        ]
    );
}
