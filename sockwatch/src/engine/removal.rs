//! Unlinks and rename-overs: who removed a socket's file, and was it theirs to remove.
use super::{
    DecidedBy, Engine, Verdict,
    model::{Fidelity, FileId, LiveAtUnlink, Proc},
    sockets::{HistoryEvent, Orphan, Removal, RemovalHow, SocketState},
    takeover::Successor,
    verdict::{CloseReason, OrphanCause, Relation},
    workload::HandOver,
};

/// Which tracked socket file a path operation named.
pub(super) enum Target {
    Found(FileId),
    /// The kernel named a file the engine does not track.
    Untracked(FileId),
    NotFound,
    /// A path-only operation whose path matches several files (mount namespaces).
    Ambiguous,
}

/// An unlink, or the name a rename replaced: who made which path stop resolving, and what
/// the kernel saw of the socket bound there.
#[derive(Clone, Copy)]
pub(super) struct PathOp<'a> {
    pub ts_ns: u64,
    pub actor: &'a Proc,
    pub path: &'a str,
    pub fidelity: Fidelity,
    pub live: Option<&'a LiveAtUnlink>,
}

/// How the file went away.
pub(super) enum How {
    Unlink,
    Rename { new_file: Option<FileId> },
}

impl Engine {
    pub(super) fn on_unlink(&mut self, op: PathOp, file: Option<FileId>, out: &mut Vec<Verdict>) {
        match self.resolve(op.path, file, op.actor, None) {
            Target::Found(f) => self.remove_file(op, f, How::Unlink, out),
            Target::Untracked(f) if op.live.is_some() => {
                self.remove_file(op, f, How::Unlink, out);
            }
            Target::Untracked(_) | Target::NotFound => self.counters.ignored.unlink_unknown += 1,
            Target::Ambiguous => self.counters.ignored.unlink_ambiguous += 1,
        }
    }

    /// One name of a file with several went away (S20): the socket is still reachable by its
    /// other names, so nothing is orphaned; the removed name no longer leads to it.
    fn remove_link(&mut self, ts_ns: u64, actor: &Proc, path: &str, file: FileId) {
        self.counters.quiet.link_removed += 1;
        self.sockets
            .modify(&file, ts_ns, |s| s.paths.retain(|p| p != path));
        self.sockets
            .record(&file, ts_ns, actor.tgid, HistoryEvent::LinkRemoved);
    }

    /// Finds the tracked file a path operation names: the kernel's inode when given, else the
    /// files `path` resolves to, narrowed to one the actor owns, else to one in its own pod.
    pub(super) fn resolve(
        &self,
        path: &str,
        file: Option<FileId>,
        actor: &Proc,
        exclude: Option<FileId>,
    ) -> Target {
        if let Some(f) = file {
            return if self.sockets.get(&f).is_some() {
                Target::Found(f)
            } else {
                Target::Untracked(f)
            };
        }
        let candidates: Vec<FileId> = self
            .sockets
            .linked_at(path)
            .into_iter()
            .filter(|f| Some(*f) != exclude)
            .collect();
        if candidates.len() <= 1 {
            return candidates
                .first()
                .map_or(Target::NotFound, |f| Target::Found(*f));
        }
        let owned: Vec<&FileId> = candidates
            .iter()
            .filter(|f| self.owners.is_owner(f, actor.tgid))
            .collect();
        if let [f] = owned.as_slice() {
            return Target::Found(**f);
        }
        let near: Vec<&FileId> = candidates
            .iter()
            .filter(|f| {
                self.sockets.get(f).is_some_and(|s| {
                    matches!(
                        Relation::between(actor, &self.victim(s, None)),
                        Relation::SameCgroup | Relation::SamePod
                    )
                })
            })
            .collect();
        match near.as_slice() {
            [f] => Target::Found(**f),
            _ => Target::Ambiguous,
        }
    }

    /// Takes the kernel's word on the socket bound to `file` when it differs from the table's
    /// (the bind was missed: late start or lost events).
    pub(super) fn adopt_kernel_view(
        &mut self,
        file: FileId,
        live: &LiveAtUnlink,
        ts_ns: u64,
        out: &mut Vec<Verdict>,
    ) {
        let known = self.sockets.get(&file).map(|s| (s.is_live(), s.sock_ino));
        match known {
            Some((true, ino)) if ino == live.sock_ino => {
                self.sockets
                    .modify(&file, ts_ns, |s| s.listening = live.listening);
                return;
            }
            Some((true, _)) => self.release(file, ts_ns, None, CloseReason::Released, out),
            _ => {}
        }
        let owner = self.proc_or_unknown(live.owner_tgid);
        let mut s = SocketState::new(file, live.sock_ino, owner.clone(), ts_ns);
        s.bound_exact = false;
        s.listening = live.listening;
        if let Some(old) = self.sockets.get(&file) {
            // Same file, so the same paths still resolve to it.
            s.bind_path = old.bind_path.clone();
            s.paths = old.paths.clone();
        }
        self.owners.forget_file(&file);
        self.insert_socket(s);
        self.owners.add(file, &owner, ts_ns);
    }

