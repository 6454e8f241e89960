//! Faults around the real agent, each with exact expectations: a restart in the middle of S1,
//! an events output that refuses lines (a full disk, a pipe nobody reads), a socket whose
//! whole life fits in one drain interval, the kernel's live table at capacity, its ring
//! buffer overflowing while the agent is stopped, a storm of process exits during sweeps, a
//! kernel without `unix_diag`, and the events file rotated, removed, replaced by a symbolic
//! link or created under a hostile umask.
use crate::common;

use std::{
    ffi::CString,
    io::Write as _,
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::{
    actor::Actor,
    agent::{Agent, sockets_at, sockwatch_bin},
    *,
};
use serde_json::Value;
use sockwatch_bench::prom::Exposition;

const DROPPED: &str = "sockwatch_output_lines_dropped_total";
const OUTPUT_FAILED: &str = "events output failed: ";

/// Directories `names` created in `tmp`.
fn dirs<const N: usize>(tmp: &tempfile::TempDir, names: [&str; N]) -> [PathBuf; N] {
    names.map(|name| {
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).expect("mkdir");
        dir
    })
}

fn scrape(addr: std::net::SocketAddr) -> Exposition {
    Exposition::parse(&Agent::metrics(addr))
}

/// Every line the agent produced by its own count: one per event received, one per verdict.
fn lines_produced(m: &Exposition) -> f64 {
    m.sum("sockwatch_events_total", &[]) + m.sum("sockwatch_verdicts_total", &[])
}

/// Polls `done` until it holds; fails saying `what` after [`patience`].
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + patience();
    while !done() {
        assert!(
            Instant::now() < deadline,
            "{what}: not within {:?}",
            patience()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the engine knows `tgid`'s listener at `path` (the batch that brought it has
/// been written, or dropped, by then) and the agent has dropped every line it produced since
/// it started, none written; returns how many.
fn wait_for_every_line_dropped(addr: std::net::SocketAddr, path: &Path, tgid: u32) -> f64 {
    let mut dropped = 0.0;
    wait_until("the listener known, every line produced dropped", || {
        let known = sockets_at(addr, path)
            .iter()
            .any(|s| s["listening"] == true && s["binder"]["tgid"] == tgid);
        let m = scrape(addr);
        dropped = m.value(DROPPED).unwrap_or_default();
        known && dropped == lines_produced(&m)
    });
    dropped
}

/// The log lines saying the events output failed.
fn output_failures(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains(OUTPUT_FAILED)).collect()
}

/// The sockfs inode of the one socket bound to `path`, from `/proc/net/unix`.
fn socket_inode(path: &Path) -> u64 {
    let table = std::fs::read_to_string("/proc/net/unix").expect("/proc/net/unix");
    let found: Vec<u64> = table
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols.get(7) == Some(&s(path))).then(|| cols[6].parse().expect("inode"))
        })
        .collect();
    assert_eq!(found.len(), 1, "one socket bound to {}", path.display());
    found[0]
}

fn file_is(v: &Value, (dev, ino): (u64, u64)) -> bool {
    v["dev"].as_u64() == Some(dev) && v["ino"].as_u64() == Some(ino)
}

/// `(kind, tgid)` of each event line about `path`, in the order written (verdicts and the
/// checks made for them are not events).
fn life_of(lines: &[Value], path: &Path) -> Vec<(String, u64)> {
    lines
        .iter()
        .filter(|l| l.get("verdict").is_none() && l.get("kind").is_some() && l["path"] == s(path))
        .map(|l| {
            let kind = l["kind"].as_str().expect("kind").to_owned();
            (kind, l["tgid"].as_u64().expect("tgid"))
        })
        .collect()
}

fn life(steps: &[(&str, u32)]) -> Vec<(String, u64)> {
    steps
        .iter()
        .map(|(kind, tgid)| ((*kind).to_owned(), u64::from(*tgid)))
        .collect()
}

/// The verdicts among `lines` about sockets under `dir`: a scan seeds the kernel's live table
/// with every live socket of the node, and other tests' may be reported too (`watch="none"`).
fn verdicts_under(lines: Vec<Value>, dir: &Path) -> Vec<Value> {
    lines
        .into_iter()
        .filter(|v| v.get("verdict").is_some())
        .filter(|v| v["path"].as_str().is_some_and(|p| p.starts_with(s(dir))))
        .collect()
}

fn verdict_names(verdicts: &[Value]) -> Vec<&str> {
    verdicts
        .iter()
        .map(|v| v["verdict"].as_str().expect("verdict"))
        .collect()
}

/// Every whole line of a JSON-lines file.
fn read_lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("events file");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}")))
        .collect()
}

