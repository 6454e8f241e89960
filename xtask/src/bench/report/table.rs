//! Markdown tables and the cells every section writes: signed ns, yes/no, quantiles, verdicts.
use crate::bench::quantile;

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
