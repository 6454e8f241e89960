//! Moves events from the kernel to the output: woken by the kernel past a backlog threshold,
//! and drained on a short timer regardless (submits below the threshold wake nobody).
use std::{future::Future, io, sync::Mutex, time::Duration};

use tokio::{
    io::{Interest, unix::AsyncFd},
    sync::mpsc,
};

use crate::{kernel::loader::EventReader, pipeline::Pipeline, scan::ScanReport};

/// A reconciliation scan and the boot-clock time it began.
pub type Sweep = (u64, ScanReport);

/// What the pump saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PumpStats {
    pub delivered: u64,
    pub decode_errors: u64,
}

/// Runs until `shutdown` completes, then drains what is left. Sweeps arriving on `sweeps`
/// are applied between drains, after the events the kernel delivered before them.
pub async fn pump(
    reader: EventReader,
    pipeline: &Mutex<Pipeline>,
    drain_every: Duration,
    mut sweeps: mpsc::Receiver<Sweep>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<PumpStats> {
    // SAFETY: the reader owns the ring buffer's fd and keeps it open while the AsyncFd lives.
    let mut fd = unsafe { AsyncFd::register_with_interest(reader, Interest::READABLE)? };
    let mut tick = tokio::time::interval(drain_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut stats = PumpStats::default();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            guard = fd.readable_mut() => {
                let mut guard = guard?;
                drain_into(guard.get_inner_mut(), pipeline, &mut stats)?;
                guard.clear_ready();
            }
            _ = tick.tick() => drain_into(fd.get_mut(), pipeline, &mut stats)?,
            Some((ts_ns, report)) = sweeps.recv() => {
                drain_into(fd.get_mut(), pipeline, &mut stats)?;
                let mut p = pipeline.lock().expect("pipeline lock");
                let seeded = p.reconcile(ts_ns, &report)?;
                p.flush()?;
                log::debug!("sweep: {} path sockets, {seeded} seeded in the kernel table", report.sockets.len());
            }
            _ = &mut shutdown => break,
        }
    }
    drain_into(fd.get_mut(), pipeline, &mut stats)?;
    Ok(stats)
}

fn drain_into(
    reader: &mut EventReader,
    pipeline: &Mutex<Pipeline>,
    stats: &mut PumpStats,
) -> io::Result<()> {
    let mut pipeline = pipeline.lock().expect("pipeline lock");
    let mut result = Ok(());
    let n = reader.drain(|ev| match ev {
        Ok(ev) => {
            stats.delivered += 1;
            if result.is_ok() {
                result = pipeline.event(ev);
            }
        }
        Err(e) => {
            stats.decode_errors += 1;
            log::warn!("dropped a malformed event record: {e}");
        }
    });
    result?;
    if n > 0 {
        pipeline.flush()?;
    }
    Ok(())
}
