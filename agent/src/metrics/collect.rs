//! Families built at scrape time from values read just then, for the collectors.
use prometheus::proto::{self, LabelPair, Metric, MetricFamily};

use super::specs::{Kind, Spec};

/// One family of a [`Spec`], filled series by series.
pub struct Family {
    spec: &'static Spec,
    family: MetricFamily,
}

impl Family {
    pub fn new(spec: &'static Spec) -> Self {
        Self {
            spec,
            family: spec.family(),
        }
    }

    /// Adds one series; `labels` are the values of the spec's label names, in their order.
    pub fn add(&mut self, labels: &[impl AsRef<str>], value: f64) {
        debug_assert_eq!(labels.len(), self.spec.labels.len(), "{}", self.spec.name);
        let mut pairs: Vec<LabelPair> = self
            .spec
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
        match self.spec.kind {
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
            Kind::Histogram => unreachable!("{}: histograms are pushed", self.spec.name),
        }
        self.family.mut_metric().push(metric);
    }

    pub fn into_family(self) -> MetricFamily {
        self.family
    }
}

/// A family with one series per `(labels, value)` row.
pub fn family<L, S>(spec: &'static Spec, rows: impl IntoIterator<Item = (L, f64)>) -> MetricFamily
where
    L: AsRef<[S]>,
    S: AsRef<str>,
{
    let mut family = Family::new(spec);
    for (labels, value) in rows {
        family.add(labels.as_ref(), value);
    }
    family.into_family()
}

/// A family of one series without labels.
pub fn single(spec: &'static Spec, value: f64) -> MetricFamily {
    family::<[&str; 0], &str>(spec, [([], value)])
}
