//! A foreign removal of a live socket's file that may be a takeover: a rolling restart's
//! successor removes its predecessor's socket and binds the path again at once (S1, S22).
//!
//! Such a removal waits, at most the takeover window, for a bind at the same path by the
//! remover, its cgroup or its pod: then it is a [`Verdict::Takeover`] and the predecessor's
//! listener a `taken_over` orphan. Otherwise it is the foreign unlink it looked like, with its
//! own time, reported when the window ends (by the time of any later input), when the remover
//! exits, or when the bounded queue pushes it out.
use std::collections::VecDeque;

use super::{
    Engine, Relation, Verdict,
    model::{FileId, Proc},
    removal::RemovalFacts,
    sockets::{HistoryEvent, Orphan},
    verdict::OrphanCause,
};

/// One removal waiting for its successor.
#[derive(Debug)]
struct Pending {
    facts: RemovalFacts,
    deadline_ns: u64,
}

/// The removals waiting for a successor's bind, oldest first.
#[derive(Debug)]
pub(super) struct PendingRemovals {
    queue: VecDeque<Pending>,
    max: usize,
    /// How long a removal waits (boot-clock ns); 0: never.
    pub window_ns: u64,
    /// Pushed out by the bound (each reported at once as a foreign unlink).
    pub evicted: u64,
}

impl PendingRemovals {
    pub fn new(max: usize, window_ns: u64) -> Self {
        Self {
            queue: VecDeque::new(),
            max,
            window_ns,
            evicted: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Takes out every entry `pick` selects, in queue order.
    fn take(&mut self, mut pick: impl FnMut(&Pending) -> bool) -> Vec<Pending> {
        let mut taken = Vec::new();
        let mut kept = VecDeque::with_capacity(self.queue.len());
        for p in self.queue.drain(..) {
            if pick(&p) {
                taken.push(p);
            } else {
                kept.push_back(p);
            }
        }
        self.queue = kept;
        taken
    }
}

/// The root cgroup's id on cgroup v2: every process outside a service or container shares it,
/// so it says nothing about who belongs together.
const ROOT_CGROUP: u64 = 1;

/// How a successor relates to the remover, when close enough for a takeover.
fn successor_relation(remover: &Proc, successor: &Proc) -> Option<Relation> {
    if remover.tgid == successor.tgid {
        return Some(Relation::SameProcess);
    }
    if remover.cgroup_id > ROOT_CGROUP && remover.cgroup_id == successor.cgroup_id {
        return Some(Relation::SameCgroup);
    }
    let pod = |p: &Proc| p.workload.as_ref().and_then(|w| w.pod_uid.clone());
    match (pod(remover), pod(successor)) {
        (Some(a), Some(b)) if a == b => Some(Relation::SamePod),
        _ => None,
    }
}

/// The new socket a successor bound.
pub(super) struct Successor<'a> {
    pub ts_ns: u64,
    pub proc: &'a Proc,
    pub path: &'a str,
    pub file: FileId,
    pub sock_ino: u64,
}

impl Engine {
    /// Queues a foreign unlink until its window ends; a full queue reports its oldest now.
    pub(super) fn hold_removal(&mut self, facts: RemovalFacts, out: &mut Vec<Verdict>) {
        if self.pending.queue.len() >= self.pending.max
            && let Some(oldest) = self.pending.queue.pop_front()
        {
            self.pending.evicted += 1;
            self.report_foreign_unlink(oldest.facts, facts.ts_ns, out);
        }
        let deadline_ns = facts.ts_ns.saturating_add(self.pending.window_ns);
        self.pending.queue.push_back(Pending { facts, deadline_ns });
    }

    /// Reports as foreign unlinks the removals whose window ended before `now_ns`.
    pub(super) fn expire_pending(&mut self, now_ns: u64, out: &mut Vec<Verdict>) {
        if self.pending.queue.is_empty() {
            return;
        }
        for p in self.pending.take(|p| p.deadline_ns < now_ns) {
            self.report_foreign_unlink(p.facts, p.deadline_ns, out);
        }
    }

    /// A remover that exits binds nothing more: its removals are foreign unlinks now.
    pub(super) fn remover_exited(&mut self, tgid: u32, ts_ns: u64, out: &mut Vec<Verdict>) {
        if self.pending.queue.is_empty() {
            return;
        }
        for p in self.pending.take(|p| p.facts.actor.tgid == tgid) {
            self.report_foreign_unlink(p.facts, ts_ns, out);
        }
    }

    /// True when the remover itself owns (or owned) a listener bound at the same path whose
    /// file is gone: a stale owner removing its successor's socket (S1's old daemon, whose
    /// Go listener unlinks its path on close). That is the incident: no waiting.
    pub(super) fn lost_own_listener(&self, facts: &RemovalFacts) -> bool {
        let at_path = |p: Option<&str>| {
            p.is_some_and(|p| p == facts.path || Some(p) == facts.victim_path.as_deref())
        };
        self.sockets.iter().any(|s| {
            s.file != facts.file
                && !s.is_linked()
                && s.listening
                && at_path(s.bind_path.as_deref())
                && (s.binder.tgid == facts.actor.tgid
                    || self.owners.is_owner(&s.file, facts.actor.tgid))
        })
    }

    /// A bind at a path whose live socket the binder (or its cgroup or pod) removed within
    /// the window: the earliest such removal becomes a takeover.
    pub(super) fn take_over(&mut self, new: &Successor<'_>, out: &mut Vec<Verdict>) {
        let matches = |p: &Pending| {
            (p.facts.path == new.path || p.facts.victim_path.as_deref() == Some(new.path))
                && p.facts.file != new.file
                && successor_relation(&p.facts.actor, new.proc).is_some()
        };
        let Some(at) = self.pending.queue.iter().position(matches) else {
            return;
        };
        let Some(p) = self.pending.queue.remove(at) else {
            return;
        };
        let facts = p.facts;
        out.push(takeover_verdict(&facts, new));
        self.sockets
            .record(&new.file, new.ts_ns, new.proc.tgid, HistoryEvent::TookOver);
        if self
            .sockets
            .get(&facts.file)
            .is_none_or(|s| s.sock_ino != facts.sock_ino)
        {
            return;
        }
        self.sockets.record(
            &facts.file,
            facts.ts_ns,
            facts.actor.tgid,
            HistoryEvent::TakenOver,
        );
        let orphan = Orphan {
            since_ns: facts.ts_ns,
            since_exact: true,
            cause: OrphanCause::TakenOver,
            removed_by: Some(facts.actor),
            successor: Some(new.proc.clone()),
        };
        self.open_orphan(facts.file, new.ts_ns, orphan, out);
    }
}

fn takeover_verdict(facts: &RemovalFacts, new: &Successor<'_>) -> Verdict {
    Verdict::Takeover {
        ts_ns: facts.ts_ns,
        remover: facts.actor.clone(),
        predecessor: facts.victim.clone(),
        successor: new.proc.clone(),
        relation: Relation::between(&facts.actor, &facts.victim),
        successor_relation: successor_relation(&facts.actor, new.proc).unwrap_or(Relation::Unknown),
        path: facts.path.clone(),
        old_file: facts.file,
        new_file: new.file,
        old_sock_ino: facts.sock_ino,
        new_sock_ino: new.sock_ino,
        gap_ns: new.ts_ns.saturating_sub(facts.ts_ns),
        decided_by: facts.decided_by,
        fidelity: facts.fidelity,
    }
}
