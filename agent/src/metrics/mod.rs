//! Prometheus metrics: one [`Registry`] owned by [`Metrics`], no global state.
//!
//! Every metric is declared once in [`SPECS`]: [`Metrics::new`] registers from that table and
//! [`Metrics::describe`] (and so `docs/metrics.md`) reads it, so the reference cannot drift
//! from what is exported. Labels come from bounded sets only: configured watch names (at most
//! [`MAX_WATCHES`], then [`OTHER_WATCH`]), verdict, relation, errno name, hook, tier, event
//! kind, map name, scan — never pids, inodes or paths.
//!
//! Kernel and engine totals arrive as absolute values ([`Metrics::kernel`],
//! [`Metrics::engine`]) and are turned into counters by adding the difference to the last
//! value seen; a value that went down (probes reloaded) counts as a reset.
use std::{
    collections::{BTreeSet, HashMap},
    sync::Mutex,
};

use agent_common::{Counter, EventKind, Tier};
use prometheus::{
    Encoder as _, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::{
    engine::{OrphanInfo, Relation, StaleKind, Stats, Verdict},
    events::KernelEvent,
    kernel::{
        loader::{HookReport, KernelCounters},
        probes::PROBES,
    },
};

/// The `watch` label of sockets outside every configured watch (or of a node-wide run).
pub use crate::config::NO_WATCH;
/// The `watch` label once [`MAX_WATCHES`] distinct names have been seen.
pub use crate::config::OTHER_WATCH;
/// Distinct `watch` label values kept (configuration allows no more watches than this).
pub const MAX_WATCHES: usize = crate::config::WATCH_LABELS;
/// Distinct `map` label values kept.
pub const MAX_MAPS: usize = 32;

/// Connect errors get a label of their own; every other errno is `other`.
pub const ERRNOS: &[(i32, &str)] = &[
    (libc::ECONNREFUSED, "ECONNREFUSED"),
    (libc::ENOENT, "ENOENT"),
    (libc::EACCES, "EACCES"),
    (libc::EPERM, "EPERM"),
    (libc::EPROTOTYPE, "EPROTOTYPE"),
    (libc::EAGAIN, "EAGAIN"),
];
const OTHER_ERRNO: &str = "other";

/// Scans, as the `scan` label names them.
pub const SCANS: &[&str] = &["startup", "periodic"];

/// The kernel's error counters, as the `reason` label names them.
const KERNEL_ERRORS: &[Counter] = &[
    Counter::MapFull,
    Counter::ReadFailed,
    Counter::Unpaired,
    Counter::FdWalkPartial,
];

const VERDICTS: &[&str] = &[
    "foreign_unlink",
    "replaced",
    "orphan_opened",
    "orphan_closed",
    "stale_connect",
    "stale_socket_file",
];

const RELATIONS: &[Relation] = &[
    Relation::SameProcess,
    Relation::SameCgroup,
    Relation::SamePod,
    Relation::SameWorkloadOtherPod,
    Relation::HostProcess,
    Relation::Other,
    Relation::Unknown,
];

const STALE_KINDS: &[StaleKind] = &[StaleKind::UnlinkedPinned, StaleKind::DeadListener];

const EVICTION_TABLES: &[&str] = &[
    "sockets",
    "live_sockets",
    "orphans",
    "procs",
    "owner_procs",
    "history",
];

const IGNORED_REASONS: &[&str] = &[
    "not_path_bound",
    "unknown_socket",
    "unlink_unknown",
    "unlink_ambiguous",
    "connect_undecided",
    "scan_without_file",
];

/// Scan durations: from a handful of sockets to a busy node's /proc walk.
const SCAN_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// One metric's declaration.
struct Spec {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    labels: &'static [&'static str],
}

const fn spec(
    name: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
    help: &'static str,
) -> Spec {
    Spec {
        name,
        kind,
        help,
        labels,
    }
}

use Kind::{Counter as C, Gauge as G, Histogram as H};

