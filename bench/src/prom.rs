//! The Prometheus text exposition, read back: the bench's scrapes and the agent's tests.
use std::collections::BTreeMap;

/// One scrape: each series (name and labels, as printed) and its value.
#[derive(Clone, Debug, Default)]
pub struct Exposition {
    /// `name{labels}` → value.
    pub series: BTreeMap<String, f64>,
    /// Size of the text.
    pub bytes: usize,
}

impl Exposition {
    /// Reads every sample line; comments, blank lines and unparsable values are skipped.
    pub fn parse(text: &str) -> Exposition {
        let sample = |l: &str| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        };
        let lines = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty());
        Exposition {
            series: lines.filter_map(sample).collect(),
            bytes: text.len(),
        }
    }

    /// The value of one series, named exactly as printed (`name{labels}`).
    pub fn value(&self, series: &str) -> Option<f64> {
        self.series.get(series).copied()
    }

    /// The sum of the series of metric `name` whose labels include every `label="value"`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let named = |k: &str| {
            k.strip_prefix(name)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('{'))
        };
        let labelled = |k: &str| {
            labels
                .iter()
                .all(|(l, v)| k.contains(&format!("{l}=\"{v}\"")))
        };
        self.series
            .iter()
            .filter(|(k, _)| named(k) && labelled(k))
            .map(|(_, v)| v)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_series_and_sums_by_label() {
        let e = Exposition::parse(
            "# HELP x doc\n# TYPE x counter\nx{a=\"1\",b=\"2\"} 3\nx{a=\"1\",b=\"3\"} 4\ny 5\nx_other 9\n\n",
        );
        assert_eq!(
            (e.value("y"), e.value("x"), e.series.len()),
            (Some(5.0), None, 4)
        );
        assert_eq!(
            (
                e.sum("x", &[("a", "1")]),
                e.sum("x", &[("b", "3")]),
                e.sum("x", &[])
            ),
            (7.0, 4.0, 7.0)
        );
        assert_eq!(e.sum("y", &[]), 5.0);
    }
}
