//! Order statistics for the report: quantiles by linear interpolation, medians and spreads.

/// The `q` quantile (0..=1) of `values`, linearly interpolated between order statistics;
/// `None` for no values.
pub fn quantile(values: &[f64], q: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    Some(v[lo] + (v[hi] - v[lo]) * (pos - lo as f64))
}

/// Median and interquartile range of a sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub p25: f64,
    pub p50: f64,
    pub p75: f64,
    pub n: usize,
}

impl Spread {
    pub fn of(values: &[f64]) -> Option<Spread> {
        Some(Spread {
            p25: quantile(values, 0.25)?,
            p50: quantile(values, 0.5)?,
            p75: quantile(values, 0.75)?,
            n: values.len(),
        })
    }
}

/// The median of `values` (NaN for none): used for the repetitions inside one round.
pub fn median(values: &[f64]) -> f64 {
    quantile(values, 0.5).unwrap_or(f64::NAN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate() {
        let v = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(quantile(&v, 0.0), Some(1.0));
        assert_eq!(quantile(&v, 1.0), Some(4.0));
        assert_eq!(quantile(&v, 0.5), Some(2.5));
        assert_eq!(quantile(&[7.0], 0.99), Some(7.0));
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
    }

    #[test]
    fn spread_of_a_sample() {
        let v: Vec<f64> = (1..=101).map(f64::from).collect();
        let s = Spread::of(&v).expect("values");
        assert_eq!((s.p25, s.p50, s.p75, s.n), (26.0, 51.0, 76.0, 101));
        assert!(Spread::of(&[f64::NAN]).is_none());
    }
}