const BUILD_INFO: Spec = spec(
    "sockwatch_build_info",
    G,
    &["version", "git"],
    "Always 1; the labels name the running build.",
);
const PROBE_ATTACHED: Spec = spec(
    "sockwatch_probe_attached",
    G,
    &["hook", "tier"],
    "1 for the tier attached for each hook, 0 for the hook's other tiers.",
);
const PROBE_FALLBACK: Spec = spec(
    "sockwatch_probe_fallback_level",
    G,
    &["hook"],
    "How many better tiers of this hook were not attached (0: its best tier is attached).",
);
const PROBE_DEGRADED: Spec = spec(
    "sockwatch_probe_degraded",
    G,
    &["hook"],
    "1 when optional programs of the attached tier were refused (less detail, e.g. connect \
     targets resolved in userspace).",
);
const HOOK_MISSING: Spec = spec(
    "sockwatch_hook_missing",
    G,
    &["hook"],
    "1 when no tier of this hook attached: the agent runs without it (its log says what it \
     misses).",
);
const EVENTS: Spec = spec(
    "sockwatch_events_total",
    C,
    &["kind", "tier"],
    "Kernel events received, by event kind and the probe tier that saw them.",
);
const CONNECT_ERRORS: Spec = spec(
    "sockwatch_connect_errors_total",
    C,
    &["errno"],
    "Failed connects (and sendtos) by path, by errno name.",
);
const DECODE_ERRORS: Spec = spec(
    "sockwatch_decode_errors_total",
    C,
    &[],
    "Ring-buffer records that could not be decoded and were dropped.",
);
const VERDICTS_TOTAL: Spec = spec(
    "sockwatch_verdicts_total",
    C,
    &["verdict", "watch"],
    "Verdicts reported, by verdict and watch.",
);
const VERDICTS_WITHHELD: Spec = spec(
    "sockwatch_verdicts_withheld_total",
    C,
    &["verdict"],
    "Verdicts not reported because a missing hook left them unconfirmed (without the release \
     hook: the socket they call open was found closed).",
);
const FOREIGN_UNLINKS: Spec = spec(
    "sockwatch_foreign_unlinks_total",
    C,
    &["relation", "watch"],
    "Live sockets' files removed by a process outside the owner set, by how the remover \
     relates to the owner.",
);
const REPLACEMENTS: Spec = spec(
    "sockwatch_replacements_total",
    C,
    &["relation", "watch"],
    "Live sockets' files replaced by a rename-over (hand-overs included), by relation.",
);
const STALE_CONNECTS: Spec = spec(
    "sockwatch_stale_connects_total",
    C,
    &["kind", "watch"],
    "Connects refused by a socket file with no bound socket: unlinked_pinned (a bind mount \
     keeps an unlinked file reachable) or dead_listener (a dead daemon's file).",
);
const STALE_SOCKET_FILES_TOTAL: Spec = spec(
    "sockwatch_stale_socket_files_total",
    C,
    &["watch"],
    "Socket files left behind by a socket closed without unlinking them.",
);
const EVENTS_SUBMITTED: Spec = spec(
    "sockwatch_kernel_events_submitted_total",
    C,
    &["kind"],
    "Records the kernel side submitted to the ring buffer, by event kind.",
);
const EVENTS_LOST: Spec = spec(
    "sockwatch_events_lost_total",
    C,
    &["kind"],
    "Records lost to a full ring buffer, by event kind (the periodic scan repairs the state).",
);
const KERNEL_ERRORS_TOTAL: Spec = spec(
    "sockwatch_kernel_errors_total",
    C,
    &["reason"],
    "Failures on the kernel side: map_full (a map update failed), read_failed (a kernel or \
     user memory read failed), unpaired (an exit probe without its entry), fd_walk_partial \
     (an fd-table walk cut at its bound on a kernel without bpf_loop).",
);
const CONNECTS_OK: Spec = spec(
    "sockwatch_connects_ok_total",
    C,
    &[],
    "Successful connects by path (counted in the kernel, not reported).",
);
const ORPHANED: Spec = spec(
    "sockwatch_orphaned_listeners",
    G,
    &["watch"],
    "Listening sockets whose file is gone: nobody can connect to them by path.",
);
const ORPHAN_AGE: Spec = spec(
    "sockwatch_orphaned_listener_oldest_age_seconds",
    G,
    &["watch"],
    "Age of the oldest open orphaned listener (0 when there is none).",
);
const ENGINE_SOCKETS: Spec = spec(
    "sockwatch_engine_sockets",
    G,
    &[],
    "Socket files the correlation engine tracks (live, orphaned and recently released).",
);
const ENGINE_LIVE: Spec = spec(
    "sockwatch_engine_live_sockets",
    G,
    &[],
    "Sockets the engine knows as bound and open.",
);
const ENGINE_PROCS: Spec = spec(
    "sockwatch_engine_processes",
    G,
    &[],
    "Processes the engine tracks (owners and recently exited owners).",
);
const ENGINE_EVICTIONS: Spec = spec(
    "sockwatch_engine_evictions_total",
    C,
    &["table"],
    "Entries the engine's memory bounds pushed out, by table.",
);
const ENGINE_IGNORED: Spec = spec(
    "sockwatch_engine_ignored_total",
    C,
    &["reason"],
    "Inputs the engine could not place and ignored, by reason.",
);
const SCAN_DURATION: Spec = spec(
    "sockwatch_scan_duration_seconds",
    H,
    &["scan"],
    "Duration of reconciliation scans (sock_diag, /proc fds, mountinfo).",
);
const STALE_BIND_MOUNTS: Spec = spec(
    "sockwatch_stale_bind_mounts",
    G,
    &[],
    "Bind mounts of socket files whose original was unlinked, as the last scan found them.",
);
const STALE_SOCKET_FILES: Spec = spec(
    "sockwatch_stale_socket_files",
    G,
    &[],
    "Socket files with no bound socket, as the last scan found them.",
);
const MAP_ENTRIES: Spec = spec(
    "sockwatch_map_entries",
    G,
    &["map"],
    "Entries in a kernel map.",
);
const MAP_CAPACITY: Spec = spec(
    "sockwatch_map_capacity",
    G,
    &["map"],
    "Capacity of a kernel map (entries).",
);

/// Every metric sockwatch itself defines, in the order of the reference.
const SPECS: &[&Spec] = &[
    &BUILD_INFO,
    &PROBE_ATTACHED,
    &PROBE_FALLBACK,
    &PROBE_DEGRADED,
    &HOOK_MISSING,
    &EVENTS,
    &CONNECT_ERRORS,
    &DECODE_ERRORS,
    &VERDICTS_TOTAL,
    &VERDICTS_WITHHELD,
    &FOREIGN_UNLINKS,
    &REPLACEMENTS,
    &STALE_CONNECTS,
    &STALE_SOCKET_FILES_TOTAL,
    &ORPHANED,
    &ORPHAN_AGE,
    &EVENTS_SUBMITTED,
    &EVENTS_LOST,
    &KERNEL_ERRORS_TOTAL,
    &CONNECTS_OK,
    &ENGINE_SOCKETS,
    &ENGINE_LIVE,
    &ENGINE_PROCS,
    &ENGINE_EVICTIONS,
    &ENGINE_IGNORED,
    &SCAN_DURATION,
    &STALE_BIND_MOUNTS,
    &STALE_SOCKET_FILES,
    &MAP_ENTRIES,
    &MAP_CAPACITY,
];

/// The agent's metrics. Cheap to share behind an `Arc`; every method takes `&self`.
pub struct Metrics {
    registry: Registry,
    probe_attached: IntGaugeVec,
    probe_fallback: IntGaugeVec,
    probe_degraded: IntGaugeVec,
    hook_missing: IntGaugeVec,
    events: IntCounterVec,
    connect_errors: IntCounterVec,
    decode_errors: IntCounterVec,
    verdicts: IntCounterVec,
    verdicts_withheld: IntCounterVec,
    foreign_unlinks: IntCounterVec,
    replacements: IntCounterVec,
    stale_connects: IntCounterVec,
    stale_socket_files_total: IntCounterVec,
    orphaned: IntGaugeVec,
    orphan_age: GaugeVec,
    events_submitted: IntCounterVec,
    events_lost: IntCounterVec,
    kernel_errors: IntCounterVec,
    connects_ok: IntCounterVec,
    engine_sockets: IntGaugeVec,
    engine_live: IntGaugeVec,
    engine_procs: IntGaugeVec,
    engine_evictions: IntCounterVec,
    engine_ignored: IntCounterVec,
    scan_duration: HistogramVec,
    stale_bind_mounts: IntGaugeVec,
    stale_socket_files: IntGaugeVec,
    map_entries: IntGaugeVec,
    map_capacity: IntGaugeVec,
    state: Mutex<State>,
}

