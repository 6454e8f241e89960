//! The report's VM section: every tier in a QEMU guest, written by `cargo xtask bench --vm` and
//! kept as it is by a host run (and the other way round), between two markers.
mod before;
mod missed;

use std::fmt::Write as _;

pub use before::VmBefore;

use crate::bench::{
    plan::{Op, UNRELATED},
    stats::{Spread, median},
    vm::{GuestBench, OPS, TIERS, floor},
};

const BEGIN: &str = "<!-- vm section: cargo xtask bench --vm -->";
const END: &str = "<!-- end of the vm section -->";

/// How much more than the floor an operation that concerns no watched socket may pay (issue
/// 38's node tax), as a fraction of `off`.
const NODE_TAX: f64 = 0.03;

/// The precise tiers' targets (issue 12): (ops, most added, as a fraction of `off`).
const TARGETS: [(&[&str], f64); 2] = [
    (&["sockcycle", "sockcycle-go"], 0.03),
    (&["unlink", "getppid"], 0.01),
];
/// The tiers the precise targets are for.
const PRECISE: [&str; 3] = ["lsm", "fentry", "kprobe"];
/// Every tier's added cost, and every program's run time, at most this multiple of the
/// floor's (issue 12).
const FLOOR_MULTIPLE: f64 = 2.0;
/// The kernel keeps a program's own name to 15 bytes (`BPF_OBJ_NAME_LEN`): `/proc/kallsyms`
/// names the agent's programs by their BTF function name, whole, and by that cut name where
/// the object carried no BTF; the floor reports the names whole.
const KERNEL_NAME_LEN: usize = 15;

/// `doc` with its VM section replaced by `section` (appended when it has none).
pub fn splice(doc: &str, section: &str) -> String {
    let kept = without(doc);
    format!("{}\n\n{}", kept.trim_end(), section.trim_end()) + "\n"
}

/// The VM section of `doc`, markers included, if it has one.
pub fn section(doc: &str) -> Option<&str> {
    let b = doc.find(BEGIN)?;
    let e = doc[b..].find(END)? + b + END.len();
    Some(&doc[b..e])
}

/// `doc` without its VM section.
fn without(doc: &str) -> String {
    match section(doc) {
        Some(s) => doc.replacen(s, "", 1),
        None => doc.to_owned(),
    }
}

/// The section for `guests`, run as `command` on `date`; `before`, the section it replaces.
pub fn render(
    guests: &[GuestBench],
    command: &str,
    date: &str,
    before: Option<&VmBefore>,
) -> String {
    let mut s = String::new();
    let _ = render_into(&mut s, guests, command, date, before);
    s
}

