//! The report's footprint and /metrics scrape sections.
use std::fmt::Write as _;

use super::format::ms_q;
use crate::bench::{footprint::Footprint, stats::quantile, throughput::Throughput};

pub fn render(s: &mut String, f: &Footprint, throughput: Option<&Throughput>) -> std::fmt::Result {
    writeln!(s, "## 3. Agent footprint\n")?;
    writeln!(
        s,
        "One agent with {} configured watches, events to tmpfs, /metrics on loopback, the \
         agent's default intervals.\n",
        f.watches
    )?;
    footprint_table(s, f)?;
    if let Some(t) = throughput {
        writeln!(
            s,
            "CPU per event is in the throughput table above (agent utime + stime over \
             events delivered, per step){}.\n",
            t.at_50k()
                .and_then(super::super::throughput::Load::cpu_us_per_event)
                .map_or(String::new(), |us| format!(
                    ": {us:.2} µs at 50,000 events/s"
                ))
        )?;
    }
    render_scrapes(s, f)
}

/// Idle CPU and RSS, without and with the held sockets.
fn footprint_table(s: &mut String, f: &Footprint) -> std::fmt::Result {
    writeln!(s, "| what | value |\n| --- | ---: |")?;
    writeln!(
        s,
        "| idle CPU over {} s, no sockets | {:.3} % of one CPU |",
        f.idle_secs,
        f.idle_cpu * 100.0
    )?;
    writeln!(
        s,
        "| RSS idle | {:.1} MiB |",
        f.rss_idle_kib as f64 / 1024.0
    )?;
    writeln!(
        s,
        "| sockets held (made at 5,000/s in {:.1} s); live in the engine | {}; {:.0} |",
        f.hold_secs, f.sockets, f.live_in_engine
    )?;
    writeln!(
        s,
        "| RSS with them (VmRSS); peak (VmHWM) | {:.1} MiB; {:.1} MiB |",
        f.rss_kib as f64 / 1024.0,
        f.hwm_kib as f64 / 1024.0
    )?;
    writeln!(
        s,
        "| idle CPU over {} s with them | {:.3} % of one CPU |\n",
        f.idle_secs,
        f.idle_cpu_loaded * 100.0
    )
}

/// Scrape times without and with the held sockets, and how much the sockets slowed it.
fn render_scrapes(s: &mut String, f: &Footprint) -> std::fmt::Result {
    writeln!(s, "## 4. /metrics scrape time\n")?;
    writeln!(
        s,
        "{} sequential scrapes over loopback (connect, request, whole body), with the \
         {} sockets above live: **{} series**, {} bytes.\n",
        f.scrape_ms.len(),
        f.sockets,
        f.series,
        f.bytes
    )?;
    writeln!(
        s,
        "| live sockets | p50 | p99 | max |\n| ---: | ---: | ---: | ---: |"
    )?;
    for (n, v) in [(0, &f.scrape_idle_ms), (f.sockets, &f.scrape_ms)] {
        writeln!(
            s,
            "| {n} | {} | {} | {} |",
            ms_q(v, 0.5),
            ms_q(v, 0.99),
            ms_q(v, 1.0)
        )?;
    }
    writeln!(s)?;
    let p50 = |v: &[f64]| quantile(v, 0.5).filter(|x| *x > 0.0);
    if let (Some(idle), Some(held)) = (p50(&f.scrape_idle_ms), p50(&f.scrape_ms)) {
        writeln!(
            s,
            "With {} live sockets the p50 scrape took {:.1}× its time with none.\n",
            f.sockets,
            held / idle
        )?;
    }
    Ok(())
}
