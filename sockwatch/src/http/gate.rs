//! Admission: connection slots, decided at once (accepting never waits), and which connection
//! gives way when they are all taken.
use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use tokio::{sync::Notify, time::Instant};

use super::Dropped;

/// What a connection is doing, as eviction ranks it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    /// Reading its request head.
    Reading,
    /// Its answer is being made or sent: never evicted.
    Answering,
    /// Answered; the client has not closed yet (a lingering close). Evicted first.
    Idle,
}

/// Which budget a connection's slot comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pool {
    /// The general slots.
    Main,
    /// The slots kept for probes when the general ones are all busy: a short head deadline,
    /// and only `/healthz` and `/readyz` answered.
    Reserve,
}

/// Connection slots: every open connection, by id (which grows with acceptance, so the first
/// entry of a phase is its oldest).
pub(super) struct Gate {
    max: usize,
    reserve: usize,
    conns: Mutex<Conns>,
}

#[derive(Default)]
struct Conns {
    next_id: u64,
    open: BTreeMap<u64, Conn>,
}

struct Conn {
    phase: Phase,
    since: Instant,
    pool: Pool,
    evict: Arc<Notify>,
}

/// A slot given to a new connection.
pub(super) struct Ticket {
    pub(super) id: u64,
    pub(super) pool: Pool,
    /// Notified when the connection must give its slot up.
    pub(super) evict: Arc<Notify>,
    /// The connection that gave way to this one, if one did.
    pub(super) displaced: Option<Dropped>,
}

impl Gate {
    pub(super) fn new(max: usize, reserve: usize) -> Self {
        Self {
            max: max.max(1),
            reserve,
            conns: Mutex::default(),
        }
    }

    /// A slot for a connection accepted `now`, or `None` to refuse it. In order: a free
    /// general slot; the slot of the oldest idle connection; that of the oldest connection
    /// still reading its head (a newcomer is preferred: an honest client sends its head at
    /// once, so it only loses its slot to as many newer connections as there are slots); a
    /// reserve slot, when every other connection is being answered.
    pub(super) fn admit(&self, now: Instant) -> Option<Ticket> {
        let mut conns = self.lock();
        if conns.count(Pool::Main) < self.max {
            return Some(conns.insert(now, Pool::Main, None));
        }
        if let Some((pool, why)) = conns.evict_one() {
            return Some(conns.insert(now, pool, Some(why)));
        }
        if conns.count(Pool::Reserve) < self.reserve {
            return Some(conns.insert(now, Pool::Reserve, None));
        }
        None
    }

    /// Moves the connection to `phase`; `false` if it was evicted meanwhile.
    pub(super) fn enter(&self, id: u64, phase: Phase) -> bool {
        match self.lock().open.get_mut(&id) {
            Some(c) => {
                c.phase = phase;
                c.since = Instant::now();
                true
            }
            None => false,
        }
    }

    /// Frees the connection's slot (a no-op once evicted).
    pub(super) fn release(&self, id: u64) {
        self.lock().open.remove(&id);
    }

    fn lock(&self) -> MutexGuard<'_, Conns> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Conns {
    fn count(&self, pool: Pool) -> usize {
        self.open.values().filter(|c| c.pool == pool).count()
    }

    fn insert(&mut self, now: Instant, pool: Pool, displaced: Option<Dropped>) -> Ticket {
        let id = self.next_id;
        self.next_id += 1;
        let evict = Arc::new(Notify::new());
        let conn = Conn {
            phase: Phase::Reading,
            since: now,
            pool,
            evict: evict.clone(),
        };
        self.open.insert(id, conn);
        Ticket {
            id,
            pool,
            evict,
            displaced,
        }
    }

    /// Tells the connection that gives way to go: its pool and why it went.
    fn evict_one(&mut self) -> Option<(Pool, Dropped)> {
        let (id, why) = match self.oldest(Phase::Idle) {
            Some(id) => (id, Dropped::EvictedIdle),
            None => (self.oldest(Phase::Reading)?, Dropped::EvictedReading),
        };
        let c = self.open.remove(&id).expect("an open connection");
        c.evict.notify_one();
        Some((c.pool, why))
    }

    fn oldest(&self, phase: Phase) -> Option<u64> {
        self.open
            .iter()
            .filter(|(_, c)| c.phase == phase)
            .min_by_key(|(_, c)| c.since)
            .map(|(id, _)| *id)
    }
}

/// Frees a connection's slot however its task ends.
pub(super) struct Slot<'a> {
    pub(super) gate: &'a Gate,
    pub(super) id: u64,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.gate.release(self.id);
    }
}
