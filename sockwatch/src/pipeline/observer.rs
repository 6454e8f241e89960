//! Who learns what the pipeline did: the metrics in `run`, nobody in `replay`.
use std::sync::Arc;

use sockwatch_common::EventKind;

use crate::{config::Config, engine::Verdict, events::KernelEvent, metrics::Metrics};

/// What the pipeline reports as it goes; every method does nothing unless implemented.
pub trait Observer: Send {
    /// An event, complete, before the engine sees it.
    fn event(&self, _ev: &KernelEvent) {}
    /// A ring-buffer record that did not decode.
    fn decode_error(&self) {}
    /// The handling of an event panicked; the event was skipped.
    fn event_failed(&self, _kind: EventKind) {}
    /// A verdict written.
    fn verdict(&self, _v: &Verdict) {}
    /// A verdict not written: its socket is closed (no release hook).
    fn withheld(&self, _v: &Verdict) {}
    /// A sweep removed `n` stale entries from the kernel's `table`.
    fn kernel_pruned(&self, _table: &str, _n: usize) {}
    /// The events file could not be reopened.
    fn events_file_reopen_failed(&self) {}
    /// Lines the output refused (a full disk, a closed pipe).
    fn output_dropped(&self, _lines: u64) {}
}

/// A replay: what it decides is written, not counted.
pub struct Unobserved;

impl Observer for Unobserved {}

/// `run`: everything counted in the metrics, verdicts labelled with the watch of their path.
pub struct Counted {
    pub metrics: Arc<Metrics>,
    pub config: Arc<Config>,
}

impl Observer for Counted {
    fn event(&self, ev: &KernelEvent) {
        self.metrics.event(ev);
    }
    fn decode_error(&self) {
        self.metrics.decode_error();
    }
    fn event_failed(&self, kind: EventKind) {
        self.metrics.event_failed(kind);
    }
    fn verdict(&self, v: &Verdict) {
        let watch = self.config.watch_of(v.path().unwrap_or_default());
        self.metrics.verdict(v, watch);
    }
    fn withheld(&self, v: &Verdict) {
        self.metrics.withheld(v);
    }
    fn kernel_pruned(&self, table: &str, n: usize) {
        self.metrics.kernel_pruned(table, n);
    }
    fn events_file_reopen_failed(&self) {
        self.metrics.events_file_reopen_failed();
    }
    fn output_dropped(&self, lines: u64) {
        self.metrics.output_dropped(lines);
    }
}
