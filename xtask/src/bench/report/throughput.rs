//! The report's throughput and loss section.
use std::fmt::Write as _;

use super::format::yes;
use crate::bench::{
    plan::Plan,
    process,
    profile::{Profile, STAGES},
    throughput::{Load, Throughput},
};

pub fn render(s: &mut String, plan: &Plan, t: &Throughput) -> std::fmt::Result {
    writeln!(s, "## 2. Throughput and loss\n")?;
    writeln!(
        s,
        "The workload runs socket life cycles in a watched directory (socket, bind, \
         listen, unlink, close: four events each — bind, listen, unlink, release), paced \
         to a rate for {} s per step by as many threads as there are CPUs (so the agent \
         competes with the producers for the CPUs), stepping up until a step loses events \
         or the workload cannot reach the rate. Produced = life cycles × 4 (calibrated: {} cycles \
         gave {} submitted + {} lost, exact: {}). For every event kind the check is \
         produced = submitted + lost (`sockwatch_kernel_events_submitted_total`, \
         `sockwatch_events_lost_total`), submitted = delivered \
         (`sockwatch_events_total`) = lines in the events file (tmpfs). Agent CPU is \
         utime + stime from /proc/PID/stat ({:.0} ms ticks).\n",
        plan.step_secs,
        t.calibration.cycles,
        t.calibration.submitted,
        t.calibration.lost,
        yes(t.calibration.exact),
        1e3 / process::clock_ticks()
    )?;
    render_steps(s, t)?;
    render_profile(s, t)?;
    render_bursts(s, t)
}

/// The sustained steps, and the highest rate among them without loss.
fn render_steps(s: &mut String, t: &Throughput) -> std::fmt::Result {
    let steps = &t.steps;
    load_table(s, "events/s asked", steps)?;
    let best = t.highest_lossless();
    writeln!(
        s,
        "Highest sustained rate with zero loss at the asked rate: **{}**.{}\n",
        best.map_or("none of the steps".into(), |l| format!(
            "{:.0} events/s (step {})",
            l.rate(),
            l.target
        )),
        match steps.last() {
            Some(l) if l.lost == 0 && l.rate() < 0.95 * l.target as f64 => format!(
                " The last step asked for {} and the producers reached only {:.0} \
                 events/s, with no loss (producers and agent share the same {} CPUs).",
                l.target,
                l.rate(),
                std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
            ),
            _ => String::new(),
        }
    )
}

/// Where the agent's CPU went at 50,000 events/s, stage by stage.
fn render_profile(s: &mut String, t: &Throughput) -> std::fmt::Result {
    let (p, load) = match &t.profile {
        Ok(profiled) => profiled,
        Err(why) => return writeln!(s, "The agent's CPU was not profiled: {why}.\n"),
    };
    let per_event = t.at_50k().and_then(Load::cpu_us_per_event);
    writeln!(
        s,
        "**Where the agent's CPU goes** at 50,000 events/s: `perf record` (4,999 samples a \
         second, call graphs unwound from DWARF) on the agent through one more step \
         ({:.0} events/s, {} lost), {} samples. A stage's share is its own time and its \
         callees' (the write's includes the kernel's side of it); its µs per event are that \
         share of the {} the 50,000 events/s step above cost (without perf).\n",
        load.rate(),
        load.lost,
        p.samples,
        per_event.map_or("CPU per event".into(), |us| format!("{us:.2} µs per event"))
    )?;
    writeln!(
        s,
        "| stage | share of the agent's CPU | µs per event |\n| --- | ---: | ---: |"
    )?;
    for (stage, share) in STAGES.iter().zip(&p.stages) {
        let (pct, us) = match (share, per_event) {
            (Some(x), Some(us)) => (format!("{:.1} %", x * 100.0), format!("{:.2}", x * us)),
            (Some(x), None) => (format!("{:.1} %", x * 100.0), "—".into()),
            (None, _) => ("not seen (inlined?)".into(), "—".into()),
        };
        writeln!(s, "| {} | {pct} | {us} |", stage.name)?;
    }
    let rest = 1.0 - p.stages.iter().flatten().sum::<f64>();
    writeln!(
        s,
        "| the rest: the event loop, ring-buffer reads, events to engine inputs, timers, sweeps | {:.1} % | {} |\n",
        rest * 100.0,
        per_event.map_or("—".into(), |us| format!("{:.2}", rest * us))
    )?;
    writeln!(
        s,
        "The C library's allocator (malloc, free), which every stage calls, took {:.1} % \
         itself.\n",
        p.allocator * 100.0
    )
}

/// The largest stage of a profile, with what would make it cheaper.
pub fn largest_stage(p: &Profile, per_event: f64) -> String {
    match p.largest() {
        Some((stage, share)) => format!(
            "the largest stage is the {} at {:.0} % ({:.2} µs per event)",
            stage.name,
            share * 100.0,
            share * per_event,
        ),
        None => "no stage of the event path was seen in the profile".into(),
    }
}

/// The bursts with the agent running, where loss began, and the ring buffer alone.
fn render_bursts(s: &mut String, t: &Throughput) -> std::fmt::Result {
    writeln!(
        s,
        "Bursts: life cycles back to back, as fast as the producer threads make them, the \
         size doubled until loss and then bisected; the agent runs throughout.\n"
    )?;
    load_table(s, "events in the burst", &t.bursts)?;
    let clean = t
        .bursts
        .iter()
        .filter(|l| l.lost == 0)
        .map(|l| l.target)
        .max();
    let lossy = t
        .bursts
        .iter()
        .filter(|l| l.lost > 0)
        .map(|l| l.target)
        .min();
    match lossy {
        Some(l) => writeln!(
            s,
            "With the agent running, loss begins between bursts of **{}** and **{l}** \
             events.",
            clean.map_or("—".into(), |c| c.to_string()),
        )?,
        None => writeln!(
            s,
            "With the agent running, **no burst lost events**, up to {} events (the \
             largest tried).",
            clean.map_or("—".into(), |c| c.to_string()),
        )?,
    }
    writeln!(
        s,
        "Verdict lines written during the phase: {}.\n",
        t.verdicts
    )?;
    let r = &t.ring;
    writeln!(
        s,
        "The ring buffer alone: a burst of {} events made while the agent was stopped \
         (SIGSTOP, then SIGCONT) kept **{}** of them and counted {} lost (exact: {}).\n",
        r.produced,
        r.submitted,
        r.lost,
        yes(r.exact)
    )
}

/// One row per load: asked, achieved, and what became of the events.
fn load_table(s: &mut String, first: &str, loads: &[Load]) -> std::fmt::Result {
    writeln!(
        s,
        "| {first} | threads | achieved events/s | produced | lost | delivered | exact | \
         agent CPU | CPU per event |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"
    )?;
    for l in loads {
        writeln!(
            s,
            "| {} | {} | {:.0} | {} | {} | {} | {} | {:.2} s | {} |",
            l.target,
            l.threads,
            l.rate(),
            l.produced,
            l.lost,
            l.delivered,
            yes(l.exact),
            l.cpu_secs,
            l.cpu_us_per_event()
                .map_or("—".into(), |us| format!("{us:.2} µs"))
        )?;
    }
    writeln!(s)
}