fn render_into(
    s: &mut String,
    guests: &[GuestBench],
    command: &str,
    date: &str,
    before: Option<&VmBefore>,
) -> std::fmt::Result {
    writeln!(s, "{BEGIN}\n## Every tier in a VM (QEMU/TCG)\n")?;
    writeln!(
        s,
        "`{command}`, {date}. This host refuses fentry, LSM and kprobe programs, so the \
         precise tiers are measured in a QEMU guest on Debian's kernel, under TCG (no KVM \
         here). **TCG distorts absolute times** (the `off` column against the host's: \
         these syscalls run 3–9× slower, and a BPF program's JIT code runs as translated \
         code): the figures are the \
         ratios and each program's ns against the same guest's others, never the absolute \
         times. The guest's `/init` runs the workload (`sockwatch-bench serve`, two of \
         them as on the host: the operations that concern no watched socket in one that \
         never binds one) pinned to vCPU 0 and the agent pinned to vCPU 1; each round times every operation with no \
         agent (`off`) and under each `--probe-mode` in turn, the order rotated each round, \
         the agent started afresh for each tier and given a second before the batches. \
         Each round also times every operation under each tier's **floor** \
         (`sockwatch-floor`: an empty program of the same kind at every attach point the \
         tier uses, attached by the agent's own code), the unavoidable cost of the \
         attachments. A ratio is taken per round against the same round's `off`; the \
         tables give its median (p50) and interquartile range over the rounds. Batches: \
         {}.\n",
        OPS.iter()
            .map(|(op, n)| format!("{op} × {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    )?;
    for g in guests {
        render_guest(s, g, before)?;
    }
    writeln!(s, "{END}")
}

fn render_guest(s: &mut String, g: &GuestBench, before: Option<&VmBefore>) -> std::fmt::Result {
    writeln!(s, "### Kernel {} ({} rounds)\n", g.release, g.rounds)?;
    render_resumes(s, g)?;
    render_ratios(s, g)?;
    render_floor(s, g)?;
    render_targets(s, g, before)?;
    render_programs(s, g)?;
    render_starts(s, g)?;
    missed::render(s, g)
}

/// The boots an emulation fault ended: which runs were run again.
fn render_resumes(s: &mut String, g: &GuestBench) -> std::fmt::Result {
    if g.resumed.is_empty() {
        return Ok(());
    }
    let runs: Vec<String> = g
        .resumed
        .iter()
        .map(|(run, fault)| format!("`{run}` ({fault})"))
        .collect();
    writeln!(
        s,
        "The guest kernel died of an emulation fault {} time(s) (TCG, not sockwatch: see \
         `xtask/src/vm/resume.rs`); each time the guest was booted again from the run it \
         faulted in, which ran again whole: {}. Only runs that finished are counted.\n",
        g.resumed.len(),
        runs.join(", ")
    )
}

/// Per round, `mode`'s ns for `op` over `off`'s, as added fractions (0.05 = +5 %).
fn added(g: &GuestBench, op: &str, mode: &str) -> Vec<f64> {
    let at = |m: &str, r: usize| {
        g.ops
            .iter()
            .find(|(round, om, oop, _)| *round == r && om == m && oop == op)
            .map(|o| o.3)
    };
    (0..g.rounds)
        .filter_map(|r| Some(at(mode, r)? / at("off", r)? - 1.0))
        .collect()
}

fn percent(x: f64) -> String {
    format!("{:+.1} %", x * 100.0)
}

fn render_ratios(s: &mut String, g: &GuestBench) -> std::fmt::Result {
    writeln!(
        s,
        "| operation | `off`, ns per op (p50) | {} |",
        TIERS.join(" | ")
    )?;
    writeln!(s, "| --- | ---: |{}", " ---: |".repeat(TIERS.len()))?;
    for (op, _) in OPS {
        let off: Vec<f64> = g
            .ops
            .iter()
            .filter(|o| o.1 == "off" && o.2 == op)
            .map(|o| o.3)
            .collect();
        write!(s, "| {op} | {:.0} |", median(&off))?;
        for mode in TIERS {
            match Spread::of(&added(g, op, mode)) {
                Some(r) => write!(
                    s,
                    " {} (IQR {} … {}) |",
                    percent(r.p50),
                    percent(r.p25),
                    percent(r.p75)
                )?,
                None => write!(s, " — |")?,
            }
        }
        writeln!(s)?;
    }
    writeln!(s)
}

/// The tier's added cost for `op` as a multiple of its floor's (p50 over p50), if the floor
/// added anything measurable: a floor at or below `off` has no multiple.
fn floor_multiple(g: &GuestBench, op: &str, tier: &str) -> Option<(f64, f64, f64)> {
    let sw = Spread::of(&added(g, op, tier))?.p50;
    let fl = Spread::of(&added(g, op, &floor(tier)))?.p50;
    (fl > 0.0).then(|| (sw, fl, sw / fl))
}

/// What each tier's floor adds, and the tier's cost as a multiple of it.
fn render_floor(s: &mut String, g: &GuestBench) -> std::fmt::Result {
    writeln!(
        s,
        "The floor: added per operation with only the empty programs attached (p50, IQR), \
         and the tier's added cost as a multiple of its floor's (p50 over p50; none where \
         the floor added nothing measurable):\n"
    )?;
    writeln!(s, "| operation | {} |", TIERS.map(floor).join(" | "))?;
    writeln!(s, "| --- |{}", " ---: |".repeat(TIERS.len()))?;
    for (op, _) in OPS {
        write!(s, "| {op} |")?;
        for tier in TIERS {
            let Some(r) = Spread::of(&added(g, op, &floor(tier))) else {
                write!(s, " — |")?;
                continue;
            };
            let times = floor_multiple(g, op, tier)
                .map_or_else(|| "no multiple".to_owned(), |m| format!("tier {:.1}×", m.2));
            write!(
                s,
                " {} (IQR {} … {}); {times} |",
                percent(r.p50),
                percent(r.p25),
                percent(r.p75)
            )?;
        }
        writeln!(s)?;
    }
    writeln!(s)
}

/// One row of a guest's targets table.
#[derive(Debug, PartialEq)]
pub struct TargetRow {
    pub target: String,
    pub tier: &'static str,
    pub measured: String,
    pub met: bool,
}

/// Every target this guest measured, in the table's order.
fn targets(g: &GuestBench) -> Vec<TargetRow> {
    let mut rows = Vec::new();
    for (ops, most) in TARGETS {
        for tier in PRECISE {
            for op in ops {
                if let Some(r) = Spread::of(&added(g, op, tier)) {
                    rows.push(TargetRow {
                        target: format!("{op} ≤ {}", percent(most)),
                        tier,
                        measured: percent(r.p50),
                        met: r.p50 <= most,
                    });
                }
            }
        }
    }
    for tier in TIERS {
        for op in ["sockcycle", "sockcycle-go"] {
            if let Some((sw, fl, times)) = floor_multiple(g, op, tier) {
                rows.push(TargetRow {
                    target: format!("{op} ≤ {FLOOR_MULTIPLE}× the floor"),
                    tier,
                    measured: format!("{} vs {} ({times:.1}×)", percent(sw), percent(fl)),
                    met: times <= FLOOR_MULTIPLE,
                });
            }
        }
        rows.extend(node_tax(g, tier));
        if let Some((within, n, worst, most)) = programs_to_floor(g, tier) {
            rows.push(TargetRow {
                target: format!("every program ≤ {FLOOR_MULTIPLE}× its empty program"),
                tier,
                measured: format!("{within} of {n}; the most `{worst}` {most:.1}×"),
                met: most <= FLOOR_MULTIPLE,
            });
        }
    }
    rows
}

/// Issue 38's node tax under `tier`: each operation that concerns no watched socket at most
/// [`NODE_TAX`] above what the tier's floor adds to it (p50 over p50).
fn node_tax(g: &GuestBench, tier: &'static str) -> Vec<TargetRow> {
    let p50 = |op, mode: &str| Spread::of(&added(g, op, mode)).map(|r| r.p50);
    UNRELATED
        .into_iter()
        .map(Op::arg)
        .filter_map(|op| {
            let (sw, fl) = (p50(op, tier)?, p50(op, &floor(tier))?);
            Some(TargetRow {
                target: format!("{op} ≤ the floor + {:.0} points", NODE_TAX * 100.0),
                tier,
                measured: format!("{} vs {}", percent(sw), percent(fl)),
                met: sw - fl <= NODE_TAX,
            })
        })
        .collect()
}

fn render_targets(s: &mut String, g: &GuestBench, before: Option<&VmBefore>) -> std::fmt::Result {
    match before {
        Some(b) => {
            writeln!(
                s,
                "| target | tier | measured (p50) | before ({}) | met |",
                b.date
            )?;
            writeln!(s, "| --- | --- | ---: | ---: | --- |")?;
        }
        None => {
            writeln!(s, "| target | tier | measured (p50) | met |")?;
            writeln!(s, "| --- | --- | ---: | --- |")?;
        }
    }
    for r in targets(g) {
        let was = before.map(|b| format!(" {} |", b.measured(&g.release, &r.target, r.tier)));
        writeln!(
            s,
            "| {} | {} | {} |{} {} |",
            r.target,
            r.tier,
            r.measured,
            was.as_deref().unwrap_or(""),
            yes_no(r.met)
        )?;
    }
    writeln!(s)
}

fn yes_no(met: bool) -> &'static str {
    if met { "yes" } else { "**no**" }
}

/// The ns per run of the floor's empty program standing for the agent's `program` on `tier`.
fn floor_ns(g: &GuestBench, tier: &str, program: &str) -> Option<f64> {
    let mode = floor(tier);
    g.programs
        .iter()
        .find(|(m, name, _, _)| *m == mode && same_program(name, program))
        .map(|p| p.3)
}

/// Whether the floor's `whole` name and the kernel's `named` are one program.
fn same_program(whole: &str, named: &str) -> bool {
    whole == named || (named.len() == KERNEL_NAME_LEN && whole.starts_with(named))
}

/// How many of `tier`'s programs that ran are within [`FLOOR_MULTIPLE`] of their empty
/// program, of how many with a floor, and the one furthest from it.
fn programs_to_floor(g: &GuestBench, tier: &str) -> Option<(usize, usize, String, f64)> {
    let mut times: Vec<(&str, f64)> = g
        .programs
        .iter()
        .filter(|p| p.0 == tier)
        .filter_map(|(_, name, _, ns)| Some((name.as_str(), ns / floor_ns(g, tier, name)?)))
        .collect();
    times.sort_by(|a, b| b.1.total_cmp(&a.1));
    let (worst, most) = *times.first()?;
    let within = times.iter().filter(|t| t.1 <= FLOOR_MULTIPLE).count();
    Some((within, times.len(), worst.to_owned(), most))
}

fn render_programs(s: &mut String, g: &GuestBench) -> std::fmt::Result {
    if g.programs.is_empty() {
        return writeln!(s, "No program ran with `bpf_stats` on.\n");
    }
    writeln!(
        s,
        "Each program's run count and mean run time, from one more pass of every batch per \
         tier with `kernel.bpf_stats_enabled` on (outside the timed rounds), busiest first, \
         beside the empty program at the same attach point (the same pass under the tier's \
         floor):\n"
    )?;
    writeln!(
        s,
        "| tier | program | runs | ns per run (TCG) | its empty program, ns per run | × |"
    )?;
    writeln!(s, "| --- | --- | ---: | ---: | ---: | ---: |")?;
    let mut progs: Vec<&(String, String, u64, f64)> = g
        .programs
        .iter()
        .filter(|p| TIERS.contains(&p.0.as_str()))
        .collect();
    progs.sort_by(|a, b| {
        let pos = |m: &str| TIERS.iter().position(|x| *x == m);
        pos(&a.0)
            .cmp(&pos(&b.0))
            .then((b.2 as f64 * b.3).total_cmp(&(a.2 as f64 * a.3)))
    });
    for (mode, name, runs, ns) in progs {
        let (empty, times) = match floor_ns(g, mode, name) {
            Some(f) => (format!("{f:.0}"), format!("{:.1}", ns / f)),
            None => ("—".to_owned(), "—".to_owned()),
        };
        writeln!(
            s,
            "| {mode} | `{name}` | {runs} | {ns:.0} | {empty} | {times} |"
        )?;
    }
    writeln!(s)
}

fn render_starts(s: &mut String, g: &GuestBench) -> std::fmt::Result {
    write!(s, "Start-up, spawn → running (p50 over the tier's starts):")?;
    for mode in TIERS {
        let t: Vec<f64> = g
            .starts
            .iter()
            .filter(|(m, _)| m == mode)
            .map(|x| x.1)
            .collect();
        if !t.is_empty() {
            write!(s, " {mode} {:.2} s;", median(&t))?;
        }
    }
    writeln!(s, "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guest() -> GuestBench {
        let mut g = GuestBench {
            release: "6.12.0-test".into(),
            rounds: 2,
            ..GuestBench::default()
        };
        for r in 0..2 {
            for (op, _) in OPS {
                g.ops.push((r, "off".into(), op.into(), 1000.0));
                g.ops
                    .push((r, "lsm".into(), op.into(), 1010.0 + r as f64 * 20.0));
                g.ops.push((r, "floor-lsm".into(), op.into(), 1010.0));
            }
        }
        g.programs
            .push(("lsm".into(), "bind_lsm".into(), 10, 1500.0));
        // The kernel names the agent's programs to 15 bytes, the floor reports them whole.
        g.programs
            .push(("lsm".into(), "conn_sendmsg_fe".into(), 4, 900.0));
        g.programs
            .push(("floor-lsm".into(), "conn_sendmsg_fexit".into(), 4, 300.0));
        g.programs
            .push(("lsm".into(), "release_fentry".into(), 8, 200.0));
        g.programs
            .push(("floor-lsm".into(), "release_fentry".into(), 8, 100.0));
        g.starts.push(("lsm".into(), 2.5));
        g
    }

    #[test]
    fn ratios_are_per_round_against_off() {
        let a = added(&guest(), "getppid", "lsm");
        assert_eq!(a.len(), 2);
        assert!((a[0] - 0.01).abs() < 1e-9 && (a[1] - 0.03).abs() < 1e-9);
        assert!(added(&guest(), "getppid", "kprobe").is_empty());
    }

    #[test]
    fn the_section_states_ratios_targets_programs_and_starts() {
        let text = render(
            &[guest()],
            "cargo xtask bench --vm 6.12",
            "2026-12-03",
            None,
        );
        assert!(text.starts_with(BEGIN) && text.trim_end().ends_with(END));
        assert!(text.contains("TCG distorts absolute times"));
        assert!(text.contains("| getppid | 1000 | +2.0 % (IQR +1.5 % … +2.5 %) | — | — | — |"));
        assert!(text.contains("| sockcycle ≤ +3.0 % | lsm | +2.0 % | yes |"));
        assert!(text.contains("| getppid ≤ +1.0 % | lsm | +2.0 % | **no** |"));
        assert!(text.contains("| lsm | `bind_lsm` | 10 | 1500 | — | — |"));
        assert!(text.contains("| lsm | `conn_sendmsg_fe` | 4 | 900 | 300 | 3.0 |"));
        assert!(!text.contains("| floor-lsm | `conn_sendmsg_fexit`"));
        // The floor added 1 % each round; lsm 1 % and 3 %: a p50 of 2 %, twice the floor's.
        assert!(text.contains("| getppid | +1.0 % (IQR +1.0 % … +1.0 %); tier 2.0× | — | — | — |"));
        assert!(
            text.contains("| sockcycle ≤ 2× the floor | lsm | +2.0 % vs +1.0 % (2.0×) | yes |")
        );
        assert!(text.contains("| lsm | `release_fentry` | 8 | 200 | 100 | 2.0 |"));
        assert!(text.contains(
            "| every program ≤ 2× its empty program | lsm | 1 of 2; the most \
             `conn_sendmsg_fe` 3.0× | **no** |"
        ));
        assert!(!text.contains("| sockcycle ≤ 2× the floor | fentry"));
        // lsm misses getppid ≤ +1 %: the reason names the floor's share and the programs.
        assert!(text.contains(
            "- **lsm**: sockcycle +2.0 % (floor +1.0 %), sockcycle-go +2.0 % (floor +1.0 %), \
             unlink +2.0 % (floor +1.0 %), getppid +2.0 % (floor +1.0 %); for unlink, \
             getppid the empty programs alone add more than the target"
        ));
        assert!(text.contains(
            "largest first: `conn_sendmsg_fe` 0.0 ms (3.0×), `release_fentry` 0.0 ms (2.0×)."
        ));
        assert!(!text.contains("Next fix"), "no prose but measured figures");
        // The node tax: each unrelated operation against the tier's floor, 3 points allowed.
        assert!(text.contains("| fork ≤ the floor + 3 points | lsm | +2.0 % vs +1.0 % | yes |"));
        assert!(!text.contains("| connect ≤ the floor + 3 points"));
        assert!(text.contains("lsm 2.50 s;"));
        assert!(!text.contains("emulation fault"));
    }

    #[test]
    fn the_previous_sections_figures_stand_beside_each_target() {
        let old = render(
            &[guest()],
            "cargo xtask bench --vm 6.12",
            "2026-12-03 10:00 UTC",
            None,
        );
        let before = VmBefore::parse(section(&old).expect("a section")).expect("figures");
        let mut g = guest();
        for o in g.ops.iter_mut().filter(|o| o.1 == "lsm") {
            o.3 += 5.0;
        }
        let text = render(
            &[g],
            "cargo xtask bench --vm 6.12",
            "2026-12-04",
            Some(&before),
        );
        assert!(
            text.contains(
                "| target | tier | measured (p50) | before (2026-12-03 10:00 UTC) | met |"
            )
        );
        assert!(
            text.contains("| sockcycle ≤ +3.0 % | lsm | +2.5 % | +2.0 % | yes |"),
            "{text}"
        );
    }

    #[test]
    fn a_floor_that_added_nothing_gives_no_multiple() {
        let mut g = guest();
        for o in g.ops.iter_mut().filter(|o| o.1 == "floor-lsm") {
            o.3 = 995.0;
        }
        assert_eq!(floor_multiple(&g, "sockcycle", "lsm"), None);
        let text = render(&[g], "cargo xtask bench --vm 6.12", "2026-12-03", None);
        assert!(text.contains("| getppid | -0.5 % (IQR -0.5 % … -0.5 %); no multiple |"));
        assert!(!text.contains("× the floor |"));
    }

    #[test]
    fn a_resumed_guest_says_which_runs_ran_again() {
        let mut g = guest();
        g.resumed.push(("round-1-lsm".into(), "int3 Oops"));
        let text = render(&[g], "cargo xtask bench --vm 6.12", "2026-12-03", None);
        assert!(text.contains(
            "died of an emulation fault 1 time(s) (TCG, not sockwatch: see \
             `xtask/src/vm/resume.rs`); each time the guest was booted again from the run it \
             faulted in, which ran again whole: `round-1-lsm` (int3 Oops)."
        ));
    }

    #[test]
    fn splicing_replaces_the_section_and_keeps_the_rest() {
        let first = splice("# Host\n\nfigures\n", &format!("{BEGIN}\nold\n{END}\n"));
        assert_eq!(
            section(&first),
            Some(format!("{BEGIN}\nold\n{END}").as_str())
        );
        let second = splice(&first, &format!("{BEGIN}\nnew\n{END}\n"));
        assert!(second.starts_with("# Host\n\nfigures\n"));
        assert!(second.contains("new") && !second.contains("old"));
        assert_eq!(second.matches(BEGIN).count(), 1);
        assert_eq!(section("# no section"), None);
    }
}
