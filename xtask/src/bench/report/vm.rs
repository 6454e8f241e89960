//! The report's VM section, written by `cargo xtask bench --vm` between two markers and kept as
//! it is by a host run (and the other way round).
use std::collections::BTreeMap;

use super::table::{NODE_TAX_POINTS, at_most_decided, points, table, yes};
use crate::bench::{
    Interval, Op, Spread, median,
    vm::{GuestBench, TIERS, floor, ops},
};

const BEGIN: &str = "<!-- vm section: cargo xtask bench --vm -->";
const END: &str = "<!-- end of the vm section -->";

/// The precise tiers, and their targets (issue 12): (ops, most added, as a fraction of `off`).
const PRECISE: [&str; 3] = ["lsm", "fentry", "kprobe"];
const TARGETS: [(&str, f64); 4] = [
    ("sockcycle", 0.03),
    ("sockcycle-go", 0.03),
    ("unlink", 0.01),
    ("getppid", 0.01),
];
/// Every tier's added cost, and every program's run time, at most this multiple of the floor's.
const FLOOR_MULTIPLE: f64 = 2.0;
/// Issue 38's cold paths: a program's run time on them at most this multiple of its empty one.
const COLD_MULTIPLE: f64 = 10.0;

/// One pass's programs: (mode, program, runs, ns per run).
type Pass = [(String, String, u64, f64)];

/// `doc` with its VM section replaced by `section` (appended when it has none).
pub fn splice(doc: &str, section: &str) -> String {
    let kept = section_of(doc).map_or(doc.to_owned(), |s| doc.replacen(s, "", 1));
    format!("{}\n\n{}\n", kept.trim_end(), section.trim_end())
}

/// The VM section of `doc`, markers included, if it has one.
pub fn section_of(doc: &str) -> Option<&str> {
    let b = doc.find(BEGIN)?;
    Some(&doc[b..doc[b..].find(END)? + b + END.len()])
}

pub use section_of as section;

/// The `6.12` of `6.12.118+deb12-cloud-amd64`: a point release of the same series compares.
fn series(release: &str) -> &str {
    release
        .match_indices('.')
        .nth(1)
        .map_or(release, |(i, _)| &release[..i])
}

/// The replaced VM section's target figures: (kernel series, target, tier) → measured.
#[derive(Debug, Default, PartialEq)]
pub struct VmBefore {
    pub date: String,
    measured: BTreeMap<(String, String, String), String>,
}

impl VmBefore {
    pub fn parse(section: &str) -> Option<VmBefore> {
        let first = section
            .lines()
            .find_map(|l| l.strip_prefix('`')?.split_once("`, ")?.1.split_once(". "));
        let (mut measured, mut kernel) = (BTreeMap::new(), None);
        for line in section.lines() {
            if let Some(rest) = line.strip_prefix("### Kernel ") {
                kernel = rest.split_whitespace().next().map(|r| series(r).to_owned());
            }
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            if let (Some(k), [target, tier, value, _, ..]) = (&kernel, &cells[..])
                && target.contains('≤')
            {
                measured.insert(
                    (k.clone(), target.to_string(), tier.to_string()),
                    value.to_string(),
                );
            }
        }
        (!measured.is_empty()).then(|| VmBefore {
            date: first.map_or("", |f| f.0).to_owned(),
            measured,
        })
    }

    fn measured(&self, release: &str, target: &str, tier: &str) -> &str {
        let key = (
            series(release).to_owned(),
            target.to_owned(),
            tier.to_owned(),
        );
        self.measured.get(&key).map_or("—", String::as_str)
    }
}

fn percent(x: f64) -> String {
    format!("{:+.1} %", x * 100.0)
}

fn iqr(r: Spread) -> String {
    format!(
        "{} (IQR {} … {})",
        percent(r.p50),
        percent(r.p25),
        percent(r.p75)
    )
}

/// `mode`'s ns for `op` in round `r`.
fn ns_at(g: &GuestBench, mode: &str, op: &str, r: usize) -> Option<f64> {
    let o = g
        .ops
        .iter()
        .find(|o| o.0 == r && o.1 == mode && o.2 == op)?;
    Some(o.3)
}

