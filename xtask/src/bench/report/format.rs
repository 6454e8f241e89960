//! How the report writes numbers.
use crate::bench::stats::quantile;

/// Quantile `q` of `secs`, in seconds.
pub fn secs_q(secs: &[f64], q: f64) -> String {
    quantile(secs, q).map_or("n/a".into(), |v| format!("{v:.2} s"))
}

/// `yes`, or a bold `no`.
pub fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "**no**" }
}

/// Signed nanoseconds.
pub fn ns(x: f64) -> String {
    format!("{x:+.0} ns")
}

/// Quantile `q` of `ms`, in milliseconds.
pub fn ms_q(ms: &[f64], q: f64) -> String {
    quantile(ms, q).map_or("—".into(), |v| format!("{v:.2} ms"))
}
