//! Sections 2 to 5: throughput and loss (with the agent's profile and the bursts), the
//! agent's footprint, the /metrics scrape time and latency.
use super::table::{q2, table, yes};
use crate::bench::{
    Plan, agent,
    load::{Footprint, Latency, Load, STAGES, Throughput},
};

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

pub fn throughput_section(s: &mut String, plan: &Plan, t: &Throughput) {
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
    profile(s, t);
    bursts(s, t);
}

/// Where the agent's CPU goes at 50,000 events/s, by stage of its event path.
fn profile(s: &mut String, t: &Throughput) {
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
}

/// The bursts with the agent running, and the ring buffer alone.
fn bursts(s: &mut String, t: &Throughput) {
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

pub fn footprint_section(s: &mut String, f: &Footprint, throughput: Option<&Throughput>) {
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
    if let Some(g) = f.scrape_growth() {
        para!(
            s,
            "With {} live sockets the p50 scrape took {g:.1}× its time with none.",
            f.sockets
        );
    }
}

pub fn latency_section(s: &mut String, l: &Latency) {
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