    /// `actor` made `file` stop resolving at `path`: decides whether it was the owners' to
    /// remove, reports it, and marks the file removed.
    pub(super) fn remove_file(
        &mut self,
        op: PathOp,
        file: FileId,
        how: How,
        out: &mut Vec<Verdict>,
    ) {
        let PathOp {
            ts_ns,
            actor,
            path,
            fidelity,
            live,
        } = op;
        if let Some(l) = live {
            self.adopt_kernel_view(file, l, ts_ns, out);
        }
        let removal_how = match how {
            How::Unlink => RemovalHow::Unlinked,
            How::Rename { .. } => RemovalHow::Replaced,
        };
        let Some(s) = self.sockets.get(&file) else {
            return;
        };
        if !s.is_live() {
            // A dead socket's file: cleanup, whoever does it.
            self.counters.quiet.stale_file_removed += 1;
            self.mark_removed(file, ts_ns, actor, removal_how, None);
            self.sockets
                .record(&file, ts_ns, actor.tgid, HistoryEvent::CleanedUp);
            return;
        }
        // Another name of a file whose path is gone already (HAProxy's `.bak` link of the
        // socket it renamed over): its loss was reported then, and no path leads to it now.
        // (A scan's finding names no remover: the removal's own event may still follow it.)
        let gone_already = s.removed.as_ref().is_some_and(|r| r.by.is_some());
        let more_names = live.and_then(|l| l.links).is_some_and(|n| n > 1);
        if matches!(how, How::Unlink) && (more_names || gone_already) {
            self.remove_link(ts_ns, actor, path, file);
            return;
        }
        let kernel_owner = live.map(|l| l.owner_tgid);
        let (foreign, decided_by) = self.ownership(file, s.binder.tgid, actor, live);
        if matches!(how, How::Unlink) && !foreign {
            self.counters.quiet.owner_unlink += 1;
            self.mark_removed(file, ts_ns, actor, removal_how, Some(false));
            self.sockets
                .record(&file, ts_ns, actor.tgid, HistoryEvent::OwnerUnlink);
            return;
        }
        let mut facts = RemovalFacts {
            ts_ns,
            actor: self.with_known_runtime(actor),
            victim: self.victim(s, kernel_owner),
            path: path.to_owned(),
            victim_path: s.display_path(),
            file,
            sock_ino: s.sock_ino,
            listening: s.listening,
            victim_bound_ns: s.bound_ns,
            decided_by,
            fidelity,
            stale_owner: false,
        };
        facts.stale_owner = matches!(how, How::Unlink) && self.lost_own_listener(&facts);
        self.mark_removed(file, ts_ns, actor, removal_how, Some(foreign));
        self.decide_removal(facts, how, foreign, out);
    }

    /// A live socket's file removed by someone, `foreign` or not, decided: a rename-over at
    /// once, by what it moved into place; an unlink when the path is served again or the
    /// takeover window ends.
    fn decide_removal(
        &mut self,
        facts: RemovalFacts,
        how: How,
        foreign: bool,
        out: &mut Vec<Verdict>,
    ) {
        let ts_ns = facts.ts_ns;
        match how {
            // A foreign unlink may be a successor's takeover: it waits for a bind, unless the
            // remover is a stale owner whose own listener at this path lost its file (S1).
            How::Unlink if self.pending.window_ns > 0 && !facts.stale_owner => {
                self.hold_removal(facts, out);
            }
            How::Unlink => self.report_foreign_unlink(facts, ts_ns, out),
            How::Rename { new_file } => match self.live_successor(new_file, &facts) {
                Some((proc, sock_ino, new_file)) => {
                    let path = facts.path.clone();
                    let successor = Successor {
                        ts_ns,
                        proc: &proc,
                        path: &path,
                        file: new_file,
                        sock_ino,
                    };
                    self.serve_again(facts, &successor, HandOver::Rename, out);
                }
                None => self.report_replaced(facts, new_file, foreign, out),
            },
        }
    }

    /// The live socket a rename moved over a removed one, with its owner: the path is
    /// served again at once (S23). `None` for a file that is no live socket.
    fn live_successor(
        &self,
        new_file: Option<FileId>,
        facts: &RemovalFacts,
    ) -> Option<(Proc, u64, FileId)> {
        let f = new_file.filter(|f| *f != facts.file)?;
        let s = self.sockets.get(&f).filter(|s| s.is_live())?;
        Some((self.victim(s, None), s.sock_ino, f))
    }

