//! Prometheus metrics: one [`Registry`] owned by [`Metrics`], no global state.
//!
//! Every metric is declared once in [`specs`]: the registry is built from those rows and
//! [`Metrics::describe`] (and so `docs/metrics.md`) reads them. Counters of what the agent
//! sees are pushed as it sees it ([`hot`]); the kernel's counters and the engine's state are
//! read when scraped, by collectors over a [`KernelSource`] and an [`EngineSource`]. Labels
//! come from bounded sets only ([`labels`]; `watch` is capped by [`watch::WatchLabels`]):
//! never pids, inodes or paths.
mod collect;
mod engine;
mod hot;
mod kernel;
mod labels;
mod lookups;
mod probes;
#[cfg(target_os = "linux")]
mod process;
mod reference;
mod specs;
mod vecs;
mod watch;

#[cfg(test)]
mod tests;

use std::sync::{Arc, Weak};

use prometheus::{Encoder as _, Registry, TextEncoder};

pub use engine::{EngineSnapshot, EngineSource, MapFill};
pub use kernel::KernelSource;
pub use labels::{GuardState, Label, Scan};
pub use reference::{Described, reference_markdown};

use crate::config::Config;

/// The agent's metrics. Cheap to share behind an `Arc`; every method takes `&self`.
pub struct Metrics {
    registry: Registry,
    watches: Arc<watch::WatchLabels>,
    hot: hot::HotCounters,
    probes: probes::ProbeGauges,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers the pushed metrics (series of known label sets at 0) and the process's.
    pub fn new() -> Self {
        let registry = Registry::new();
        let m = Self {
            hot: hot::HotCounters::register(&registry),
            probes: probes::ProbeGauges::register(&registry),
            watches: Arc::default(),
            registry,
        };
        #[cfg(target_os = "linux")]
        m.registry
            .register(Box::new(process::ProcessMetrics::for_self()))
            .expect("registered once");
        m.registry
            .register(Box::new(lookups::LookupCollector::default()))
            .expect("registered once");
        m.watches([crate::config::NO_WATCH]);
        m
    }

    /// Reads the kernel's counters from `source` at every scrape (without keeping it alive).
    pub fn collect_kernel<S: KernelSource + 'static>(&self, source: &Arc<S>) {
        let source: Weak<dyn KernelSource> = Arc::<S>::downgrade(source);
        let collector = kernel::KernelCollector::new(source);
        self.registry
            .register(Box::new(collector))
            .expect("registered once");
    }

    /// Reads the engine's state from `source` at every scrape (without keeping it alive);
    /// `config` names the watch of each orphan.
    pub fn collect_engine<S: EngineSource + 'static>(&self, source: &Arc<S>, config: Arc<Config>) {
        let source: Weak<dyn EngineSource> = Arc::<S>::downgrade(source);
        let collector = engine::EngineCollector::new(source, self.watches.clone(), config);
        self.registry
            .register(Box::new(collector))
            .expect("registered once");
    }

    /// Creates every series of these watches at 0 (call it with the configured watch names at
    /// start-up): a counter series born with its first increment is invisible to `increase()`.
    /// Names past the label bound fold into `other`.
    pub fn watches<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        for name in names {
            self.watch_label(name);
        }
    }

    /// The bounded label value for `watch`, creating its series on first sight.
    fn watch_label(&self, watch: &str) -> String {
        let (label, new) = self.watches.admit(watch);
        if new {
            self.hot.watch_series(&label);
        }
        label
    }

    /// Every metric in the Prometheus text exposition format (0.0.4).
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("text encoding of gathered metrics");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
}