/// What turns absolute totals into counter increments, and the bounded label sets seen.
#[derive(Default)]
struct State {
    /// Last absolute value per (metric, label).
    last: HashMap<(&'static str, String), u64>,
    watches: BTreeSet<String>,
    maps: BTreeSet<String>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every metric; series of bounded, known label sets start at 0 so `rate()`
    /// and `increase()` see their first increment.
    pub fn new() -> Self {
        let registry = Registry::new();
        let gauge = |s: &Spec| {
            debug_assert_eq!(s.kind, Kind::Gauge, "{}", s.name);
            let m = IntGaugeVec::new(Opts::new(s.name, s.help), s.labels).expect("valid spec");
            registry
                .register(Box::new(m.clone()))
                .expect("registered once");
            m
        };
        let counter = |s: &Spec| {
            debug_assert_eq!(s.kind, Kind::Counter, "{}", s.name);
            let m = IntCounterVec::new(Opts::new(s.name, s.help), s.labels).expect("valid spec");
            registry
                .register(Box::new(m.clone()))
                .expect("registered once");
            m
        };
        let build_info = gauge(&BUILD_INFO);
        let orphan_age = GaugeVec::new(
            Opts::new(ORPHAN_AGE.name, ORPHAN_AGE.help),
            ORPHAN_AGE.labels,
        )
        .expect("valid spec");
        registry
            .register(Box::new(orphan_age.clone()))
            .expect("registered once");
        let scan_duration = HistogramVec::new(
            HistogramOpts::new(SCAN_DURATION.name, SCAN_DURATION.help)
                .buckets(SCAN_BUCKETS.to_vec()),
            SCAN_DURATION.labels,
        )
        .expect("valid spec");
        registry
            .register(Box::new(scan_duration.clone()))
            .expect("registered once");
        let m = Self {
            probe_attached: gauge(&PROBE_ATTACHED),
            probe_fallback: gauge(&PROBE_FALLBACK),
            probe_degraded: gauge(&PROBE_DEGRADED),
            hook_missing: gauge(&HOOK_MISSING),
            events: counter(&EVENTS),
            connect_errors: counter(&CONNECT_ERRORS),
            decode_errors: counter(&DECODE_ERRORS),
            verdicts: counter(&VERDICTS_TOTAL),
            verdicts_withheld: counter(&VERDICTS_WITHHELD),
            foreign_unlinks: counter(&FOREIGN_UNLINKS),
            replacements: counter(&REPLACEMENTS),
            stale_connects: counter(&STALE_CONNECTS),
            stale_socket_files_total: counter(&STALE_SOCKET_FILES_TOTAL),
            orphaned: gauge(&ORPHANED),
            orphan_age,
            events_submitted: counter(&EVENTS_SUBMITTED),
            events_lost: counter(&EVENTS_LOST),
            kernel_errors: counter(&KERNEL_ERRORS_TOTAL),
            connects_ok: counter(&CONNECTS_OK),
            engine_sockets: gauge(&ENGINE_SOCKETS),
            engine_live: gauge(&ENGINE_LIVE),
            engine_procs: gauge(&ENGINE_PROCS),
            engine_evictions: counter(&ENGINE_EVICTIONS),
            engine_ignored: counter(&ENGINE_IGNORED),
            scan_duration,
            stale_bind_mounts: gauge(&STALE_BIND_MOUNTS),
            stale_socket_files: gauge(&STALE_SOCKET_FILES),
            map_entries: gauge(&MAP_ENTRIES),
            map_capacity: gauge(&MAP_CAPACITY),
            state: Mutex::new(State::default()),
            registry,
        };
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION"), git_revision()])
            .set(1);
        #[cfg(target_os = "linux")]
        m.registry
            .register(Box::new(
                prometheus::process_collector::ProcessCollector::for_self(),
            ))
            .expect("registered once");
        m.init_series();
        m
    }

    /// Series whose label sets are known up front, at 0.
    fn init_series(&self) {
        for v in VERDICTS {
            self.verdicts_withheld.with_label_values(&[*v]);
        }
        for (_, name) in ERRNOS {
            self.connect_errors.with_label_values(&[*name]);
        }
        self.connect_errors.with_label_values(&[OTHER_ERRNO]);
        self.decode_errors.with_label_values::<&str>(&[]);
        for k in EventKind::ALL {
            self.events_submitted.with_label_values(&[k.name()]);
            self.events_lost.with_label_values(&[k.name()]);
        }
        for c in KERNEL_ERRORS {
            self.kernel_errors.with_label_values(&[c.name()]);
        }
        self.connects_ok.with_label_values::<&str>(&[]);
        for t in EVICTION_TABLES {
            self.engine_evictions.with_label_values(&[*t]);
        }
        for r in IGNORED_REASONS {
            self.engine_ignored.with_label_values(&[*r]);
        }
        for g in [
            &self.engine_sockets,
            &self.engine_live,
            &self.engine_procs,
            &self.stale_bind_mounts,
            &self.stale_socket_files,
        ] {
            g.with_label_values::<&str>(&[]);
        }
        for s in SCANS {
            self.scan_duration.with_label_values(&[*s]);
        }
        self.watches([NO_WATCH]);
    }

    /// Creates every series of these watches at 0 (call it with the configured watch names at
    /// start-up): a counter series born with its first increment is invisible to `increase()`.
    /// Names past [`MAX_WATCHES`] fold into [`OTHER_WATCH`].
    pub fn watches<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        for name in names {
            self.watch_label(name);
        }
    }

    /// The bounded label value for `watch`, creating its series on first sight.
    fn watch_label(&self, watch: &str) -> String {
        let watch = if watch.is_empty() { NO_WATCH } else { watch };
        let mut state = self.state.lock().expect("metrics state");
        if state.watches.contains(watch) {
            return watch.to_string();
        }
        let label = if state.watches.len() < MAX_WATCHES {
            watch
        } else if state.watches.contains(OTHER_WATCH) {
            return OTHER_WATCH.to_string();
        } else {
            OTHER_WATCH
        };
        state.watches.insert(label.to_string());
        drop(state);
        for v in VERDICTS {
            self.verdicts.with_label_values(&[*v, label]);
        }
        for r in RELATIONS {
            self.foreign_unlinks
                .with_label_values(&[relation_name(*r), label]);
            self.replacements
                .with_label_values(&[relation_name(*r), label]);
        }
        for k in STALE_KINDS {
            self.stale_connects
                .with_label_values(&[stale_kind_name(*k), label]);
        }
        self.stale_socket_files_total.with_label_values(&[label]);
        self.orphaned.with_label_values(&[label]);
        self.orphan_age.with_label_values(&[label]);
        label.to_string()
    }