/// S1's foreign unlink (B listens on P, A unlinks P) with the agent SIGKILLed inside the
/// takeover window: the verdicts the killed agent was holding die with it (its event lines were
/// written), and the restarted agent's startup scan reports B's orphaned listener exactly once,
/// cause `scan`, with its exact file, socket and owner, its counters from zero; its sweeps do
/// not report it again, and B's exit closes it.
#[test]
fn a_restart_in_the_middle_of_s1_reports_the_orphan_once() {
    if !root("restart_in_s1") {
        return;
    }
    let tmp = tempdir();
    let [run1, run2, watch] = dirs(&tmp, ["run1", "run2", "multus"]);
    let sock = watch.join("multus.sock");
    // A window far longer than the test: the foreign unlink is still undecided at the kill.
    let first = Agent::start(&run1, &watch, &["--takeover-window", "60s"]);
    let (mut b, mut a) = (Actor::spawn(), Actor::spawn());
    b.must(&format!("listen-on {}", s(&sock)));
    let file = stat_id(&sock);
    let sock_ino = socket_inode(&sock);
    a.must(&format!("unlink {}", s(&sock)));
    first.expect_line("A's unlink", |l| {
        l["kind"] == "unlink" && l["tgid"] == a.pid
    });
    let first_events = first.events.clone();
    drop(first); // SIGKILL (Child::kill): no shutdown, no flush of pending removals
    let written = read_lines(&first_events);
    assert_eq!(
        life_of(&written, &sock),
        life(&[("bind", b.pid), ("listen", b.pid), ("unlink", a.pid)]),
        "{written:#?}"
    );
    assert!(
        verdicts_under(written.clone(), &watch).is_empty(),
        "the removal was still in its window: {written:#?}"
    );

    let addr = free_addr();
    let listen = addr.to_string();
    let args = ["--listen", &listen, "--scan-interval", "1s"];
    let second = Agent::start(&run2, &watch, &args);
    let m = scrape(addr);
    assert_eq!(
        m.sum("sockwatch_events_total", &[]),
        0.0,
        "counters from zero"
    );
    assert_eq!(m.value(DROPPED), Some(0.0));
    let in_watch = [("watch", "multus")];
    assert_eq!(
        m.sum("sockwatch_verdicts_total", &in_watch),
        1.0,
        "the startup scan's orphan only"
    );
    let orphans = |cause| {
        m.sum(
            "sockwatch_orphaned_listeners",
            &[in_watch[0], ("cause", cause)],
        )
    };
    assert_eq!((orphans("scan"), orphans("unlinked")), (1.0, 0.0));
    let log = second.log_text();
    assert!(log.contains(", 1 findings, "), "the startup scan's: {log}");

    let orphan = second.expect_verdict("B's orphan, found by the startup scan", |v| {
        v["verdict"] == "orphan_opened" && v["path"] == s(&sock)
    });
    assert_eq!(orphan["cause"], "scan", "{orphan}");
    assert_eq!(orphan["since_exact"], false, "{orphan}");
    assert_eq!(orphan["owner"]["tgid"], b.pid, "{orphan}");
    assert!(file_is(&orphan["file"], file), "{orphan}");
    assert_eq!(orphan["sock_ino"], sock_ino, "{orphan}");

    let periodic = r#"sockwatch_scan_duration_seconds_count{scan="periodic"}"#;
    wait_until("two periodic sweeps", || {
        scrape(addr).value(periodic).unwrap_or_default() >= 2.0
    });
    assert_eq!(
        verdicts_under(second.verdicts(), &watch),
        std::slice::from_ref(&orphan),
        "reported once"
    );
    let b_pid = b.pid;
    drop(b); // B exits: its orphan closes
    let closed = second.expect_verdict("B's orphan closed", |v| {
        v["verdict"] == "orphan_closed" && v["file"] == orphan["file"]
    });
    assert_eq!(closed["owner"]["tgid"], b_pid, "{closed}");
    let verdicts = verdicts_under(second.stop(), &watch);
    assert_eq!(
        verdict_names(&verdicts),
        ["orphan_opened", "orphan_closed"],
        "{verdicts:#?}"
    );
    drop(a);
}

/// A 64 KiB tmpfs mounted for a test; lazily unmounted when dropped.
struct SmallDisk(PathBuf);

