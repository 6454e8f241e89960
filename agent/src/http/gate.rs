//! Admission: connection slots, and evicting the oldest connection still reading its head.
use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{
    sync::{Notify, OwnedSemaphorePermit, Semaphore},
    time::{Instant, sleep_until},
};

/// Connection slots, and the connections still reading their head (evictable), oldest first.
pub(super) struct Gate {
    slots: Arc<Semaphore>,
    reading: Mutex<Reading>,
}

#[derive(Default)]
struct Reading {
    next_id: u64,
    /// By id, which grows with acceptance: the first entry is the oldest.
    conns: BTreeMap<u64, ReadingConn>,
}

struct ReadingConn {
    since: Instant,
    /// The slot moves to the connection's task once its head is read, or to the newcomer
    /// that evicts it.
    permit: OwnedSemaphorePermit,
    evict: Arc<Notify>,
}

impl Gate {
    pub(super) fn new(max: usize) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(max)),
            reading: Mutex::new(Reading::default()),
        }
    }

    /// A slot for a new connection (its id and eviction signal), or `None` to refuse it.
    pub(super) async fn admit(&self, evict_after: Duration) -> Option<(u64, Arc<Notify>)> {
        let give_up = Instant::now() + 2 * evict_after;
        loop {
            if let Ok(permit) = self.slots.clone().try_acquire_owned() {
                return Some(self.register(permit));
            }
            let oldest = self.lock().conns.first_key_value().map(|(_, c)| c.since);
            let now = Instant::now();
            let wake = match oldest {
                Some(since) if now >= since + evict_after => {
                    if let Some(permit) = self.evict_oldest() {
                        return Some(self.register(permit));
                    }
                    continue;
                }
                Some(since) => (since + evict_after).min(give_up),
                None => give_up,
            };
            if now >= give_up {
                return None;
            }
            tokio::select! {
                p = self.slots.clone().acquire_owned() => {
                    return Some(self.register(p.expect("the semaphore is never closed")));
                }
                _ = sleep_until(wake) => {}
            }
        }
    }

    pub(super) fn register(&self, permit: OwnedSemaphorePermit) -> (u64, Arc<Notify>) {
        let evict = Arc::new(Notify::new());
        let mut r = self.lock();
        let id = r.next_id;
        r.next_id += 1;
        r.conns.insert(
            id,
            ReadingConn {
                since: Instant::now(),
                permit,
                evict: evict.clone(),
            },
        );
        (id, evict)
    }

    /// Tells the oldest reading connection to go, and takes its slot.
    pub(super) fn evict_oldest(&self) -> Option<OwnedSemaphorePermit> {
        let (_, c) = self.lock().conns.pop_first()?;
        log::debug!(
            "http: evicting a connection that has not sent its request in {:?}",
            c.since.elapsed()
        );
        c.evict.notify_one();
        Some(c.permit)
    }

    /// The connection's slot once its head is read; `None` if it was evicted meanwhile.
    pub(super) fn finish_reading(&self, id: u64) -> Option<OwnedSemaphorePermit> {
        self.lock().conns.remove(&id).map(|c| c.permit)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Reading> {
        self.reading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Frees a reading connection's slot however its task ends.
pub(super) struct ReadingGuard<'a> {
    pub(super) gate: &'a Gate,
    pub(super) id: u64,
}

impl Drop for ReadingGuard<'_> {
    fn drop(&mut self) {
        self.gate.finish_reading(self.id);
    }
}
