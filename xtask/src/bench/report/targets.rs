//! The targets table: each target of issues 6, 9, 12 and 38 whose phase ran, what this run
//! measured for it, and the previous report's figure beside it; and the measured breakdown
//! of a missed per-operation target (by syscall and program) and of missed agent CPU.
use std::collections::BTreeMap;

use super::{
    Report,
    table::{NODE_TAX_POINTS, at_most, at_most_decided, ns, points, table},
};
use crate::bench::{
    Interval, Op, Spread, Variant,
    load::{Footprint, Latency, Load, Throughput},
    overhead::{GO_STEPS, Overhead, Programs},
    quantile,
};

/// The previous report's target figures, shown beside this run's.
#[derive(Debug, Default)]
pub struct Before {
    /// The sockwatch revision that report measured.
    pub revision: String,
    measured: BTreeMap<String, String>,
}

impl Before {
    /// The figures of a report's targets table, if it has one.
    pub fn parse(text: &str) -> Option<Before> {
        let machine = text
            .lines()
            .find_map(|l| l.strip_prefix("| sockwatch | "))?;
        let revision = machine
            .trim_end_matches(" |")
            .rsplit("git ")
            .next()?
            .to_owned();
        let (mut measured, mut in_targets) = (BTreeMap::new(), false);
        for line in text.lines() {
            if line.starts_with("## ") {
                in_targets = line.starts_with("## Targets");
            }
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            if in_targets && cells.len() >= 3 && !["target", "---"].contains(&cells[0]) {
                measured.insert(cells[0].to_owned(), cells[1].to_owned());
            }
        }
        (!measured.is_empty()).then_some(Before { revision, measured })
    }

    /// What the previous report measured for target `what` (or under its former name).
    pub(super) fn measured(&self, what: &str, formerly: Option<&str>) -> &str {
        let get = |w: &str| self.measured.get(w).map(String::as_str);
        get(what).or_else(|| get(formerly?)).unwrap_or("—")
    }
}

/// Issue 12's most agent CPU per event at 50,000 events/s, µs.
const AGENT_CPU_US: f64 = 1.5;

/// A target row: what, measured, verdict, and its name in reports before it was tightened.
pub struct Target {
    pub(super) what: String,
    pub(super) measured: String,
    pub(super) verdict: String,
    pub(super) formerly: Option<&'static str>,
}

fn target(what: impl Into<String>, measured: impl Into<String>, verdict: String) -> Target {
    Target {
        what: what.into(),
        measured: measured.into(),
        verdict,
        formerly: None,
    }
}

impl Report {
    /// Every target whose phase ran, in the report's order.
    pub fn targets(&self) -> Vec<Target> {
        let mut t = Vec::new();
        if let Some(o) = &self.overhead {
            overhead_targets(o, &mut t);
        }
        if let Some(th) = &self.throughput {
            throughput_targets(th, &mut t);
        }
        if let Some(f) = &self.footprint {
            footprint_targets(f, &mut t);
        }
        if let Some(l) = &self.latency {
            latency_targets(l, &mut t);
        }
        t
    }

    /// The targets table, with the previous report's figures when there is one.
    pub fn targets_table(&self, s: &mut String, targets: &[Target]) {
        s.push_str("## Targets (issues 6 and 12)\n\n");
        let before = self.before.as_ref();
        let head = format!("before (git {})", before.map_or("", |b| &b.revision));
        let mut head = vec!["target", "measured", &head, "verdict"];
        if before.is_none() {
            head.remove(2);
        }
        let rows = targets.iter().map(|t| {
            let was = before.map(|b| b.measured(&t.what, t.formerly).to_owned());
            [
                Some(t.what.clone()),
                Some(t.measured.clone()),
                was,
                Some(t.verdict.clone()),
            ]
            .into_iter()
            .flatten()
            .collect()
        });
        table(s, &head, &"l".repeat(head.len()), rows);
    }

