//! Harness for tests that load the real probes into the running kernel.
//!
//! `SOCKWATCH_REQUIRE_TIERS` (comma list, set by `cargo xtask test`) names the tiers this
//! kernel must accept: a refused required tier fails the test; any other refused tier skips
//! it with the reason printed. Without root the tests skip, saying so, unless tiers are
//! required.
#![allow(dead_code)] // each test binary uses its own part of the harness

pub mod actor;
pub mod agent;
pub mod daemons;
pub mod go;
pub mod prom;
pub mod replay;
pub mod scenes;
pub mod shared;

use std::{
    path::Path,
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

use sockwatch::{
    events::{KernelEvent, complete, mntns::MntnsIndex},
    kernel::{
        live::LiveTable,
        loader::{EventReader, LoadOptions, Probes},
        preflight,
        probes::{PROBES, ProbeMode},
        watch::WatchedDir,
    },
};
use sockwatch_common::{Event, Tier};

pub struct Loaded {
    pub probes: Probes,
    pub events: EventReader,
    pub live: LiveTable,
    /// Drained but not yet expected, in arrival order.
    backlog: Vec<KernelEvent>,
    /// Where a connect's target is resolved after its client exited, as the agent does.
    namespaces: MntnsIndex,
}

/// Every forced mode and the tier it stands for, exact tiers first.
const ALL_MODES: [(ProbeMode, Tier); 4] = [
    (ProbeMode::Fentry, Tier::Fentry),
    (ProbeMode::Lsm, Tier::Lsm),
    (ProbeMode::Kprobe, Tier::Kprobe),
    (ProbeMode::Tracepoint, Tier::Tracepoint),
];

/// The modes a probe scenario runs under: every one. In the VM (emulated, slow) the tracepoint
/// tier is left to the host, which runs it natively; the VM still runs it for bind in
/// `kernel.rs`.
pub fn modes() -> Vec<(ProbeMode, Tier)> {
    let in_vm = std::env::var_os("SOCKWATCH_IN_VM").is_some();
    ALL_MODES
        .into_iter()
        .filter(|(_, t)| !(in_vm && *t == Tier::Tracepoint))
        .collect()
}

/// The modes an end-to-end test of the agent runs under: `SOCKWATCH_TEST_MODES`
/// (comma-separated; each guest gets its kernel's share of the suite's rotation) when set,
/// else [`modes`].
pub fn agent_modes() -> Vec<(ProbeMode, Tier)> {
    if let Ok(list) = std::env::var("SOCKWATCH_TEST_MODES") {
        let chosen: Vec<_> = ALL_MODES
            .into_iter()
            .filter(|(m, _)| list.split(',').any(|n| n.trim() == m.name()))
            .collect();
        let skipped: Vec<&str> = ALL_MODES
            .iter()
            .filter(|m| !chosen.contains(m))
            .map(|(m, _)| m.name())
            .collect();
        if !skipped.is_empty() {
            skip(
                "modes",
                format_args!("{skipped:?}: SOCKWATCH_TEST_MODES={list} (this kernel's share)"),
            );
        }
        return chosen;
    }
    modes()
}

fn required_tiers() -> Vec<String> {
    std::env::var("SOCKWATCH_REQUIRE_TIERS")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

pub fn is_required(tier: Tier) -> bool {
    required_tiers().iter().any(|t| t == tier.name())
}

/// The first of `tiers` (best first) that this kernel must accept: the one the agent attaches
/// where the required tiers are exactly the ones the kernel gives (as in CI).
pub fn best_required(tiers: &[Tier]) -> Option<Tier> {
    tiers.iter().copied().find(|t| is_required(*t))
}

/// Says that `test` leaves a case or a tier untested here, and why. Written to stdout itself,
/// past libtest's capture of `print!`, so the line shows (and xtask counts it) for a test that
/// passes too: a skip is never hidden in a pass.
pub fn skip(test: &str, why: impl std::fmt::Display) {
    use std::io::Write as _;
    let line = format!("SOCKWATCH-SKIP: {test}: {why}\n");
    let _ = std::io::stdout().lock().write_all(line.as_bytes());
}

/// Root, or a printed SKIP (a failure when tiers are required: CI runs as root).
pub fn root(test: &str) -> bool {
    if !is_root() {
        assert!(
            std::env::var_os("SOCKWATCH_REQUIRE_TIERS").is_none(),
            "{test}: tiers are required but not running as root"
        );
        skip(test, "needs root to load eBPF programs");
    }
    is_root()
}

pub fn is_root() -> bool {
    // SAFETY: geteuid(2) takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Loads the probes under `mode` and checks every hook attached at its first candidate tier
/// the kernel must give;
/// `None` (with the reason printed) when this kernel cannot, and `tier` is not required here.
pub fn load(test: &str, mode: ProbeMode, tier: Tier) -> Option<Loaded> {
    load_watching(test, mode, tier, Vec::new())
}

/// Whether this kernel loads `mode`'s probes, as [`load`] decides (skip with the reason, or
/// fail for a required tier), asked of the kernel once per test binary and mode: the
/// end-to-end tests ask before each agent they start, and a load costs seconds under
/// emulation.
pub fn tier_loads(test: &str, mode: ProbeMode, tier: Tier) -> bool {
    static ANSWERS: Mutex<Vec<(&str, bool)>> = Mutex::new(Vec::new());
    let mut answers = ANSWERS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(&(_, loads)) = answers.iter().find(|(m, _)| *m == mode.name()) {
        if !loads {
            skip(
                test,
                format_args!(
                    "tier {} refused by this kernel (reason printed by the first test)",
                    tier.name()
                ),
            );
        }
        return loads;
    }
    let loads = load(test, mode, tier).is_some();
    answers.push((mode.name(), loads));
    loads
}

pub fn load_watching(
    test: &str,
    mode: ProbeMode,
    tier: Tier,
    watch: Vec<WatchedDir>,
) -> Option<Loaded> {
    if !is_root() {
        assert!(
            required_tiers().is_empty(),
            "{test}: tiers are required but not running as root"
        );
        skip(test, "needs root to load eBPF programs");
        return None;
    }
    preflight::prepare().unwrap_or_else(|e| panic!("{test}: preflight: {e}"));
    let loaded = Probes::load(&LoadOptions {
        mode,
        ignore_tgid: 0,
        wakeup_bytes: Event::SIZE as u64,
        watch,
        require_all_hooks: true,
        live_capacity: sockwatch_common::maps::LIVE_CAPACITY,
        guard: false,
        stand_ins: Default::default(),
    });
    let mut probes = match loaded {
        Ok(p) => p,
        Err(e) if !is_required(tier) => {
            skip(
                test,
                format_args!("tier {} refused by this kernel: {e}", tier.name()),
            );
            return None;
        }
        Err(e) => panic!("{test}: required tier {} did not load: {e}", tier.name()),
    };
    for (r, spec) in probes.report.iter().zip(PROBES) {
        // The first candidate this kernel must give (arm64 before 6.4 has no fentry).
        let candidates = mode.candidates(spec);
        let want = candidates
            .iter()
            .find(|c| is_required(c.tier))
            .or(candidates.first())
            .map(|c| c.tier);
        assert_eq!(r.attached, want, "{test}: {}", r.summary());
    }
    let events = probes.events().expect("event ring buffer");
    let live = probes.live_table().expect("live table");
    Some(Loaded {
        probes,
        events,
        live,
        backlog: Vec::new(),
        namespaces: MntnsIndex::default(),
    })
}

/// How long an event may take: the VM runs under emulation.
pub fn patience() -> Duration {
    if std::env::var_os("SOCKWATCH_IN_VM").is_some() {
        Duration::from_secs(60)
    } else {
        // An upper bound only: generous, so a loaded CI machine does not fail a test.
        Duration::from_secs(20)
    }
}

impl Loaded {
    /// Moves what the kernel has delivered into the backlog, completed as the agent's pump
    /// completes it.
    fn fill(&mut self) {
        let (live, backlog, namespaces) = (&self.live, &mut self.backlog, &mut self.namespaces);
        self.events.drain(|e| {
            let mut e = e.expect("well-formed record");
            complete::connect_target(&mut e, &|id| live.get(id), namespaces);
            backlog.push(e);
        });
    }

    /// The first event matching `want`, waiting up to [`patience`]; fails listing what
    /// arrived. Earlier unmatched events stay available to later expectations.
    pub fn expect(&mut self, what: &str, want: impl Fn(&KernelEvent) -> bool) -> KernelEvent {
        let deadline = Instant::now() + patience();
        loop {
            self.fill();
            if let Some(i) = self.backlog.iter().position(&want) {
                return self.backlog.remove(i);
            }
            assert!(
                Instant::now() < deadline,
                "no {what} event within {:?}; saw: {:#?}",
                patience(),
                self.backlog
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every event whose path is under `dir` arriving within `wait`.
    pub fn collect_under(&mut self, dir: &Path, wait: Duration) -> Vec<KernelEvent> {
        std::thread::sleep(wait);
        self.fill();
        let dir = dir.to_string_lossy().into_owned();
        self.backlog
            .iter()
            .filter(|e| e.path.starts_with(&dir))
            .cloned()
            .collect()
    }
}

/// Drains until `want` matches an event, or fails after [`patience`], listing what arrived.
pub fn expect_event(
    events: &mut EventReader,
    what: &str,
    want: impl Fn(&KernelEvent) -> bool,
) -> KernelEvent {
    let deadline = Instant::now() + patience();
    let mut seen = Vec::new();
    loop {
        let mut found = None;
        events.drain(|e| {
            let e = e.expect("well-formed record");
            if found.is_none() && want(&e) {
                found = Some(e);
            } else if seen.len() < 50 {
                seen.push(e);
            }
        });
        if let Some(e) = found {
            return e;
        }
        assert!(
            Instant::now() < deadline,
            "no {what} event within {:?}; saw: {seen:#?}",
            patience()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Drains for a short while and returns every event whose path is under `dir`.
pub fn events_under(events: &mut EventReader, dir: &Path, wait: Duration) -> Vec<KernelEvent> {
    let deadline = Instant::now() + wait;
    let dir = dir.to_string_lossy().into_owned();
    let mut out = Vec::new();
    while Instant::now() < deadline {
        events.drain(|e| {
            let e = e.expect("well-formed record");
            if e.path.starts_with(&dir) {
                out.push(e);
            }
        });
        std::thread::sleep(Duration::from_millis(20));
    }
    out
}

pub fn gettid() -> u32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("sockwatch-test")
        .tempdir_in("/tmp")
        .expect("tempdir")
}

/// `(st_dev, st_ino)` of `path`.
pub fn stat_id(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display()));
    (m.dev(), m.ino())
}

/// A free loopback address for the agent's `--listen`.
pub fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// `path` as UTF-8 (every test path is).
pub fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8")
}

/// A link to the test binary in `dir` (a copy across file systems): actors run from it
/// (`Actor::spawn_from`) are another program to the agent, whose /proc/PID/exe differs.
pub fn other_program(dir: &Path) -> std::path::PathBuf {
    let me = std::env::current_exe().expect("test binary");
    let other = dir.join("other-program");
    if std::fs::hard_link(&me, &other).is_err() {
        std::fs::copy(&me, &other).expect("copy the test binary");
    }
    other
}
