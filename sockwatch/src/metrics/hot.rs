//! Counters pushed on the event path: events, verdicts, connect errors, decode errors, scans.
use std::{collections::BTreeMap, sync::OnceLock};

use prometheus::{HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Registry};

use super::{
    Metrics,
    labels::{GuardState, Label, Scan, count_names, errno_name, errno_names},
    specs::*,
    vecs::{counter, gauge, registered},
};
use crate::{
    engine::{Relation, ServedBy, StaleKind, Verdict, VerdictCounts},
    events::KernelEvent,
    http::Dropped,
};
use sockwatch_common::{EventKind, GuardPolicy, Tier};

/// `sockwatch_events_total`'s series by kind and tier, each resolved at its first event: the
/// vector's lookup hashes the label values under a lock, once per event otherwise. A series
/// still appears only once its first event is counted.
type EventSeries = [[OnceLock<IntCounter>; Tier::ALL.len()]; EventKind::ALL.len()];

/// Scan durations: from a handful of sockets to a busy node's /proc walk.
const SCAN_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The kernel maps sweeps prune: `LIVE`, `TRACKED` and `PENDING`.
pub const PRUNED_TABLES: [&str; 3] = ["live", "tracked", "pending"];

/// The pushed metrics, registered.
pub(super) struct HotCounters {
    events: IntCounterVec,
    event_series: EventSeries,
    connect_errors: IntCounterVec,
    decode_errors: IntCounterVec,
    event_failures: IntCounterVec,
    output_dropped: IntCounterVec,
    events_file_reopen_failures: IntCounterVec,
    kernel_pruned: IntCounterVec,
    verdicts: IntCounterVec,
    withheld: IntCounterVec,
    foreign_unlinks: IntCounterVec,
    takeovers: IntCounterVec,
    hijacks: IntCounterVec,
    replacements: IntCounterVec,
    stale_connects: IntCounterVec,
    stale_socket_files: IntCounterVec,
    guard_denials: IntCounterVec,
    guard_state: IntGaugeVec,
    scan_duration: HistogramVec,
    scan_failures: IntCounterVec,
    found_stale_bind_mounts: IntGaugeVec,
    found_stale_socket_files: IntGaugeVec,
    found_socket_file_mounts: IntGaugeVec,
    watch_missing: IntGaugeVec,
    http_dropped: IntCounterVec,
}

impl HotCounters {
    /// Registers each, with the series of known label sets at 0 so `rate()` and `increase()`
    /// see their first increment.
    pub(super) fn register(registry: &Registry) -> Self {
        let histogram = HistogramVec::new(
            SCAN_DURATION.histogram_opts(SCAN_BUCKETS),
            SCAN_DURATION.labels,
        )
        .expect("valid spec");
        let hot = Self {
            events: counter(registry, &EVENTS),
            event_series: Default::default(),
            connect_errors: counter(registry, &CONNECT_ERRORS),
            decode_errors: counter(registry, &DECODE_ERRORS),
            event_failures: counter(registry, &EVENT_FAILURES),
            output_dropped: counter(registry, &OUTPUT_DROPPED),
            events_file_reopen_failures: counter(registry, &EVENTS_FILE_REOPEN_FAILURES),
            kernel_pruned: counter(registry, &KERNEL_PRUNED),
            verdicts: counter(registry, &VERDICTS),
            withheld: counter(registry, &VERDICTS_WITHHELD),
            foreign_unlinks: counter(registry, &FOREIGN_UNLINKS),
            takeovers: counter(registry, &TAKEOVERS),
            hijacks: counter(registry, &HIJACKS),
            replacements: counter(registry, &REPLACEMENTS),
            stale_connects: counter(registry, &STALE_CONNECTS),
            stale_socket_files: counter(registry, &STALE_SOCKET_FILES_TOTAL),
            guard_denials: counter(registry, &GUARD_DENIALS),
            guard_state: gauge(registry, &GUARD_STATE),
            scan_duration: registered(registry, histogram),
            scan_failures: counter(registry, &SCAN_FAILURES),
            found_stale_bind_mounts: gauge(registry, &STALE_BIND_MOUNTS),
            found_stale_socket_files: gauge(registry, &STALE_SOCKET_FILES_FOUND),
            found_socket_file_mounts: gauge(registry, &SOCKET_FILE_MOUNTS),
            watch_missing: gauge(registry, &WATCH_MISSING),
            http_dropped: counter(registry, &HTTP_DROPPED),
        };
        hot.init_series();
        hot
    }

