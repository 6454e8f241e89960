//! Renames: a socket file moved to a new name, a rename over another file (which removes
//! that one: `removal.rs` decides it), and `RENAME_EXCHANGE`.
use super::{
    Engine, Verdict,
    inputs::Rename,
    model::{Fidelity, FileId, Proc},
    removal::{How, PathOp, Target},
    sockets::{HistoryEvent, SocketState},
    verdict::Relation,
    workload::HandOver,
};

/// A socket file's new name after a rename (`to: None`: unknown).
struct Move<'a> {
    ts_ns: u64,
    actor: &'a Proc,
    file: FileId,
    from: Option<String>,
    to: Option<&'a str>,
    exchanged_with: Option<FileId>,
    fidelity: Fidelity,
    /// Whether to report the move of a live socket (a rename-over's removal names it already).
    report: bool,
}

impl Engine {
    /// A rename: a rename-over reports the live socket it displaced (`replaced`), a move the
    /// live socket whose file it moved (`moved`), an exchange both files it swapped.
    pub(super) fn on_rename(&mut self, r: &Rename, out: &mut Vec<Verdict>) {
        let (ts_ns, actor) = (r.ts_ns, &r.proc);
        let source = self.moved_socket(r);
        if r.exchange {
            self.exchange(r, source, out);
            return;
        }
        let op = PathOp {
            ts_ns,
            actor,
            path: &r.to,
            fidelity: r.fidelity,
            live: r.live.as_ref(),
        };
        let start = out.len();
        // Without the kernel's inode, the displaced file is whatever `to` resolved to.
        let look_up_path =
            r.replaced.is_some() || r.fidelity == Fidelity::PathOnly || r.live.is_some();
        if look_up_path {
            let how = How::Rename { new_file: source };
            match self.resolve(&r.to, r.replaced, actor, source) {
                Target::Found(f) => self.remove_file(op, f, how, out),
                Target::Untracked(f) if r.live.is_some() => self.remove_file(op, f, how, out),
                Target::Ambiguous => self.counters.ignored.unlink_ambiguous += 1,
                // Renames over paths that are no socket files are not this engine's business.
                Target::Untracked(_) | Target::NotFound => {}
            }
        }
        // A socket moved over another (S5's atomic replace, S23's hand-over) is named by the
        // removal's verdict.
        let replaced_one = out[start..].iter().any(|v| {
            matches!(
                v,
                Verdict::Replaced { .. }
                    | Verdict::Takeover {
                        how: HandOver::Rename,
                        ..
                    }
                    | Verdict::Hijack {
                        how: HandOver::Rename,
                        ..
                    }
            )
        });
        if let Some(file) = source {
            let to_new_name = Move {
                ts_ns,
                actor,
                file,
                from: self.known_path(file, r.from.as_deref()),
                to: Some(&r.to),
                exchanged_with: None,
                fidelity: r.fidelity,
                report: !replaced_one,
            };
            self.move_socket(to_new_name, out);
        }
    }

    /// The tracked socket file a rename moved: the kernel's (or userspace's) inode, else on the
    /// tracepoint tier what its old name resolves to.
    fn moved_socket(&self, r: &Rename) -> Option<FileId> {
        if let Some(f) = r.moved.filter(|f| self.sockets.get(f).is_some()) {
            return Some(f);
        }
        let from = r
            .from
            .as_deref()
            .filter(|_| r.fidelity == Fidelity::PathOnly)?;
        match self.resolve(from, None, &r.proc, None) {
            Target::Found(f) => Some(f),
            _ => None,
        }
    }

    /// `RENAME_EXCHANGE`: the file moved takes the new name, the one there takes the old name;
    /// nothing is removed. The file swapped away is the kernel's `replaced` (exact tiers),
    /// else what the new name led to before.
    fn exchange(&mut self, r: &Rename, source: Option<FileId>, out: &mut Vec<Verdict>) {
        let (ts_ns, actor) = (r.ts_ns, &r.proc);
        let other = match self.resolve(&r.to, r.replaced, actor, source) {
            Target::Found(f) => Some(f),
            _ => None,
        };
        let old = source
            .and_then(|f| self.known_path(f, r.from.as_deref()))
            .or(r.from.clone());
        let (moved_file, other_file) = (source.or(r.moved), other.or(r.replaced));
        let swap = |file, from, to, exchanged_with| Move {
            ts_ns,
            actor,
            file,
            from,
            to,
            exchanged_with,
            fidelity: r.fidelity,
            report: true,
        };
        if let Some(f) = source {
            self.move_socket(swap(f, old.clone(), Some(&r.to), other_file), out);
        }
        if let Some(f) = other {
            self.move_socket(swap(f, Some(r.to.clone()), old.as_deref(), moved_file), out);
        }
    }

    /// The path a tracked socket file was known by: its bind path, else `fallback` (the old
    /// name as the actor gave it).
    fn known_path(&self, file: FileId, fallback: Option<&str>) -> Option<String> {
        self.sockets
            .get(&file)
            .and_then(SocketState::display_path)
            .or(fallback.map(str::to_owned))
    }

    /// Points a socket file's path index at its new name (`None`: unknown, so no path leads
    /// to it as far as the engine knows) and, when `report`, reports the move of a live
    /// socket.
    fn move_socket(&mut self, m: Move, out: &mut Vec<Verdict>) {
        let Move {
            ts_ns,
            actor,
            file,
            from,
            to,
            exchanged_with,
            fidelity,
            report,
        } = m;
        self.sockets.modify(&file, ts_ns, |s| {
            s.bind_path = to.map(str::to_owned);
            s.paths.clear();
            if let Some(to) = to {
                s.add_alias(to);
            }
        });
        self.sockets
            .record(&file, ts_ns, actor.tgid, HistoryEvent::Moved);
        let Some(s) = self
            .sockets
            .get(&file)
            .filter(|s| s.is_live() && s.is_linked())
        else {
            return;
        };
        if !report {
            return;
        }
        let owner = self.victim(s, None);
        let (foreign, _) = self.ownership(file, s.binder.tgid, actor, None);
        out.push(Verdict::Moved {
            ts_ns,
            relation: Relation::between(actor, &owner),
            actor: actor.clone(),
            owner,
            foreign,
            file,
            sock_ino: s.sock_ino,
            listening: s.listening,
            from,
            to: to.map(str::to_owned),
            exchanged_with,
            fidelity,
        });
    }
}
