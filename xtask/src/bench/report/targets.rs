//! The targets the bench checks (issue 6), each with what was measured and a verdict.
use std::fmt::Write as _;

use super::{before::Before, format::ns};
use crate::bench::{
    footprint::Footprint,
    latency::Latency,
    overhead::Overhead,
    plan::{Op, UNRELATED, Variant},
    stats::{Spread, quantile},
    throughput::Throughput,
};

/// Issue 12's most agent CPU per event at 50,000 events/s, µs.
pub const AGENT_CPU_US: f64 = 1.5;

/// Issue 38's node tax: points an unrelated operation may pay above its floor.
const NODE_TAX_POINTS: f64 = 3.0;

/// "Flat in the socket count": the p50 scrape with the held sockets at most this many times
/// the p50 with none.
const SCRAPE_FLAT: f64 = 1.5;

/// How the targets on sockwatch's per-operation cost begin.
const OVERHEAD_TARGETS: [&str; 2] = ["tracepoint tier", "cheaper than the bpftrace"];

pub struct Target {
    pub what: String,
    pub measured: String,
    pub verdict: Verdict,
    /// The row's name in reports before the target was tightened, for the "before" column.
    formerly: Option<&'static str>,
}

impl Target {
    fn new(what: impl Into<String>, measured: impl Into<String>, verdict: Verdict) -> Target {
        Target {
            what: what.into(),
            measured: measured.into(),
            verdict,
            formerly: None,
        }
    }

    fn formerly(self, name: &'static str) -> Target {
        Target {
            formerly: Some(name),
            ..self
        }
    }

    /// What `before` measured for this target, under its name then or now.
    fn before<'a>(&self, before: &'a Before) -> &'a str {
        match (before.measured(&self.what), self.formerly) {
            ("—", Some(old)) => before.measured(old),
            (was, _) => was,
        }
    }
}

/// Every target whose phase ran, in the report's order.
pub fn all(
    overhead: Option<&Overhead>,
    throughput: Option<&Throughput>,
    footprint: Option<&Footprint>,
    latency: Option<&Latency>,
) -> Vec<Target> {
    let mut t = Vec::new();
    if let Some(o) = overhead {
        t.extend(tracepoint_tier(o));
        t.extend(versus(
            o,
            Variant::Bpftrace,
            "cheaper than the bpftrace script",
            1.0,
        ));
        let auditd = "far cheaper than auditd (≤ ⅓ of its added cost)";
        t.extend(versus(o, Variant::Auditd, auditd, 1.0 / 3.0));
        let floor = "within 2× the empty-program floor (issue 12)";
        t.extend(versus(o, Variant::Floor, floor, 2.0));
        t.extend(unrelated_syscall(o));
        t.extend(node_tax(o));
        t.extend(cycle_to_floor(o));
        t.extend(programs_to_floor(o));
    }
    if let Some(th) = throughput {
        t.extend(sustained(th));
    }
    if let Some(f) = footprint {
        t.extend(footprint_targets(f));
    }
    if let Some(l) = latency {
        t.extend(latency_targets(l));
    }
    t
}

/// Whether a target on sockwatch's per-operation cost was missed.
pub fn overhead_missed(targets: &[Target]) -> bool {
    targets.iter().any(|t| {
        matches!(t.verdict, Verdict::Missed(_))
            && OVERHEAD_TARGETS.iter().any(|p| t.what.starts_with(p))
    })
}

/// The targets table; with `before`, the replaced report's figure beside each.
pub fn render(s: &mut String, targets: &[Target], before: Option<&Before>) -> std::fmt::Result {
    writeln!(s, "## Targets (issues 6 and 12)\n")?;
    match before {
        Some(b) => writeln!(
            s,
            "| target | measured | before (git {}) | verdict |\n| --- | --- | --- | --- |",
            b.revision
        )?,
        None => writeln!(s, "| target | measured | verdict |\n| --- | --- | --- |")?,
    }
    for t in targets {
        let was = before.map(|b| format!(" {} |", t.before(b)));
        let was = was.as_deref().unwrap_or("");
        writeln!(
            s,
            "| {} | {} |{was} {} |",
            t.what,
            t.measured,
            t.verdict.text()
        )?;
    }
    writeln!(s)
}