fn cstr(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

impl SmallDisk {
    fn mount(at: &Path) -> SmallDisk {
        let (fs, target, data) = (cstr("tmpfs"), cstr(s(at)), cstr("size=64k"));
        // SAFETY: every pointer is a NUL-terminated string that outlives the call.
        let rc = unsafe {
            libc::mount(
                fs.as_ptr(),
                target.as_ptr(),
                fs.as_ptr(),
                0,
                data.as_ptr().cast(),
            )
        };
        let e = std::io::Error::last_os_error();
        assert_eq!(rc, 0, "mount a tmpfs on {}: {e}", at.display());
        SmallDisk(at.to_owned())
    }

    /// Fills the disk with a file, until the kernel says it is full; returns the file.
    fn fill(&self) -> PathBuf {
        let path = self.0.join("filler");
        let mut f = std::fs::File::create(&path).expect("filler");
        let page = [0u8; 4096];
        let e = loop {
            if let Err(e) = f.write_all(&page) {
                break e;
            }
        };
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let target = cstr(s(&self.0));
        // SAFETY: the path is a NUL-terminated string that outlives the call.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

/// The events file on a full disk: the agent runs on and serves metrics, drops every line,
/// counted (exactly: all it produced), says so in one log line, and writes again once there
/// is room, starting with the next line: what the file holds and what was dropped add up to
/// every line produced.
#[test]
fn a_full_disk_drops_lines_counted_and_writing_resumes() {
    if !root("full_disk") {
        return;
    }
    let tmp = tempdir();
    let [run, disk_dir, watch] = dirs(&tmp, ["run", "disk", "w"]);
    let disk = SmallDisk::mount(&disk_dir);
    // Full before the agent writes a byte: no line lands in part. The events file (a new
    // inode, no block) on the small disk, the agent's log on a roomy one.
    let filler = disk.fill();
    let addr = free_addr();
    let agent = Agent::start_writing(
        &run,
        &disk_dir.join("events.jsonl"),
        &watch,
        &["--listen", &addr.to_string()],
        |_| {},
    );

    let (lost, kept) = (watch.join("lost.sock"), watch.join("kept.sock"));
    let (mut a, mut b) = (Actor::spawn(), Actor::spawn());
    a.must(&format!("listen-on {}", s(&lost)));
    let dropped = wait_for_every_line_dropped(addr, &lost, a.pid);
    assert!(dropped >= 2.0, "A's bind and listen at least: {dropped}");
    assert!(agent.lines().is_empty(), "{:#?}", agent.lines());
    let log = agent.log_text();
    let failures = output_failures(&log);
    assert_eq!(failures.len(), 1, "one line per outage: {log}");
    assert!(
        failures[0].contains("(os error 28)"),
        "ENOSPC: {}",
        failures[0]
    );

    std::fs::remove_file(&filler).expect("room again");
    b.must(&format!("listen-on {}", s(&kept)));
    let (dev, ino) = stat_id(&kept);
    let bind = agent.expect_line("B's bind, once there is room", |l| {
        l["kind"] == "bind" && l["path"] == s(&kept)
    });
    assert_eq!(bind["tgid"], b.pid, "{bind}");
    assert!(file_is(&bind, (dev, ino)), "{bind}");
    agent.expect_line("B's listen", |l| {
        l["kind"] == "listen" && l["path"] == s(&kept)
    });
    let recovered = format!("events output recovered; {dropped} lines were dropped");
    assert!(
        agent.log_text().contains(&recovered),
        "{}",
        agent.log_text()
    );

    let m = scrape(addr);
    let lines = agent.lines();
    assert_eq!(m.value(DROPPED), Some(dropped), "nothing dropped since");
    assert!(life_of(&lines, &lost).is_empty(), "{lines:#?}");
    assert_eq!(
        lines.len() as f64 + dropped,
        lines_produced(&m),
        "{lines:#?}"
    );
    drop((a, b));
    agent.stop();
}

/// A child process killed and reaped when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `sockwatch run --events -` whose stdout is a pipe nobody reads, started with SIGPIPE at its
/// default action (as a parent may leave it) and stdin closed: the agent does not die of it
/// (its fd 0 is /dev/null); each write fails
/// with EPIPE, the lines are dropped and counted (all it produced), one log line says so, it
/// serves metrics, and SIGINT still stops it cleanly.
#[test]
fn a_stdout_nobody_reads_drops_lines_counted_and_the_agent_runs_on() {
    if !root("stdout_epipe") {
        return;
    }
    let tmp = tempdir();
    let [run, watch] = dirs(&tmp, ["run", "w"]);
    let log = run.join("agent.log");
    let addr = free_addr();
    let mut cmd = Command::new(sockwatch_bin());
    cmd.args(["run", "--events", "-", "--scan-interval", "0s"])
        .args(["--watch", s(&watch), "--listen", &addr.to_string()])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("log file"));
    // SAFETY: the closure runs in the forked child before exec and calls only signal(2) and
    // close(2), which are async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            // A closed stdin too: the agent fills the slot with /dev/null before it opens
            // anything that could take the number.
            libc::close(0);
            Ok(())
        })
    };
    let mut agent = Reaped(cmd.spawn().expect("spawn sockwatch"));
    drop(agent.0.stdout.take()); // the pipe's only read end
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until("the agent runs", || {
        let exited = agent.0.try_wait().expect("wait");
        assert!(exited.is_none(), "exited {exited:?}: {}", log_text());
        log_text().contains("running;")
    });
    let stdin = std::fs::read_link(format!("/proc/{}/fd/0", agent.0.id())).expect("fd 0");
    assert_eq!(stdin, Path::new("/dev/null"), "the closed stdin's slot");

    let (mut a, unread) = (Actor::spawn(), watch.join("unread.sock"));
    a.must(&format!("listen-on {}", s(&unread)));
    let dropped = wait_for_every_line_dropped(addr, &unread, a.pid);
    assert!(dropped >= 2.0, "A's bind and listen at least: {dropped}");
    let exited = agent.0.try_wait().expect("wait");
    assert!(exited.is_none(), "exited {exited:?}: {}", log_text());
    let text = log_text();
    let failures = output_failures(&text);
    assert_eq!(failures.len(), 1, "one line per outage: {text}");
    assert!(
        failures[0].contains("(os error 32)"),
        "EPIPE: {}",
        failures[0]
    );

    drop(a);
    // SAFETY: kill(2) takes no pointers; the pid is our own child's, not yet reaped.
    unsafe { libc::kill(agent.0.id() as i32, libc::SIGINT) };
    let status = agent.0.wait().expect("wait");
    assert!(status.success(), "exit {status}: {}", log_text());
}

/// With a drain interval of a second, a socket bound, listened on, unlinked by its owner and
/// closed, and another bound, listened on and left behind by its binder's exit, all before
/// the agent drains (as a rule: the kernel wakes it only past a quarter-full ring): each life
/// cycle is written in order with its process, the first is quiet, and the second is exactly
/// one stale socket file naming its binder and file.
#[test]
fn sockets_born_and_gone_within_one_drain_interval() {
    if !root("one_drain_interval") {
        return;
    }
    let tmp = tempdir();
    let [run, watch] = dirs(&tmp, ["run", "w"]);
    let agent = Agent::start(&run, &watch, &["--drain-interval", "1s"]);
    let (brief, dead) = (watch.join("brief.sock"), watch.join("dead.sock"));
    let (mut a, mut d) = (Actor::spawn(), Actor::spawn());
    let (a_pid, d_pid) = (a.pid, d.pid);
    let began = Instant::now();
    let h = a.must(&format!("listen-on {}", s(&brief)));
    a.must(&format!("unlink {}", s(&brief)));
    a.must(&format!("close {h}"));
    d.must(&format!("listen-on {}", s(&dead)));
    let dead_file = stat_id(&dead);
    drop(d); // exits holding its listener: released by the exit, the file left behind
    eprintln!("both life cycles took {:?}", began.elapsed());

    let stale = agent.expect_verdict("the dead listener's file", |v| {
        v["verdict"] == "stale_socket_file" && v["path"] == s(&dead)
    });
    assert_eq!(stale["binder"]["tgid"], d_pid, "{stale}");
    assert!(file_is(&stale["file"], dead_file), "{stale}");
    let lines = agent.lines();
    assert_eq!(
        life_of(&lines, &brief),
        life(&[
            ("bind", a_pid),
            ("listen", a_pid),
            ("unlink", a_pid),
            ("release", a_pid)
        ]),
        "{lines:#?}"
    );
    assert_eq!(
        life_of(&lines, &dead),
        life(&[("bind", d_pid), ("listen", d_pid), ("release", d_pid)]),
        "{lines:#?}"
    );
    drop(a);
    let verdicts = verdicts_under(agent.stop(), &watch);
    assert_eq!(verdicts, [stale], "the stale file only");
}

