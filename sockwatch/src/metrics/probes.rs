//! What the build is and what attached: gauges set once at start-up.
use prometheus::{IntGaugeVec, Registry};

use super::{
    Metrics,
    specs::{BUILD_INFO, HOOK_MISSING, PROBE_ATTACHED, PROBE_DEGRADED, PROBE_FALLBACK},
    vecs::gauge,
};
use crate::kernel::{loader::HookReport, probes::PROBES};

pub(super) struct ProbeGauges {
    attached: IntGaugeVec,
    fallback: IntGaugeVec,
    degraded: IntGaugeVec,
    missing: IntGaugeVec,
}

impl ProbeGauges {
    /// Registers the probe gauges and the build's, which is set right away.
    pub(super) fn register(registry: &Registry) -> Self {
        gauge(registry, &BUILD_INFO)
            .with_label_values(&[env!("CARGO_PKG_VERSION"), git_revision()])
            .set(1);
        Self {
            attached: gauge(registry, &PROBE_ATTACHED),
            fallback: gauge(registry, &PROBE_FALLBACK),
            degraded: gauge(registry, &PROBE_DEGRADED),
            missing: gauge(registry, &HOOK_MISSING),
        }
    }
}

impl Metrics {
    /// What attached: every tier of every hook in [`PROBES`] is exported, 1 or 0.
    pub fn probes(&self, report: &[HookReport]) {
        let gauges = &self.probes;
        for spec in PROBES {
            let hook = spec.hook.name();
            let r = report.iter().find(|r| r.hook == spec.hook);
            let attached = r.and_then(|r| r.attached);
            for t in spec.tiers {
                gauges
                    .attached
                    .with_label_values(&[hook, t.tier.name()])
                    .set(i64::from(attached == Some(t.tier)));
            }
            let level = spec
                .tiers
                .iter()
                .position(|t| Some(t.tier) == attached)
                .unwrap_or(spec.tiers.len());
            gauges.fallback.with_label_values(&[hook]).set(level as i64);
            gauges
                .degraded
                .with_label_values(&[hook])
                .set(i64::from(r.is_some_and(|r| !r.degraded.is_empty())));
            gauges
                .missing
                .with_label_values(&[hook])
                .set(i64::from(attached.is_none()));
        }
    }
}

/// The git revision baked in at build time (`SOCKWATCH_GIT_REVISION`), or "unknown".
pub(super) fn git_revision() -> &'static str {
    match option_env!("SOCKWATCH_GIT_REVISION") {
        Some(r) if !r.is_empty() => r,
        _ => "unknown",
    }
}