/// ≤ 10 % added per socket life cycle, C and Go order.
fn tracepoint_tier(o: &Overhead) -> Vec<Target> {
    [(Op::SockCycle, "C order"), (Op::SockCycleGo, "Go order")]
        .into_iter()
        .filter_map(|(op, order)| {
            let r = Spread::of(&o.ratios(Variant::Sockwatch, op))?;
            Some(Target::new(
                format!("tracepoint tier: ≤ 10 % added per socket operation (life cycle, {order})"),
                format!("{:+.1} % (p50 of per-round ratios)", (r.p50 - 1.0) * 100.0),
                Verdict::at_most(r.p50 - 1.0, 0.10, |x| format!("{:.1} points", x * 100.0)),
            ))
        })
        .collect()
}

/// An unrelated syscall (getppid) pays only the attachment: sockwatch's time per call within
/// 10 % of the empty programs'.
fn unrelated_syscall(o: &Overhead) -> Option<Target> {
    let p50 = |v| Spread::of(o.ns.get(&(v, Op::Getppid))?).map(|s| s.p50);
    let (sw, floor) = (p50(Variant::Sockwatch)?, p50(Variant::Floor)?);
    let over = sw / floor - 1.0;
    Some(Target::new(
        "tracepoint tier: getppid(2) ≤ the empty-program floor + 10 % (issue 12)",
        format!("{sw:.0} vs {floor:.0} ns per call ({:+.1} %)", over * 100.0),
        Verdict::at_most(over, 0.10, |x| format!("{:.1} points", x * 100.0)),
    ))
}

/// Issue 38's node tax: every operation that concerns no watched socket within 3 points of
/// the floor's ratio to `off` (floor ×1.11 → sockwatch ≤ ×1.14), p50 of per-round ratios.
fn node_tax(o: &Overhead) -> Option<Target> {
    let mut shown = Vec::new();
    let mut over = Vec::new();
    for op in UNRELATED {
        let p50 = |v| Spread::of(&o.ratios(v, op)).map(|r| r.p50);
        let (Some(sw), Some(floor)) = (p50(Variant::Sockwatch), p50(Variant::Floor)) else {
            continue;
        };
        shown.push(format!("{}: ×{sw:.3} vs ×{floor:.3}", op.arg()));
        let points = (sw - floor) * 100.0;
        if points > NODE_TAX_POINTS {
            over.push(format!(
                "{} by {:.1} points",
                op.arg(),
                points - NODE_TAX_POINTS
            ));
        }
    }
    if shown.is_empty() {
        return None;
    }
    let verdict = match over.is_empty() {
        true => Verdict::Met,
        false => Verdict::Missed(over.join(", ")),
    };
    Some(Target::new(
        "node tax (issue 38): every unrelated operation ≤ 3 points above the floor's ratio to \
         off",
        shown.join("; "),
        verdict,
    ))
}

/// Issue 38: a watched socket life cycle costs at most 1.5× what the floor adds to it.
fn cycle_to_floor(o: &Overhead) -> Vec<Target> {
    [(Op::SockCycle, "C order"), (Op::SockCycleGo, "Go order")]
        .into_iter()
        .filter_map(|(op, order)| {
            let sw = o.added_ns(Variant::Sockwatch, op)?;
            let floor = o.added_ns(Variant::Floor, op).filter(|f| *f > 0.0)?;
            Some(Target::new(
                format!("watched life cycle ({order}) ≤ 1.5× the floor's added ns (issue 38)"),
                format!("{} vs {} ({:.2}×)", ns(sw), ns(floor), sw / floor),
                Verdict::at_most(sw / floor, 1.5, |x| format!("{x:.2}×")),
            ))
        })
        .collect()
}

