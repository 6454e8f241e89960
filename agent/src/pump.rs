//! Moves events from the kernel to the output: woken by the kernel past a backlog threshold,
//! and drained on a short timer regardless (submits below the threshold wake nobody).
use std::{future::Future, io, time::Duration};

use tokio::io::{Interest, unix::AsyncFd};

use crate::{enrich::LiveTable, loader::EventReader, output::JsonLines};

/// What the pump saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PumpStats {
    pub delivered: u64,
    pub decode_errors: u64,
}

/// Runs until `shutdown` completes, then drains what is left.
pub async fn pump(
    reader: EventReader,
    live: &LiveTable,
    out: &mut JsonLines,
    drain_every: Duration,
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
                drain_into(guard.get_inner_mut(), live, out, &mut stats)?;
                guard.clear_ready();
            }
            _ = tick.tick() => drain_into(fd.get_mut(), live, out, &mut stats)?,
            _ = &mut shutdown => break,
        }
    }
    drain_into(fd.get_mut(), live, out, &mut stats)?;
    Ok(stats)
}

fn drain_into(
    reader: &mut EventReader,
    live: &LiveTable,
    out: &mut JsonLines,
    stats: &mut PumpStats,
) -> io::Result<()> {
    let mut result = Ok(());
    let n = reader.drain(|ev| match ev {
        Ok(mut ev) => {
            stats.delivered += 1;
            crate::enrich::connect_target(&mut ev, |id| live.get(id));
            if result.is_ok() {
                result = out.write(&ev);
            }
        }
        Err(e) => {
            stats.decode_errors += 1;
            log::warn!("dropped a malformed event record: {e}");
        }
    });
    result?;
    if n > 0 {
        out.flush()?;
    }
    Ok(())
}
