//! The client library's metric vectors, made from specs and registered.
use prometheus::{IntCounterVec, IntGaugeVec, Registry, core::Collector};

use super::specs::{Kind, Spec};

/// Registers a metric and hands it back.
pub fn registered<M: Collector + Clone + 'static>(registry: &Registry, metric: M) -> M {
    registry
        .register(Box::new(metric.clone()))
        .expect("registered once");
    metric
}

pub fn counter(registry: &Registry, spec: &Spec) -> IntCounterVec {
    debug_assert_eq!(spec.kind, Kind::Counter, "{}", spec.name);
    let vec = IntCounterVec::new(spec.opts(), spec.labels).expect("valid spec");
    registered(registry, vec)
}

pub fn gauge(registry: &Registry, spec: &Spec) -> IntGaugeVec {
    debug_assert_eq!(spec.kind, Kind::Gauge, "{}", spec.name);
    let vec = IntGaugeVec::new(spec.opts(), spec.labels).expect("valid spec");
    registered(registry, vec)
}
