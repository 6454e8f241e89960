//! Every metric sockwatch defines, one row each: name, type, label names and help.
use std::collections::HashMap;

use prometheus::{
    HistogramOpts, Opts,
    core::Desc,
    proto::{MetricFamily, MetricType},
};

/// A metric's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    /// The type as the text format's `# TYPE` line names it.
    pub fn name(self) -> &'static str {
        type_name(self.proto())
    }

    fn proto(self) -> MetricType {
        match self {
            Kind::Counter => MetricType::COUNTER,
            Kind::Gauge => MetricType::GAUGE,
            Kind::Histogram => MetricType::HISTOGRAM,
        }
    }
}

/// A metric type as the text format's `# TYPE` line names it.
pub fn type_name(kind: MetricType) -> &'static str {
    match kind {
        MetricType::COUNTER => "counter",
        MetricType::GAUGE => "gauge",
        MetricType::HISTOGRAM => "histogram",
        MetricType::SUMMARY => "summary",
        MetricType::UNTYPED => "untyped",
    }
}

/// One metric's declaration.
#[derive(Debug)]
pub struct Spec {
    pub name: &'static str,
    pub kind: Kind,
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

impl Spec {
    pub fn opts(&self) -> Opts {
        Opts::new(self.name, self.help)
    }

    pub fn histogram_opts(&self, buckets: &[f64]) -> HistogramOpts {
        HistogramOpts::new(self.name, self.help).buckets(buckets.to_vec())
    }

    /// The descriptor a collector reports for this metric.
    pub fn desc(&self) -> Desc {
        let labels = self
            .labels
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        Desc::new(self.name.into(), self.help.into(), labels, HashMap::new()).expect("valid spec")
    }