    fn events_of(&self, ev: &KernelEvent) -> IntCounter {
        self.events
            .with_label_values(&[ev.kind.name(), ev.tier.name()])
    }

    fn init_series(&self) {
        for verdict in count_names::<VerdictCounts>() {
            self.withheld.with_label_values(&[verdict]);
        }
        for errno in errno_names() {
            self.connect_errors.with_label_values(&[errno]);
        }
        self.decode_errors.with_label_values::<&str>(&[]);
        for kind in EventKind::ALL {
            self.event_failures.with_label_values(&[kind.name()]);
        }
        self.output_dropped.with_label_values::<&str>(&[]);
        self.events_file_reopen_failures
            .with_label_values::<&str>(&[]);
        for table in PRUNED_TABLES {
            self.kernel_pruned.with_label_values(&[table]);
        }
        self.found_stale_bind_mounts.with_label_values::<&str>(&[]);
        self.found_stale_socket_files.with_label_values::<&str>(&[]);
        for state in GuardState::ALL {
            self.guard_state.with_label_values(&[state.label()]);
        }
        for why in Dropped::ALL {
            self.http_dropped.with_label_values(&[why.label()]);
        }
        for scan in Scan::ALL {
            self.scan_duration.with_label_values(&[scan.label()]);
            self.scan_failures.with_label_values(&[scan.label()]);
        }
    }

    /// Creates every series of a newly admitted `watch` label at 0.
    pub(super) fn watch_series(&self, watch: &str) {
        for verdict in count_names::<VerdictCounts>() {
            self.verdicts.with_label_values(&[verdict.as_str(), watch]);
        }
        for relation in Relation::ALL {
            self.foreign_unlinks
                .with_label_values(&[relation.label(), watch]);
            for served_by in [ServedBy::Owner, ServedBy::Workload] {
                self.takeovers
                    .with_label_values(&[relation.label(), served_by.label(), watch]);
            }
            self.hijacks.with_label_values(&[relation.label(), watch]);
            self.replacements
                .with_label_values(&[relation.label(), watch]);
        }
        for kind in StaleKind::ALL {
            self.stale_connects
                .with_label_values(&[kind.label(), watch]);
        }
        self.stale_socket_files.with_label_values(&[watch]);
        for policy in [GuardPolicy::StaleOwner, GuardPolicy::Foreign] {
            self.guard_denials
                .with_label_values(&[policy.name(), watch]);
        }
        self.found_socket_file_mounts.with_label_values(&[watch]);
        self.watch_missing.with_label_values(&[watch]);
    }
}

impl Metrics {
    /// One decoded kernel event.
    pub fn event(&self, ev: &KernelEvent) {
        let hot = &self.hot;
        let kind = EventKind::ALL.iter().position(|k| *k == ev.kind);
        let tier = Tier::ALL.iter().position(|t| *t == ev.tier);
        let (k, t) = kind.zip(tier).expect("ALL lists every variant");
        hot.event_series[k][t]
            .get_or_init(|| hot.events_of(ev))
            .inc();
        if ev.kind == EventKind::Connect && ev.ret < 0 {
            hot.connect_errors
                .with_label_values(&[errno_name(-ev.ret)])
                .inc();
        }
    }

    /// A ring-buffer record that did not decode.
    pub fn decode_error(&self) {
        self.hot.decode_errors.with_label_values::<&str>(&[]).inc();
    }

    /// The handling of an event of this kind failed; the event was skipped.
    pub fn event_failed(&self, kind: EventKind) {
        self.hot
            .event_failures
            .with_label_values(&[kind.name()])
            .inc();
    }

    /// A reconciliation scan of this kind failed as a whole.
    pub fn scan_failed(&self, scan: Scan) {
        self.hot
            .scan_failures
            .with_label_values(&[scan.label()])
            .inc();
    }

    /// Event or verdict lines the events output refused, dropped.
    pub fn output_dropped(&self, lines: u64) {
        self.hot
            .output_dropped
            .with_label_values::<&str>(&[])
            .inc_by(lines);
    }

