//! Moves events from the kernel to the output: woken by the kernel past a backlog threshold,
//! and drained on a short timer regardless (submits below the threshold wake nobody). Each
//! timer tick also tells the engine the time (`CLOCK_BOOTTIME`, the clock of the kernel's
//! `bpf_ktime_get_boot_ns` timestamps), so a takeover window ends without a later event, and
//! at most once a second the kernel's loss counters are read for notices (`notice::Losses`).
use std::{
    any::Any,
    future::Future,
    io,
    panic::{AssertUnwindSafe, catch_unwind},
    sync::Mutex,
    time::Duration,
};

use tokio::{
    io::{Interest, unix::AsyncFd},
    sync::mpsc,
};

use crate::{
    events::{KernelEvent, decode::DecodeError},
    kernel::{counters::KernelCounters, loader::EventReader},
    pipeline::{Pipeline, lock, notice::Losses},
    scan::ScanReport,
};

/// A reconciliation scan and the boot-clock time it began.
pub type Sweep = (u64, ScanReport);

/// What the pump saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PumpStats {
    pub delivered: u64,
    pub decode_errors: u64,
}

/// Runs until `shutdown` completes, then drains what is left. Sweeps arriving on `sweeps`
/// are applied between drains, after the events the kernel delivered before them. Losses
/// the kernel's counters (`counters`) show are written as notices, and once more at the end.
pub async fn pump(
    reader: EventReader,
    pipeline: &Mutex<Pipeline>,
    drain_every: Duration,
    mut sweeps: mpsc::Receiver<Sweep>,
    shutdown: impl Future<Output = ()>,
    counters: impl Fn() -> Option<KernelCounters>,
) -> io::Result<PumpStats> {
    // SAFETY: the reader owns the ring buffer's fd and keeps it open while the AsyncFd lives.
    let mut fd = unsafe { AsyncFd::register_with_interest(reader, Interest::READABLE)? };
    let mut tick = tokio::time::interval(drain_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut stats = PumpStats::default();
    let mut losses = Losses::default();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            guard = fd.readable_mut() => {
                let mut guard = guard?;
                drain_into(guard.get_inner_mut(), pipeline, &mut stats)?;
                guard.clear_ready();
            }
            _ = tick.tick() => {
                // The clock first: every event drained now happened before it.
                let now = crate::host::clock::boot_ns();
                drain_into(fd.get_mut(), pipeline, &mut stats)?;
                // Read before the pipeline is locked: the probes have a lock of their own.
                let notices = losses.poll(now, &counters);
                let mut p = lock(pipeline);
                p.tick(now)?;
                p.notices(&notices)?;
            }
            Some((ts_ns, report)) = sweeps.recv() => {
                drain_into(fd.get_mut(), pipeline, &mut stats)?;
                let mut p = lock(pipeline);
                let seeded = p.reconcile(ts_ns, &report)?;
                p.flush()?;
                log::debug!("sweep: {} path sockets, {seeded} seeded in the kernel table", report.sockets.len());
            }
            _ = &mut shutdown => break,
        }
    }
    drain_into(fd.get_mut(), pipeline, &mut stats)?;
    let now = crate::host::clock::boot_ns();
    let last = counters()
        .map(|c| losses.check(&c, now))
        .unwrap_or_default();
    let mut p = lock(pipeline);
    p.finish()?;
    p.notices(&last)?;
    Ok(stats)
}

/// Drains the ring buffer, locking the pipeline for one event at a time: a scrape or an API
/// call waits for one event's handling at most, never for a whole drain.
fn drain_into(
    reader: &mut EventReader,
    pipeline: &Mutex<Pipeline>,
    stats: &mut PumpStats,
) -> io::Result<()> {
    let mut result = Ok(());
    let n = reader.drain(|record| take(&mut lock(pipeline), stats, &mut result, record));
    result?;
    if n > 0 {
        lock(pipeline).flush()?;
    }
    Ok(())
}

/// One record off the ring buffer: an event goes through the pipeline (until one fails,
/// which ends the drain with that error; a live pipeline's output drops what it cannot write,
/// counted, rather than fail); a malformed one is counted and dropped, and so is an event
/// whose handling panicked.
fn take(
    pipeline: &mut Pipeline,
    stats: &mut PumpStats,
    result: &mut io::Result<()>,
    record: Result<KernelEvent, DecodeError>,
) {
    match record {
        Ok(ev) => {
            stats.delivered += 1;
            if result.is_ok() {
                let kind = ev.kind;
                match catch_unwind(AssertUnwindSafe(|| pipeline.event(ev))) {
                    Ok(handled) => *result = handled,
                    Err(panic) => pipeline.event_failed(kind, panic_message(&*panic)),
                }
            }
        }
        Err(e) => {
            stats.decode_errors += 1;
            pipeline.decode_error();
            log::warn!("dropped a malformed event record: {e}");
        }
    }
}

/// What a panic said, when it said it with a string.
fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{
        config::Config,
        engine::{Engine, Limits},
        metrics::Metrics,
        pipeline::{observer::Counted, output::JsonLines},
    };

    #[test]
    fn a_malformed_record_is_counted_in_the_stats_and_the_metrics() {
        let metrics = Arc::new(Metrics::new());
        let mut pipeline = Pipeline::replay(
            Engine::new(Limits::default()).expect("engine"),
            JsonLines::new(Box::new(io::sink())),
        );
        pipeline.observe(Counted {
            metrics: metrics.clone(),
            config: Arc::new(Config::default()),
        });
        let mut stats = PumpStats::default();
        let mut result = Ok(());
        take(
            &mut pipeline,
            &mut stats,
            &mut result,
            Err(DecodeError::Kind(99)),
        );
        take(
            &mut pipeline,
            &mut stats,
            &mut result,
            Err(DecodeError::Tier(9)),
        );
        assert!(result.is_ok());
        assert_eq!(stats.decode_errors, 2);
        assert!(
            metrics
                .render()
                .lines()
                .any(|l| l == "sockwatch_decode_errors_total 2"),
            "{}",
            metrics.render()
        );
    }

    #[test]
    fn a_poisoned_pipeline_lock_is_taken_and_a_failed_event_counted_by_kind() {
        let metrics = Arc::new(Metrics::new());
        let mut pipeline = Pipeline::replay(
            Engine::new(Limits::default()).expect("engine"),
            JsonLines::new(Box::new(io::sink())),
        );
        pipeline.observe(Counted {
            metrics: metrics.clone(),
            config: Arc::new(Config::default()),
        });
        let shared = Arc::new(Mutex::new(pipeline));
        let holder = shared.clone();
        let panicked = std::thread::spawn(move || {
            let _held = holder.lock();
            panic!("a failure while the lock is held");
        })
        .join();
        assert!(panicked.is_err() && shared.is_poisoned());

        let mut p = lock(&shared);
        p.event_failed(sockwatch_common::EventKind::Connect, "test");
        p.event_failed(sockwatch_common::EventKind::Connect, "test");
        let text = metrics.render();
        let failures = |kind: &str| format!("sockwatch_event_failures_total{{kind=\"{kind}\"}} ");
        assert!(
            text.contains(&format!("{}2", failures("connect"))),
            "{text}"
        );
        assert!(text.contains(&format!("{}0", failures("bind"))), "{text}");
    }
}
