//! The report's latency section.
use std::fmt::Write as _;

use super::format::{ms_q, secs_q};
use crate::bench::latency::Latency;

pub fn render(s: &mut String, l: &Latency) -> std::fmt::Result {
    writeln!(s, "## 5. Latency\n")?;
    writeln!(
        s,
        "Each sample: a random pause of 0–25 ms (so that samples do not fall into step \
         with any timer), a bind in the watched directory, then the time from bind's \
         return until the `bind` line naming that path is in the events file (followed \
         with inotify), or until `sockwatch_events_total{{kind=\"bind\"}}` has grown in \
         /metrics (polled every millisecond, each poll a whole scrape). Both clocks are \
         the workload's CLOCK_MONOTONIC.\n"
    )?;
    writeln!(
        s,
        "| path | samples | missed (2 s) | p50 | p90 | p99 | max |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    )?;
    for (what, v, missed) in [
        ("syscall return → event line", &l.to_line, l.line_missed),
        ("syscall return → /metrics", &l.to_metrics, l.metrics_missed),
    ] {
        let ms: Vec<f64> = v.iter().map(|x| x / 1e6).collect();
        writeln!(
            s,
            "| {what} | {} | {missed} | {} | {} | {} | {} |",
            ms.len(),
            ms_q(&ms, 0.5),
            ms_q(&ms, 0.9),
            ms_q(&ms, 0.99),
            ms_q(&ms, 1.0)
        )?;
    }
    writeln!(
        s,
        "\nAgent start-up with the whole probe table (`--probe-mode auto`: every tier of \
         every hook tried; spawn → running, probes attached and the startup scan done), \
         {} starts: p50 {}, max {}.\n",
        l.startup.len(),
        secs_q(&l.startup, 0.5),
        secs_q(&l.startup, 1.0)
    )
}
