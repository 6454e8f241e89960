//! The report's VM section: every tier in a QEMU guest, written by `cargo xtask bench --vm` and
//! kept as it is by a host run (and the other way round), between two markers.
use std::fmt::Write as _;

use crate::bench::{
    stats::{Spread, median},
    vm::{GuestBench, MODES, OPS},
};

const BEGIN: &str = "<!-- vm section: cargo xtask bench --vm -->";
const END: &str = "<!-- end of the vm section -->";

/// The precise tiers' targets (issue 12): (ops, most added, as a fraction of `off`).
const TARGETS: [(&[&str], f64); 2] = [
    (&["sockcycle", "sockcycle-go"], 0.03),
    (&["unlink", "getppid"], 0.01),
];

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

/// The section for `guests`, run as `command` on `date`.
pub fn render(guests: &[GuestBench], command: &str, date: &str) -> String {
    let mut s = String::new();
    let _ = render_into(&mut s, guests, command, date);
    s
}

fn render_into(
    s: &mut String,
    guests: &[GuestBench],
    command: &str,
    date: &str,
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
         times. The guest's `/init` runs the workload (`sockwatch-bench serve`) pinned to \
         vCPU 0 and the agent pinned to vCPU 1; each round times every operation with no \
         agent (`off`) and under each `--probe-mode` in turn, the order rotated each round, \
         the agent started afresh for each tier and given a second before the batches. A \
         ratio is taken per round against the same round's `off`; the tables give its \
         median (p50) and interquartile range over the rounds. Batches: {}.\n",
        OPS.iter()
            .map(|(op, n)| format!("{op} × {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    )?;
    for g in guests {
        render_guest(s, g)?;
    }
    writeln!(s, "{END}")
}

fn render_guest(s: &mut String, g: &GuestBench) -> std::fmt::Result {
    writeln!(s, "### Kernel {} ({} rounds)\n", g.release, g.rounds)?;
    render_resumes(s, g)?;
    render_ratios(s, g)?;
    render_targets(s, g)?;
    render_programs(s, g)?;
    render_starts(s, g)
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
        MODES[1..].join(" | ")
    )?;
    writeln!(s, "| --- | ---: |{}", " ---: |".repeat(MODES.len() - 1))?;
    for (op, _) in OPS {
        let off: Vec<f64> = g
            .ops
            .iter()
            .filter(|o| o.1 == "off" && o.2 == op)
            .map(|o| o.3)
            .collect();
        write!(s, "| {op} | {:.0} |", median(&off))?;
        for mode in &MODES[1..] {
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

fn render_targets(s: &mut String, g: &GuestBench) -> std::fmt::Result {
    writeln!(s, "| target | tier | measured (p50) | met |")?;
    writeln!(s, "| --- | --- | ---: | --- |")?;
    for (ops, most) in TARGETS {
        for mode in ["lsm", "fentry", "kprobe"] {
            for op in ops {
                let Some(r) = Spread::of(&added(g, op, mode)) else {
                    continue;
                };
                writeln!(
                    s,
                    "| {op} ≤ {} | {mode} | {} | {} |",
                    percent(most),
                    percent(r.p50),
                    if r.p50 <= most { "yes" } else { "**no**" }
                )?;
            }
        }
    }
    writeln!(s)
}

fn render_programs(s: &mut String, g: &GuestBench) -> std::fmt::Result {
    if g.programs.is_empty() {
        return writeln!(s, "No program ran with `bpf_stats` on.\n");
    }
    writeln!(
        s,
        "Each program's run count and mean run time, from one more pass of every batch per \
         tier with `kernel.bpf_stats_enabled` on (outside the timed rounds), busiest first:\n"
    )?;
    writeln!(s, "| tier | program | runs | ns per run (TCG) |")?;
    writeln!(s, "| --- | --- | ---: | ---: |")?;
    let mut progs: Vec<&(String, String, u64, f64)> = g.programs.iter().collect();
    progs.sort_by(|a, b| {
        let pos = |m: &str| MODES.iter().position(|x| *x == m);
        pos(&a.0)
            .cmp(&pos(&b.0))
            .then((b.2 as f64 * b.3).total_cmp(&(a.2 as f64 * a.3)))
    });
    for (mode, name, runs, ns) in progs {
        writeln!(s, "| {mode} | `{name}` | {runs} | {ns:.0} |")?;
    }
    writeln!(s)
}

fn render_starts(s: &mut String, g: &GuestBench) -> std::fmt::Result {
    write!(s, "Start-up, spawn → running (p50 over the tier's starts):")?;
    for mode in &MODES[1..] {
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
            }
        }
        g.programs
            .push(("lsm".into(), "bind_lsm".into(), 10, 1500.0));
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
        let text = render(&[guest()], "cargo xtask bench --vm 6.12", "2026-12-03");
        assert!(text.starts_with(BEGIN) && text.trim_end().ends_with(END));
        assert!(text.contains("TCG distorts absolute times"));
        assert!(text.contains("| getppid | 1000 | +2.0 % (IQR +1.5 % … +2.5 %) | — | — | — |"));
        assert!(text.contains("| sockcycle ≤ +3.0 % | lsm | +2.0 % | yes |"));
        assert!(text.contains("| getppid ≤ +1.0 % | lsm | +2.0 % | **no** |"));
        assert!(text.contains("| lsm | `bind_lsm` | 10 | 1500 |"));
        assert!(text.contains("lsm 2.50 s;"));
        assert!(!text.contains("emulation fault"));
    }

    #[test]
    fn a_resumed_guest_says_which_runs_ran_again() {
        let mut g = guest();
        g.resumed.push(("round-1-lsm".into(), "int3 Oops"));
        let text = render(&[g], "cargo xtask bench --vm 6.12", "2026-12-03");
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
