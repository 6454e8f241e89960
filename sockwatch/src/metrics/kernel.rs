//! The kernel side's counters, read from its per-CPU map at scrape time.
use std::sync::Weak;

use prometheus::{
    core::{Collector, Desc},
    proto::MetricFamily,
};
use sockwatch_common::Counter;

use super::{
    collect::{family, single},
    labels::kernel_errors,
    specs::{CONNECTS_OK, EVENTS_LOST, EVENTS_SUBMITTED, GUARD_KERNEL, KERNEL_ERRORS, Spec},
};
use crate::kernel::counters::KernelCounters;

/// Where the kernel's counters are read from, once per scrape.
pub trait KernelSource: Send + Sync {
    /// The counters now, summed over CPUs; `None` when they cannot be read (the scrape then
    /// goes without them).
    fn counters(&self) -> Option<KernelCounters>;
}

/// The metrics each scrape reads from a [`KernelSource`].
pub const KERNEL_SPECS: [&Spec; 5] = [
    &EVENTS_SUBMITTED,
    &EVENTS_LOST,
    &KERNEL_ERRORS,
    &CONNECTS_OK,
    &GUARD_KERNEL,
];

/// The guard's kernel counters, by their `decision` label.
pub const GUARD_DECISIONS: [(&str, Counter); 3] = [
    ("denied", Counter::GuardDenied),
    ("would_deny", Counter::GuardWouldDeny),
    ("unknown", Counter::GuardUnknown),
];

/// Exports the kernel's totals as they are: the kernel counts, this only reads. A source
/// that is gone (the agent is stopping) yields nothing.
pub struct KernelCollector {
    source: Weak<dyn KernelSource>,
    descs: Vec<Desc>,
}

impl KernelCollector {
    pub fn new(source: Weak<dyn KernelSource>) -> Self {
        Self {
            source,
            descs: KERNEL_SPECS.iter().map(|s| s.desc()).collect(),
        }
    }
}

impl Collector for KernelCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Some(c) = self.source.upgrade().and_then(|s| s.counters()) else {
            return Vec::new();
        };
        let by_kind = |totals: &[(sockwatch_common::EventKind, u64)]| {
            totals
                .iter()
                .map(|(kind, n)| ([kind.name()], *n as f64))
                .collect::<Vec<_>>()
        };
        vec![
            family(&EVENTS_SUBMITTED, by_kind(&c.emitted)),
            family(&EVENTS_LOST, by_kind(&c.lost)),
            family(
                &KERNEL_ERRORS,
                kernel_errors().map(|r| ([r.name()], c.get(r) as f64)),
            ),
            single(&CONNECTS_OK, c.get(Counter::ConnectOk) as f64),
            family(
                &GUARD_KERNEL,
                GUARD_DECISIONS.map(|(name, r)| ([name], c.get(r) as f64)),
            ),
        ]
    }
}
