//! Families built at scrape time from values read just then, for the collectors.
use prometheus::proto::{self, LabelPair, Metric, MetricFamily};

use super::specs::{Kind, Spec};

/// A family of `spec` with one series per `(labels, value)` row; `labels` are the values of
/// the spec's label names, in their order.
pub fn family<L, S>(spec: &Spec, rows: impl IntoIterator<Item = (L, f64)>) -> MetricFamily
where
    L: AsRef<[S]>,
    S: AsRef<str>,
{
    let mut family = spec.empty_family();
    let series = rows
        .into_iter()
        .map(|(labels, value)| series(spec, labels.as_ref(), value));
    family.set_metric(series.collect());
    family
}

/// A family of one series without labels.
pub fn single(spec: &Spec, value: f64) -> MetricFamily {
    family::<[&str; 0], &str>(spec, [([], value)])
}

fn series(spec: &Spec, labels: &[impl AsRef<str>], value: f64) -> Metric {
    debug_assert_eq!(labels.len(), spec.labels.len(), "{}", spec.name);
    let mut pairs: Vec<LabelPair> = spec
        .labels
        .iter()
        .zip(labels)
        .map(|(name, value)| {
            let mut pair = LabelPair::default();
            pair.set_name(name.to_string());
            pair.set_value(value.as_ref().to_string());
            pair
        })
        .collect();
    // The client library's own vectors list label pairs by name; so do these.
    pairs.sort_by(|a, b| a.name().cmp(b.name()));
    let mut metric = Metric::from_label(pairs);
    match spec.kind {
        Kind::Counter => {
            let mut counter = proto::Counter::default();
            counter.set_value(value);
            metric.set_counter(counter);
        }
        Kind::Gauge => {
            let mut gauge = proto::Gauge::default();
            gauge.set_value(value);
            metric.set_gauge(gauge);
        }
        Kind::Histogram => unreachable!("{}: histograms are pushed, not collected", spec.name),
    }
    metric
}