    /// What attached: every tier of every hook in [`PROBES`] is exported, 1 or 0.
    pub fn probes(&self, report: &[HookReport]) {
        for spec in PROBES {
            let hook = spec.hook.name();
            let r = report.iter().find(|r| r.hook == spec.hook);
            let attached = r.and_then(|r| r.attached);
            for t in spec.tiers {
                self.probe_attached
                    .with_label_values(&[hook, t.tier.name()])
                    .set(i64::from(attached == Some(t.tier)));
            }
            let level = spec
                .tiers
                .iter()
                .position(|t| Some(t.tier) == attached)
                .unwrap_or(spec.tiers.len());
            self.probe_fallback
                .with_label_values(&[hook])
                .set(level as i64);
            self.probe_degraded
                .with_label_values(&[hook])
                .set(i64::from(r.is_some_and(|r| !r.degraded.is_empty())));
            self.hook_missing
                .with_label_values(&[hook])
                .set(i64::from(attached.is_none()));
        }
    }

    /// One decoded kernel event.
    pub fn event(&self, ev: &KernelEvent) {
        self.events
            .with_label_values(&[ev.kind.name(), ev.tier.name()])
            .inc();
        if ev.kind == EventKind::Connect && ev.ret < 0 {
            self.connect_errors
                .with_label_values(&[errno_name(-ev.ret)])
                .inc();
        }
    }

    /// A ring-buffer record that did not decode.
    pub fn decode_error(&self) {
        self.decode_errors.with_label_values::<&str>(&[]).inc();
    }

    /// One verdict, about a socket under `watch` (a configured watch name, or "" for none).
    /// A verdict a missing hook left unconfirmed, not reported.
    pub fn withheld(&self, v: &Verdict) {
        self.verdicts_withheld.with_label_values(&[v.name()]).inc();
    }

    pub fn verdict(&self, v: &Verdict, watch: &str) {
        let watch = self.watch_label(watch);
        let watch = watch.as_str();
        self.verdicts.with_label_values(&[v.name(), watch]).inc();
        match v {
            Verdict::ForeignUnlink { relation, .. } => self
                .foreign_unlinks
                .with_label_values(&[relation_name(*relation), watch])
                .inc(),
            Verdict::Replaced { relation, .. } => self
                .replacements
                .with_label_values(&[relation_name(*relation), watch])
                .inc(),
            Verdict::StaleConnect { kind, .. } => self
                .stale_connects
                .with_label_values(&[stale_kind_name(*kind), watch])
                .inc(),
            Verdict::StaleSocketFile { .. } => self
                .stale_socket_files_total
                .with_label_values(&[watch])
                .inc(),
            Verdict::OrphanOpened { .. } | Verdict::OrphanClosed { .. } => {}
        }
    }

    /// The kernel's counters, as absolute values read just now (call it before each scrape).
    pub fn kernel(&self, c: &KernelCounters) {
        let mut state = self.state.lock().expect("metrics state");
        for (k, n) in &c.emitted {
            let counter = self.events_submitted.with_label_values(&[k.name()]);
            advance(&mut state, EVENTS_SUBMITTED.name, k.name(), *n, |d| {
                counter.inc_by(d)
            });
        }
        for (k, n) in &c.lost {
            let counter = self.events_lost.with_label_values(&[k.name()]);
            advance(&mut state, EVENTS_LOST.name, k.name(), *n, |d| {
                counter.inc_by(d)
            });
        }
        for r in KERNEL_ERRORS {
            let counter = self.kernel_errors.with_label_values(&[r.name()]);
            advance(
                &mut state,
                KERNEL_ERRORS_TOTAL.name,
                r.name(),
                c.get(*r),
                |d| counter.inc_by(d),
            );
        }
        let counter = self.connects_ok.with_label_values::<&str>(&[]);
        advance(
            &mut state,
            CONNECTS_OK.name,
            "",
            c.get(Counter::ConnectOk),
            |d| counter.inc_by(d),
        );
    }

    /// The engine's sizes and totals, and its open orphans (`watch_of` maps a path to its
    /// watch name, "" for none).
    pub fn engine(&self, stats: &Stats, orphans: &[OrphanInfo], watch_of: impl Fn(&str) -> String) {
        let mut per_watch: HashMap<String, (i64, u64)> = HashMap::new();
        for o in orphans {
            let w = self.watch_label(&watch_of(o.path.as_deref().unwrap_or("")));
            let e = per_watch.entry(w).or_default();
            e.0 += 1;
            e.1 = e.1.max(o.age_ns);
        }
        let known: Vec<String> = self
            .state
            .lock()
            .expect("metrics state")
            .watches
            .iter()
            .cloned()
            .collect();
        for w in &known {
            let (n, age_ns) = per_watch.get(w).copied().unwrap_or_default();
            self.orphaned.with_label_values(&[w.as_str()]).set(n);
            self.orphan_age
                .with_label_values(&[w.as_str()])
                .set(age_ns as f64 / 1e9);
        }
        self.engine_sockets
            .with_label_values::<&str>(&[])
            .set(stats.sockets as i64);
        self.engine_live
            .with_label_values::<&str>(&[])
            .set(stats.live_sockets as i64);
        self.engine_procs
            .with_label_values::<&str>(&[])
            .set(stats.procs as i64);
        let e = &stats.evictions;
        let i = &stats.ignored;
        let mut state = self.state.lock().expect("metrics state");
        for (table, n) in EVICTION_TABLES.iter().zip([
            e.sockets,
            e.live_sockets,
            e.orphans,
            e.procs,
            e.owner_procs,
            e.history,
        ]) {
            let counter = self.engine_evictions.with_label_values(&[*table]);
            advance(&mut state, ENGINE_EVICTIONS.name, table, n, |d| {
                counter.inc_by(d)
            });
        }
        for (reason, n) in IGNORED_REASONS.iter().zip([
            i.not_path_bound,
            i.unknown_socket,
            i.unlink_unknown,
            i.unlink_ambiguous,
            i.connect_undecided,
            i.scan_without_file,
        ]) {
            let counter = self.engine_ignored.with_label_values(&[*reason]);
            advance(&mut state, ENGINE_IGNORED.name, reason, n, |d| {
                counter.inc_by(d)
            });
        }
    }