/// Per round, `mode`'s ns for `op` over `off`'s, as added fractions (0.05 = +5 %).
fn added(g: &GuestBench, op: &str, mode: &str) -> Vec<f64> {
    (0..g.rounds)
        .filter_map(|r| Some(ns_at(g, mode, op, r)? / ns_at(g, "off", op, r)? - 1.0))
        .collect()
}

/// Per round, what `tier` adds to `op` beyond its floor, in points of `off`'s time.
fn points_above_floor(g: &GuestBench, op: &str, tier: &str) -> Vec<f64> {
    let at = |mode: &str, r| ns_at(g, mode, op, r);
    (0..g.rounds)
        .filter_map(|r| Some((at(tier, r)? - at(&floor(tier), r)?) / at("off", r)? * 100.0))
        .collect()
}

fn p50(g: &GuestBench, op: &str, mode: &str) -> Option<f64> {
    Some(Spread::of(&added(g, op, mode))?.p50)
}

/// The tier's added cost for `op` and its floor's, and the first as a multiple of the second,
/// if the floor added anything measurable.
fn floor_multiple(g: &GuestBench, op: &str, tier: &str) -> Option<(f64, f64, f64)> {
    let (sw, fl) = (p50(g, op, tier)?, p50(g, op, &floor(tier))?);
    (fl > 0.0).then(|| (sw, fl, sw / fl))
}

/// The ns per run of the floor's empty program standing for the agent's `program` on `tier`:
/// the kernel cuts a program's own name to 15 bytes where the object carried no BTF, the floor
/// reports names whole.
fn floor_ns(pass: &Pass, tier: &str, program: &str) -> Option<f64> {
    let same =
        |whole: &str| whole == program || (program.len() == 15 && whole.starts_with(program));
    pass.iter()
        .find(|p| p.0 == floor(tier) && same(&p.1))
        .map(|p| p.3)
}

/// `tier`'s programs in `pass` with a floor: (name, runs, ns per run, × its empty program),
/// the most above its empty program first.
fn programs<'a>(pass: &'a Pass, tier: &str) -> Vec<(&'a str, u64, f64, f64)> {
    let of = |p: &'a (String, String, u64, f64)| {
        Some((p.1.as_str(), p.2, p.3, p.3 / floor_ns(pass, tier, &p.1)?))
    };
    let mut progs: Vec<_> = pass.iter().filter(|p| p.0 == tier).filter_map(of).collect();
    progs.sort_by(|a, b| b.3.total_cmp(&a.3));
    progs
}

/// The row of "every program in `pass` at most `most`× its empty program", if any ran.
fn within(pass: &Pass, tier: &'static str, what: String, most: f64) -> Option<TargetRow> {
    let progs = programs(pass, tier);
    let worst = progs.first()?;
    let n = progs.iter().filter(|p| p.3 <= most).count();
    let measured = format!(
        "{n} of {}; the most `{}` {:.1}×",
        progs.len(),
        worst.0,
        worst.3
    );
    Some((what, tier, measured, Some(worst.3 <= most)))
}