    /// The measured breakdown of a missed per-operation target (by syscall and program) and
    /// of missed agent CPU (by stage).
    pub fn missed_section(&self, s: &mut String, targets: &[Target]) {
        let per_op = ["tracepoint tier", "cheaper than the bpftrace"];
        let missed = |t: &&Target| {
            t.verdict.starts_with("**missed**") && per_op.iter().any(|p| t.what.starts_with(p))
        };
        let overhead = self
            .overhead
            .as_ref()
            .filter(|_| targets.iter().any(|t| missed(&t)));
        let cpu = self
            .throughput
            .as_ref()
            .and_then(|t| Some((t.at_50k()?.cpu_us_per_event()?, t)));
        let cpu = cpu.filter(|(us, _)| *us > AGENT_CPU_US);
        if overhead.is_some() || cpu.is_some() {
            s.push_str("## Missed targets: the measured breakdown\n\n");
        }
        if let Some(o) = overhead {
            overhead_breakdown(s, o);
        }
        if let Some((us, t)) = cpu {
            cpu_breakdown(s, us, t);
        }
    }
}

/// Zero loss at 50,000 and at 100,000 events/s, and the agent's CPU per event.
fn throughput_targets(th: &Throughput, t: &mut Vec<Target>) {
    let at50 = th.at_50k();
    let measured = at50.map_or("not reached".into(), |l| {
        format!(
            "{} lost of {} at {:.0} events/s",
            l.lost,
            l.produced,
            l.rate()
        )
    });
    let verdict = match at50 {
        Some(l) if l.lost == 0 && l.rate() >= 0.95 * 50_000.0 && l.exact => "met".into(),
        Some(l) if l.lost > 0 => format!("**missed** {} events lost", l.lost),
        Some(l) if !l.exact => "**missed** counts do not add up".into(),
        _ => "**missed** the workload could not produce the rate".into(),
    };
    t.push(target(
        "zero loss at 50,000 events/s sustained",
        measured,
        verdict,
    ));
    let best = th.highest_lossless();
    let measured = best.map_or("no step without loss".into(), |l| {
        format!(
            "{:.0} events/s (step {}), the highest step without loss",
            l.rate(),
            l.target
        )
    });
    let verdict = match best {
        Some(l) if l.target >= 100_000 => "met".into(),
        Some(l) => format!("**missed** by {:.0} events/s", 100_000.0 - l.rate()),
        None => "**missed** every step lost events".into(),
    };
    t.push(target(
        "zero loss sustained at ≥ 100,000 events/s (issue 12)",
        measured,
        verdict,
    ));
    if let Some(us) = at50.and_then(Load::cpu_us_per_event) {
        t.push(Target {
            formerly: Some("≤ 2 µs agent CPU per event"),
            ..target(
                "≤ 1.5 µs agent CPU per event at 50,000 events/s (issue 12)",
                format!("{us:.2} µs at 50,000 events/s"),
                at_most(us, AGENT_CPU_US, |x| format!("{x:.2} µs")),
            )
        });
    }
}

/// RSS with the held sockets, and the scrape's p99 and growth.
fn footprint_targets(f: &Footprint, t: &mut Vec<Target>) {
    let mib = f.rss_kib as f64 / 1024.0;
    let what = format!("RSS ≤ 64 MiB with {} live watched sockets", f.sockets);
    t.push(target(
        what,
        format!("{mib:.1} MiB"),
        at_most(mib, 64.0, |x| format!("{x:.1} MiB")),
    ));
    if let Some(p99) = quantile(&f.scrape_ms, 0.99) {
        // Flat in the socket count: the p50 with the sockets at most 1.5× the p50 with none.
        let growth = f.scrape_growth();
        let verdict = match (at_most(p99, 10.0, |x| format!("{x:.1} ms")), growth) {
            (v, Some(g)) if v == "met" && g > 1.5 => {
                format!("**missed** not flat: p50 {g:.1}× its time with no socket")
            }
            (v, _) => v,
        };
        let growth = growth.map_or("—".into(), |g| format!("{g:.1}×"));
        let measured = format!(
            "p99 {p99:.1} ms at {} series; p50 {growth} its time with no socket",
            f.series
        );
        let what = format!(
            "scrape p99 ≤ 10 ms with {} live sockets, flat in the socket count (issue 12)",
            f.sockets
        );
        t.push(Target {
            formerly: Some("scrape ≤ 50 ms"),
            ..target(what, measured, verdict)
        });
    }
}