/// `--live-capacity 16`, the table's least: A binds 20 listeners under the watch. The table
/// takes 16 and each bind past it is counted as `map_full`; the agent runs on and says
/// nothing false. A unlinks and closes 8 of its own: those entries free, and a sweep seeds
/// the 4 left out (12 entries). B's unlink of one of those 4 is then a foreign unlink naming
/// A, on every tier, and A's orphaned listener: the only verdicts.
#[test]
fn a_full_live_table_counts_map_full_and_the_sweeps_repair_it() {
    if !root("live_full") {
        return;
    }
    let tmp = tempdir();
    let [run, watch] = dirs(&tmp, ["run", "w"]);
    let addr = free_addr();
    let listen = addr.to_string();
    let args = ["--live-capacity", "16", "--listen", &listen];
    let agent = Agent::start_sweeping(
        &run,
        &watch,
        1,
        &args,
        &[("SOCKWATCH_TAKEOVER_WINDOW", "0s")],
    );
    let live_entries = || scrape(addr).value(r#"sockwatch_map_entries{map="LIVE"}"#);
    assert_eq!(
        scrape(addr).value(r#"sockwatch_map_capacity{map="LIVE"}"#),
        Some(16.0)
    );
    let map_full = || scrape(addr).sum("sockwatch_kernel_errors_total", &[("reason", "map_full")]);
    let full_before = map_full();

    let mut a = Actor::spawn();
    let paths: Vec<PathBuf> = (0..20).map(|i| watch.join(format!("l{i}.sock"))).collect();
    let handles: Vec<String> = paths
        .iter()
        .map(|p| a.must(&format!("listen-on {}", s(p))))
        .collect();
    wait_until("16 entries, 4 binds counted as map_full", || {
        live_entries() == Some(16.0) && map_full() - full_before >= 4.0
    });
    // Said in the stream too: each notice what the kernel refused since the one before.
    let refused = || -> f64 {
        let notices = agent.notices().into_iter();
        let full = notices.filter(|n| n["notice"] == "live_table_full");
        full.map(|n| n["refused"].as_f64().expect("refused")).sum()
    };
    wait_until("live_table_full notices adding up to map_full", || {
        refused() == map_full()
    });
    let quiet = || verdicts_under(agent.verdicts(), &watch);
    assert_eq!(quiet(), Vec::<Value>::new(), "nothing false while full");

    for (p, h) in paths.iter().zip(&handles).take(8) {
        a.must(&format!("unlink {}", s(p)));
        a.must(&format!("close {h}"));
    }
    wait_until("the sweep seeds the 4 left out", || {
        live_entries() == Some(12.0)
    });
    assert_eq!(quiet(), Vec::<Value>::new(), "A's own removals");

    let left_out = &paths[19];
    let file = stat_id(left_out);
    let mut b = Actor::spawn();
    b.must(&format!("unlink {}", s(left_out)));
    let v = agent.expect_verdict("B's foreign unlink of a seeded socket", |v| {
        v["verdict"] == "foreign_unlink" && file_is(&v["file"], file)
    });
    assert_eq!(v["victim"]["tgid"], a.pid, "{v}");
    assert_eq!(v["actor"]["tgid"], b.pid, "{v}");
    let verdicts = verdicts_under(agent.stop(), &watch);
    assert_eq!(
        verdict_names(&verdicts),
        ["foreign_unlink", "orphan_opened"],
        "A still listens on the unlinked file: {verdicts:#?}"
    );
    assert!(file_is(&verdicts[1]["file"], file), "{verdicts:#?}");
}

/// The agent's process stopped (SIGSTOP) while this lives, so nobody drains the kernel's ring
/// buffer; continued (SIGCONT) when dropped, however the test ends.
struct Stopped(libc::pid_t);

impl Stopped {
    fn stop(pid: u32) -> Stopped {
        let pid = libc::pid_t::try_from(pid).expect("a pid");
        // SAFETY: kill(2) takes no pointers; the pid is the test's own child, not yet reaped.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0, "SIGSTOP");
        let stopped = Stopped(pid);
        wait_until("the agent stopped", || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
            // The state follows the command name, which is in parentheses.
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
        });
        stopped
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: as in `stop`.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// Records the kernel's ring buffer holds at most: each is an event behind an 8-byte
/// header, 8-aligned.
fn ring_records() -> usize {
    let record = (sockwatch_common::Event::SIZE + 8).next_multiple_of(8);
    sockwatch_common::maps::EVENTS_BYTES as usize / record
}

/// The agent stopped (SIGSTOP), this process binds a quarter more datagram sockets under the
/// watch than the ring buffer holds records, closing each at once: the kernel loses at least
/// the binds the ring could not hold. Continued, the agent says so in one `events_lost`
/// notice (under `--events-filter verdicts`) whose counts per kind and total are exactly
/// what `sockwatch_events_lost_total` counts.
#[test]
fn a_ring_buffer_overflow_is_one_events_lost_notice_matching_the_metrics() {
    if !root("ring_overflow") {
        return;
    }
    let tmp = tempdir();
    let [run, watch] = dirs(&tmp, ["run", "w"]);
    let addr = free_addr();
    let args = ["--listen", &addr.to_string(), "--events-filter", "verdicts"];
    let agent = Agent::start(&run, &watch, &args);
    let records = ring_records();
    let binds = records + records / 4;
    let stopped = Stopped::stop(agent.pid());
    let began = Instant::now();
    for i in 0..binds {
        drop(std::os::unix::net::UnixDatagram::bind(watch.join(format!("f{i}"))).expect("bind"));
    }
    eprintln!(
        "{binds} binds (the ring holds {records} records) in {:?}",
        began.elapsed()
    );
    drop(stopped);

    let notice = agent.expect_line("the events_lost notice", |l| l["notice"] == "events_lost");
    let m = scrape(addr);
    let lost = |kind: &str| m.sum("sockwatch_events_lost_total", &[("kind", kind)]);
    let total = m.sum("sockwatch_events_lost_total", &[]);
    let kinds = notice["lost"].as_object().expect("lost by kind");
    for (kind, n) in kinds {
        assert_eq!(n.as_f64(), Some(lost(kind)), "{kind}: {notice}");
    }
    let named: f64 = kinds.keys().map(|k| lost(k)).sum();
    assert_eq!(named, total, "every kind that lost is named: {notice}");
    assert_eq!(notice["total"].as_f64(), Some(total), "{notice}");
    assert!(
        lost("bind") >= (binds - records) as f64,
        "at least the binds the ring could not hold: {notice}"
    );
    assert_eq!(
        agent.notices(),
        [notice],
        "one notice: the losses ended before it"
    );
    agent.stop();
}

/// Sweeps every second while the watched directory is a regular file: each fails for the same
/// reason, said in one `scan_failed` notice (under `--events-filter verdicts`); the directory
/// back, the next sweep's success is one `scan_recovered` notice counting every failure.
#[test]
fn failing_sweeps_are_one_notice_and_their_recovery_one() {
    if !root("sweep_notices") {
        return;
    }
    let tmp = tempdir();
    let [run, watch] = dirs(&tmp, ["run", "w"]);
    let addr = free_addr();
    let args = ["--listen", &addr.to_string(), "--events-filter", "verdicts"];
    let agent = Agent::start_sweeping(&run, &watch, 1, &args, &[]);
    std::fs::remove_dir(&watch).expect("rmdir");
    std::fs::write(&watch, "not a directory").expect("a file in its place");
    let failures = || scrape(addr).sum("sockwatch_scan_failures_total", &[("scan", "periodic")]);
    wait_until("three sweeps failed", || failures() >= 3.0);
    let reason = format!("--watch {}: not a directory or a socket file", s(&watch));
    let notices = agent.notices();
    assert_eq!(notices.len(), 1, "said once: {notices:#?}");
    let n = &notices[0];
    assert_eq!(
        (&n["notice"], &n["scan"], &n["reason"]),
        (&"scan_failed".into(), &"periodic".into(), &reason.into()),
        "{n}"
    );

    std::fs::remove_file(&watch).expect("rm");
    std::fs::create_dir(&watch).expect("the directory back");
    let back = agent.expect_line("the recovery", |l| l["notice"] == "scan_recovered");
    assert_eq!(back["failed_scans"].as_f64(), Some(failures()), "{back}");
    let periodic = r#"sockwatch_scan_duration_seconds_count{scan="periodic"}"#;
    let ok = scrape(addr).value(periodic).unwrap_or_default();
    wait_until("two more sweeps", || {
        scrape(addr).value(periodic).unwrap_or_default() >= ok + 2.0
    });
    assert_eq!(agent.notices(), [n.clone(), back], "recovered once");
    agent.stop();
}

/// A process that forks children which exit at once, as fast as it can, until killed.
struct ExitStorm(libc::pid_t);

impl ExitStorm {
    fn start() -> ExitStorm {
        // SAFETY: the child calls only fork, waitpid and _exit (async-signal-safe), on no
        // memory shared with the parent's other threads.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            loop {
                // SAFETY: as above.
                unsafe {
                    let child = libc::fork();
                    if child == 0 {
                        libc::_exit(0);
                    }
                    if child > 0 {
                        libc::waitpid(child, std::ptr::null_mut(), 0);
                    }
                }
            }
        }
        ExitStorm(pid)
    }
}

impl Drop for ExitStorm {
    fn drop(&mut self) {
        // SAFETY: kill and waitpid take no pointers but the null status; the pid is our child.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            libc::waitpid(self.0, std::ptr::null_mut(), 0);
        }
    }
}

