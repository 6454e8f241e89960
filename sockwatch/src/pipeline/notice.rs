//! Notice lines: what the agent could not see, said in the event stream itself and under
//! every `--events-filter`, so that a reader of the stream alone knows when it was blind: a
//! hook no tier attached, ring-buffer records lost, a full kernel table, scans failing.
//!
//! No I/O but [`ScanHealth`]'s log lines: the kernel's counters and the clock are handed in,
//! and the pump and `run` write what comes out.
use serde::{Serialize, Serializer};
use sockwatch_common::{Counter, EventKind, Tier};

use crate::{
    kernel::{
        counters::KernelCounters,
        loader::HookReport,
        probes::{Hook, Missed as _},
    },
    metrics::{Label as _, Scan},
};

/// One notice line, tagged by `notice`; `ts_ns` (boot clock) comes last, before the stamp.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "notice", rename_all = "snake_case")]
pub enum Notice {
    /// A hook no tier attached at start: the agent runs without it.
    HookMissing {
        hook: Hook,
        /// What the agent misses without it (`Hook::missed_without`).
        missed: &'static str,
        /// Each tier tried, and why this kernel refused it.
        refused: Vec<Refusal>,
        ts_ns: u64,
    },
    /// Records the ring buffer had no room for since the last notice: per kind (only kinds
    /// that lost any), and their sum.
    EventsLost {
        #[serde(serialize_with = "by_kind")]
        lost: Vec<(EventKind, u64)>,
        total: u64,
        ts_ns: u64,
    },
    /// Entries the kernel's tables refused since the last notice (the `map_full` counter).
    LiveTableFull { refused: u64, ts_ns: u64 },
    /// A scan failed for a reason not said since the last success.
    ScanFailed {
        #[serde(serialize_with = "scan_label")]
        scan: Scan,
        reason: String,
        ts_ns: u64,
    },
    /// A scan succeeded after `failed_scans` failed in a row.
    ScanRecovered { failed_scans: u64, ts_ns: u64 },
}

/// A tier of a missing hook, refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Refusal {
    pub tier: Tier,
    pub reason: String,
}

impl Notice {
    /// When it was said, on the boot clock.
    pub fn ts_ns(&self) -> u64 {
        match self {
            Notice::HookMissing { ts_ns, .. }
            | Notice::EventsLost { ts_ns, .. }
            | Notice::LiveTableFull { ts_ns, .. }
            | Notice::ScanFailed { ts_ns, .. }
            | Notice::ScanRecovered { ts_ns, .. } => *ts_ns,
        }
    }

    /// The notice of a hook that `r` says no tier attached; `None` for an attached one.
    pub fn hook_missing(r: &HookReport, ts_ns: u64) -> Option<Notice> {
        r.attached.is_none().then(|| Notice::HookMissing {
            hook: r.hook,
            missed: r.hook.missed_without(),
            refused: r
                .refused
                .iter()
                .map(|(tier, why)| Refusal {
                    tier: *tier,
                    reason: why.clone(),
                })
                .collect(),
            ts_ns,
        })
    }
}