    /// One finished reconciliation scan (`scan`: `startup` or `periodic`) and what it found.
    pub fn scan(
        &self,
        scan: &str,
        seconds: f64,
        stale_bind_mounts: usize,
        stale_socket_files: usize,
    ) {
        let scan = SCANS
            .iter()
            .find(|s| **s == scan)
            .copied()
            .unwrap_or("periodic");
        self.scan_duration
            .with_label_values(&[scan])
            .observe(seconds.max(0.0));
        self.stale_bind_mounts
            .with_label_values::<&str>(&[])
            .set(stale_bind_mounts as i64);
        self.stale_socket_files
            .with_label_values::<&str>(&[])
            .set(stale_socket_files as i64);
    }

    /// Fill of one kernel map. At most [`MAX_MAPS`] distinct names are kept.
    pub fn map_fill(&self, map: &str, entries: u64, capacity: u64) {
        {
            let mut state = self.state.lock().expect("metrics state");
            if !state.maps.contains(map) {
                if state.maps.len() >= MAX_MAPS {
                    return;
                }
                state.maps.insert(map.to_string());
            }
        }
        self.map_entries
            .with_label_values(&[map])
            .set(entries as i64);
        self.map_capacity
            .with_label_values(&[map])
            .set(capacity as i64);
    }

    /// Every metric in the Prometheus text exposition format (0.0.4).
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding of gathered metrics");
        String::from_utf8(out).expect("the text format is UTF-8")
    }

    /// (name, type, help, labels) of every metric exported, sockwatch's own first, then the
    /// process metrics of the Prometheus client (Linux).
    pub fn describe() -> Vec<(String, String, String, Vec<String>)> {
        let mut out: Vec<_> = SPECS
            .iter()
            .map(|s| {
                (
                    s.name.to_string(),
                    s.kind.name().to_string(),
                    s.help.to_string(),
                    s.labels.iter().map(|l| l.to_string()).collect(),
                )
            })
            .collect();
        let own: BTreeSet<&str> = SPECS.iter().map(|s| s.name).collect();
        let mut rest: Vec<_> = Metrics::new()
            .registry
            .gather()
            .into_iter()
            .filter(|f| !own.contains(f.name()))
            .map(|f| {
                let kind = match f.get_field_type() {
                    prometheus::proto::MetricType::COUNTER => "counter",
                    prometheus::proto::MetricType::GAUGE => "gauge",
                    prometheus::proto::MetricType::HISTOGRAM => "histogram",
                    prometheus::proto::MetricType::SUMMARY => "summary",
                    prometheus::proto::MetricType::UNTYPED => "untyped",
                };
                (
                    f.name().to_string(),
                    kind.to_string(),
                    f.help().to_string(),
                    Vec::new(),
                )
            })
            .collect();
        rest.sort();
        out.extend(rest);
        out
    }

    /// The values each bounded label takes, for the reference (`watch` and `map` are
    /// described in words).
    pub fn label_values() -> Vec<(&'static str, Vec<String>)> {
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let mut errnos: Vec<String> = ERRNOS.iter().map(|(_, n)| n.to_string()).collect();
        errnos.push(OTHER_ERRNO.into());
        let mut hooks: Vec<String> = PROBES.iter().map(|h| h.hook.name().to_string()).collect();
        hooks.dedup();
        vec![
            ("hook", hooks),
            (
                "tier",
                Tier::ALL.iter().map(|t| t.name().to_string()).collect(),
            ),
            (
                "kind (events)",
                EventKind::ALL
                    .iter()
                    .map(|k| k.name().to_string())
                    .collect(),
            ),
            (
                "kind (stale connects)",
                STALE_KINDS
                    .iter()
                    .map(|k| stale_kind_name(*k).to_string())
                    .collect(),
            ),
            ("verdict", s(VERDICTS)),
            (
                "relation",
                RELATIONS
                    .iter()
                    .map(|r| relation_name(*r).to_string())
                    .collect(),
            ),
            ("errno", errnos),
            (
                "reason (kernel errors)",
                KERNEL_ERRORS.iter().map(|c| c.name().to_string()).collect(),
            ),
            ("reason (engine ignored)", s(IGNORED_REASONS)),
            ("table", s(EVICTION_TABLES)),
            ("scan", s(SCANS)),
        ]
    }
}

/// Adds to a counter what an absolute total gained since last seen; a total that went down
/// was reset (probes reloaded) and counts from zero.
fn advance(
    state: &mut State,
    metric: &'static str,
    label: &str,
    now: u64,
    inc_by: impl FnOnce(u64),
) {
    let last = state.last.entry((metric, label.to_string())).or_insert(0);
    let delta = if now >= *last { now - *last } else { now };
    *last = now;
    if delta > 0 {
        inc_by(delta);
    }
}

/// The `errno` label of a positive errno.
pub fn errno_name(errno: i32) -> &'static str {
    ERRNOS
        .iter()
        .find(|(n, _)| *n == errno)
        .map_or(OTHER_ERRNO, |(_, name)| name)
}

/// The `relation` label: the relation's serialized name.
pub fn relation_name(r: Relation) -> &'static str {
    match r {
        Relation::SameProcess => "same_process",
        Relation::SameCgroup => "same_cgroup",
        Relation::SamePod => "same_pod",
        Relation::SameWorkloadOtherPod => "same_workload_other_pod",
        Relation::HostProcess => "host_process",
        Relation::Other => "other",
        Relation::Unknown => "unknown",
    }
}

/// The stale-connect `kind` label: the kind's serialized name.
pub fn stale_kind_name(k: StaleKind) -> &'static str {
    match k {
        StaleKind::UnlinkedPinned => "unlinked_pinned",
        StaleKind::DeadListener => "dead_listener",
    }
}

/// The git revision baked in at build time (`SOCKWATCH_GIT_REVISION`), or "unknown".
fn git_revision() -> &'static str {
    match option_env!("SOCKWATCH_GIT_REVISION") {
        Some(r) if !r.is_empty() => r,
        _ => "unknown",
    }
}