/// The pid the kernel handed out last (a clock of forks).
fn last_pid() -> u64 {
    std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .expect("ns_last_pid")
        .trim()
        .parse()
        .expect("a pid")
}

/// Sweeps every second while a process forks children that exit at once (thousands a
/// second natively): processes vanish in the middle of every /proc walk. No sweep fails, and
/// A's three listeners under the watch stay live: no stale socket file, no orphan, no verdict.
#[test]
fn sweeps_in_a_storm_of_exits_fail_nothing_and_say_nothing_false() {
    if !root("exit_storm") {
        return;
    }
    let tmp = tempdir();
    let [run, watch] = dirs(&tmp, ["run", "w"]);
    let mut a = Actor::spawn();
    for i in 0..3 {
        a.must(&format!(
            "listen-on {}",
            s(&watch.join(format!("a{i}.sock")))
        ));
    }
    let addr = free_addr();
    let listen = addr.to_string();
    let agent = Agent::start_sweeping(&run, &watch, 1, &["--listen", &listen], &[]);
    let periodic = r#"sockwatch_scan_duration_seconds_count{scan="periodic"}"#;
    let sweeps = || scrape(addr).value(periodic).unwrap_or_default();
    let (sweeps_before, pid_before, clock) = (sweeps(), last_pid(), Instant::now());
    let storm = ExitStorm::start();
    wait_until("three sweeps in the storm", || {
        sweeps() >= sweeps_before + 3.0
    });
    drop(storm);
    let forks = last_pid().saturating_sub(pid_before);
    eprintln!(
        "exit_storm: {forks} processes forked and gone in {:.1} s, {} sweeps",
        clock.elapsed().as_secs_f64(),
        sweeps() - sweeps_before
    );
    let m = scrape(addr);
    assert_eq!(m.sum("sockwatch_scan_failures_total", &[]), 0.0);
    assert!(
        !agent.log_text().contains("sweep failed"),
        "{}",
        agent.log_text()
    );
    let verdicts = verdicts_under(agent.stop(), &watch);
    assert_eq!(verdicts, Vec::<Value>::new(), "A's listeners are live");
    drop(a);
}

