//! docs/BENCHMARKS.md: the machine, the command, every figure, and the targets. Every sentence
//! is the method (what was measured and how) or a figure of this run; every table is written
//! by [`table`].
use std::{collections::BTreeMap, fs, time::Duration};

use super::{
    Op, Plan, Spread, Variant, agent,
    env::Env,
    load::{Footprint, Latency, Load, STAGES, Throughput},
    overhead::{GO_STEPS, Overhead},
    quantile,
};
use crate::cmd;

/// Appends `format!(…)` and a blank line: one paragraph.
macro_rules! para {
    ($s:expr, $($t:tt)*) => {{ $s.push_str(&format!($($t)*)); $s.push_str("\n\n"); }};
}

#[cfg(test)]
mod tests;
pub mod vm;

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
fn q2(values: &[f64], q: f64, unit: &str) -> String {
    quantile(values, q).map_or("—".into(), |v| format!("{v:.2} {unit}"))
}

/// `met`, or `**missed** by` how much `got` exceeds `limit`.
fn at_most(got: f64, limit: f64, show: impl Fn(f64) -> String) -> String {
    if got <= limit {
        "met".into()
    } else {
        format!("**missed** by {}", show(got - limit))
    }
}

/// `cargo xtask` and `args`, as the report names the command that wrote it.
pub fn command_line(args: impl IntoIterator<Item = String>) -> String {
    std::iter::once("cargo xtask".to_string())
        .chain(args)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The first line of a command's output, or why it failed.
fn first_line(cmd: &mut std::process::Command) -> String {
    cmd::output(cmd).map_or_else(
        |e| format!("unknown ({e})"),
        |s| s.lines().next().unwrap_or_default().trim().into(),
    )
}

/// Now, in UTC, to the minute.
pub fn date() -> String {
    first_line(cmd::command("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]))
}

/// `/proc/loadavg`'s three averages.
pub fn loadavg() -> String {
    let text = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The value after `key` in the first line of `file` that has it.
fn proc_field(file: &str, key: &str, sep: char) -> Option<String> {
    let text = fs::read_to_string(file).ok()?;
    text.lines().find_map(|l| {
        Some(
            l.strip_prefix(key)?
                .split_once(sep)?
                .1
                .trim()
                .trim_matches('"')
                .to_owned(),
        )
    })
}

/// The machine table's rows.
fn machine(env: &Env) -> Vec<(&'static str, String)> {
    let git = |args: &[&str]| {
        cmd::output(
            cmd::command("git")
                .args(args)
                .current_dir(cmd::workspace_root()),
        )
    };
    let rev = git(&["rev-parse", "--short", "HEAD"])
        .unwrap_or_default()
        .trim()
        .to_owned();
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).unwrap_or_default();
    let dirty: Vec<&str> = dirty.lines().filter_map(|l| l.get(3..)).collect();
    let dirty = if dirty.is_empty() {
        String::new()
    } else {
        format!(" (uncommitted changes in: {})", dirty.join(", "))
    };
    let ram = proc_field("/proc/meminfo", "MemTotal", ':')
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    vec![
        (
            "CPUs (nproc)",
            std::thread::available_parallelism().map_or("?".into(), |n| n.to_string()),
        ),
        (
            "CPU model",
            proc_field("/proc/cpuinfo", "model name", ':').unwrap_or("unknown".into()),
        ),
        (
            "RAM",
            ram.map_or("unknown".into(), |kib| {
                format!("{:.1} GiB", kib / 1024.0 / 1024.0)
            }),
        ),
        ("kernel", kernel.trim().to_owned()),
        (
            "OS",
            proc_field("/etc/os-release", "PRETTY_NAME", '=').unwrap_or_default(),
        ),
        (
            "sockwatch",
            format!(
                "{}, git {rev}{dirty}",
                first_line(cmd::command(&env.sockwatch).arg("--version"))
            ),
        ),
        (
            "bpftrace",
            first_line(cmd::command("bpftrace").arg("--version")),
        ),
        ("auditd", first_line(cmd::command("auditctl").arg("-v"))),
    ]
}

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
    fn measured(&self, what: &str, formerly: Option<&str>) -> &str {
        let get = |w: &str| self.measured.get(w).map(String::as_str);
        get(what).or_else(|| get(formerly?)).unwrap_or("—")
    }
}

/// Issue 12's most agent CPU per event at 50,000 events/s, µs.
const AGENT_CPU_US: f64 = 1.5;

/// A target row: what, measured, verdict, and its name in reports before it was tightened.
struct Target {
    what: String,
    measured: String,
    verdict: String,
    formerly: Option<&'static str>,
}

fn target(what: impl Into<String>, measured: impl Into<String>, verdict: String) -> Target {
    Target {
        what: what.into(),
        measured: measured.into(),
        verdict,
        formerly: None,
    }
}

pub struct Report {
    plan: Plan,
    command: String,
    date: String,
    machine: Vec<(&'static str, String)>,
    check: String,
    load_start: String,
    pub load_after_overhead: String,
    load_end: String,
    duration: Duration,
    pub notes: Vec<String>,
    pub overhead: Option<Overhead>,
    pub latency: Option<Latency>,
    pub throughput: Option<Throughput>,
    pub footprint: Option<Footprint>,
    /// The report this one replaces: its figures are shown beside the new ones.
    pub before: Option<Before>,
}

impl Report {
    /// Records the machine, `sockwatch check`, the command and the load now.
    pub fn new(plan: &Plan, command: String, env: &Env) -> Report {
        let check = cmd::output(cmd::command(&env.sockwatch).arg("check"));
        Report {
            plan: plan.clone(),
            command,
            date: date(),
            machine: machine(env),
            check: check.unwrap_or_else(|e| format!("sockwatch check failed: {e:#}")),
            load_start: loadavg(),
            load_after_overhead: String::new(),
            load_end: String::new(),
            duration: Duration::ZERO,
            notes: Vec::new(),
            overhead: None,
            latency: None,
            throughput: None,
            footprint: None,
            before: None,
        }
    }

    pub fn finish(&mut self, took: Duration) {
        (self.load_end, self.duration) = (loadavg(), took);
    }

    pub fn render(&self) -> String {
        let mut s = String::from("# sockwatch benchmarks\n\n");
        para!(
            s,
            "<!-- Written by `cargo xtask bench` (xtask/src/bench/, workload in bench/) from a real run; \
             rerun it rather than editing the figures. -->"
        );
        para!(
            s,
            "Run `{}` as root on {}; it took {:.1} min. Host figures, native (no emulation). Probe tier: \
             **tracepoint** (`--probe-mode tracepoint`); the tiers this host offers are in `sockwatch check` below.",
            self.command,
            self.date,
            self.duration.as_secs_f64() / 60.0
        );
        let loads = format!(
            "start {}; after the overhead phase {}; end {}",
            self.load_start, self.load_after_overhead, self.load_end
        );
        let rows = self.machine.iter().map(|(k, v)| (*k, v.clone()));
        let rows = rows.chain([("load average (1, 5, 15 min)", loads)]);
        table(
            &mut s,
            &["machine", ""],
            "ll",
            rows.map(|(k, v)| vec![k.to_owned(), v]),
        );
        para!(
            s,
            "The overhead phase interleaves observers round by round, so drift in background load falls on \
             every observer alike; the other phases are single runs and carry that noise."
        );
        para!(
            s,
            "`sockwatch check` on this host:\n\n```\n{}```",
            self.check
        );
        let targets = self.targets();
        s += "## Targets (issues 6 and 12)\n\n";
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
        table(&mut s, &head, &"l".repeat(head.len()), rows);
        if let Some(o) = &self.overhead {
            overhead_section(&mut s, &self.plan, o);
        }
        if let Some(t) = &self.throughput {
            throughput_section(&mut s, &self.plan, t);
        }
        if let Some(f) = &self.footprint {
            footprint_section(&mut s, f, self.throughput.as_ref());
        }
        if let Some(l) = &self.latency {
            latency_section(&mut s, l);
        }
        self.missed_section(&mut s, &targets);
        s += "## Not measured here\n\n";
        s += "- **Precise tiers (fentry/fexit, BPF LSM, kprobes).** This host cannot load them, so this run \
              measures the tracepoint tier only. `cargo xtask bench --vm SERIES` measures every tier in a QEMU \
              guest, with their targets (≤ 3 % per socket life cycle, ≤ 1 % per regular-file unlink and per \
              unrelated syscall); its section, when it has run, follows this one and is kept by a host run.\n";
        if let Some(f) = &self.footprint {
            s += &format!(
                "- **10,000 /metrics series.** The scrape was timed with {} configured watches, which gave {} \
                 series (see the scrape section).\n",
                f.watches, f.series
            );
        }
        for n in &self.notes {
            s += &format!("- {n}\n");
        }
        s + "\n"
    }

    /// Every target whose phase ran, in the report's order.
    fn targets(&self) -> Vec<Target> {
        let mut t = Vec::new();
        if let Some(o) = &self.overhead {
            overhead_targets(o, &mut t);
        }
        if let Some(th) = &self.throughput {
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
        if let Some(f) = &self.footprint {
            let mib = f.rss_kib as f64 / 1024.0;
            let what = format!("RSS ≤ 64 MiB with {} live watched sockets", f.sockets);
            t.push(target(
                what,
                format!("{mib:.1} MiB"),
                at_most(mib, 64.0, |x| format!("{x:.1} MiB")),
            ));
            if let Some(p99) = quantile(&f.scrape_ms, 0.99) {
                // Flat in the socket count: the p50 with the sockets at most 1.5× the p50 with none.
                let growth = scrape_growth(f);
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
        if let Some(l) = &self.latency {
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
        t
    }

    /// The measured breakdown of a missed per-operation target (by syscall and program) and
    /// of missed agent CPU (by stage).
    fn missed_section(&self, s: &mut String, targets: &[Target]) {
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
            let sw = Variant::Sockwatch;
            let mut steps: Vec<(&str, f64)> = (0..GO_STEPS.len())
                .filter_map(|i| {
                    Some((
                        GO_STEPS[i],
                        o.step_p50(sw, i)? - o.step_p50(Variant::Off, i)?,
                    ))
                })
                .collect();
            steps.sort_by(|a, b| b.1.total_cmp(&a.1));
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
            // What sockwatch adds to bind and listen, against its programs' run time there.
            let share: Vec<String> = ["bind", "listen"]
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
                .collect();
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
        if let Some((us, t)) = cpu {
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
    }
}

/// The per-operation targets: sockwatch's ratio, against bpftrace, auditd and the floor.
fn overhead_targets(o: &Overhead, t: &mut Vec<Target>) {
    let (sw, floor) = (Variant::Sockwatch, Variant::Floor);
    let p50 = |v, op, cpu| Spread::of(&o.ratios(v, op, cpu)).map(|r| r.p50);
    let points = |x: f64| format!("{:.1} points", x * 100.0);
    let cycles = [(Op::SockCycle, "C order"), (Op::SockCycleGo, "Go order")];
    for (op, order) in cycles {
        if let Some(r) = p50(sw, op, false) {
            t.push(target(
                format!("tracepoint tier: ≤ 10 % added per socket operation (life cycle, {order})"),
                format!("{:+.1} % (p50 of per-round ratios)", (r - 1.0) * 100.0),
                at_most(r - 1.0, 0.10, points),
            ));
        }
    }
    let versus = [
        (Variant::Bpftrace, "cheaper than the bpftrace script", 1.0),
        (
            Variant::Auditd,
            "far cheaper than auditd (≤ ⅓ of its added cost)",
            1.0 / 3.0,
        ),
        (floor, "within 2× the empty-program floor (issue 12)", 2.0),
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
    // Issue 38's node tax: every op that concerns no watched socket within 3 points of the
    // floor's ratio to `off`.
    let (mut shown, mut over) = (Vec::new(), Vec::new());
    for op in Op::ALL.into_iter().filter(|op| op.unrelated()) {
        let (Some(a), Some(b)) = (p50(sw, op, false), p50(floor, op, false)) else {
            continue;
        };
        shown.push(format!("{}: ×{a:.3} vs ×{b:.3}", op.arg()));
        if (a - b) * 100.0 > 3.0 {
            over.push(format!(
                "{} by {:.1} points",
                op.arg(),
                (a - b) * 100.0 - 3.0
            ));
        }
    }
    if !shown.is_empty() {
        let verdict = if over.is_empty() {
            "met".into()
        } else {
            format!("**missed** {}", over.join(", "))
        };
        let what = "node tax (issue 38): every unrelated operation ≤ 3 points above the floor's ratio to off";
        t.push(target(what, shown.join("; "), verdict));
    }
    for (op, order) in cycles {
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
    let mut times: Vec<(&str, f64)> = o
        .programs
        .iter()
        .filter_map(|p| Some((p.0.as_str(), p.2 / o.floor_of(&p.0)?)))
        .collect();
    times.sort_by(|a, b| b.1.total_cmp(&a.1));
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

fn overhead_section(s: &mut String, plan: &Plan, o: &Overhead) {
    s.push_str("## 1. Per-operation overhead\n\n");
    let batches: Vec<String> = plan
        .ops
        .iter()
        .map(|(op, n)| format!("{} × {n}", op.arg()))
        .collect();
    let unrelated: Vec<&str> = Op::ALL
        .into_iter()
        .filter(|op| op.unrelated())
        .map(Op::arg)
        .collect();
    para!(
        s,
        "A workload process (`bench/`, release build) times each operation in a batch ({}; each batch after a \
         tenth as many untimed) and reports nanoseconds per op; those that concern no watched socket ({}) run in \
         a second one, which never binds a watched socket: the kernel tracks a process that did, and its \
         children, for the rest of its life, and the node's other workloads never did. xtask switches one \
         observer on, runs every batch {} time(s), switches it off, and goes on to the next; {} rounds, the order \
         of observers rotated each round, so drift in background load falls on all of them. Each batch starts \
         after a {} ms pause, so an observer's work on the previous batch is not charged to it, and runs in a \
         thread created for it (whether a thread is audited is decided when it is created). A round's value is \
         the median of its repetitions; the tables give the p50 over rounds and the interquartile range (IQR); \
         ratios are taken per round against the same round's `off`. The last column is the ratio of the \
         workload thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), which leaves out time it was preempted or \
         blocked (auditd's backlog, for one). Phase time: {:.0} s.",
        batches.join(", "),
        unrelated.join(", "),
        plan.reps,
        o.rounds,
        plan.pause.as_millis(),
        o.secs
    );
    para!(
        s,
        "Observers: **sockwatch** `run --probe-mode tracepoint --watch DIR` (events to a tmpfs file, /metrics on \
         loopback); **bpftrace** with the script in `xtask/src/bench/observers.rs` (the same syscall \
         tracepoints, enter and exit, AF_UNIX paths read from user memory and filtered by the watched \
         directory's prefix, maps of bound descriptors and live socket paths, a line per event, output to \
         tmpfs); **auditd** with `auditctl -w DIR -p wa` (Debian's auditd, backlog 8192 as Debian's default \
         rules set it, log on disk); **empty programs (floor)**, bpftrace with an empty program on each \
         tracepoint sockwatch's tracepoint tier attaches (`floor_script`, same file): what the attachment alone \
         costs. Outside auditd's windows auditing is off with the rule `-a never,task`, so that the other \
         observers' threads get no audit context."
    );
    let head = [
        "observer",
        "ns per op, p50",
        "IQR",
        "ratio vs off, p50",
        "ratio IQR",
        "added ns",
        "ratio of thread CPU time, p50",
    ];
    for &(op, _) in &plan.ops {
        para!(s, "**{}**", op.label());
        let rows = o.variants.iter().filter_map(|&v| {
            let sp = Spread::of(o.ns.get(&(v, op))?)?;
            let (r, cpu) = (
                Spread::of(&o.ratios(v, op, false)),
                Spread::of(&o.ratios(v, op, true)),
            );
            let cells = match v {
                Variant::Off => ["1".into(), "—".into(), "—".into(), "1".into()],
                _ => [
                    r.map_or("?".into(), |r| format!("{:.3}", r.p50)),
                    r.map_or("?".into(), |r| format!("{:.3}–{:.3}", r.p25, r.p75)),
                    o.added_ns(v, op).map_or("?".into(), ns),
                    cpu.map_or("?".into(), |r| format!("{:.3}", r.p50)),
                ],
            };
            let head = [
                v.name().into(),
                format!("{:.0}", sp.p50),
                format!("{:.0}–{:.0}", sp.p25, sp.p75),
            ];
            Some(head.into_iter().chain(cells).collect())
        });
        table(s, &head, "lrrrrrr", rows);
    }
    let others: Vec<Variant> = o
        .variants
        .iter()
        .copied()
        .filter(|v| *v != Variant::Off)
        .collect();
    if o.steps.contains_key(&Variant::Off) {
        para!(
            s,
            "**The Go-order life cycle syscall by syscall** (each syscall timed on its own; p50 over rounds of ns \
             per call, and what each observer adds to it):"
        );
        let head: Vec<String> = others
            .iter()
            .map(|v| format!("{} adds", v.name()))
            .collect();
        let head: Vec<&str> = ["syscall", "off"]
            .into_iter()
            .chain(head.iter().map(String::as_str))
            .collect();
        let rows = GO_STEPS.iter().enumerate().filter_map(|(i, name)| {
            let base = o.step_p50(Variant::Off, i)?;
            let adds = others
                .iter()
                .map(|&v| o.step_p50(v, i).map_or("?".into(), |x| ns(x - base)));
            Some(
                [name.to_string(), format!("{base:.0}")]
                    .into_iter()
                    .chain(adds)
                    .collect(),
            )
        });
        table(
            s,
            &head,
            &format!("l{}", "r".repeat(others.len() + 1)),
            rows,
        );
    }
    if !o.programs.is_empty() {
        para!(
            s,
            "**sockwatch's kernel programs**, during one more pass of every batch above with \
             `kernel.bpf_stats_enabled=1` (outside the measured rounds; the statistics add two clock reads to each \
             run), and the empty program on the same tracepoint during the same pass under the floor's bpftrace \
             (what the statistics see of a program that does nothing):"
        );
        let rows = o.programs.iter().map(|(name, runs, avg)| {
            let floor = o.floor_of(name);
            vec![
                format!("`{name}`"),
                runs.to_string(),
                format!("{avg:.0}"),
                floor.map_or("—".into(), |f| format!("{f:.0}")),
                floor.map_or("—".into(), |f| format!("{:.1}", avg / f)),
                format!("{:.1}", *runs as f64 * avg / 1e6),
            ]
        });
        table(
            s,
            &[
                "program",
                "runs",
                "ns per run",
                "empty program, ns per run",
                "× empty",
                "total ms",
            ],
            "lrrrrr",
            rows,
        );
    }
    if o.problems.is_empty() {
        para!(
            s,
            "Every window was checked: sockwatch delivered and bpftrace printed exactly one bind per socket life \
             cycle run in it, with nothing lost; audit lost no record."
        );
    } else {
        let list: Vec<String> = o.problems.iter().map(|p| format!("- {p}")).collect();
        para!(
            s,
            "Windows whose observer did not see everything (left out of the figures above):\n\n{}",
            list.join("\n")
        );
    }
}

/// One row per load: asked, achieved, and what became of the events.
fn loads_table(s: &mut String, first: &str, loads: &[Load]) {
    let head = [
        first,
        "threads",
        "achieved events/s",
        "produced",
        "lost",
        "delivered",
        "exact",
        "agent CPU",
        "CPU per event",
    ];
    let rows = loads.iter().map(|l| {
        let per_event = l
            .cpu_us_per_event()
            .map_or("—".into(), |us| format!("{us:.2} µs"));
        let (t, th, rate) = (
            l.target.to_string(),
            l.threads.to_string(),
            format!("{:.0}", l.rate()),
        );
        let counts = [l.produced, l.lost, l.delivered].map(|x| x.to_string());
        [t, th, rate]
            .into_iter()
            .chain(counts)
            .chain([yes(l.exact), format!("{:.2} s", l.cpu_secs), per_event])
            .collect()
    });
    table(s, &head, "rrrrrrlrr", rows);
}

fn throughput_section(s: &mut String, plan: &Plan, t: &Throughput) {
    s.push_str("## 2. Throughput and loss\n\n");
    let c = &t.calibration;
    para!(
        s,
        "The workload runs socket life cycles in a watched directory (socket, bind, listen, unlink, close: four \
         events each — bind, listen, unlink, release), paced to a rate for {} s per step by as many threads as \
         there are CPUs (so the agent competes with the producers for the CPUs), stepping up until a step loses \
         events or the workload cannot reach the rate. Produced = life cycles × 4 (calibrated: {} cycles gave {} \
         submitted + {} lost, exact: {}). For every event kind the check is produced = submitted + lost \
         (`sockwatch_kernel_events_submitted_total`, `sockwatch_events_lost_total`), submitted = delivered \
         (`sockwatch_events_total`) = lines in the events file (tmpfs). Agent CPU is utime + stime from \
         /proc/PID/stat ({:.0} ms ticks).",
        plan.step_secs,
        c.cycles,
        c.submitted,
        c.lost,
        yes(c.exact),
        1e3 / agent::clock_ticks()
    );
    loads_table(s, "events/s asked", &t.steps);
    let best = t
        .highest_lossless()
        .map_or("none of the steps".into(), |l| {
            format!("{:.0} events/s (step {})", l.rate(), l.target)
        });
    let short = match t.steps.last() {
        Some(l) if l.lost == 0 && l.rate() < 0.95 * l.target as f64 => format!(
            " The last step asked for {} and the producers reached only {:.0} events/s, with no loss (producers \
             and agent share the same {} CPUs).",
            l.target,
            l.rate(),
            std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
        ),
        _ => String::new(),
    };
    para!(
        s,
        "Highest sustained rate with zero loss at the asked rate: **{best}**.{short}"
    );
    let per_event = t.at_50k().and_then(Load::cpu_us_per_event);
    match &t.profile {
        Err(why) => para!(s, "The agent's CPU was not profiled: {why}."),
        Ok((p, load)) => {
            para!(
                s,
                "**Where the agent's CPU goes** at 50,000 events/s: `perf record` (4,999 samples a second, call \
                 graphs unwound from DWARF) on the agent through one more step ({:.0} events/s, {} lost), {} \
                 samples. A stage's share is its own time and its callees' (the write's includes the kernel's \
                 side of it); its µs per event are that share of the {} the 50,000 events/s step above cost \
                 (without perf).",
                load.rate(),
                load.lost,
                p.samples,
                per_event.map_or("CPU per event".into(), |us| format!("{us:.2} µs per event"))
            );
            let us = |x: f64| per_event.map_or("—".into(), |us| format!("{:.2}", x * us));
            let rows = STAGES.iter().zip(&p.stages).map(|(st, share)| match share {
                Some(x) => vec![st.0.into(), format!("{:.1} %", x * 100.0), us(*x)],
                None => vec![st.0.into(), "not seen (inlined?)".into(), "—".into()],
            });
            let rest = 1.0 - p.stages.iter().flatten().sum::<f64>();
            let the_rest = "the rest: the event loop, ring-buffer reads, events to engine inputs, timers, sweeps";
            let rows = rows.chain([vec![
                the_rest.into(),
                format!("{:.1} %", rest * 100.0),
                us(rest),
            ]]);
            table(
                s,
                &["stage", "share of the agent's CPU", "µs per event"],
                "lrr",
                rows,
            );
            para!(
                s,
                "The C library's allocator (malloc, free), which every stage calls, took {:.1} % itself.",
                p.allocator * 100.0
            );
        }
    }
    para!(
        s,
        "Bursts: life cycles back to back, as fast as the producer threads make them, the size doubled until loss \
         and then bisected; the agent runs throughout."
    );
    loads_table(s, "events in the burst", &t.bursts);
    let clean = t
        .bursts
        .iter()
        .filter(|l| l.lost == 0)
        .map(|l| l.target)
        .max();
    let clean = clean.map_or("—".into(), |c| c.to_string());
    let loss = match t
        .bursts
        .iter()
        .filter(|l| l.lost > 0)
        .map(|l| l.target)
        .min()
    {
        Some(l) => format!("loss begins between bursts of **{clean}** and **{l}** events."),
        None => format!("**no burst lost events**, up to {clean} events (the largest tried)."),
    };
    para!(
        s,
        "With the agent running, {loss}\nVerdict lines written during the phase: {}.",
        t.verdicts
    );
    let r = &t.ring;
    para!(
        s,
        "The ring buffer alone: a burst of {} events made while the agent was stopped (SIGSTOP, then SIGCONT) kept \
         **{}** of them and counted {} lost (exact: {}).",
        r.produced,
        r.submitted,
        r.lost,
        yes(r.exact)
    );
}

/// The p50 scrape with the held sockets over the p50 with none.
fn scrape_growth(f: &Footprint) -> Option<f64> {
    let p50 = |v: &[f64]| quantile(v, 0.5).filter(|x| *x > 0.0);
    Some(p50(&f.scrape_ms)? / p50(&f.scrape_idle_ms)?)
}

fn footprint_section(s: &mut String, f: &Footprint, throughput: Option<&Throughput>) {
    s.push_str("## 3. Agent footprint\n\n");
    para!(
        s,
        "One agent with {} configured watches, events to tmpfs, /metrics on loopback, the agent's default \
         intervals.",
        f.watches
    );
    let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
    let rows = [
        (
            format!("idle CPU over {} s, no sockets", f.idle_secs),
            format!("{:.3} % of one CPU", f.idle_cpu * 100.0),
        ),
        ("RSS idle".into(), mib(f.rss_idle_kib)),
        (
            format!(
                "sockets held (made at 5,000/s in {:.1} s); live in the engine",
                f.hold_secs
            ),
            format!("{}; {:.0}", f.sockets, f.live_in_engine),
        ),
        (
            "RSS with them (VmRSS); peak (VmHWM)".into(),
            format!("{}; {}", mib(f.rss_kib), mib(f.hwm_kib)),
        ),
        (
            format!("idle CPU over {} s with them", f.idle_secs),
            format!("{:.3} % of one CPU", f.idle_cpu_loaded * 100.0),
        ),
    ];
    table(s, &["what", "value"], "lr", rows.map(|(k, v)| vec![k, v]));
    if let Some(t) = throughput {
        let at50 = t.at_50k().and_then(Load::cpu_us_per_event);
        let at50 = at50.map_or(String::new(), |us| {
            format!(": {us:.2} µs at 50,000 events/s")
        });
        para!(
            s,
            "CPU per event is in the throughput table above (agent utime + stime over events delivered, per \
             step){at50}."
        );
    }
    s.push_str("## 4. /metrics scrape time\n\n");
    para!(
        s,
        "{} sequential scrapes over loopback (connect, request, whole body), with the {} sockets above live: \
         **{} series**, {} bytes.",
        f.scrape_ms.len(),
        f.sockets,
        f.series,
        f.bytes
    );
    let rows = [(0, &f.scrape_idle_ms), (f.sockets, &f.scrape_ms)];
    let rows = rows.map(|(n, v)| {
        vec![
            n.to_string(),
            q2(v, 0.5, "ms"),
            q2(v, 0.99, "ms"),
            q2(v, 1.0, "ms"),
        ]
    });
    table(s, &["live sockets", "p50", "p99", "max"], "rrrr", rows);
    if let Some(g) = scrape_growth(f) {
        para!(
            s,
            "With {} live sockets the p50 scrape took {g:.1}× its time with none.",
            f.sockets
        );
    }
}

fn latency_section(s: &mut String, l: &Latency) {
    s.push_str("## 5. Latency\n\n");
    para!(
        s,
        "Each sample: a random pause of 0–25 ms (so that samples do not fall into step with any timer), a bind in \
         the watched directory, then the time from bind's return until the `bind` line naming that path is in the \
         events file (followed with inotify), or until `sockwatch_events_total{{kind=\"bind\"}}` has grown in \
         /metrics (polled every millisecond, each poll a whole scrape). Both clocks are the workload's \
         CLOCK_MONOTONIC."
    );
    let paths = [
        ("syscall return → event line", &l.to_line, l.line_missed),
        ("syscall return → /metrics", &l.to_metrics, l.metrics_missed),
    ];
    let rows = paths.map(|(what, v, missed)| {
        let ms: Vec<f64> = v.iter().map(|x| x / 1e6).collect();
        let qs = [0.5, 0.9, 0.99, 1.0].map(|q| q2(&ms, q, "ms"));
        [what.into(), ms.len().to_string(), missed.to_string()]
            .into_iter()
            .chain(qs)
            .collect()
    });
    table(
        s,
        &[
            "path",
            "samples",
            "missed (2 s)",
            "p50",
            "p90",
            "p99",
            "max",
        ],
        "lrrrrrr",
        rows,
    );
    para!(
        s,
        "Agent start-up with the whole probe table (`--probe-mode auto`: every tier of every hook tried; spawn → \
         running, probes attached and the startup scan done), {} starts: p50 {}, max {}.",
        l.startup.len(),
        q2(&l.startup, 0.5, "s"),
        q2(&l.startup, 1.0, "s")
    );
}
