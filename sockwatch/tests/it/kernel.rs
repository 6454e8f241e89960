//! The probes in a real kernel: each test performs real syscalls from this process and
//! asserts the exact event the agent receives. Run as root, one test thread.
use crate::common;

use std::{os::unix::net::UnixListener, process::Command, time::Duration};

use common::{agent::sockwatch_bin, *};
use sockwatch::kernel::probes::ProbeMode;
use sockwatch_common::{EventKind, Tier};

/// Bind's tiers, best first.
const BIND_TIERS: [Tier; 3] = [Tier::Fentry, Tier::Kprobe, Tier::Tracepoint];

/// The tier `--probe-mode precise` attaches bind on: fentry, or kprobe where the kernel has
/// no trampolines (arm64 before 6.4).
fn precise_tier() -> Tier {
    best_required(&[Tier::Fentry, Tier::Kprobe]).unwrap_or(Tier::Fentry)
}

fn bind_is_reported(test: &str, mode: ProbeMode, tier: Tier) {
    let Some(mut l) = load(test, mode, tier) else {
        return;
    };
    let dir = tempdir();
    let path = dir.path().join("bound.sock");
    let _listener = UnixListener::bind(&path).expect("bind");
    let (dev, ino) = stat_id(&path);
    let path_str = path.to_str().expect("utf-8").to_string();

    let ev = expect_event(&mut l.events, "bind", |e| {
        e.kind == EventKind::Bind && e.path == path_str
    });
    assert_eq!(ev.tier, tier);
    assert_eq!(
        (ev.dev, ev.ino),
        (dev, ino),
        "device and inode as stat(2) reports them"
    );
    assert_eq!(ev.tgid, std::process::id());
    assert_eq!(ev.pid, gettid());
    assert_eq!(ev.ret, 0);
    assert!(ev.sock_ino != 0, "sockfs inode of the bound socket");
    assert_eq!(ev.comm, comm_of_this_thread());
    assert!(ev.ts_ns > 0);
    let counters = l.probes.counters().expect("counters");
    assert_eq!(counters.lost_total(), 0, "{counters:?}");
    for c in [
        sockwatch_common::Counter::MapFull,
        sockwatch_common::Counter::ReadFailed,
    ] {
        assert_eq!(counters.get(c), 0, "{counters:?}");
    }
}

fn comm_of_this_thread() -> String {
    let comm = std::fs::read_to_string(format!("/proc/self/task/{}/comm", gettid())).expect("comm");
    comm.trim_end().to_string()
}

#[test]
fn bind_tracepoint_tier() {
    bind_is_reported(
        "bind_tracepoint_tier",
        ProbeMode::Tracepoint,
        Tier::Tracepoint,
    );
}

#[test]
fn bind_precise_tier() {
    bind_is_reported("bind_precise_tier", ProbeMode::Precise, precise_tier());
}

/// Abstract and unnamed sockets, failed binds and other families never reach the ring buffer.
#[test]
fn bind_ignores_abstract_unnamed_failed_and_inet() {
    for (test, mode, tier) in [
        (
            "ignores_tracepoint",
            ProbeMode::Tracepoint,
            Tier::Tracepoint,
        ),
        ("ignores_precise", ProbeMode::Precise, precise_tier()),
    ] {
        let Some(mut l) = load(test, mode, tier) else {
            continue;
        };
        let dir = tempdir();
        let marker = dir.path().join("marker.sock");
        // SAFETY: the sockaddr is zero-initialised plain data, bound with its own size; the descriptor is closed below.
        unsafe {
            // Abstract: sun_path starts with NUL.
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            let mut addr: libc::sockaddr_un = std::mem::zeroed();
            addr.sun_family = libc::AF_UNIX as u16;
            let name = format!("\0sockwatch-abstract-{}", std::process::id());
            for (i, b) in name.bytes().enumerate() {
                addr.sun_path[i] = b as libc::c_char;
            }
            let len = (2 + name.len()) as u32;
            assert_eq!(
                libc::bind(fd, (&raw const addr).cast(), len),
                0,
                "abstract bind"
            );
            // Unnamed (autobind): only the family.
            let fd2 = libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0);
            assert_eq!(libc::bind(fd2, (&raw const addr).cast(), 2), 0, "autobind");
            libc::close(fd);
            libc::close(fd2);
        }
        // A failed path bind: the directory does not exist.
        assert!(UnixListener::bind(dir.path().join("missing/x.sock")).is_err());
        // An inet socket.
        let _tcp = std::net::TcpListener::bind("127.0.0.1:0").expect("tcp bind");
        // Then a real one, so we know the earlier ones had time to show up.
        let _l = UnixListener::bind(&marker).expect("marker bind");
        let marker_str = marker.to_str().expect("utf-8").to_string();
        let mut others = Vec::new();
        let deadline = std::time::Instant::now() + patience();
        let mut found = false;
        while !found {
            assert!(
                std::time::Instant::now() < deadline,
                "{test}: marker bind never reported"
            );
            l.events.drain(|e| {
                let e = e.expect("well-formed");
                if e.path == marker_str {
                    found = true;
                } else if e.tgid == std::process::id() {
                    others.push(e);
                }
            });
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            others.is_empty(),
            "{test}: unexpected events from this process: {others:#?}"
        );
    }
}