    /// A rename-over is reported at once: the file moved into place serves the path already.
    fn report_replaced(
        &mut self,
        facts: RemovalFacts,
        new_file: Option<FileId>,
        foreign: bool,
        out: &mut Vec<Verdict>,
    ) {
        let (file, ts_ns, actor) = (facts.file, facts.ts_ns, facts.actor.clone());
        out.push(facts.replaced(new_file, foreign));
        self.sockets
            .record(&file, ts_ns, actor.tgid, HistoryEvent::Replaced);
        let orphan = Orphan {
            since_ns: ts_ns,
            since_exact: true,
            cause: OrphanCause::Replaced,
            removed_by: Some(actor),
            successor: None,
        };
        self.open_orphan(file, ts_ns, orphan, out);
    }

    /// Reports a foreign unlink decided at `decided_ns` (its own time, or its window's end)
    /// and the orphan it left, unless the socket was closed meanwhile.
    pub(super) fn report_foreign_unlink(
        &mut self,
        facts: RemovalFacts,
        decided_ns: u64,
        out: &mut Vec<Verdict>,
    ) {
        let (file, ts_ns, actor) = (facts.file, facts.ts_ns, facts.actor.clone());
        let same_socket = self
            .sockets
            .get(&file)
            .is_some_and(|s| s.sock_ino == facts.sock_ino);
        out.push(facts.foreign_unlink());
        if !same_socket {
            return;
        }
        self.sockets
            .record(&file, ts_ns, actor.tgid, HistoryEvent::ForeignUnlink);
        let orphan = Orphan {
            since_ns: ts_ns,
            since_exact: true,
            cause: OrphanCause::Unlinked,
            removed_by: Some(actor),
            successor: None,
        };
        self.open_orphan(file, decided_ns, orphan, out);
    }

    /// `actor`, with the runtime its bind was read with when its removal's own reading came
    /// too late (the process had exited).
    pub(super) fn with_known_runtime(&self, actor: &Proc) -> Proc {
        let runtime = actor
            .runtime
            .or_else(|| self.owners.proc(actor.tgid).and_then(|p| p.runtime));
        Proc {
            runtime,
            ..actor.clone()
        }
    }

    /// Whether `actor` removed a file outside the owner set, and who decided: the kernel's
    /// fd-table check when the tier made one, else the engine's owner sets.
    pub(super) fn ownership(
        &self,
        file: FileId,
        binder_tgid: u32,
        actor: &Proc,
        live: Option<&LiveAtUnlink>,
    ) -> (bool, DecidedBy) {
        let kernel_owner = live.map(|l| l.owner_tgid);
        match live.and_then(|l| l.unlinker_holds_fd) {
            Some(holds) => (
                !holds && kernel_owner != Some(actor.tgid),
                DecidedBy::Kernel,
            ),
            None => {
                let owners = self.owners.of(&file);
                let owner = owners.contains(&actor.tgid)
                    || kernel_owner == Some(actor.tgid)
                    || (owners.is_empty() && binder_tgid == actor.tgid);
                (!owner, DecidedBy::Engine)
            }
        }
    }

    fn mark_removed(
        &mut self,
        file: FileId,
        ts_ns: u64,
        actor: &Proc,
        how: RemovalHow,
        foreign: Option<bool>,
    ) {
        self.sockets.modify(&file, ts_ns, |s| {
            s.removed = Some(Removal {
                ts_ns,
                by: Some(actor.clone()),
                how,
                foreign,
            });
            s.paths.clear();
            s.stale_pending_tgid = None;
        });
    }
}

/// What a removal of a live socket's file is reported with.
#[derive(Debug)]
pub(super) struct RemovalFacts {
    pub ts_ns: u64,
    pub actor: Proc,
    pub victim: Proc,
    pub path: String,
    pub victim_path: Option<String>,
    pub file: FileId,
    pub sock_ino: u64,
    pub listening: bool,
    pub victim_bound_ns: u64,
    pub decided_by: DecidedBy,
    pub fidelity: Fidelity,
    /// See [`Verdict::ForeignUnlink`]'s `stale_owner`.
    pub stale_owner: bool,
}

impl RemovalFacts {
    fn relation(&self) -> Relation {
        Relation::between(&self.actor, &self.victim)
    }

    fn foreign_unlink(self) -> Verdict {
        Verdict::ForeignUnlink {
            ts_ns: self.ts_ns,
            relation: self.relation(),
            actor: self.actor,
            victim: self.victim,
            path: self.path,
            victim_path: self.victim_path,
            file: self.file,
            sock_ino: self.sock_ino,
            listening: self.listening,
            victim_bound_ns: self.victim_bound_ns,
            decided_by: self.decided_by,
            fidelity: self.fidelity,
            stale_owner: self.stale_owner,
        }
    }

    fn replaced(self, new_file: Option<FileId>, foreign: bool) -> Verdict {
        Verdict::Replaced {
            ts_ns: self.ts_ns,
            relation: self.relation(),
            actor: self.actor,
            victim: self.victim,
            foreign,
            path: self.path,
            victim_path: self.victim_path,
            file: self.file,
            new_file,
            sock_ino: self.sock_ino,
            listening: self.listening,
            victim_bound_ns: self.victim_bound_ns,
            decided_by: self.decided_by,
            fidelity: self.fidelity,
        }
    }
}