/// `unix_diag` removed from the kernel, and the kernel kept from loading it again on demand
/// (its modprobe path pointed at nothing), while this lives: a node whose kernel lacks it.
/// Dropping it loads the module again and restores the modprobe path, however the test ends.
struct WithoutUnixDiag {
    module: PathBuf,
    modprobe: String,
}

const MODPROBE: &str = "/proc/sys/kernel/modprobe";

impl WithoutUnixDiag {
    /// `None`, with the reason printed, where unix_diag is no module of the test's to remove.
    fn unload(test: &str) -> Option<Self> {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let module = PathBuf::from(format!("/lib/modules/{}/unix_diag.ko", release.trim()));
        let loaded = Path::new("/sys/module/unix_diag/initstate").exists();
        if std::env::var_os("SOCKWATCH_IN_VM").is_none() || !loaded || !module.exists() {
            skip(
                test,
                "unix_diag is not a module the test loaded (built in, as on this host, or a \
                 node's own): the VM layers remove and reload it",
            );
            return None;
        }
        let modprobe = std::fs::read_to_string(MODPROBE).expect("modprobe path");
        std::fs::write(MODPROBE, "/nonexistent/sockwatch-test-modprobe\n").expect("set modprobe");
        let gone = WithoutUnixDiag {
            module,
            modprobe: modprobe.trim().to_owned(),
        };
        // SAFETY: delete_module reads a NUL-terminated name; O_NONBLOCK fails if it is in use.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_delete_module,
                c"unix_diag".as_ptr(),
                libc::O_NONBLOCK,
            )
        };
        assert_eq!(
            rc,
            0,
            "rmmod unix_diag: {}",
            std::io::Error::last_os_error()
        );
        Some(gone)
    }

    fn load(&self) {
        if Path::new("/sys/module/unix_diag").exists() {
            return;
        }
        let ko = std::fs::File::open(&self.module).expect("the module file");
        // SAFETY: finit_module reads the open file and a NUL-terminated (empty) parameter list.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_finit_module,
                std::os::fd::AsRawFd::as_raw_fd(&ko),
                c"".as_ptr(),
                0,
            )
        };
        assert_eq!(
            rc,
            0,
            "insmod unix_diag: {}",
            std::io::Error::last_os_error()
        );
    }
}

impl Drop for WithoutUnixDiag {
    fn drop(&mut self) {
        self.load();
        let _ = std::fs::write(MODPROBE, format!("{}\n", self.modprobe));
    }
}

#[test]
fn without_unix_diag_the_agent_runs_on_kernel_events_and_adopts_once_it_returns() {
    let test = "no_unix_diag";
    if !root(test) {
        return;
    }
    let Some(gone) = WithoutUnixDiag::unload(test) else {
        return;
    };
    let dump = sockwatch::host::diag::dump_current();
    assert!(
        matches!(dump, Err(sockwatch::host::diag::DiagError::NoUnixDiag)),
        "the kernel answers AF_UNIX dumps without unix_diag: {dump:?}"
    );
    let tmp = tempdir();
    let [run, watch] = dirs(&tmp, ["run", "w"]);
    let (early, late) = (watch.join("early.sock"), watch.join("late.sock"));
    let mut b = Actor::spawn();
    b.must(&format!("listen-on {}", s(&early)));
    let addr = free_addr();
    let listen = addr.to_string();
    let agent = Agent::start_sweeping(
        &run,
        &watch,
        1,
        &["--listen", &listen],
        &[("SOCKWATCH_TAKEOVER_WINDOW", "0s")],
    );
    let log = agent.log_text();
    assert!(
        log.contains("startup scan failed, continuing on kernel events alone")
            && log.contains("load the unix_diag module"),
        "{log}"
    );
    let failures = |scan| scrape(addr).sum("sockwatch_scan_failures_total", &[("scan", scan)]);
    assert_eq!(failures("startup"), 1.0);
    wait_until("three sweeps failed", || failures("periodic") >= 3.0);
    let log = agent.log_text();
    assert_eq!(
        log.matches("sweep failed").count(),
        0,
        "each sweep failing as the start-up scan did is not said again: {log}"
    );
    let notices = agent.notices();
    assert_eq!(
        notices.len(),
        1,
        "the startup scan's failure, said once: {notices:#?}"
    );
    assert_eq!(notices[0]["notice"], "scan_failed", "{notices:#?}");
    assert_eq!(notices[0]["scan"], "startup", "{notices:#?}");

    // The kernel's events still give verdicts.
    let (mut a, mut c) = (Actor::spawn(), Actor::spawn());
    c.must(&format!("listen-on {}", s(&late)));
    let late_file = stat_id(&late);
    wait_until("C's listener known from its bind", || {
        sockets_at(addr, &late)
            .iter()
            .any(|s| s["listening"] == true && s["binder"]["tgid"] == c.pid)
    });
    a.must(&format!("unlink {}", s(&late)));
    let v = agent.expect_verdict("A's foreign unlink of C's listener", |v| {
        v["verdict"] == "foreign_unlink" && file_is(&v["file"], late_file)
    });
    assert_eq!(
        (&v["victim"]["tgid"], &v["actor"]["tgid"]),
        (&c.pid.into(), &a.pid.into()),
        "{v}"
    );
    // What the agent misses meanwhile: the listener bound before it started.
    assert_eq!(sockets_at(addr, &early), Vec::<Value>::new());

    gone.load();
    wait_until("a sweep adopts B's listener", || {
        sockets_at(addr, &early)
            .iter()
            .any(|s| s["listening"] == true && s["binder"]["tgid"] == b.pid)
    });
    let log = agent.log_text();
    assert_eq!(log.matches("sweep recovered after ").count(), 1, "{log}");
    let recovered = agent.expect_line("the recovery notice", |l| l["notice"] == "scan_recovered");
    let failed = failures("startup") + failures("periodic");
    assert_eq!(
        recovered["failed_scans"].as_f64(),
        Some(failed),
        "{recovered}"
    );
    let early_file = stat_id(&early);
    a.must(&format!("unlink {}", s(&early)));
    let v = agent.expect_verdict("A's foreign unlink of B's adopted listener", |v| {
        v["verdict"] == "foreign_unlink" && file_is(&v["file"], early_file)
    });
    assert_eq!(
        (&v["victim"]["tgid"], &v["actor"]["tgid"]),
        (&b.pid.into(), &a.pid.into()),
        "{v}"
    );
    drop(gone);
    let verdicts = verdicts_under(agent.stop(), &watch);
    let mut names = verdict_names(&verdicts);
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "foreign_unlink",
            "foreign_unlink",
            "orphan_opened",
            "orphan_opened"
        ],
        "B and C still listen on their unlinked files: {verdicts:#?}"
    );
}