/// Kinds as keys, in kind order (the derive would write a list of pairs).
fn by_kind<S: Serializer>(lost: &[(EventKind, u64)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(lost.iter().map(|(kind, n)| (kind.name(), n)))
}

fn scan_label<S: Serializer>(scan: &Scan, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(scan.label())
}

/// Losses are checked at most this often: a few map reads, off the event path.
pub const CHECK_EVERY_NS: u64 = 1_000_000_000;

/// The kernel's loss counters as of the last check, so that each notice says what was lost
/// since the one before. The counters start at zero with the agent (nothing is pinned).
#[derive(Debug, Default)]
pub struct Losses {
    lost: Vec<(EventKind, u64)>,
    map_full: u64,
    /// Boot-clock time of the last check; `None` before the first.
    checked_ns: Option<u64>,
}

impl Losses {
    /// At most once per [`CHECK_EVERY_NS`]: reads the counters (`read`; `None` when they
    /// cannot be) and returns the notices of what grew. Not due, `read` is not called.
    pub fn poll(
        &mut self,
        now_ns: u64,
        read: impl FnOnce() -> Option<KernelCounters>,
    ) -> Vec<Notice> {
        let due = self
            .checked_ns
            .is_none_or(|t| now_ns.saturating_sub(t) >= CHECK_EVERY_NS);
        if !due {
            return Vec::new();
        }
        self.checked_ns = Some(now_ns);
        read().map_or_else(Vec::new, |now| self.check(&now, now_ns))
    }

    /// The notices of what grew since the last check, whenever it was (the agent stopping).
    pub fn check(&mut self, now: &KernelCounters, ts_ns: u64) -> Vec<Notice> {
        let before = std::mem::replace(&mut self.lost, now.lost.clone());
        let was = |kind| {
            before
                .iter()
                .find(|(k, _)| *k == kind)
                .map_or(0, |(_, n)| *n)
        };
        let lost: Vec<(EventKind, u64)> = now
            .lost
            .iter()
            .map(|&(kind, n)| (kind, n.saturating_sub(was(kind))))
            .filter(|(_, n)| *n > 0)
            .collect();
        let map_full = now.get(Counter::MapFull);
        let refused = map_full.saturating_sub(std::mem::replace(&mut self.map_full, map_full));
        let mut notices = Vec::new();
        if !lost.is_empty() {
            let total = lost.iter().map(|(_, n)| n).sum();
            notices.push(Notice::EventsLost { lost, total, ts_ns });
        }
        if refused > 0 {
            notices.push(Notice::LiveTableFull { refused, ts_ns });
        }
        notices
    }
}

/// Whether scans fail, so that one failing for the same reason at every interval (a kernel
/// without `unix_diag`) is said once, and its recovery once: in the log and as a notice. The
/// failure counter counts every one.
#[derive(Debug, Default)]
pub struct ScanHealth {
    /// The reason last said, and how many scans in a row failed.
    failing: Option<(String, u64)>,
}

impl ScanHealth {
    /// The startup scan failed (its own log line says so): the sweeps say the same reason
    /// no more.
    pub fn startup_failed(why: String, ts_ns: u64) -> (Self, Notice) {
        let mut health = Self::default();
        let notice = health.fail(Scan::Startup, why, ts_ns);
        (health, notice.expect("the first failure is new"))
    }

    /// A sweep failed: said (one WARN line, and the notice returned) when its reason is new.
    pub fn failed(&mut self, why: String, ts_ns: u64) -> Option<Notice> {
        let notice = self.fail(Scan::Periodic, why.clone(), ts_ns);
        if notice.is_some() {
            log::warn!(
                "sweep failed: {why} (said again only if the reason changes; \
                 sockwatch_scan_failures_total counts each)"
            );
        } else {
            let n = self.failing.as_ref().map_or(0, |(_, n)| *n);
            log::debug!("sweep failed again ({n} in a row): {why}");
        }
        notice
    }

    fn fail(&mut self, scan: Scan, why: String, ts_ns: u64) -> Option<Notice> {
        let (said, n) = self.failing.take().unwrap_or_default();
        let new = n == 0 || said != why;
        self.failing = Some((why.clone(), n + 1));
        new.then_some(Notice::ScanFailed {
            scan,
            reason: why,
            ts_ns,
        })
    }

    /// A scan succeeded: the recovery, said once, after failures.
    pub fn succeeded(&mut self, ts_ns: u64) -> Option<Notice> {
        let (_, failed_scans) = self.failing.take()?;
        log::info!(
            "sweep recovered after {failed_scans} failed scans: the sockets it found are adopted"
        );
        Some(Notice::ScanRecovered {
            failed_scans,
            ts_ns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counters with these losses per kind and this `map_full`.
    fn counters(lost: &[(EventKind, u64)], map_full: u64) -> KernelCounters {
        KernelCounters {
            other: vec![(Counter::MapFull, map_full), (Counter::ReadFailed, 7)],
            emitted: EventKind::ALL.iter().map(|&k| (k, 1_000)).collect(),
            lost: EventKind::ALL
                .iter()
                .map(|&k| (k, lost.iter().find(|(l, _)| *l == k).map_or(0, |(_, n)| *n)))
                .collect(),
        }
    }

    fn line(n: &Notice) -> String {
        serde_json::to_string(n).expect("serde")
    }

    #[test]
    fn each_notice_says_what_grew_since_the_last_one() {
        use EventKind::{Bind, Exit, Release};
        let mut w = Losses::default();
        assert_eq!(w.check(&counters(&[], 0), 1), [], "nothing lost yet");
        let first = w.check(&counters(&[(Bind, 3), (Release, 5)], 2), 2);
        assert_eq!(
            first.iter().map(line).collect::<Vec<_>>(),
            [
                r#"{"notice":"events_lost","lost":{"bind":3,"release":5},"total":8,"ts_ns":2}"#,
                r#"{"notice":"live_table_full","refused":2,"ts_ns":2}"#,
            ]
        );
        let second = w.check(&counters(&[(Bind, 3), (Release, 6), (Exit, 4)], 2), 3);
        assert_eq!(
            second,
            [Notice::EventsLost {
                lost: vec![(Release, 1), (Exit, 4)],
                total: 5,
                ts_ns: 3
            }],
            "bind lost no more, the table refused no more"
        );
        assert_eq!(
            w.check(&counters(&[(Bind, 3), (Release, 6), (Exit, 4)], 2), 4),
            []
        );
        let third = w.check(&counters(&[(Bind, 3), (Release, 6), (Exit, 4)], 9), 5);
        assert_eq!(
            third,
            [Notice::LiveTableFull {
                refused: 7,
                ts_ns: 5
            }]
        );
    }

    #[test]
    fn losses_are_read_at_most_once_a_second() {
        let mut w = Losses::default();
        let lost = |n| Some(counters(&[(EventKind::Bind, n)], 0));
        let totals = |notices: Vec<Notice>| -> Vec<u64> {
            notices
                .iter()
                .map(|n| match n {
                    Notice::EventsLost { total, .. } => *total,
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        assert_eq!(totals(w.poll(10, || lost(1))), [1], "the first tick checks");
        let too_soon = w.poll(9 + CHECK_EVERY_NS, || panic!("read within the second"));
        assert_eq!(too_soon, []);
        let next = w.poll(10 + CHECK_EVERY_NS, || lost(3));
        assert_eq!(totals(next), [2], "what grew since the first check");
        assert_eq!(w.poll(10 + 2 * CHECK_EVERY_NS, || None), [], "unreadable");
        let after = w.poll(11 + 2 * CHECK_EVERY_NS, || {
            panic!("an unreadable check counts")
        });
        assert_eq!(after, []);
    }

    #[test]
    fn a_missing_hook_says_what_is_missed_and_why_each_tier_was_refused() {
        let report = |attached| HookReport {
            hook: Hook::Connect,
            attached,
            refused: vec![
                (
                    Tier::Fentry,
                    "BPF_PROG_LOAD failed: Permission denied".into(),
                ),
                (Tier::Tracepoint, "no such tracepoint".into()),
            ],
            degraded: Vec::new(),
            programs: Vec::new(),
        };
        assert_eq!(Notice::hook_missing(&report(Some(Tier::Kprobe)), 1), None);
        let n = Notice::hook_missing(&report(None), 42).expect("missing");
        assert_eq!(
            line(&n),
            format!(
                r#"{{"notice":"hook_missing","hook":"connect","missed":"{}","refused":[{{"tier":"fentry","reason":"BPF_PROG_LOAD failed: Permission denied"}},{{"tier":"tracepoint","reason":"no such tracepoint"}}],"ts_ns":42}}"#,
                Hook::Connect.missed_without()
            )
        );
        assert_eq!(n.ts_ns(), 42);
    }

    #[test]
    fn a_scan_failure_is_said_once_per_reason_and_its_recovery_once() {
        let (mut h, first) = ScanHealth::startup_failed("no unix_diag".into(), 1);
        assert_eq!(
            line(&first),
            r#"{"notice":"scan_failed","scan":"startup","reason":"no unix_diag","ts_ns":1}"#
        );
        assert_eq!(h.failed("no unix_diag".into(), 2), None, "said already");
        let other = h.failed("EMFILE".into(), 3).expect("a new reason");
        assert_eq!(
            line(&other),
            r#"{"notice":"scan_failed","scan":"periodic","reason":"EMFILE","ts_ns":3}"#
        );
        assert_eq!(h.failed("EMFILE".into(), 4), None);
        let back = h.succeeded(5).expect("recovered");
        assert_eq!(
            line(&back),
            r#"{"notice":"scan_recovered","failed_scans":4,"ts_ns":5}"#
        );
        assert_eq!(h.succeeded(6), None, "recovered once");
        assert!(
            h.failed("no unix_diag".into(), 7).is_some(),
            "after a success the old reason is new again"
        );
    }
}
