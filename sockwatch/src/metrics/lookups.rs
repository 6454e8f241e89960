//! The lookup pool's counters (`host::lookup`), read at scrape time: the pool is the
//! process's own, shared by events and scans.
use prometheus::{
    core::{Collector, Desc},
    proto::MetricFamily,
};

use super::{
    collect::family,
    specs::{LOOKUP_REFUSALS, LOOKUP_SKIPS, LOOKUP_TIMEOUTS, Spec},
};
use crate::host::lookup::{self, Tally};

/// The metrics each scrape reads from the lookup pool.
pub const LOOKUP_SPECS: [&Spec; 3] = [&LOOKUP_TIMEOUTS, &LOOKUP_REFUSALS, &LOOKUP_SKIPS];

pub struct LookupCollector {
    descs: Vec<Desc>,
}

impl Default for LookupCollector {
    fn default() -> Self {
        Self {
            descs: LOOKUP_SPECS.iter().map(|s| s.desc()).collect(),
        }
    }
}

impl Collector for LookupCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let tally = lookup::tally();
        let by_kind = |count: fn(&Tally) -> u64| {
            tally
                .iter()
                .map(|(kind, t)| ([kind.name()], count(t) as f64))
                .collect::<Vec<_>>()
        };
        vec![
            family(&LOOKUP_TIMEOUTS, by_kind(|t| t.timeouts)),
            family(&LOOKUP_REFUSALS, by_kind(|t| t.refused)),
            family(&LOOKUP_SKIPS, by_kind(|t| t.skipped)),
        ]
    }
}
