//! Unit tests of the metrics, and the fixtures they share.
mod collectors;
mod hot;
mod reference;

use std::sync::{Arc, Mutex};

use sockwatch_common::{Counter, EventKind, Tier};

use super::{EngineSnapshot, EngineSource, KernelSource, Metrics};
use crate::{
    config::{Config, WatchConfig},
    engine::{DecidedBy, Fidelity, FileId, Proc, Relation, Verdict},
    events::KernelEvent,
    kernel::counters::KernelCounters,
};

/// The value of one series in `text`, by its exact `name{labels}`.
fn value(text: &str, series: &str) -> Option<f64> {
    sockwatch_bench::prom::Exposition::parse(text).value(series)
}

/// Asserts the value of each `(series, value)` in `text`.
fn assert_values(text: &str, want: &[(&str, f64)]) {
    for (series, want) in want {
        assert_eq!(value(text, series), Some(*want), "{series} in\n{text}");
    }
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
        stale_owner: false,
    }
}

/// Counters as the loader reads them: every kind and counter, `lost` unlinks, the rest 0.
fn kernel_counters(lost: u64, map_full: u64, connects_ok: u64) -> KernelCounters {
    let count = |c: Counter| match c {
        Counter::MapFull => map_full,
        Counter::ConnectOk => connects_ok,
        _ => 0,
    };
    let unlinks = |n: u64| move |k: &EventKind| (*k, if *k == EventKind::Unlink { n } else { 0 });
    KernelCounters {
        other: Counter::ALL.iter().map(|&c| (c, count(c))).collect(),
        emitted: EventKind::ALL.iter().map(unlinks(100)).collect(),
        lost: EventKind::ALL.iter().map(unlinks(lost)).collect(),
    }
}

impl KernelSource for Mutex<KernelCounters> {
    fn counters(&self) -> Option<KernelCounters> {
        Some(self.lock().expect("kernel counters").clone())
    }
}

impl EngineSource for Mutex<EngineSnapshot> {
    fn snapshot(&self) -> EngineSnapshot {
        self.lock().expect("engine snapshot").clone()
    }
}

/// Metrics reading the two sources it returns (which it does not keep alive), its watches
/// named by `config`.
struct Scraped {
    metrics: Metrics,
    kernel: Arc<Mutex<KernelCounters>>,
    engine: Arc<Mutex<EngineSnapshot>>,
}

impl Scraped {
    fn new(config: Config) -> Self {
        let metrics = Metrics::new();
        metrics.watches(config.watch_names());
        let kernel = Arc::new(Mutex::new(kernel_counters(0, 0, 0)));
        let engine = Arc::new(Mutex::new(EngineSnapshot::default()));
        metrics.collect_kernel(&kernel);
        metrics.collect_engine(&engine, Arc::new(config));
        Self {
            metrics,
            kernel,
            engine,
        }
    }

    fn render(&self) -> String {
        self.metrics.render()
    }
}

/// A configuration watching each `(name, directory)`.
fn watching(watches: &[(&str, &str)]) -> Config {
    Config {
        watches: watches
            .iter()
            .map(|(name, path)| WatchConfig {
                name: name.to_string(),
                path: path.into(),
                guard: Default::default(),
            })
            .collect(),
        ..Config::default()
    }
}
