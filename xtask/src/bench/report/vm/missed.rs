//! Why a guest's precise tiers miss their targets, from its own figures: what the floor (the
//! attachments alone) adds against each target, and the programs whose own work is the rest.
use std::fmt::Write as _;

use super::{GuestBench, PRECISE, added, floor, floor_ns, percent, targets};
use crate::bench::stats::Spread;

/// The programs shown per tier, largest own work first.
const SHOWN: usize = 4;

pub fn render(s: &mut String, g: &GuestBench) -> std::fmt::Result {
    let rows = targets(g);
    let missed: Vec<&str> = PRECISE
        .into_iter()
        .filter(|tier| rows.iter().any(|r| r.tier == *tier && !r.met))
        .collect();
    if missed.is_empty() {
        return Ok(());
    }
    writeln!(
        s,
        "**Missed targets in this guest: the measured reason.**\n"
    )?;
    for tier in missed {
        writeln!(
            s,
            "- **{tier}**: {} Its programs' own work (runs × ns beyond the empty program at \
             the same attach point, over the per-program pass), largest first: {}.",
            floor_share(g, tier),
            own_work(g, tier)
        )?;
    }
    writeln!(s)
}

/// Each operation's added cost under the tier against what its floor adds.
fn floor_share(g: &GuestBench, tier: &str) -> String {
    let p50 = |mode: &str, op: &str| Spread::of(&added(g, op, mode)).map(|r| r.p50);
    let mut parts = Vec::new();
    let mut floor_over = Vec::new();
    for (op, target) in [
        ("sockcycle", 0.03),
        ("sockcycle-go", 0.03),
        ("unlink", 0.01),
        ("getppid", 0.01),
    ] {
        let (Some(sw), Some(fl)) = (p50(tier, op), p50(&floor(tier), op)) else {
            continue;
        };
        parts.push(format!("{op} {} (floor {})", percent(sw), percent(fl)));
        if fl > target {
            floor_over.push(op);
        }
    }
    let verdict = if floor_over.is_empty() {
        "no floor reaches its target: the rest is the programs' own work".to_owned()
    } else {
        format!(
            "for {} the empty programs alone add more than the target, so under TCG no \
             program on these attach points meets it; the rest of each figure is the \
             programs' own work",
            floor_over.join(", ")
        )
    };
    format!("{}; {verdict}.", parts.join(", "))
}

/// The tier's programs by their run time beyond their empty programs', largest first.
fn own_work(g: &GuestBench, tier: &str) -> String {
    let mut work: Vec<(&str, f64, f64)> = g
        .programs
        .iter()
        .filter(|p| p.0 == tier)
        .filter_map(|(_, name, runs, ns)| {
            let empty = floor_ns(g, tier, name)?;
            Some((name.as_str(), *runs as f64 * (ns - empty), ns / empty))
        })
        .collect();
    work.sort_by(|a, b| b.1.total_cmp(&a.1));
    let shown: Vec<String> = work
        .iter()
        .take(SHOWN)
        .map(|(name, total, times)| format!("`{name}` {:.1} ms ({times:.1}×)", total / 1e6))
        .collect();
    if shown.is_empty() {
        "not measured (no program ran beside its empty program)".into()
    } else {
        shown.join(", ")
    }
}