const REOPEN_FAILED: &str = "sockwatch_events_file_reopen_failures_total";

/// The whole lines of a JSON-lines file (none while it is missing).
fn whole_lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let whole = text.rfind('\n').map_or("", |end| &text[..end]);
    whole
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}")))
        .collect()
}

/// The permission bits of `path` (not followed).
fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt as _;
    let m = path.symlink_metadata().expect("lstat");
    m.mode() & 0o7777
}

/// `listen-on` at each of `socks`, by `actor`.
fn listen_on(actor: &mut Actor, socks: &[&Path]) {
    for sock in socks {
        actor.must(&format!("listen-on {}", s(sock)));
    }
}

/// logrotate's rotation: the events file renamed, an event, then `kill -HUP` and an event.
/// The agent runs on (SIGHUP never stops it); the lines after the signal go to a new file at
/// the path (the agent's: 0600); every line is in exactly one of the two files. SIGTERM
/// right after two more events, which sit in the ring (it is drained once a second), exits
/// 0 with them written.
#[test]
fn a_renamed_events_file_is_reopened_on_sighup_and_sigterm_flushes_the_last_events() {
    if !root("events_file_rotated") {
        return;
    }
    let tmp = tempdir();
    let [run, watch] = dirs(&tmp, ["run", "w"]);
    let addr = free_addr();
    let listen = addr.to_string();
    let args = ["--listen", &listen, "--drain-interval", "1s"];
    let mut agent = Agent::start(&run, &watch, &args);
    let (events, rotated) = (agent.events.clone(), run.join("events.jsonl.1"));
    let [one, two, three, last] =
        ["one", "two", "three", "last"].map(|n| watch.join(format!("{n}.sock")));
    let mut a = Actor::spawn();
    let listened = |l: &Value, sock: &Path| l["kind"] == "listen" && l["path"] == s(sock);

    listen_on(&mut a, &[&one]);
    agent.expect_line("A's listen on one", |l| listened(l, &one));
    let first = stat_id(&events);
    std::fs::rename(&events, &rotated).expect("rotate");
    listen_on(&mut a, &[&two]);
    agent.signal(libc::SIGHUP);
    // The once-a-second check may have reopened the file already; the signal reopens it
    // regardless, and the next event comes after that.
    wait_until("the signal's reopen in the log", || {
        agent.log_text().contains("reopened (on SIGHUP)")
    });
    assert!(
        agent.is_running(),
        "SIGHUP stopped it: {}",
        agent.log_text()
    );
    listen_on(&mut a, &[&three]);
    agent.expect_line("A's listen on three, in a new file", |l| {
        listened(l, &three)
    });
    assert_ne!(stat_id(&events), first, "a new file at the path");
    assert_eq!(mode_of(&events), 0o600, "created by the agent");
    let (old, new) = (whole_lines(&rotated), whole_lines(&events));
    let both: Vec<Value> = old.iter().chain(&new).cloned().collect();
    let bound = life(&[("bind", a.pid), ("listen", a.pid)]);
    assert_eq!(life_of(&old, &one), bound, "{old:#?}");
    assert!(
        life_of(&old, &three).is_empty(),
        "after the signal: {old:#?}"
    );
    for sock in [&one, &two, &three] {
        assert_eq!(life_of(&both, sock), bound, "once each: {both:#?}");
    }
    assert_eq!(scrape(addr).value(REOPEN_FAILED), Some(0.0));

    listen_on(&mut a, &[&last]);
    let log = agent.log.clone();
    let status = agent.stop_by(libc::SIGTERM);
    let log = std::fs::read_to_string(log).unwrap_or_default();
    assert!(status.success(), "exit {status}: {log}");
    let new = whole_lines(&events);
    assert_eq!(
        life_of(&new, &last),
        bound,
        "drained at the exit: {new:#?}\n{log}"
    );
    drop(a);
}

/// The events file removed, no signal: within a second the agent sees its path lead nowhere,
/// creates the file again (0600) and writes the next lines there.
#[test]
fn a_removed_events_file_is_created_again_by_itself() {
    if !root("events_file_removed") {
        return;
    }
    let tmp = tempdir();
    let [run, watch] = dirs(&tmp, ["run", "w"]);
    let addr = free_addr();
    let agent = Agent::start(&run, &watch, &["--listen", &addr.to_string()]);
    let events = agent.events.clone();
    let [one, two] = ["one", "two"].map(|n| watch.join(format!("{n}.sock")));
    let mut a = Actor::spawn();
    listen_on(&mut a, &[&one]);
    agent.expect_line("A's listen on one", |l| {
        l["kind"] == "listen" && l["path"] == s(&one)
    });
    let first = stat_id(&events);
    std::fs::remove_file(&events).expect("rm");
    let removed = Instant::now();
    wait_until("a new events file at the path", || events.exists());
    eprintln!("created again {:?} after the removal", removed.elapsed());
    assert_ne!(stat_id(&events), first);
    assert_eq!(mode_of(&events), 0o600);
    listen_on(&mut a, &[&two]);
    agent.expect_line("A's listen on two, in the new file", |l| {
        l["kind"] == "listen" && l["path"] == s(&two)
    });
    let log = agent.log_text();
    assert!(
        log.contains("reopened (the file was renamed or removed)"),
        "{log}"
    );
    assert_eq!(scrape(addr).value(REOPEN_FAILED), Some(0.0));
    drop(a);
    agent.stop();
}