/// Every program's run time within 2× the empty program's on its tracepoint. An empty program
/// reads no map and no kernel memory, so a program that does its work misses this by design;
/// the verdict names the worst and says so.
fn programs_to_floor(o: &Overhead) -> Option<Target> {
    let mut times: Vec<(&str, f64)> = o
        .programs
        .iter()
        .filter_map(|(name, _, avg)| Some((name.as_str(), avg / o.floor_of(name)?)))
        .collect();
    times.sort_by(|a, b| b.1.total_cmp(&a.1));
    let (worst, most) = *times.first()?;
    let within = times.iter().filter(|t| t.1 <= 2.0).count();
    let measured = format!(
        "{within} of {} programs within 2×; the most `{worst}` at {most:.1}×",
        times.len()
    );
    let verdict = if most <= 2.0 {
        Verdict::Met
    } else {
        Verdict::Missed(
            "because each program does what an empty one does not: map lookups and \
             reads of kernel memory (per operation, the floor targets above)"
                .into(),
        )
    };
    Some(Target::new(
        "every program ≤ 2× the empty program on its tracepoint (issue 12)",
        measured,
        verdict,
    ))
}

/// sockwatch's added ns per op at most `factor` times observer `v`'s, for every op; an op
/// where the per-round ratios' IQRs overlap counts as a tie when `factor` is 1.
fn versus(o: &Overhead, v: Variant, rule: &str, factor: f64) -> Option<Target> {
    if !o.variants.contains(&v) {
        return None;
    }
    let mut worse = Vec::new();
    let mut tied = Vec::new();
    let mut shown = Vec::new();
    for op in [
        Op::Unlink,
        Op::SockCycle,
        Op::SockCycleGo,
        Op::Connect,
        Op::Getppid,
    ] {
        let (Some(sw), Some(other)) = (o.added_ns(Variant::Sockwatch, op), o.added_ns(v, op))
        else {
            continue;
        };
        shown.push(format!("{}: {} vs {}", op.arg(), ns(sw), ns(other)));
        if sw > other.max(0.0) * factor && sw > 0.0 {
            // Within the spread of the per-round ratios, the order is noise.
            let r = |v| Spread::of(&o.ratios(v, op));
            match (r(Variant::Sockwatch), r(v)) {
                (Some(a), Some(b)) if factor == 1.0 && a.p25 <= b.p75 => tied.push(op.arg()),
                _ => worse.push(op.arg()),
            }
        }
    }
    let tie = if tied.is_empty() {
        String::new()
    } else {
        format!(
            "; {} higher by less than the rounds' spread (ratio IQRs overlap)",
            tied.join(", ")
        )
    };
    let verdict = if worse.is_empty() {
        Verdict::Met.with(tie)
    } else {
        Verdict::Missed(format!("not for {}{tie}", worse.join(", ")))
    };
    Some(Target::new(
        format!("{rule}, added ns per op"),
        shown.join("; "),
        verdict,
    ))
}

/// Zero loss at 50,000 events/s, and the agent's CPU per event there.
fn sustained(th: &Throughput) -> Vec<Target> {
    let at50 = th.at_50k();
    let mut t = vec![Target::new(
        "zero loss at 50,000 events/s sustained",
        at50.map_or("not reached".into(), |l| {
            format!(
                "{} lost of {} at {:.0} events/s",
                l.lost,
                l.produced,
                l.rate()
            )
        }),
        match at50 {
            Some(l) if l.lost == 0 && l.rate() >= 0.95 * 50_000.0 && l.exact => Verdict::Met,
            Some(l) if l.lost > 0 => Verdict::Missed(format!("{} events lost", l.lost)),
            Some(l) if !l.exact => Verdict::Missed("counts do not add up".into()),
            _ => Verdict::Missed("the workload could not produce the rate".into()),
        },
    )];
    let best = th.highest_lossless();
    t.push(Target::new(
        "zero loss sustained at ≥ 100,000 events/s (issue 12)",
        best.map_or("no step without loss".into(), |l| {
            format!(
                "{:.0} events/s (step {}), the highest step without loss",
                l.rate(),
                l.target
            )
        }),
        match best {
            Some(l) if l.target >= 100_000 => Verdict::Met,
            Some(l) => Verdict::Missed(format!("by {:.0} events/s", 100_000.0 - l.rate())),
            None => Verdict::Missed("every step lost events".into()),
        },
    ));
    if let Some(us) = at50.and_then(super::super::throughput::Load::cpu_us_per_event) {
        t.push(
            Target::new(
                "≤ 1.5 µs agent CPU per event at 50,000 events/s (issue 12)",
                format!("{us:.2} µs at 50,000 events/s"),
                Verdict::at_most(us, AGENT_CPU_US, |x| format!("{x:.2} µs")),
            )
            .formerly("≤ 2 µs agent CPU per event"),
        );
    }
    t
}

