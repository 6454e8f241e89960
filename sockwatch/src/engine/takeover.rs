//! A foreign removal of a live socket's file that may be a takeover: a rolling restart's
//! successor removes its predecessor's socket and binds the path again at once (S1, S22), or
//! kubelet empties its plugin directory and each plugin binds its own path again (S24).
//!
//! Such a removal waits, at most the takeover window, for a bind at the same path. Who binds
//! decides (`workload.rs`): the victim's own workload makes it a [`Verdict::Takeover`] and the
//! victim's listener a `taken_over` orphan; another workload a [`Verdict::Hijack`]. Nobody
//! binding makes it the foreign unlink it looked like, with its own time, reported when the
//! window ends (by the time of any later input), when the remover exits, or when the bounded
//! queue pushes it out. A rename of a live socket over the file is decided the same way, at
//! once (S23, `removal.rs`).
use std::collections::VecDeque;

use super::{
    Engine, Relation, Verdict,
    model::{FileId, Proc},
    removal::RemovalFacts,
    sockets::{HistoryEvent, Orphan},
    verdict::OrphanCause,
    workload::{self, HandOver, Outcome, Parties, ServedBy},
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

/// How the successor relates to the remover. Processes of the root cgroup do not belong
/// together: that cgroup says nothing of them.
fn successor_relation(remover: &Proc, successor: &Proc) -> Relation {
    match Relation::between(remover, successor) {
        Relation::SameCgroup if !workload::close_to_remover(remover, successor) => Relation::Other,
        r => r,
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

    /// A bind at a path whose live socket was removed within the window: the earliest such
    /// removal is served again, by the victim's workload or by another.
    pub(super) fn take_over(&mut self, new: &Successor<'_>, out: &mut Vec<Verdict>) {
        // A freed inode number can come back at once for the new file (ext4, tmpfs): the
        // socket tells the two apart then.
        let matches = |p: &Pending| {
            (p.facts.path == new.path || p.facts.victim_path.as_deref() == Some(new.path))
                && (p.facts.file != new.file || p.facts.sock_ino != new.sock_ino)
        };
        let Some(at) = self.pending.queue.iter().position(matches) else {
            return;
        };
        let Some(p) = self.pending.queue.remove(at) else {
            return;
        };
        self.serve_again(p.facts, new, HandOver::Rebind, out);
    }

    /// `new` serves the path of the socket `facts` removed: a takeover when it is the
    /// victim's own workload, else a hijack; the victim's listener, if still open, is
    /// orphaned either way.
    pub(super) fn serve_again(
        &mut self,
        facts: RemovalFacts,
        new: &Successor<'_>,
        how: HandOver,
        out: &mut Vec<Verdict>,
    ) {
        let parties = Parties {
            victim: &facts.victim,
            remover: &facts.actor,
            successor: new.proc,
            owns_old: self.owners.is_owner(&facts.file, new.proc.tgid),
        };
        let (cause, event) = match workload::outcome(&parties) {
            Outcome::Served(by) => {
                out.push(takeover_verdict(&facts, new, by, how));
                (OrphanCause::TakenOver, HistoryEvent::TakenOver)
            }
            Outcome::Hijacked => {
                out.push(hijack_verdict(&facts, new, how));
                (OrphanCause::Hijacked, HistoryEvent::Hijacked)
            }
        };
        self.sockets
            .record(&new.file, new.ts_ns, new.proc.tgid, HistoryEvent::TookOver);
        if self
            .sockets
            .get(&facts.file)
            .is_none_or(|s| s.sock_ino != facts.sock_ino)
        {
            return;
        }
        self.sockets
            .record(&facts.file, facts.ts_ns, facts.actor.tgid, event);
        let orphan = Orphan {
            since_ns: facts.ts_ns,
            since_exact: true,
            cause,
            removed_by: Some(facts.actor),
            successor: Some(new.proc.clone()),
        };
        self.open_orphan(facts.file, new.ts_ns, orphan, out);
    }
}

fn gap_ns(facts: &RemovalFacts, new: &Successor<'_>, how: HandOver) -> u64 {
    match how {
        HandOver::Rebind => new.ts_ns.saturating_sub(facts.ts_ns),
        HandOver::Rename => 0,
    }
}

fn takeover_verdict(
    facts: &RemovalFacts,
    new: &Successor<'_>,
    served_by: ServedBy,
    how: HandOver,
) -> Verdict {
    Verdict::Takeover {
        ts_ns: facts.ts_ns,
        remover: facts.actor.clone(),
        predecessor: facts.victim.clone(),
        successor: new.proc.clone(),
        relation: Relation::between(&facts.actor, &facts.victim),
        successor_relation: successor_relation(&facts.actor, new.proc),
        served_by,
        how,
        path: facts.path.clone(),
        old_file: facts.file,
        new_file: new.file,
        old_sock_ino: facts.sock_ino,
        new_sock_ino: new.sock_ino,
        gap_ns: gap_ns(facts, new, how),
        decided_by: facts.decided_by,
        fidelity: facts.fidelity,
    }
}

fn hijack_verdict(facts: &RemovalFacts, new: &Successor<'_>, how: HandOver) -> Verdict {
    Verdict::Hijack {
        ts_ns: facts.ts_ns,
        remover: facts.actor.clone(),
        victim: facts.victim.clone(),
        successor: new.proc.clone(),
        relation: Relation::between(&facts.actor, &facts.victim),
        how,
        path: facts.path.clone(),
        victim_path: facts.victim_path.clone(),
        old_file: facts.file,
        new_file: new.file,
        old_sock_ino: facts.sock_ino,
        new_sock_ino: new.sock_ino,
        gap_ns: gap_ns(facts, new, how),
        decided_by: facts.decided_by,
        fidelity: facts.fidelity,
    }
}