/// The real binary: auto attaches the best tier, prints a JSON bind event for a bind made by
/// another process, and exits cleanly on SIGINT.
#[test]
fn cli_run_prints_json_bind_event_and_stops_on_sigint() {
    if !is_root() {
        skip("cli_run", "needs root");
        return;
    }
    let dir = tempdir();
    let events_file = dir.path().join("events.jsonl");
    let log = dir.path().join("stderr.log");
    let mut child = Command::new(sockwatch_bin())
        .args(["run", "--events"])
        .arg(&events_file)
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("spawn sockwatch");
    let deadline = std::time::Instant::now() + patience();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("running;")
    {
        assert!(
            child.try_wait().expect("wait").is_none(),
            "sockwatch exited: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        assert!(
            std::time::Instant::now() < deadline,
            "sockwatch did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let path = dir.path().join("cli.sock");
    let _listener = UnixListener::bind(&path).expect("bind");
    let (dev, ino) = stat_id(&path);
    let path_str = path.to_str().expect("utf-8").to_string();

    let deadline = std::time::Instant::now() + patience();
    let line = loop {
        let text = std::fs::read_to_string(&events_file).unwrap_or_default();
        if let Some(l) = text.lines().find(|l| l.contains(&path_str)) {
            break l.to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no event line for {path_str}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let v: serde_json::Value = serde_json::from_str(&line).expect("one JSON object per line");
    assert_eq!(v["kind"], "bind");
    assert_eq!(v["path"], path_str);
    assert_eq!(v["dev"], dev);
    assert_eq!(v["ino"], ino);
    assert_eq!(v["tgid"], std::process::id());
    let best = best_required(&BIND_TIERS).expect("bind has a required tier");
    assert_eq!(v["tier"], best.name());

    // SAFETY: kill(2) takes no pointers; the pid is our own child's, not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().expect("wait");
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "exit status {status}: {stderr}");
    assert!(
        stderr.contains(&format!("attached bind: {}", best.name())),
        "{stderr}"
    );
    assert!(stderr.contains("stopping:"), "{stderr}");
}

/// Forcing a tier this kernel refuses leaves too few hooks to run: a one-line error, exit 2.
/// Each mode whose tiers this kernel does not give is forced: `precise` where neither fentry
/// nor kprobes load (the host in CI), `fentry` where trampolines are missing (arm64 before
/// 6.4), `kprobe` where kprobes are.
#[test]
fn cli_forced_refused_tier_fails_clearly() {
    if !is_root() {
        skip("cli_forced_refused_tier", "needs root");
        return;
    }
    let refused = [
        (
            "precise",
            "fentry",
            "bind_fexit",
            [Tier::Fentry, Tier::Kprobe],
        ),
        (
            "fentry",
            "fentry",
            "bind_fexit",
            [Tier::Fentry, Tier::Fentry],
        ),
        (
            "kprobe",
            "kprobe",
            "bind_kprobe",
            [Tier::Kprobe, Tier::Kprobe],
        ),
    ]
    .into_iter()
    .filter(|(_, _, _, tiers)| !tiers.iter().any(|t| is_required(*t)));
    let mut forced = 0;
    for (mode, first, program, _) in refused {
        forced += 1;
        let out = Command::new(sockwatch_bin())
            .args(["run", "--probe-mode", mode])
            .output()
            .expect("run sockwatch");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{mode}: {stderr}");
        assert!(
            stderr.trim_end().starts_with(&format!(
                "sockwatch: cannot run under --probe-mode {mode}: bind and unlink or rename \
                 must attach; no tier for bind ({first} refused by this kernel: {program}: "
            )),
            "{mode}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{mode}: one line: {stderr}");
    }
    if forced == 0 {
        skip("cli_forced_refused_tier", "every tier loads on this kernel");
    }
}

/// `check` tells the truth about this kernel.
#[test]
fn cli_check_reports_tiers() {
    if !is_root() {
        skip("cli_check", "needs root");
        return;
    }
    let out = Command::new(sockwatch_bin())
        .arg("check")
        .output()
        .expect("run sockwatch");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = |tier: &str| {
        stdout
            .lines()
            .find(|l| l.split_whitespace().take(2).eq(["bind", tier]))
            .unwrap_or_else(|| panic!("no bind/{tier} row in:\n{stdout}"))
            .split_whitespace()
            .nth(2)
            .expect("supported column")
            .to_string()
    };
    for tier in BIND_TIERS {
        let given = if is_required(tier) { "yes" } else { "no" };
        assert_eq!(row(tier.name()), given, "bind/{}", tier.name());
    }
    let best = best_required(&BIND_TIERS).expect("a required tier").name();
    assert!(
        stdout.contains(&format!("run would attach bind: {best}")),
        "{stdout}"
    );
}

/// Not root: a one-line error naming the problem.
#[test]
fn cli_not_privileged_fails_clearly() {
    if !is_root() {
        skip("cli_not_privileged", "needs root to drop privileges");
        return;
    }
    use std::os::unix::process::CommandExt;
    // SAFETY: the pre_exec closure only calls async-signal-safe setgid/setuid.
    let out = unsafe {
        Command::new(sockwatch_bin())
            .arg("run")
            .pre_exec(|| {
                // Drop to nobody: no capabilities left.
                if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
            .output()
            .expect("run sockwatch")
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr
            .trim_end()
            .lines()
            .last()
            .unwrap_or_default()
            .starts_with("sockwatch: not privileged"),
        "{stderr}"
    );
}

/// aya relocates the programs against a subset of this kernel's BTF (each start scans it once
/// per local type, 1.2 s under emulation against the whole): every instruction of every
/// function comes out as it does against the whole BTF, on each kernel this test runs on.
#[test]
fn relocating_against_the_btf_subset_changes_no_instruction() {
    use aya::{Btf, Endianness};
    use sockwatch::kernel::{btf::Types, loader};
    let raw = std::fs::read("/sys/kernel/btf/vmlinux").expect("every kernel in CI has BTF");
    let local = loader::object_btf(loader::EBPF_OBJECT).expect("the object's .BTF section");
    let cut = Types::parse(&raw)
        .and_then(|t| t.relocation_subset(local))
        .expect("a subset of this kernel's BTF");
    let relocated = |btf: &[u8]| {
        let btf = Btf::parse(btf, Endianness::default()).expect("parsed by aya");
        let mut object = aya_obj::Object::parse(loader::EBPF_OBJECT).expect("the object");
        object.relocate_btf(&btf).expect("relocated");
        let functions = object.functions.values();
        functions
            .map(|f| format!("{} {:?}", f.name, f.instructions))
            .collect::<Vec<_>>()
    };
    let (whole, subset) = (relocated(&raw), relocated(&cut));
    assert_eq!(whole.len(), subset.len());
    for (w, s) in whole.iter().zip(&subset) {
        assert!(w == s, "relocated differently:\n{w}\n{s}");
    }
    eprintln!(
        "relocation subset: {} KiB of the kernel's {} KiB of BTF, {} functions relocated alike",
        cut.len() / 1024,
        raw.len() / 1024,
        whole.len()
    );
}

/// The tracepoint tier filters unlinks by base name: first through a filter of name-hash
/// slots, each generation of which userspace rebuilds in turn at each sweep from the names
/// the kernel keeps, then through those names. After both generations were rebuilt, a live
/// socket's file and a released one's (a daemon's cleanup after its close) are still seen
/// removed, and a name no socket bore is ruled out by the filter itself. A socket bound after
/// the rebuilds is marked by the kernel alone, and its removal is seen too.
#[test]
fn the_name_filter_keeps_live_and_released_names_across_rebuilds() {
    use common::actor::Actor;
    use sockwatch_common::{maps::name_filter_slot, name_hash};
    let test = "name_filter_rebuilt";
    let Some(mut l) = load(test, ProbeMode::Tracepoint, Tier::Tracepoint) else {
        return;
    };
    let dir = tempdir();
    let path = |name: &str| dir.path().join(name);
    let (live, released, plain) = (path("live.sock"), path("released.sock"), path("plain.file"));
    let late = path("late.sock");
    let mut a = Actor::spawn();
    a.must(&format!("listen-on {}", s(&live)));
    let h = a.must(&format!("bind {}", s(&released)));
    a.must(&format!("close {h}"));
    l.expect("the release", |e| {
        e.kind == EventKind::Release && e.path == s(&released)
    });
    for generation in 0..2 {
        let names = l.live.rebuild_name_filter().expect("rebuilt");
        assert!(
            names.is_some_and(|n| n >= 2),
            "rebuild {generation}: {names:?} names, want live.sock and released.sock at least"
        );
    }
    let passes = |l: &Loaded, name: &str| {
        let filter = l
            .live
            .name_filter()
            .expect("a filter on the tracepoint tier");
        filter.passes(name_filter_slot(name_hash(name.as_bytes())))
    };
    assert!(passes(&l, "live.sock") && passes(&l, "released.sock"));
    // Other sockets bound on this machine meanwhile share its slot once in 16,384.
    assert!(!passes(&l, "plain.file"), "a name no socket bore passes");
    a.must(&format!("listen-on {}", s(&late)));
    l.expect("the late bind", |e| {
        e.kind == EventKind::Bind && e.path == s(&late)
    });
    assert!(passes(&l, "late.sock"), "marked by the kernel's bind");
    std::fs::write(&plain, b"").expect("create");
    let mut b = Actor::spawn();
    for file in [&plain, &live, &released, &late] {
        b.must(&format!("unlink {}", s(file)));
    }
    for file in [&live, &released, &late] {
        let ev = l.expect("the removal", |e| {
            e.kind == EventKind::Unlink && e.path == s(file)
        });
        assert_eq!((ev.tgid, ev.tier), (b.pid, Tier::Tracepoint));
    }
    let events = l.collect_under(dir.path(), Duration::from_millis(200));
    let leaked: Vec<_> = events.iter().filter(|e| e.path == s(&plain)).collect();
    assert!(leaked.is_empty(), "{leaked:#?}");
}

/// Every exit, fork and tracepoint-tier close asks whether its process is tracked, first
/// through a slot filter rebuilt like the name filter. After both generations were rebuilt, a
/// holder's fork is seen, its worker (tracked by the kernel alone, after the rebuilds) is seen
/// exiting, and the holder's own exit releases its socket; a process that holds nothing is
/// ruled out by the filter itself.
#[test]
fn the_tracked_filter_keeps_holders_across_rebuilds() {
    use common::actor::Actor;
    use sockwatch_common::maps::tracked_filter_slot;
    let test = "tracked_filter_rebuilt";
    let Some(mut l) = load(test, ProbeMode::Tracepoint, Tier::Tracepoint) else {
        return;
    };
    let dir = tempdir();
    let sock = dir.path().join("held.sock");
    let (mut a, idle) = (Actor::spawn(), Actor::spawn());
    a.must(&format!("listen-on {}", s(&sock)));
    let file = stat_id(&sock);
    l.expect("the bind", |e| e.kind == EventKind::Bind && e.tgid == a.pid);
    for generation in 0..2 {
        let marked = l.live.rebuild_tracked_filter().expect("rebuilt");
        assert!(marked >= 1, "rebuild {generation}: {marked} processes");
    }
    let passes = |l: &Loaded, tgid: u32| {
        let filter = l.live.tracked_filter();
        filter.passes(tracked_filter_slot(tgid))
    };
    assert!(passes(&l, a.pid));
    // Another tracked process on this machine shares its slot once in 16,384.
    assert!(!passes(&l, idle.pid), "a process that holds nothing passes");
    let reply = a.must(&format!("fork-unlink {}", s(&sock)));
    let (worker, _) = reply.split_once(' ').expect("pid and status");
    let worker: u32 = worker.parse().expect("pid");
    let fork = l.expect("the fork", |e| e.kind == EventKind::Fork && e.tgid == a.pid);
    assert_eq!(fork.child_tgid, Some(worker));
    l.expect("the worker's exit", |e| {
        e.kind == EventKind::Exit && e.tgid == worker
    });
    let holder = a.pid;
    drop(a);
    let rel = l.expect("the release at exit", |e| {
        e.kind == EventKind::Release && e.tgid == holder
    });
    assert_eq!((rel.dev, rel.ino), file);
    l.expect("the holder's exit", |e| {
        e.kind == EventKind::Exit && e.tgid == holder
    });
}