    /// A connection the HTTP endpoint dropped or refused.
    pub fn http_dropped(&self, why: Dropped) {
        self.hot
            .http_dropped
            .with_label_values(&[why.label()])
            .inc();
    }

    /// A reopen of the events file failed.
    pub fn events_file_reopen_failed(&self) {
        self.hot
            .events_file_reopen_failures
            .with_label_values::<&str>(&[])
            .inc();
    }

    /// Entries a sweep removed from the kernel map `table` (one of [`PRUNED_TABLES`]).
    pub fn kernel_pruned(&self, table: &str, n: usize) {
        self.hot
            .kernel_pruned
            .with_label_values(&[table])
            .inc_by(n as u64);
    }

    /// A verdict a missing hook left unconfirmed, not reported.
    pub fn withheld(&self, v: &Verdict) {
        self.hot.withheld.with_label_values(&[v.name()]).inc();
    }

    /// One verdict, about a socket under `watch` (a configured watch name, or "" for none).
    pub fn verdict(&self, v: &Verdict, watch: &str) {
        let hot = &self.hot;
        let watch = self.watch_label(watch);
        let watch = watch.as_str();
        hot.verdicts.with_label_values(&[v.name(), watch]).inc();
        match v {
            Verdict::ForeignUnlink { relation, .. } => hot
                .foreign_unlinks
                .with_label_values(&[relation.label(), watch])
                .inc(),
            Verdict::Takeover {
                relation,
                served_by,
                ..
            } => hot
                .takeovers
                .with_label_values(&[relation.label(), served_by.label(), watch])
                .inc(),
            Verdict::Hijack { relation, .. } => hot
                .hijacks
                .with_label_values(&[relation.label(), watch])
                .inc(),
            Verdict::Replaced { relation, .. } => hot
                .replacements
                .with_label_values(&[relation.label(), watch])
                .inc(),
            Verdict::StaleConnect { kind, .. } => hot
                .stale_connects
                .with_label_values(&[kind.label(), watch])
                .inc(),
            Verdict::StaleSocketFile { .. } => {
                hot.stale_socket_files.with_label_values(&[watch]).inc();
            }
            Verdict::UnlinkDenied(g) => hot
                .guard_denials
                .with_label_values(&[g.policy.name(), watch])
                .inc(),
            Verdict::UnlinkWouldDeny(_)
            | Verdict::OrphanOpened { .. }
            | Verdict::OrphanClosed { .. }
            | Verdict::Moved { .. } => {}
        }
    }

    /// The guard's state now: its series is 1, the others 0.
    pub fn guard_state(&self, now: GuardState) {
        for state in GuardState::ALL {
            self.hot
                .guard_state
                .with_label_values(&[state.label()])
                .set(i64::from(*state == now));
        }
    }

    /// Whether the directory of watch `watch` is missing (the agent waits for it).
    pub fn watch_missing(&self, watch: &str, missing: bool) {
        let label = self.watch_label(watch);
        self.hot
            .watch_missing
            .with_label_values(&[label.as_str()])
            .set(i64::from(missing));
    }

    /// The live socket files the last scan found bind-mounted, one watch name (or "") per
    /// mount: every admitted watch's series is set, 0 when it has none.
    pub fn socket_file_mounts<'a>(&self, watches: impl IntoIterator<Item = &'a str>) {
        let mut per: BTreeMap<String, i64> =
            self.watches.all().into_iter().map(|w| (w, 0)).collect();
        for w in watches {
            *per.entry(self.watch_label(w)).or_default() += 1;
        }
        for (watch, n) in per {
            self.hot
                .found_socket_file_mounts
                .with_label_values(&[watch.as_str()])
                .set(n);
        }
    }

    /// One finished reconciliation scan and what it found.
    pub fn scan(
        &self,
        scan: Scan,
        seconds: f64,
        stale_bind_mounts: usize,
        stale_socket_files: usize,
    ) {
        let hot = &self.hot;
        hot.scan_duration
            .with_label_values(&[scan.label()])
            .observe(seconds.max(0.0));
        hot.found_stale_bind_mounts
            .with_label_values::<&str>(&[])
            .set(stale_bind_mounts as i64);
        hot.found_stale_socket_files
            .with_label_values::<&str>(&[])
            .set(stale_socket_files as i64);
    }
}