/// Start-up with the whole probe table, and the p99 event latency.
fn latency_targets(l: &Latency, t: &mut Vec<Target>) {
    if let Some(max) = quantile(&l.startup, 1.0) {
        t.push(target(
            "start-up ≤ 2 s with the whole probe table (issue 9; spawn → running)",
            format!("{max:.2} s (slowest of the starts)"),
            at_most(max, 2.0, |x| format!("{x:.2} s")),
        ));
    }
    if let Some(ms) = quantile(&l.to_line, 0.99).map(|ns| ns / 1e6) {
        t.push(target(
            "p99 event latency ≤ 20 ms (syscall return → event line)",
            format!("{ms:.1} ms"),
            at_most(ms, 20.0, |x| format!("{x:.1} ms")),
        ));
    }
}

/// The watched life cycles, by the order of their syscalls.
const CYCLES: [(Op, &str); 2] = [(Op::SockCycle, "C order"), (Op::SockCycleGo, "Go order")];

/// The per-operation targets: sockwatch's ratio, against bpftrace, auditd and the floor.
fn overhead_targets(o: &Overhead, t: &mut Vec<Target>) {
    let (sw, floor) = (Variant::Sockwatch, Variant::Floor);
    let p50 = |v, op, cpu| Spread::of(&o.ratios(v, op, cpu)).map(|r| r.p50);
    let points = |x: f64| format!("{:.1} points", x * 100.0);
    for (op, order) in CYCLES {
        if let Some(r) = p50(sw, op, false) {
            t.push(target(
                format!("tracepoint tier: ≤ 10 % added per socket operation (life cycle, {order})"),
                format!("{:+.1} % (p50 of per-round ratios)", (r - 1.0) * 100.0),
                at_most(r - 1.0, 0.10, points),
            ));
        }
    }
    versus_targets(o, t);
    let getppid = |v| o.p50(v, Op::Getppid);
    if let (Some(a), Some(b)) = (getppid(sw), getppid(floor)) {
        t.push(target(
            "tracepoint tier: getppid(2) ≤ the empty-program floor + 10 % (issue 12)",
            format!(
                "{a:.0} vs {b:.0} ns per call ({:+.1} %)",
                (a / b - 1.0) * 100.0
            ),
            at_most(a / b - 1.0, 0.10, points),
        ));
    }
    floor_targets(o, t);
}

/// sockwatch's added ns per op against bpftrace's, auditd's and the floor's.
fn versus_targets(o: &Overhead, t: &mut Vec<Target>) {
    let sw = Variant::Sockwatch;
    let versus = [
        (Variant::Bpftrace, "cheaper than the bpftrace script", 1.0),
        (
            Variant::Auditd,
            "far cheaper than auditd (≤ ⅓ of its added cost)",
            1.0 / 3.0,
        ),
        (
            Variant::Floor,
            "within 2× the empty-program floor (issue 12)",
            2.0,
        ),
    ];
    for (v, rule, factor) in versus.into_iter().filter(|x| o.variants.contains(&x.0)) {
        // sockwatch's added ns at most `factor` times `v`'s; against bpftrace, an op where the
        // per-round ratios' IQRs overlap is a tie (the order is noise).
        let (mut shown, mut worse, mut tied) = (Vec::new(), Vec::new(), Vec::new());
        for op in [
            Op::Unlink,
            Op::SockCycle,
            Op::SockCycleGo,
            Op::Connect,
            Op::Getppid,
        ] {
            let (Some(a), Some(b)) = (o.added_ns(sw, op), o.added_ns(v, op)) else {
                continue;
            };
            shown.push(format!("{}: {} vs {}", op.arg(), ns(a), ns(b)));
            if a > b.max(0.0) * factor && a > 0.0 {
                let r = |v| Spread::of(&o.ratios(v, op, false));
                match (r(sw), r(v)) {
                    (Some(x), Some(y)) if factor == 1.0 && x.p25 <= y.p75 => tied.push(op.arg()),
                    _ => worse.push(op.arg()),
                }
            }
        }
        let tie = match tied.is_empty() {
            true => String::new(),
            false => format!(
                "; {} higher by less than the rounds' spread (ratio IQRs overlap)",
                tied.join(", ")
            ),
        };
        let verdict = match worse.is_empty() {
            true => format!("met{tie}"),
            false => format!("**missed** not for {}{tie}", worse.join(", ")),
        };
        t.push(target(
            format!("{rule}, added ns per op"),
            shown.join("; "),
            verdict,
        ));
    }
}

