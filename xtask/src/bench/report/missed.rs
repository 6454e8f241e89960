//! The report's section for missed targets: sockwatch's per-operation cost and the agent's CPU
//! per event, broken down by the run's own figures.
use std::fmt::Write as _;

use super::{format::ns, targets::AGENT_CPU_US, throughput};
use crate::bench::{
    overhead::{GO_STEPS, Overhead},
    plan::{Op, Variant},
    stats::Spread,
    throughput::Throughput,
};

pub fn render(s: &mut String, o: &Overhead) -> std::fmt::Result {
    let top: Vec<String> = sockwatch_steps(o)
        .into_iter()
        .take(5)
        .map(|(n, x)| format!("{n} {}", ns(x)))
        .collect();
    let change = |r: Vec<f64>| {
        Spread::of(&r).map_or("?".into(), |r| format!("{:+.0} %", (r.p50 - 1.0) * 100.0))
    };
    let cpu = |op| change(o.cpu_ratios(Variant::Sockwatch, op));
    let wall = |op| change(o.ratios(Variant::Sockwatch, op));
    writeln!(
        s,
        "**Per-operation overhead (tracepoint tier).** sockwatch adds {} per getppid call. \
         Syscall by syscall (Go order), the largest additions are: {}. The workload \
         thread's CPU time grows {} (C order) and {} (Go order), against wall-clock ratios \
         of {} and {}. The costliest program runs (programs run at least 100 times): {}. \
         Added per call against the programs' own run time: {}.\n",
        o.added_ns(Variant::Sockwatch, Op::Getppid)
            .map_or("?".into(), ns),
        if top.is_empty() {
            "?".into()
        } else {
            top.join(", ")
        },
        cpu(Op::SockCycle),
        cpu(Op::SockCycleGo),
        wall(Op::SockCycle),
        wall(Op::SockCycleGo),
        costliest_programs(o),
        program_share(o),
    )
}

/// The agent's CPU per event against its target, by the profile's stages.
pub fn agent_cpu(s: &mut String, us: f64, t: &Throughput) -> std::fmt::Result {
    let why = match &t.profile {
        Ok((p, _)) => throughput::largest_stage(p, us),
        Err(e) => format!("the agent was not profiled ({e})"),
    };
    writeln!(
        s,
        "**Agent CPU per event.** {us:.2} µs at 50,000 events/s against {AGENT_CPU_US} µs: \
         {why}.\n"
    )
}

/// Added ns per syscall of the Go-order cycle under sockwatch, largest first.
fn sockwatch_steps(o: &Overhead) -> Vec<(&'static str, f64)> {
    let mut out: Vec<(&'static str, f64)> = GO_STEPS
        .iter()
        .enumerate()
        .filter_map(|(i, n)| {
            let added = o.step_p50(Variant::Sockwatch, i)? - o.step_p50(Variant::Off, i)?;
            Some((*n, added))
        })
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

/// For bind and listen: what sockwatch adds to the call, and its programs' run time (those on
/// the call's tracepoints, `<call>_tp_*`).
fn program_share(o: &Overhead) -> String {
    let steps = sockwatch_steps(o);
    let mut out = Vec::new();
    for call in ["bind", "listen"] {
        let prefix = format!("{call}_tp_");
        let ran: Vec<f64> = o
            .programs
            .iter()
            .filter(|(n, _, _)| n.starts_with(&prefix))
            .map(|(_, _, avg)| *avg)
            .collect();
        let added = steps.iter().find(|(n, _)| *n == call).map(|(_, x)| *x);
        if let (Some(a), false) = (added, ran.is_empty()) {
            out.push(format!(
                "{call} gets {} per call, of which its {} run {:.0} ns",
                ns(a),
                match ran.len() {
                    1 => "one program".to_owned(),
                    n => format!("{n} programs"),
                },
                ran.iter().sum::<f64>()
            ));
        }
    }
    if out.is_empty() {
        "not measured".into()
    } else {
        out.join("; ")
    }
}

/// The four programs (of those run at least 100 times) with the highest average run time.
fn costliest_programs(o: &Overhead) -> String {
    let mut p: Vec<_> = o
        .programs
        .iter()
        .filter(|(_, runs, _)| *runs >= 100)
        .collect();
    p.sort_by(|a, b| b.2.total_cmp(&a.2));
    let top: Vec<String> = p
        .iter()
        .take(4)
        .map(|(n, _, avg)| format!("`{n}` {avg:.0} ns"))
        .collect();
    if top.is_empty() {
        "not measured".into()
    } else {
        top.join(", ")
    }
}
