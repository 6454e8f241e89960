//! Harness for tests that load the real probes into the running kernel.
//!
//! `SOCKWATCH_REQUIRE_TIERS` (comma list, set by `cargo xtask test`) names the tiers this
//! kernel must accept: a refused required tier fails the test; any other refused tier skips
//! it with the reason printed. Without root the tests skip, saying so, unless tiers are
//! required.
#![allow(dead_code)] // each test binary uses its own part of the harness

use std::{
    path::Path,
    time::{Duration, Instant},
};

use agent_common::{Event, Tier};
use sockwatch::{
    event::SockEvent,
    loader::{EventReader, LoadOptions, Probes},
    preflight,
    probes::ProbeMode,
};

pub struct Loaded {
    pub probes: Probes,
    pub events: EventReader,
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

pub fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// Loads the probes under `mode` and checks every hook attached at `tier`; `None` (with the
/// reason printed) when this kernel cannot, and the tier is not required here.
pub fn load(test: &str, mode: ProbeMode, tier: Tier) -> Option<Loaded> {
    if !is_root() {
        assert!(
            required_tiers().is_empty(),
            "{test}: tiers are required but not running as root"
        );
        eprintln!("SKIP {test}: needs root to load eBPF programs");
        return None;
    }
    preflight::prepare().unwrap_or_else(|e| panic!("{test}: preflight: {e}"));
    let loaded = Probes::load(&LoadOptions {
        mode,
        ignore_tgid: 0,
        wakeup_bytes: Event::SIZE as u64,
    });
    let mut probes = match loaded {
        Ok(p) => p,
        Err(e) if !is_required(tier) => {
            eprintln!(
                "SKIP {test}: tier {} refused by this kernel: {e}",
                tier.name()
            );
            return None;
        }
        Err(e) => panic!("{test}: required tier {} did not load: {e}", tier.name()),
    };
    for r in &probes.report {
        assert_eq!(r.attached, Some(tier), "{test}: {}", r.summary());
    }
    let events = probes.events().expect("event ring buffer");
    Some(Loaded { probes, events })
}

/// How long an event may take: the VM runs under emulation.
pub fn patience() -> Duration {
    if std::env::var_os("SOCKWATCH_IN_VM").is_some() {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(5)
    }
}

/// Drains until `want` matches an event, or fails after [`patience`], listing what arrived.
pub fn expect_event(
    events: &mut EventReader,
    what: &str,
    want: impl Fn(&SockEvent) -> bool,
) -> SockEvent {
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
pub fn events_under(events: &mut EventReader, dir: &Path, wait: Duration) -> Vec<SockEvent> {
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