/// Each program's ns per run over its empty program's (where measured), the most first.
fn times_empty(programs: &Programs, floor_of: impl Fn(&str) -> Option<f64>) -> Vec<(&str, f64)> {
    let mut times: Vec<(&str, f64)> = programs
        .iter()
        .filter_map(|p| Some((p.0.as_str(), p.2 / floor_of(&p.0)?)))
        .collect();
    times.sort_by(|a, b| b.1.total_cmp(&a.1));
    times
}

/// Issue 38's cold paths: every program that ran on operations concerning no watched socket
/// at most 10× the empty program on its tracepoint.
fn cold_paths(o: &Overhead, t: &mut Vec<Target>) {
    let times = times_empty(&o.cold_programs, |name| o.cold_floor_of(name));
    let Some(&(worst, most)) = times.first() else {
        return;
    };
    let over: Vec<String> = times
        .iter()
        .filter(|t| t.1 > 10.0)
        .map(|(name, x)| format!("`{name}` {x:.1}×"))
        .collect();
    let measured = format!(
        "{} of {} programs within 10×; the most `{worst}` at {most:.1}×",
        times.len() - over.len(),
        times.len()
    );
    let verdict = match over.is_empty() {
        true => "met".into(),
        false => format!("**missed** by {}", over.join(", ")),
    };
    t.push(target(
        "cold paths (issue 38): every program ≤ 10× the empty program on operations that concern no watched socket",
        measured,
        verdict,
    ));
}

/// Issue 38's node tax under observer `v`: each of `ops` pays at most 3 points of `off` above
/// the floor, decided by the per-round points' median and its interval.
fn node_tax(o: &Overhead, v: Variant, ops: fn(Op) -> bool, what: &str, t: &mut Vec<Target>) {
    let (mut shown, mut over, mut open, mut coverage) = (Vec::new(), Vec::new(), Vec::new(), 1.0);
    for op in Op::ALL.into_iter().filter(|op| ops(*op)) {
        let Some(i) = Interval::of(&o.points_above_floor(v, op)) else {
            continue;
        };
        shown.push(format!("{}: {}", op.arg(), points(i)));
        coverage = i.coverage;
        match at_most_decided(i, NODE_TAX_POINTS) {
            Some(true) => {}
            Some(false) => over.push(format!(
                "{} by {:.1} points",
                op.arg(),
                i.p50 - NODE_TAX_POINTS
            )),
            None => open.push(op.arg()),
        }
    }
    if shown.is_empty() {
        return;
    }
    let measured = format!(
        "{} (points of `off` above the floor per round: p50 and its {:.0} % interval)",
        shown.join("; "),
        coverage * 100.0
    );
    let undecided = format!(
        "{}: the interval holds {NODE_TAX_POINTS} points",
        open.join(", ")
    );
    let verdict = match (over.is_empty(), open.is_empty()) {
        (true, true) => "met".into(),
        (true, false) => format!("**undecided** {undecided}"),
        (false, true) => format!("**missed** {}", over.join(", ")),
        (false, false) => format!("**missed** {}; undecided {undecided}", over.join(", ")),
    };
    t.push(target(what, measured, verdict));
}

/// Issue 38's node tax, the watched life cycles and every program against the floor.
fn floor_targets(o: &Overhead, t: &mut Vec<Target>) {
    let (sw, floor) = (Variant::Sockwatch, Variant::Floor);
    let narrowed =
        "node tax (issue 38): every unrelated operation ≤ 3 points above the floor's ratio to off";
    node_tax(o, sw, Op::unrelated, narrowed, t);
    let default = "node tax, the DaemonSet's default (no --watch: a life cycle anywhere is a watched \
                   one): every unrelated operation ≤ 3 points above the floor's ratio to off";
    node_tax(
        o,
        Variant::SockwatchDefault,
        Op::unrelated_by_default,
        default,
        t,
    );
    for (op, order) in CYCLES {
        let (Some(a), Some(b)) = (
            o.added_ns(sw, op),
            o.added_ns(floor, op).filter(|f| *f > 0.0),
        ) else {
            continue;
        };
        t.push(target(
            format!("watched life cycle ({order}) ≤ 1.5× the floor's added ns (issue 38)"),
            format!("{} vs {} ({:.2}×)", ns(a), ns(b), a / b),
            at_most(a / b, 1.5, |x| format!("{x:.2}×")),
        ));
    }
    cold_paths(o, t);
    let times = times_empty(&o.programs, |name| o.floor_of(name));
    if let Some(&(worst, most)) = times.first() {
        let within = times.iter().filter(|t| t.1 <= 2.0).count();
        t.push(target(
            "every program ≤ 2× the empty program on its tracepoint (issue 12)",
            format!(
                "{within} of {} programs within 2×; the most `{worst}` at {most:.1}×",
                times.len()
            ),
            at_most(most, 2.0, |x| format!("{x:.1}×")),
        ));
    }
}