/// A target row: (target, tier, measured, met; none when the rounds' noise leaves it open).
type TargetRow = (String, &'static str, String, Option<bool>);

/// A guest's target rows.
fn targets(g: &GuestBench) -> Vec<TargetRow> {
    let mut rows = Vec::new();
    for ops in [&TARGETS[..2], &TARGETS[2..]] {
        for tier in PRECISE {
            for &(op, most) in ops {
                if let Some(x) = p50(g, op, tier) {
                    rows.push((
                        format!("{op} ≤ {}", percent(most)),
                        tier,
                        percent(x),
                        Some(x <= most),
                    ));
                }
            }
        }
    }
    for tier in TIERS {
        for op in ["sockcycle", "sockcycle-go"] {
            if let Some((sw, fl, x)) = floor_multiple(g, op, tier) {
                let measured = format!("{} vs {} ({x:.1}×)", percent(sw), percent(fl));
                rows.push((
                    format!("{op} ≤ {FLOOR_MULTIPLE}× the floor"),
                    tier,
                    measured,
                    Some(x <= FLOOR_MULTIPLE),
                ));
            }
        }
        // With every directory watched (`auto`), a life cycle anywhere is a watched one.
        let unrelated = if tier == "auto" {
            Op::unrelated_by_default
        } else {
            Op::unrelated
        };
        for op in Op::ALL.into_iter().filter(|op| unrelated(*op)).map(Op::arg) {
            if let Some(i) = Interval::of(&points_above_floor(g, op, tier)) {
                rows.push((
                    format!("{op} ≤ the floor + {NODE_TAX_POINTS:.0} points"),
                    tier,
                    points(i),
                    at_most_decided(i, NODE_TAX_POINTS),
                ));
            }
        }
        let every = format!("every program ≤ {FLOOR_MULTIPLE}× its empty program");
        rows.extend(within(&g.programs, tier, every, FLOOR_MULTIPLE));
        let cold = format!("cold paths: every program ≤ {COLD_MULTIPLE}× its empty program");
        rows.extend(within(&g.cold, tier, cold, COLD_MULTIPLE));
    }
    rows
}

/// The section for `guests`, run as `command` on `date`; `before`, the section it replaces.
pub fn render(
    guests: &[GuestBench],
    command: &str,
    date: &str,
    before: Option<&VmBefore>,
) -> String {
    let batches: Vec<String> = ops()
        .iter()
        .map(|(op, n)| format!("{} × {n}", op.arg()))
        .collect();
    let mut s = format!("{BEGIN}\n## Every tier in a VM (QEMU/TCG)\n\n");
    para!(
        s,
        "`{command}`, {date}. This host refuses fentry, LSM and kprobe programs, so the precise tiers are measured \
         in a QEMU guest on Debian's kernel, under TCG (no KVM here). **TCG distorts absolute times** (the `off` \
         column against the host's: these syscalls run 3–9× slower, and a BPF program's JIT code runs as \
         translated code): the figures are the ratios and each program's ns against the same guest's others, \
         never the absolute times. The guest's `/init` runs the workload (`sockwatch-bench serve`, three as on the \
         host: the operations that concern no watched socket in one that never binds a path socket, the life \
         cycles outside the watched directory in another) pinned to vCPU 0 and the agent pinned to vCPU 1; each round times every operation with no agent (`off`), under each \
         `--probe-mode` (the tiers with `--watch`, and `auto` in the DaemonSet's default configuration: no \
         `--watch`, so the workload's life cycles are watched ones and it is tracked) and under each one's \
         **floor** (`sockwatch-floor`: an empty program of the same kind at every attach point the tier \
         uses, attached by the agent's own code: the attachments' unavoidable cost), \
         the order rotated each round, the agent started afresh each time and given a second before the \
         batches. A ratio is taken per round against the same round's `off`; the tables give its median (p50) \
         and interquartile range over the rounds. A node-tax row (an operation that concerns no watched socket \
         against the floor) takes per round the tier's time less its floor's, in points of `off`'s, and is \
         decided on their median's distribution-free interval (order statistics): yes when all of it is at most \
         3 points, no when none of it is, undecided when it holds 3. Batches: {}.",
        batches.join(", ")
    );
    for g in guests {
        guest(&mut s, g, before);
    }
    s + END + "\n"
}

/// One kernel's part: its ratios, its floor, its targets, its programs, its start-ups, and
/// why a precise tier missed.
fn guest(s: &mut String, g: &GuestBench, before: Option<&VmBefore>) {
    para!(s, "### Kernel {} ({} rounds)", g.release, g.rounds);
    resumed(s, g);
    ratios(s, g);
    floors(s, g);
    let rows = targets(g);
    targets_table(s, g, &rows, before);
    programs_table(s, &g.programs, PROGRAMS);
    programs_table(s, &g.cold, &cold_intro());
    starts(s, g);
    missed(s, g, &rows);
}

/// The runs the guest was booted again for, if its kernel died of an emulation fault.
fn resumed(s: &mut String, g: &GuestBench) {
    if g.resumed.is_empty() {
        return;
    }
    let runs: Vec<String> = g
        .resumed
        .iter()
        .map(|(run, fault)| format!("`{run}` ({fault})"))
        .collect();
    para!(
        s,
        "The guest kernel died of an emulation fault {} time(s) (TCG, not sockwatch: see \
         `xtask/src/vm/resume.rs`); each time the guest was booted again from the run it faulted in, which \
         ran again whole: {}. Only runs that finished are counted.",
        g.resumed.len(),
        runs.join(", ")
    );
}

/// Each operation's `off` time and what each tier adds to it.
fn ratios(s: &mut String, g: &GuestBench) {
    let ops = ops().map(|(op, _)| op.arg());
    let head: Vec<&str> = ["operation", "`off`, ns per op (p50)"]
        .into_iter()
        .chain(TIERS)
        .collect();
    let rows = ops.iter().map(|op| {
        let off: Vec<f64> = g
            .ops
            .iter()
            .filter(|o| o.1 == "off" && o.2 == *op)
            .map(|o| o.3)
            .collect();
        let tiers = TIERS.map(|t| Spread::of(&added(g, op, t)).map_or("—".into(), iqr));
        [op.to_string(), format!("{:.0}", median(&off))]
            .into_iter()
            .chain(tiers)
            .collect()
    });
    table(s, &head, &format!("lr{}", "r".repeat(TIERS.len())), rows);
}

/// What each tier's floor adds, and the tier as a multiple of it.
fn floors(s: &mut String, g: &GuestBench) {
    let ops = ops().map(|(op, _)| op.arg());
    para!(
        s,
        "The floor: added per operation with only the empty programs attached (p50, IQR), and the tier's added \
         cost as a multiple of its floor's (p50 over p50; none where the floor added nothing measurable):"
    );
    let head: Vec<String> = TIERS.map(floor).to_vec();
    let head: Vec<&str> = ["operation"]
        .into_iter()
        .chain(head.iter().map(String::as_str))
        .collect();
    let rows = ops.iter().map(|op| {
        let cells = TIERS.map(|tier| {
            let Some(r) = Spread::of(&added(g, op, &floor(tier))) else {
                return "—".into();
            };
            let x = floor_multiple(g, op, tier)
                .map_or("no multiple".into(), |m| format!("tier {:.1}×", m.2));
            format!("{}; {x}", iqr(r))
        });
        [op.to_string()].into_iter().chain(cells).collect()
    });
    table(s, &head, &format!("l{}", "r".repeat(TIERS.len())), rows);
}

/// The target rows, beside the replaced section's figures.
fn targets_table(s: &mut String, g: &GuestBench, rows: &[TargetRow], before: Option<&VmBefore>) {
    let was = before.map(|b| format!("before ({})", b.date));
    let head: Vec<&str> = ["target", "tier", "measured (p50)"]
        .into_iter()
        .chain(was.as_deref())
        .chain(["met"])
        .collect();
    let table_rows = rows.iter().map(|(target, tier, measured, met)| {
        let was = before.map(|b| b.measured(&g.release, target, tier).to_owned());
        [target.clone(), tier.to_string(), measured.clone()]
            .into_iter()
            .chain(was)
            .chain([met.map_or("undecided".into(), yes)])
            .collect()
    });
    table(
        s,
        &head,
        if before.is_some() { "llrrl" } else { "llrl" },
        table_rows,
    );
}

const PROGRAMS: &str = "Each program's run count and mean run time, from one more pass of every batch per \
     tier with `kernel.bpf_stats_enabled` on (outside the timed rounds), busiest first, beside the empty program \
     at the same attach point (the same pass under the tier's floor):";

/// The cold-path pass's introduction, naming its operations.
fn cold_intro() -> String {
    format!(
        "**The cold paths** (issue 38): the same, through a pass of only the operations that concern no \
         watched socket ({}), on a fresh agent and floor; not under `auto`, where every directory is watched:",
        Op::unrelated_names().join(", ")
    )
}
/// Each program's runs and ns per run in `pass`, beside its empty program's, after `intro`.
fn programs_table(s: &mut String, pass: &Pass, intro: &str) {
    if pass.is_empty() {
        para!(s, "No program ran in this pass with `bpf_stats` on.");
    } else {
        para!(s, "{intro}");
        let rows = TIERS.iter().flat_map(|tier| {
            let mut progs: Vec<_> = pass.iter().filter(|p| p.0 == *tier).collect();
            progs.sort_by(|a, b| (b.2 as f64 * b.3).total_cmp(&(a.2 as f64 * a.3)));
            progs.into_iter().map(|(mode, name, runs, ns)| {
                let empty = floor_ns(pass, mode, name);
                let x = empty.map_or("—".into(), |f| format!("{:.1}", ns / f));
                let empty = empty.map_or("—".into(), |f| format!("{f:.0}"));
                vec![
                    mode.clone(),
                    format!("`{name}`"),
                    runs.to_string(),
                    format!("{ns:.0}"),
                    empty,
                    x,
                ]
            })
        });
        let head = [
            "tier",
            "program",
            "runs",
            "ns per run (TCG)",
            "its empty program, ns per run",
            "×",
        ];
        table(s, &head, "llrrrr", rows);
    }
}

/// The p50 start-up per tier.
fn starts(s: &mut String, g: &GuestBench) {
    let starts = TIERS.iter().filter_map(|tier| {
        let t: Vec<f64> = g
            .starts
            .iter()
            .filter(|(m, _)| m == tier)
            .map(|x| x.1)
            .collect();
        (!t.is_empty()).then(|| format!(" {tier} {:.2} s;", median(&t)))
    });
    para!(
        s,
        "Start-up, spawn → running (p50 over the tier's starts):{}",
        starts.collect::<String>()
    );
}

/// Why a precise tier misses its targets, from the guest's own figures: what the floor adds
/// against each target, and the programs' own work beyond their empty programs.
fn missed(s: &mut String, g: &GuestBench, rows: &[TargetRow]) {
    let missed: Vec<&str> = PRECISE
        .into_iter()
        .filter(|t| rows.iter().any(|r| r.1 == *t && r.3 == Some(false)))
        .collect();
    if missed.is_empty() {
        return;
    }
    s.push_str("**Missed targets in this guest: the measured reason.**\n\n");
    for tier in missed {
        let (mut parts, mut floor_over) = (Vec::new(), Vec::new());
        for (op, most) in TARGETS {
            let (Some(sw), Some(fl)) = (p50(g, op, tier), p50(g, op, &floor(tier))) else {
                continue;
            };
            parts.push(format!("{op} {} (floor {})", percent(sw), percent(fl)));
            if fl > most {
                floor_over.push(op);
            }
        }
        let floor_says = match floor_over.is_empty() {
            true => "no floor reaches its target: the rest is the programs' own work".to_owned(),
            false => format!(
                "for {} the empty programs alone add more than the target, so under TCG no program on these \
                 attach points meets it; the rest of each figure is the programs' own work",
                floor_over.join(", ")
            ),
        };
        let mut work: Vec<(&str, f64, f64)> = programs(&g.programs, tier)
            .into_iter()
            .map(|(n, runs, ns, x)| (n, runs as f64 * (ns - ns / x), x))
            .collect();
        work.sort_by(|a, b| b.1.total_cmp(&a.1));
        let work: Vec<String> = work
            .iter()
            .take(4)
            .map(|(n, total, x)| format!("`{n}` {:.1} ms ({x:.1}×)", total / 1e6))
            .collect();
        let work = if work.is_empty() {
            "not measured (no program ran beside its empty program)".into()
        } else {
            work.join(", ")
        };
        s.push_str(&format!(
            "- **{tier}**: {}; {floor_says}. Its programs' own work (runs × ns beyond the empty program at the same \
             attach point, over the per-program pass), largest first: {work}.\n",
            parts.join(", ")
        ));
    }
    s.push('\n');
}

#[cfg(test)]
mod tests;
