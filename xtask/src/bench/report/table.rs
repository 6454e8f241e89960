//! Markdown tables and the cells every section writes: signed ns, yes/no, quantiles, verdicts.
use crate::bench::{Interval, quantile};

/// Issue 38's node tax: what an operation that concerns no watched socket may pay above the
/// floor, in points of its time with no observer.
pub const NODE_TAX_POINTS: f64 = 3.0;

/// A markdown table: the header, a rule per column (`r` in `align` right-aligns it), the rows,
/// and a blank line.
pub fn table(
    s: &mut String,
    head: &[&str],
    align: &str,
    rows: impl IntoIterator<Item = Vec<String>>,
) {
    let rule = align.chars().map(|c| if c == 'r' { "---:" } else { "---" });
    let rule: Vec<String> = rule.map(String::from).collect();
    let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
    *s += &line(&head.iter().map(ToString::to_string).collect::<Vec<_>>());
    *s += &line(&rule);
    for r in rows {
        *s += &line(&r);
    }
    s.push('\n');
}

/// Signed nanoseconds.
pub fn ns(x: f64) -> String {
    format!("{x:+.0} ns")
}

/// `yes`, or a bold `no`.
pub fn yes(b: bool) -> String {
    if b { "yes" } else { "**no**" }.into()
}

/// Quantile `q` of `values` with `unit`, two decimals.
pub fn q2(values: &[f64], q: f64, unit: &str) -> String {
    quantile(values, q).map_or("—".into(), |v| format!("{v:.2} {unit}"))
}

/// `met`, or `**missed** by` how much `got` exceeds `limit`.
pub fn at_most(got: f64, limit: f64, show: impl Fn(f64) -> String) -> String {
    if got <= limit {
        "met".into()
    } else {
        format!("**missed** by {}", show(got - limit))
    }
}

/// Points with their interval: `+1.2 (−0.5 … +2.9)`.
pub fn points(i: Interval) -> String {
    format!("{:+.1} ({:+.1} … {:+.1})", i.p50, i.low, i.high)
}

/// Is the measured quantity at most `limit`? Yes when the whole interval is, no when none of
/// it is, and undecided when it holds the limit: the rounds' noise is wider than the question.
pub fn at_most_decided(i: Interval, limit: f64) -> Option<bool> {
    match (i.high <= limit, i.low > limit) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    }
}