/// RSS with the held sockets, and the scrape's p99.
fn footprint_targets(f: &Footprint) -> Vec<Target> {
    let mib = f.rss_kib as f64 / 1024.0;
    let mut t = vec![Target::new(
        format!("RSS ≤ 64 MiB with {} live watched sockets", f.sockets),
        format!("{mib:.1} MiB"),
        Verdict::at_most(mib, 64.0, |x| format!("{x:.1} MiB")),
    )];
    if let Some(p99) = quantile(&f.scrape_ms, 0.99) {
        t.push(scrape_target(f, p99).formerly("scrape ≤ 50 ms"));
    }
    t
}

/// The scrape's p99 with the held sockets, and whether its p50 stayed flat against the
/// same scrapes with none (at most [`SCRAPE_FLAT`]× as long).
fn scrape_target(f: &Footprint, p99: f64) -> Target {
    let growth = match (
        quantile(&f.scrape_ms, 0.5),
        quantile(&f.scrape_idle_ms, 0.5),
    ) {
        (Some(held), Some(idle)) if idle > 0.0 => Some(held / idle),
        _ => None,
    };
    let verdict = match (
        Verdict::at_most(p99, 10.0, |x| format!("{x:.1} ms")),
        growth,
    ) {
        (Verdict::Met, Some(g)) if g > SCRAPE_FLAT => {
            Verdict::Missed(format!("not flat: p50 {g:.1}× its time with no socket"))
        }
        (v, _) => v,
    };
    Target::new(
        format!(
            "scrape p99 ≤ 10 ms with {} live sockets, flat in the socket count (issue 12)",
            f.sockets
        ),
        format!(
            "p99 {p99:.1} ms at {} series; p50 {} its time with no socket",
            f.series,
            growth.map_or("—".into(), |g| format!("{g:.1}×"))
        ),
        verdict,
    )
}

/// The slowest start-up, and the p99 latency to the event line.
fn latency_targets(l: &Latency) -> Vec<Target> {
    let mut t = Vec::new();
    if let Some(max) = quantile(&l.startup, 1.0) {
        t.push(Target::new(
            "start-up ≤ 2 s with the whole probe table (issue 9; spawn → running)",
            format!("{max:.2} s (slowest of the starts)"),
            Verdict::at_most(max, 2.0, |x| format!("{x:.2} s")),
        ));
    }
    if let Some(p99) = quantile(&l.to_line, 0.99) {
        let ms = p99 / 1e6;
        t.push(Target::new(
            "p99 event latency ≤ 20 ms (syscall return → event line)",
            format!("{ms:.1} ms"),
            Verdict::at_most(ms, 20.0, |x| format!("{x:.1} ms")),
        ));
    }
    t
}

pub enum Verdict {
    Met,
    MetWith(String),
    Missed(String),
}

impl Verdict {
    fn at_most(got: f64, limit: f64, show: impl Fn(f64) -> String) -> Verdict {
        if got <= limit {
            Verdict::Met
        } else {
            Verdict::Missed(format!("by {}", show(got - limit)))
        }
    }

    /// Met, with a remark when there is one.
    fn with(self, remark: String) -> Verdict {
        match self {
            Verdict::Met if !remark.is_empty() => Verdict::MetWith(remark),
            v => v,
        }
    }

    fn text(&self) -> String {
        match self {
            Verdict::Met => "met".into(),
            Verdict::MetWith(r) => format!("met{r}"),
            Verdict::Missed(why) => format!("**missed** {why}"),
        }
    }
}