/// What sockwatch adds to each syscall of the Go-order life cycle, largest first.
fn added_by_syscall(o: &Overhead) -> Vec<(&'static str, f64)> {
    let sw = Variant::Sockwatch;
    let mut steps: Vec<(&'static str, f64)> = (0..GO_STEPS.len())
        .filter_map(|i| {
            Some((
                GO_STEPS[i],
                o.step_p50(sw, i)? - o.step_p50(Variant::Off, i)?,
            ))
        })
        .collect();
    steps.sort_by(|a, b| b.1.total_cmp(&a.1));
    steps
}

/// What sockwatch adds to bind and listen, against its programs' run time there.
fn added_against_programs(o: &Overhead, steps: &[(&str, f64)]) -> Vec<String> {
    ["bind", "listen"]
        .into_iter()
        .filter_map(|call| {
            let ran: Vec<f64> = o
                .programs
                .iter()
                .filter(|p| p.0.starts_with(&format!("{call}_tp_")))
                .map(|p| p.2)
                .collect();
            let added = steps.iter().find(|(n, _)| *n == call)?.1;
            let what = if ran.len() == 1 {
                "one program".into()
            } else {
                format!("{} programs", ran.len())
            };
            let total = ran.iter().sum::<f64>();
            (!ran.is_empty()).then(|| {
                format!(
                    "{call} gets {} per call, of which its {what} run {total:.0} ns",
                    ns(added)
                )
            })
        })
        .collect()
}

/// The largest additions by syscall, the thread CPU time, the costliest programs.
fn overhead_breakdown(s: &mut String, o: &Overhead) {
    let sw = Variant::Sockwatch;
    let steps = added_by_syscall(o);
    let top: Vec<String> = steps
        .iter()
        .take(5)
        .map(|(n, x)| format!("{n} {}", ns(*x)))
        .collect();
    let change = |op, cpu| {
        Spread::of(&o.ratios(sw, op, cpu))
            .map_or("?".into(), |r| format!("{:+.0} %", (r.p50 - 1.0) * 100.0))
    };
    let mut costly: Vec<_> = o.programs.iter().filter(|p| p.1 >= 100).collect();
    costly.sort_by(|a, b| b.2.total_cmp(&a.2));
    let costly: Vec<String> = costly
        .iter()
        .take(4)
        .map(|(n, _, avg)| format!("`{n}` {avg:.0} ns"))
        .collect();
    let share = added_against_programs(o, &steps);
    let or_none = |v: Vec<String>, sep| {
        if v.is_empty() {
            "not measured".into()
        } else {
            v.join(sep)
        }
    };
    para!(
        s,
        "**Per-operation overhead (tracepoint tier).** sockwatch adds {} per getppid call. Syscall by \
         syscall (Go order), the largest additions are: {}. The workload thread's CPU time grows {} (C \
         order) and {} (Go order), against wall-clock ratios of {} and {}. The costliest program runs \
         (programs run at least 100 times): {}. Added per call against the programs' own run time: {}.",
        o.added_ns(sw, Op::Getppid).map_or("?".into(), ns),
        or_none(top, ", "),
        change(Op::SockCycle, true),
        change(Op::SockCycleGo, true),
        change(Op::SockCycle, false),
        change(Op::SockCycleGo, false),
        or_none(costly, ", "),
        or_none(share, "; "),
    );
}

/// The largest stage of the agent's profile, against the missed CPU per event.
fn cpu_breakdown(s: &mut String, us: f64, t: &Throughput) {
    let why = match &t.profile {
        Ok((p, _)) => p.largest().map_or(
            "no stage of the event path was seen in the profile".into(),
            |(st, x)| {
                format!(
                    "the largest stage is the {st} at {:.0} % ({:.2} µs per event)",
                    x * 100.0,
                    x * us
                )
            },
        ),
        Err(e) => format!("the agent was not profiled ({e})"),
    };
    para!(
        s,
        "**Agent CPU per event.** {us:.2} µs at 50,000 events/s against {AGENT_CPU_US} µs: {why}."
    );
}