    /// An empty family of this metric, for a collector to fill.
    pub fn empty_family(&self) -> MetricFamily {
        let mut family = MetricFamily::default();
        family.set_name(self.name.into());
        family.set_help(self.help.into());
        family.set_field_type(self.kind.proto());
        family
    }
}

/// Declares each row as a `const` of that name, and [`SPECS`] in row order.
macro_rules! specs {
    ($($id:ident: $kind:ident $name:literal [$($label:literal),*] $help:literal;)*) => {
        $(pub const $id: Spec = Spec { name: $name, kind: Kind::$kind, labels: &[$($label),*], help: $help };)*
        /// Every metric sockwatch itself defines, in the order of the reference.
        pub const SPECS: &[&Spec] = &[$(&$id),*];
    };
}

specs! {
    BUILD_INFO: Gauge "sockwatch_build_info" ["version", "revision"] "Always 1; the labels name the running build.";
    PROBE_ATTACHED: Gauge "sockwatch_probe_attached" ["hook", "tier"] "1 for the tier attached for each hook, 0 for the hook's other tiers.";
    PROBE_FALLBACK: Gauge "sockwatch_probe_fallback_level" ["hook"] "How many better tiers of this hook were not attached (0: its best tier is attached).";
    PROBE_DEGRADED: Gauge "sockwatch_probe_degraded" ["hook"] "1 when optional programs of the attached tier were refused (less detail, e.g. connect targets resolved in userspace).";
    HOOK_MISSING: Gauge "sockwatch_hook_missing" ["hook"] "1 when no tier of this hook attached: the agent runs without it (its log says what it misses).";
    EVENTS: Counter "sockwatch_events_total" ["kind", "tier"] "Kernel events received, by event kind and the probe tier that saw them.";
    CONNECT_ERRORS: Counter "sockwatch_connect_errors_total" ["errno"] "Failed connects (and sendtos) by path, by errno name.";
    DECODE_ERRORS: Counter "sockwatch_decode_errors_total" [] "Ring-buffer records that could not be decoded and were dropped.";
    EVENT_FAILURES: Counter "sockwatch_event_failures_total" ["kind"] "Events whose handling failed (a panic, logged once per kind) and were skipped; the agent runs on.";
    LOOKUP_TIMEOUTS: Counter "sockwatch_lookup_timeouts_total" ["lookup"] "Filesystem and /proc lookups made for an event or a scan that did not answer within 300 ms (a FUSE server that ignores the agent, a dead NFS server): the event or verdict went out with what was known (flag lookup_failed), the scan without that file.";
    LOOKUP_REFUSALS: Counter "sockwatch_lookup_refusals_total" ["lookup"] "Lookups not tried because every lookup worker was busy (stuck in earlier lookups that never answered).";
    LOOKUP_SKIPS: Counter "sockwatch_lookup_skips_total" ["lookup"] "Lookups not made because the path is on a FUSE or network filesystem (--lookup-network-filesystems allows them).";
    OUTPUT_DROPPED: Counter "sockwatch_output_lines_dropped_total" [] "Event and verdict lines the events output (--events) refused and the agent dropped: a full disk, a pipe nobody reads. The agent runs on; its log says when the output fails and when it recovers.";
    EVENTS_FILE_REOPEN_FAILURES: Counter "sockwatch_events_file_reopen_failures_total" [] "Failed reopens of the events file (--events FILE), on SIGHUP or because its path no longer leads to the open file (renamed, removed, replaced), tried at most once a second. The lines go on to the file already open; the log says when reopening begins to fail and when it succeeds again.";
    KERNEL_PRUNED: Counter "sockwatch_kernel_pruned_total" ["table"] "Kernel map entries a sweep removed as stale: live (a socket closed unseen: close_range, close-on-exec on the tracepoint tier), tracked (a process gone without its exit seen), pending (a hook entry's record no exit took within 10 s).";
    VERDICTS: Counter "sockwatch_verdicts_total" ["verdict", "watch"] "Verdicts reported, by verdict and watch.";
    VERDICTS_WITHHELD: Counter "sockwatch_verdicts_withheld_total" ["verdict"] "Verdicts not reported because a missing hook left them unconfirmed (without the release hook: the socket they call open was found closed).";
    FOREIGN_UNLINKS: Counter "sockwatch_foreign_unlinks_total" ["relation", "watch"] "Live sockets' files removed by a process outside the owner set, by how the remover relates to the owner.";
    TAKEOVERS: Counter "sockwatch_takeovers_total" ["relation", "served_by", "watch"] "Live sockets' files removed (or renamed over) by a process outside the owner set whose path the owner's own workload served again within the takeover window: served_by owner (the owner bound it again: a plugin re-registering) or workload (a successor: a rolling restart, a rename hand-over), by how the remover relates to the predecessor.";
    HIJACKS: Counter "sockwatch_hijacks_total" ["relation", "watch"] "Live sockets' files removed (or renamed over) by a process outside the owner set whose path another workload served within the takeover window, by how the remover relates to the victim.";
    REPLACEMENTS: Counter "sockwatch_replacements_total" ["relation", "watch"] "Live sockets' files replaced by a rename-over of a file that is no live socket, by relation (a live socket renamed over one is a takeover or a hijack).";
    STALE_CONNECTS: Counter "sockwatch_stale_connects_total" ["kind", "watch"] "Connects refused by a socket file with no bound socket: unlinked_pinned (a bind mount keeps an unlinked file reachable) or dead_listener (a dead daemon's file).";
    STALE_SOCKET_FILES_TOTAL: Counter "sockwatch_stale_socket_files_total" ["watch"] "Socket files left behind by a socket closed without unlinking them.";
    ORPHANED: Gauge "sockwatch_orphaned_listeners" ["watch", "cause"] "Listening sockets whose file is gone: nobody can connect to them by path. cause: unlinked, replaced, listen_after_removal, scan, hijacked (another workload serves its path), or taken_over (a predecessor in its graceful shutdown whose successor serves the path).";
    ORPHAN_OPENED: Gauge "sockwatch_orphaned_listener_oldest_opened_timestamp_seconds" ["watch", "cause"] "When the oldest open orphaned listener, by cause, became orphaned (as the agent first knew it): Unix time in seconds, 0 when there is none.";
    EVENTS_SUBMITTED: Counter "sockwatch_kernel_events_submitted_total" ["kind"] "Records the kernel side submitted to the ring buffer, by event kind.";
    EVENTS_LOST: Counter "sockwatch_events_lost_total" ["kind"] "Records lost to a full ring buffer, by event kind (the periodic scan repairs the state).";
    KERNEL_ERRORS: Counter "sockwatch_kernel_errors_total" ["reason"] "Failures on the kernel side: map_full (a map update failed), read_failed (a kernel or user memory read failed), unpaired (a bind or listen kretprobe without its entry), fd_walk_partial (an fd-table walk cut at its bound on a kernel without bpf_loop).";
    CONNECTS_OK: Counter "sockwatch_connects_ok_total" [] "Successful connects by path (counted in the kernel, not reported).";
    ENGINE_SOCKETS: Gauge "sockwatch_engine_sockets" [] "Socket files the correlation engine tracks (live, orphaned and recently released).";
    ENGINE_LIVE: Gauge "sockwatch_engine_live_sockets" [] "Sockets the engine knows as bound and open.";
    ENGINE_PROCS: Gauge "sockwatch_engine_processes" [] "Processes the engine tracks (owners and recently exited owners).";
    ENGINE_EVICTIONS: Counter "sockwatch_engine_evictions_total" ["table"] "Entries the engine's memory bounds pushed out, by table.";
    ENGINE_IGNORED: Counter "sockwatch_engine_ignored_total" ["reason"] "Inputs the engine could not place and ignored, by reason.";
    SCAN_FAILURES: Counter "sockwatch_scan_failures_total" ["scan"] "Reconciliation scans that failed as a whole (the log says why); the agent runs on kernel events alone until the next sweep.";
    SCAN_DURATION: Histogram "sockwatch_scan_duration_seconds" ["scan"] "Duration of reconciliation scans (sock_diag, /proc fds, mountinfo).";
    STALE_BIND_MOUNTS: Gauge "sockwatch_stale_bind_mounts" [] "Bind mounts of socket files whose original was unlinked, as the last scan found them.";
    STALE_SOCKET_FILES_FOUND: Gauge "sockwatch_stale_socket_files_found" [] "Socket files with no bound socket, as the last scan found them.";
    WATCH_MISSING: Gauge "sockwatch_watch_directory_missing" ["watch"] "1 while a watched directory does not exist: the agent waits for it and watches it from its creation (its first bind where its parent exists, else within a second).";
    SOCKET_FILE_MOUNTS: Gauge "sockwatch_socket_file_mounts" ["watch"] "Live socket files bind-mounted into a mount namespace, as the last scan found them: each becomes a stale bind mount when its daemon restarts (mount the directory instead).";
    GUARD_STATE: Gauge "sockwatch_guard_state" ["state"] "Guard mode, one-hot: off (no watch has a policy), on (refusing), audit (deciding and reporting, refusing nothing), paused (SIGUSR1; SIGUSR2 resumes), unavailable (a policy is set but BPF LSM is not active or the unlink hook is not on the LSM tier: the agent observes only).";
    GUARD_DENIALS: Counter "sockwatch_guard_denials_total" ["policy", "watch"] "Removals of a live listener's file the guard refused with EPERM, by the policy that refused them.";
    GUARD_KERNEL: Counter "sockwatch_guard_kernel_decisions_total" ["decision"] "The guard's decisions in the kernel: denied (refused with EPERM), would_deny (audit mode: would have been refused, let through), unknown (a socket file removed while the guard was deciding whose socket the live table did not hold, an unbound file or one lost to a full table: let through).";
    HTTP_DROPPED: Counter "sockwatch_http_connections_dropped_total" ["reason"] "Connections to the HTTP endpoint it dropped or refused, by reason: refused (every connection being answered, the probes' reserve full too: a 503 written without waiting), evicted_idle (an answered client that had not closed, for a new connection), evicted_reading (the oldest client still sending its request head, for a new connection), header_timeout (the head not complete within its deadline: 408), response_timeout (the response not made and taken within 10 s), idle_timeout (an answered client that neither closed nor sent within 1 s).";
    MAP_ENTRIES: Gauge "sockwatch_map_entries" ["map"] "Entries in a kernel map, as its last walk counted them: each sweep walks it, and a scrape only when the last walk is 30 s old.";
    MAP_CAPACITY: Gauge "sockwatch_map_capacity" ["map"] "Capacity of a kernel map (entries).";
}