/// A symbolic link at the events path, to a root-only file: at the start the agent refuses
/// it, one line naming the path, exit 1, the file untouched. Running, the events file
/// renamed and such a link put in its place: the agent does not follow it; every check
/// fails, counted, logged once; the lines go on to the renamed file; once the link is gone
/// the next check creates the file again.
#[test]
fn a_symbolic_link_at_the_events_path_is_refused_and_never_followed() {
    if !root("events_file_symlink") {
        return;
    }
    let tmp = tempdir();
    let [run, watch] = dirs(&tmp, ["run", "w"]);
    let secret = tmp.path().join("secret");
    std::fs::write(&secret, "root only\n").expect("secret");
    let untouched = || std::fs::read_to_string(&secret).expect("secret") == "root only\n";
    let events = run.join("events.jsonl");
    std::os::unix::fs::symlink(&secret, &events).expect("symlink");
    let out = Command::new(sockwatch_bin())
        .args(["run", "--scan-interval", "0s", "--events", s(&events)])
        .args(["--watch", s(&watch)])
        .output()
        .expect("run sockwatch");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|l| !l.starts_with('[')).collect();
    assert_eq!(
        errors,
        [format!(
            "sockwatch: cannot open --events {}: the path is a symbolic link, which the agent \
             does not follow (whoever placed it could make root append to any file); give the \
             file's own path, or `-` for stdout",
            s(&events)
        )],
        "{stderr}"
    );
    assert!(!stderr.contains("running;"), "{stderr}");
    assert!(untouched());

    std::fs::remove_file(&events).expect("rm the link");
    let addr = free_addr();
    let agent = Agent::start(&run, &watch, &["--listen", &addr.to_string()]);
    let rotated = run.join("events.jsonl.1");
    let [one, two, three] = ["one", "two", "three"].map(|n| watch.join(format!("{n}.sock")));
    let mut a = Actor::spawn();
    listen_on(&mut a, &[&one]);
    agent.expect_line("A's listen on one", |l| {
        l["kind"] == "listen" && l["path"] == s(&one)
    });
    std::fs::rename(&events, &rotated).expect("rotate");
    std::os::unix::fs::symlink(&secret, &events).expect("a link in its place");
    wait_until("two failed reopens", || {
        scrape(addr).value(REOPEN_FAILED).unwrap_or_default() >= 2.0
    });
    listen_on(&mut a, &[&two]);
    wait_until("A's listen on two, in the renamed file", || {
        !life_of(&whole_lines(&rotated), &two).is_empty()
    });
    assert!(untouched());
    let log = agent.log_text();
    let refused: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("cannot reopen it"))
        .collect();
    assert_eq!(refused.len(), 1, "once per outage: {log}");
    assert!(refused[0].contains("symbolic link"), "{}", refused[0]);

    std::fs::remove_file(&events).expect("rm the link");
    wait_until("the events file created again", || {
        events.symlink_metadata().is_ok_and(|m| m.is_file())
    });
    listen_on(&mut a, &[&three]);
    agent.expect_line("A's listen on three, in the new file", |l| {
        l["kind"] == "listen" && l["path"] == s(&three)
    });
    let failed = scrape(addr).value(REOPEN_FAILED).unwrap_or_default();
    let recovered = format!("after {failed} failed attempts");
    assert!(
        agent.log_text().contains(&recovered),
        "{}",
        agent.log_text()
    );
    assert!(untouched());
    drop(a);
    agent.stop();
}

/// Under a umask that would leave 0400 (0277), the events file the agent creates is 0600, or
/// 0640 with `--events-file-mode 0640`, and so is the one it creates after a rename. A file
/// that exists keeps its mode (here 0666, with a warning: anyone can add lines to it).
#[test]
fn the_events_file_is_created_0600_or_0640_whatever_the_umask() {
    if !root("events_file_mode") {
        return;
    }
    let umask = |cmd: &mut Command| {
        // SAFETY: umask(2) is async-signal-safe and takes no pointers.
        unsafe {
            cmd.pre_exec(|| {
                libc::umask(0o277);
                Ok(())
            })
        };
    };
    for (extra, want) in [
        (&[][..], 0o600),
        (&["--events-file-mode", "0640"][..], 0o640),
    ] {
        let tmp = tempdir();
        let [run, watch] = dirs(&tmp, ["run", "w"]);
        let events = run.join("events.jsonl");
        let agent = Agent::start_writing(&run, &events, &watch, extra, umask);
        assert_eq!(mode_of(&events), want, "{extra:?}");
        let first = stat_id(&events);
        std::fs::rename(&events, run.join("events.jsonl.1")).expect("rotate");
        wait_until("a new events file", || events.exists());
        assert_ne!(stat_id(&events), first);
        assert_eq!(mode_of(&events), want, "{extra:?}, after the rename");
        agent.stop();
    }

    let tmp = tempdir();
    let [run, watch] = dirs(&tmp, ["run", "w"]);
    let events = run.join("events.jsonl");
    std::fs::write(&events, "").expect("an events file");
    std::fs::set_permissions(&events, std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .expect("chmod");
    let agent = Agent::start(&run, &watch, &[]);
    assert_eq!(mode_of(&events), 0o666, "left as it was");
    let log = agent.log_text();
    assert!(
        log.contains(&format!(
            "events file {}: is writable by others (mode 0666)",
            s(&events)
        )),
        "{log}"
    );
    agent.stop();
}