/// `docs/metrics.md`: the metric reference, generated from [`Metrics::describe`].
pub fn reference_markdown() -> String {
    use std::fmt::Write as _;
    let mut md = String::new();
    md.push_str(
        "# sockwatch metrics\n\n\
         <!-- Generated from `Metrics::describe()` by the `docs_metrics_md_is_current` test; \
         do not edit. Regenerate with `SOCKWATCH_BLESS=1 cargo test -p agent --lib metrics`. -->\n\n\
         Served at `/metrics` (Prometheus text format 0.0.4) by `sockwatch run --listen ADDR` \
         (default port 9469). Every label takes values from a bounded set: no pid, inode or \
         path is ever a label value; use the JSON API (`/api/sockets`, `/api/verdicts`) or the \
         event stream for those.\n\n\
         | metric | type | labels | help |\n| --- | --- | --- | --- |\n",
    );
    for (name, kind, help, labels) in Metrics::describe() {
        let labels = if labels.is_empty() {
            "—".to_string()
        } else {
            labels
                .iter()
                .map(|l| format!("`{l}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            md,
            "| `{name}` | {kind} | {labels} | {} |",
            help.replace('|', "\\|")
        );
    }
    md.push_str("\n## Label values\n\n| label | values |\n| --- | --- |\n");
    let _ = writeln!(
        md,
        "| watch | a configured watch name; `{NO_WATCH}` outside every watch (or without \
         watches); `{OTHER_WATCH}` past {MAX_WATCHES} names |"
    );
    let _ = writeln!(md, "| map | a kernel map name (at most {MAX_MAPS}) |");
    let _ = writeln!(
        md,
        "| version, git | the build's crate version and git revision |"
    );
    for (label, values) in Metrics::label_values() {
        let values: Vec<String> = values.iter().map(|v| format!("`{v}`")).collect();
        let _ = writeln!(md, "| {label} | {} |", values.join(", "));
    }
    md
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::{
        engine::{DecidedBy, Fidelity, FileId, OrphanCause, Proc},
        kernel::probes::Hook,
    };

    /// The value of one series in `text`, by its exact `name{labels}` prefix.
    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map(|v| v.parse().expect("numeric value"))
    }

    /// Built from its JSON form, so fields added later take their defaults.
    fn sock_event(kind: EventKind, tier: Tier, ret: i32) -> KernelEvent {
        serde_json::from_value(serde_json::json!({
            "kind": kind.name(), "tier": tier.name(), "fidelity": "exact", "ts_ns": 1,
            "tgid": 10, "pid": 10, "comm": "x", "cgroup_id": 0, "dev": 1, "ino": 2,
            "sock_ino": 3, "nlink": 1, "path": "/run/x.sock", "ret": ret,
        }))
        .expect("a KernelEvent")
    }

    fn foreign_unlink(relation: Relation) -> Verdict {
        Verdict::ForeignUnlink {
            ts_ns: 1,
            actor: Proc::unknown(2),
            victim: Proc::unknown(1),
            relation,
            path: "/run/multus/multus.sock".into(),
            victim_path: None,
            file: FileId { dev: 1, ino: 99 },
            sock_ino: 5,
            listening: true,
            victim_bound_ns: 0,
            decided_by: DecidedBy::Kernel,
            fidelity: Fidelity::Exact,
        }
    }

    #[test]
    fn build_info_and_preinitialized_series() {
        let text = Metrics::new().render();
        let info = format!(
            "sockwatch_build_info{{git=\"{}\",version=\"{}\"}}",
            git_revision(),
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(value(&text, &info), Some(1.0), "{text}");
        assert_eq!(
            value(&text, r#"sockwatch_events_lost_total{kind="unlink"}"#),
            Some(0.0)
        );
        assert_eq!(
            value(
                &text,
                r#"sockwatch_foreign_unlinks_total{relation="other",watch="none"}"#
            ),
            Some(0.0)
        );
        assert_eq!(
            value(&text, r#"sockwatch_orphaned_listeners{watch="none"}"#),
            Some(0.0)
        );
        assert!(text.contains("process_resident_memory_bytes"), "{text}");
    }

    #[test]
    fn probes_export_every_tier_and_the_fallback_level() {
        let m = Metrics::new();
        m.probes(&[
            HookReport {
                hook: Hook::Bind,
                attached: Some(Tier::Tracepoint),
                refused: vec![(Tier::Fentry, "no".into()), (Tier::Kprobe, "no".into())],
                degraded: vec![],
                programs: vec![],
            },
            HookReport {
                hook: Hook::Connect,
                attached: Some(Tier::Fentry),
                refused: vec![],
                degraded: vec!["connect_target_fexit: inlined".into()],
                programs: vec![],
            },
            HookReport {
                hook: Hook::Exit,
                attached: None,
                refused: vec![(Tier::Tracepoint, "too large".into())],
                degraded: vec![],
                programs: vec![],
            },
        ]);
        let t = m.render();
        let v = |s: &str| value(&t, s);
        assert_eq!(
            v(r#"sockwatch_probe_attached{hook="bind",tier="tracepoint"}"#),
            Some(1.0)
        );
        assert_eq!(
            v(r#"sockwatch_probe_attached{hook="bind",tier="fentry"}"#),
            Some(0.0)
        );
        assert_eq!(
            v(r#"sockwatch_probe_attached{hook="bind",tier="kprobe"}"#),
            Some(0.0)
        );
        assert_eq!(
            v(r#"sockwatch_probe_fallback_level{hook="bind"}"#),
            Some(2.0)
        );
        assert_eq!(
            v(r#"sockwatch_probe_fallback_level{hook="connect"}"#),
            Some(0.0)
        );
        assert_eq!(v(r#"sockwatch_probe_degraded{hook="connect"}"#), Some(1.0));
        assert_eq!(v(r#"sockwatch_probe_degraded{hook="bind"}"#), Some(0.0));
        assert_eq!(v(r#"sockwatch_hook_missing{hook="exit"}"#), Some(1.0));
        assert_eq!(v(r#"sockwatch_hook_missing{hook="bind"}"#), Some(0.0));
        assert_eq!(
            v(r#"sockwatch_probe_attached{hook="exit",tier="tracepoint"}"#),
            Some(0.0)
        );
        // A hook missing from the report is attached at no tier.
        assert_eq!(
            v(r#"sockwatch_probe_attached{hook="unlink",tier="lsm"}"#),
            Some(0.0)
        );
        assert_eq!(
            v(r#"sockwatch_probe_fallback_level{hook="unlink"}"#),
            Some(4.0)
        );
        // Every (hook, tier) of the probe table is exported.
        let n = PROBES.iter().map(|h| h.tiers.len()).sum::<usize>();
        assert_eq!(
            t.lines()
                .filter(|l| l.starts_with("sockwatch_probe_attached{"))
                .count(),
            n
        );
    }

    #[test]
    fn events_and_connect_errors_by_errno_name() {
        let m = Metrics::new();
        m.event(&sock_event(EventKind::Bind, Tier::Fentry, 0));
        m.event(&sock_event(
            EventKind::Connect,
            Tier::Tracepoint,
            -libc::ECONNREFUSED,
        ));
        m.event(&sock_event(
            EventKind::Connect,
            Tier::Tracepoint,
            -libc::ENOENT,
        ));
        m.event(&sock_event(
            EventKind::Connect,
            Tier::Tracepoint,
            -libc::EXDEV,
        ));
        m.decode_error();
        let t = m.render();
        let v = |s: &str| value(&t, s);
        assert_eq!(
            v(r#"sockwatch_events_total{kind="bind",tier="fentry"}"#),
            Some(1.0)
        );
        assert_eq!(
            v(r#"sockwatch_events_total{kind="connect",tier="tracepoint"}"#),
            Some(3.0)
        );
        assert_eq!(
            v(r#"sockwatch_connect_errors_total{errno="ECONNREFUSED"}"#),
            Some(1.0)
        );
        assert_eq!(
            v(r#"sockwatch_connect_errors_total{errno="ENOENT"}"#),
            Some(1.0)
        );
        assert_eq!(
            v(r#"sockwatch_connect_errors_total{errno="other"}"#),
            Some(1.0)
        );
        assert_eq!(
            v(r#"sockwatch_connect_errors_total{errno="EACCES"}"#),
            Some(0.0)
        );
        assert_eq!(v("sockwatch_decode_errors_total"), Some(1.0));
    }

    #[test]
    fn verdicts_by_kind_relation_and_watch() {
        let m = Metrics::new();
        m.watches(["multus"]);
        m.verdict(&foreign_unlink(Relation::SameWorkloadOtherPod), "multus");
        m.verdict(&foreign_unlink(Relation::Unknown), "");
        m.verdict(
            &Verdict::StaleConnect {
                ts_ns: 1,
                kind: StaleKind::UnlinkedPinned,
                actor: Proc::unknown(3),
                path: "/q".into(),
                file: None,
                binder: None,
                removed_by: None,
                decided_by: DecidedBy::Engine,
            },
            "multus",
        );
        let t = m.render();
        let v = |s: &str| value(&t, s);
        assert_eq!(
            v(
                r#"sockwatch_foreign_unlinks_total{relation="same_workload_other_pod",watch="multus"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            v(r#"sockwatch_foreign_unlinks_total{relation="unknown",watch="none"}"#),
            Some(1.0)
        );
        assert_eq!(
            v(r#"sockwatch_verdicts_total{verdict="foreign_unlink",watch="multus"}"#),
            Some(1.0)
        );
        assert_eq!(
            v(r#"sockwatch_verdicts_total{verdict="stale_connect",watch="multus"}"#),
            Some(1.0)
        );
        assert_eq!(
            v(r#"sockwatch_stale_connects_total{kind="unlinked_pinned",watch="multus"}"#),
            Some(1.0)
        );
        assert_eq!(
            v(r#"sockwatch_stale_connects_total{kind="dead_listener",watch="multus"}"#),
            Some(0.0)
        );
        assert_eq!(
            v(r#"sockwatch_replacements_total{relation="other",watch="multus"}"#),
            Some(0.0)
        );
    }

    #[test]
    fn watch_labels_are_bounded() {
        let m = Metrics::new();
        for i in 0..(MAX_WATCHES + 10) {
            m.verdict(&foreign_unlink(Relation::Other), &format!("w{i}"));
        }
        let t = m.render();
        let watches: BTreeSet<&str> = t
            .lines()
            .filter(|l| l.starts_with("sockwatch_orphaned_listeners{"))
            .map(|l| l.split('"').nth(1).expect("watch label"))
            .collect();
        assert_eq!(watches.len(), MAX_WATCHES + 1, "{watches:?}");
        assert!(watches.contains(OTHER_WATCH));
        // "none" is pre-created, so MAX_WATCHES - 1 of the w* names fit.
        let other = value(
            &t,
            r#"sockwatch_foreign_unlinks_total{relation="other",watch="other"}"#,
        );
        assert_eq!(other, Some(11.0));
    }

    #[test]
    fn kernel_totals_become_counters_and_survive_a_reset() {
        let m = Metrics::new();
        let counters = |lost: u64, map_full: u64, ok: u64| KernelCounters {
            other: vec![
                (Counter::MapFull, map_full),
                (Counter::ReadFailed, 0),
                (Counter::ConnectOk, ok),
                (Counter::Unpaired, 0),
                (Counter::FdWalkPartial, 0),
            ],
            emitted: vec![(EventKind::Unlink, 100)],
            lost: vec![(EventKind::Unlink, lost)],
        };
        m.kernel(&counters(5, 1, 7));
        m.kernel(&counters(8, 1, 9));
        let t = m.render();
        assert_eq!(
            value(&t, r#"sockwatch_events_lost_total{kind="unlink"}"#),
            Some(8.0)
        );
        assert_eq!(
            value(&t, r#"sockwatch_kernel_errors_total{reason="map_full"}"#),
            Some(1.0)
        );
        assert_eq!(value(&t, "sockwatch_connects_ok_total"), Some(9.0));
        assert_eq!(
            value(
                &t,
                r#"sockwatch_kernel_events_submitted_total{kind="unlink"}"#
            ),
            Some(100.0)
        );
        // Probes reloaded: the kernel starts from 0 again; the counter keeps going up.
        m.kernel(&counters(2, 1, 9));
        let t = m.render();
        assert_eq!(
            value(&t, r#"sockwatch_events_lost_total{kind="unlink"}"#),
            Some(10.0)
        );
    }

    #[test]
    fn engine_orphans_per_watch_and_zero_when_gone() {
        let m = Metrics::new();
        m.watches(["multus", "crio"]);
        let orphan = |path: &str, age_s: u64| OrphanInfo {
            file: FileId { dev: 1, ino: 2 },
            sock_ino: 3,
            owner: Proc::unknown(4),
            path: Some(path.into()),
            since_ns: 0,
            since_exact: true,
            age_ns: age_s * 1_000_000_000,
            cause: OrphanCause::Unlinked,
            removed_by: None,
        };
        let watch_of = |p: &str| {
            if p.starts_with("/run/multus/") {
                "multus".to_string()
            } else {
                String::new()
            }
        };
        let mut stats = Stats {
            sockets: 7,
            live_sockets: 5,
            procs: 3,
            ..Stats::default()
        };
        stats.evictions.sockets = 2;
        stats.ignored.unlink_ambiguous = 4;
        m.engine(
            &stats,
            &[
                orphan("/run/multus/a.sock", 30),
                orphan("/run/multus/b.sock", 90),
                orphan("/tmp/x.sock", 5),
            ],
            watch_of,
        );
        let t = m.render();
        let v = |s: &str| value(&t, s);
        assert_eq!(
            v(r#"sockwatch_orphaned_listeners{watch="multus"}"#),
            Some(2.0)
        );
        assert_eq!(
            v(r#"sockwatch_orphaned_listeners{watch="none"}"#),
            Some(1.0)
        );
        assert_eq!(
            v(r#"sockwatch_orphaned_listeners{watch="crio"}"#),
            Some(0.0)
        );
        assert_eq!(
            v(r#"sockwatch_orphaned_listener_oldest_age_seconds{watch="multus"}"#),
            Some(90.0)
        );
        assert_eq!(v("sockwatch_engine_sockets"), Some(7.0));
        assert_eq!(v("sockwatch_engine_live_sockets"), Some(5.0));
        assert_eq!(v("sockwatch_engine_processes"), Some(3.0));
        assert_eq!(
            v(r#"sockwatch_engine_evictions_total{table="sockets"}"#),
            Some(2.0)
        );
        assert_eq!(
            v(r#"sockwatch_engine_ignored_total{reason="unlink_ambiguous"}"#),
            Some(4.0)
        );
        m.engine(&stats, &[], watch_of);
        let t = m.render();
        assert_eq!(
            value(&t, r#"sockwatch_orphaned_listeners{watch="multus"}"#),
            Some(0.0)
        );
        assert_eq!(
            value(
                &t,
                r#"sockwatch_orphaned_listener_oldest_age_seconds{watch="multus"}"#
            ),
            Some(0.0)
        );
        assert_eq!(
            value(&t, r#"sockwatch_engine_evictions_total{table="sockets"}"#),
            Some(2.0)
        );
    }

    #[test]
    fn scans_and_map_fill() {
        let m = Metrics::new();
        m.scan("startup", 0.2, 1, 2);
        m.scan("periodic", 0.03, 0, 2);
        m.scan("bogus", 0.03, 0, 3);
        for i in 0..(MAX_MAPS + 5) {
            m.map_fill(&format!("M{i}"), 10, 100);
        }
        m.map_fill("M0", 11, 100);
        let t = m.render();
        let v = |s: &str| value(&t, s);
        assert_eq!(
            v(r#"sockwatch_scan_duration_seconds_count{scan="startup"}"#),
            Some(1.0)
        );
        assert_eq!(
            v(r#"sockwatch_scan_duration_seconds_count{scan="periodic"}"#),
            Some(2.0)
        );
        assert_eq!(v("sockwatch_stale_bind_mounts"), Some(0.0));
        assert_eq!(v("sockwatch_stale_socket_files"), Some(3.0));
        assert_eq!(v(r#"sockwatch_map_entries{map="M0"}"#), Some(11.0));
        assert_eq!(v(r#"sockwatch_map_capacity{map="M0"}"#), Some(100.0));
        assert_eq!(
            t.lines()
                .filter(|l| l.starts_with("sockwatch_map_entries{"))
                .count(),
            MAX_MAPS
        );
    }

    #[test]
    fn label_names_match_the_engines_serialization() {
        for r in RELATIONS {
            let json = serde_json::to_string(r).expect("serializes");
            assert_eq!(json.trim_matches('"'), relation_name(*r));
        }
        for k in STALE_KINDS {
            let json = serde_json::to_string(k).expect("serializes");
            assert_eq!(json.trim_matches('"'), stale_kind_name(*k));
        }
    }

    /// Every family the registry exports is described, with the same type and help, and
    /// every described family is exported once each method has run.
    #[test]
    fn describe_matches_the_registry() {
        let m = Metrics::new();
        m.map_fill("LIVE", 1, 2);
        m.probes(&[]);
        m.event(&sock_event(EventKind::Bind, Tier::Fentry, 0));
        m.scan("startup", 0.1, 0, 0);
        let described = Metrics::describe();
        let gathered = m.registry.gather();
        assert_eq!(gathered.len(), described.len());
        for f in &gathered {
            let d = described
                .iter()
                .find(|d| d.0 == f.name())
                .unwrap_or_else(|| panic!("{} is not described", f.name()));
            assert_eq!(d.2, f.help(), "{}", f.name());
            let text_type = m
                .render()
                .lines()
                .find_map(|l| {
                    l.strip_prefix(&format!("# TYPE {} ", f.name()))
                        .map(str::to_string)
                })
                .expect("TYPE line");
            assert_eq!(d.1, text_type, "{}", f.name());
        }
        for d in &described {
            assert!(
                d.0.starts_with("process_") || d.0.starts_with("sockwatch_"),
                "{}",
                d.0
            );
            let counter = d.1 == "counter";
            assert_eq!(
                counter,
                d.0.ends_with("_total"),
                "{}: counters end in _total",
                d.0
            );
        }
    }

    #[test]
    fn docs_metrics_md_is_current() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/metrics.md");
        let want = reference_markdown();
        if std::env::var_os("SOCKWATCH_BLESS").is_some_and(|v| v == "1") {
            std::fs::write(&path, &want).expect("write docs/metrics.md");
            return;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/metrics.md is out of date with Metrics::describe(): regenerate it with \
             `SOCKWATCH_BLESS=1 cargo test -p agent --lib metrics::tests::docs_metrics_md_is_current`"
        );
    }
}
