//! Connects by path: learning path aliases, and telling stale connects from ordinary refusals.
use super::{
    CloseReason, DecidedBy, Engine, StaleKind, Verdict,
    model::{FileId, Proc},
    sockets::HistoryEvent,
};

/// ECONNREFUSED.
const ECONNREFUSED: i32 = 111;

/// What the kernel saw of a connect's target inode, where the tier could see it.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct TargetView {
    pub nlink: Option<u32>,
    pub bound: Option<bool>,
    pub listening: Option<bool>,
}

/// A connect by path as the engine takes it (see [`super::Input::Connect`]).
#[derive(Clone, Copy)]
pub(super) struct Connect<'a> {
    pub ts_ns: u64,
    pub actor: &'a Proc,
    pub path: &'a str,
    pub errno: i32,
    /// The inode the path led to, where the tier could see it.
    pub target: Option<FileId>,
    pub view: TargetView,
}

impl Engine {
    pub(super) fn on_connect(&mut self, c: Connect, out: &mut Vec<Verdict>) {
        let Connect {
            ts_ns,
            actor,
            path,
            errno,
            target,
            view,
        } = c;
        // Without the kernel's inode, only an unambiguous path names a file.
        let file = target.or_else(|| match self.sockets.linked_at(path).as_slice() {
            [f] => Some(*f),
            _ => None,
        });
        if errno == 0 {
            if let Some(f) = target {
                self.learn_alias(f, path, ts_ns);
            }
            return;
        }
        if errno != ECONNREFUSED {
            self.counters.connect_error(errno);
            return;
        }
        let entry = file.and_then(|f| self.sockets.get(&f).map(|s| (f, s.is_live())));
        // A file the engine tracks was bound in scope; another is judged by the path.
        if entry.is_none() && !self.scope.covers(path) {
            self.counters.ignored.connect_outside_watch += 1;
            return;
        }
        // A listening target is a bound one.
        let bound = view.bound.or(view.listening.filter(|l| *l));
        let decided_by = match (bound, entry) {
            // Bound (S8: not listening yet, or a full backlog): an ordinary refusal.
            (Some(true), _) | (None, Some((_, true))) => {
                self.counters.connect_error(errno);
                if let Some((f, _)) = entry {
                    self.sockets
                        .record(&f, ts_ns, actor.tgid, HistoryEvent::ConnectRefused);
                }
                return;
            }
            (Some(false), Some((f, true))) => {
                // The kernel says nothing is bound: the close was lost.
                self.release(f, ts_ns, None, CloseReason::Released, out);
                DecidedBy::Kernel
            }
            // Nothing bound, but no inode to name: not even known to be a socket file.
            (Some(false), None) if file.is_none() => {
                self.counters.ignored.connect_undecided += 1;
                return;
            }
            (Some(false), _) => DecidedBy::Kernel,
            (None, Some((_, false))) => DecidedBy::Engine,
            (None, None) => {
                self.counters.ignored.connect_undecided += 1;
                return;
            }
        };
        let known = entry.and_then(|(f, _)| self.sockets.get(&f));
        let kind = stale_kind(view.nlink, known);
        out.push(Verdict::StaleConnect {
            ts_ns,
            kind,
            actor: actor.clone(),
            path: path.to_owned(),
            file,
            binder: known.map(|s| s.binder.clone()),
            removed_by: known.and_then(|s| s.removed.as_ref().and_then(|r| r.by.clone())),
            decided_by,
        });
        if let Some((f, _)) = entry {
            self.sockets
                .record(&f, ts_ns, actor.tgid, HistoryEvent::StaleConnect);
            if kind == StaleKind::DeadListener {
                // The dead daemon's file matters now, whether or not its closer has exited.
                self.report_stale(f, ts_ns, out);
            }
        }
    }
}

/// No links (the kernel's count, else the engine's record of a removal): a bind mount pins an
/// unlinked file (S3); still linked: a dead daemon's file (S4).
fn stale_kind(nlink: Option<u32>, known: Option<&super::SocketState>) -> StaleKind {
    match nlink {
        Some(0) => StaleKind::UnlinkedPinned,
        Some(_) => StaleKind::DeadListener,
        None if known.is_some_and(|s| !s.is_linked()) => StaleKind::UnlinkedPinned,
        None => StaleKind::DeadListener,
    }
}

impl Engine {
    /// A connect that reached a known, linked file by `path`: another view of it (S13),
    /// remembered for path-only lookups.
    fn learn_alias(&mut self, file: FileId, path: &str, ts_ns: u64) {
        if self
            .sockets
            .get(&file)
            .is_some_and(super::sockets::SocketState::is_linked)
        {
            self.sockets.modify(&file, ts_ns, |s| {
                s.add_alias(path);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{
        Engine, StaleKind, Verdict, inputs,
        model::Input,
        tests::{P, a, b, c, engine, fid, listen, release, unlink_path},
    };

    /// A refusal the kernel saw as unbound, as a client whose target could not be resolved
    /// (exited before the agent looked, no member of its namespace left) reports it.
    fn refused_unresolved(ts_ns: u64, path: &str) -> Input {
        Input::Connect(inputs::Connect {
            ts_ns,
            proc: c(),
            path: path.into(),
            errno: 111,
            target: None,
            target_nlink: None,
            target_bound: Some(false),
            target_listening: None,
        })
    }

    #[test]
    fn a_refusal_with_no_inode_to_name_is_undecided_not_a_dead_listener() {
        let mut e = engine();
        assert!(
            e.apply(&refused_unresolved(5, "/elsewhere/view.sock"))
                .is_empty()
        );
        assert_eq!(e.stats().ignored.connect_undecided, 1);
    }

    /// A refusal the kernel saw as unbound, at a file it resolved.
    fn refused_at_dead_file(ts_ns: u64, path: &str) -> Input {
        super::super::tests::connect_seen(ts_ns, &c(), path, 111, fid(9), (1, false, false))
    }

    #[test]
    fn a_stale_connect_to_an_untracked_file_outside_the_watches_is_no_verdict() {
        let scope = super::super::Scope::watching(["/run/w".into()]);
        let mut e = engine().with_scope(scope);
        assert!(
            e.apply(&refused_at_dead_file(5, "/run/sibling/dead.sock"))
                .is_empty()
        );
        assert!(
            e.apply(&refused_unresolved(5, "/run/sibling/view.sock"))
                .is_empty()
        );
        let ignored = e.stats().ignored;
        assert_eq!(
            (ignored.connect_outside_watch, ignored.connect_undecided),
            (2, 0)
        );
        let inside = e.apply(&refused_at_dead_file(6, "/run/w/dead.sock"));
        assert!(
            matches!(
                inside.as_slice(),
                [Verdict::StaleConnect { kind: StaleKind::DeadListener, file: Some(f), .. }]
                    if *f == fid(9)
            ),
            "{inside:?}"
        );
    }

    /// a's listener at `P` removed by b and closed; c is refused through a bind mount of the
    /// file at `/elsewhere/view.sock` that still pins its inode.
    fn refused_through_a_pinned_view(e: &mut Engine) -> Vec<Verdict> {
        e.apply(&super::super::tests::bind(1, &a(), fid(1), 11, P));
        e.apply(&listen(2, &a(), fid(1), 11));
        e.apply(&unlink_path(3, &b(), P));
        e.apply(&release(4, &a(), fid(1), 11));
        e.apply(&super::super::tests::connect_seen(
            5,
            &c(),
            "/elsewhere/view.sock",
            111,
            fid(1),
            (0, false, false),
        ))
    }

    #[test]
    fn a_tracked_socket_reached_by_a_path_outside_the_watches_stays_in_scope() {
        let scope = super::super::Scope::watching(["/run/w".into()]);
        let mut e = engine().with_scope(scope);
        let out = refused_through_a_pinned_view(&mut e);
        assert!(
            out.iter()
                .any(|v| matches!(v, Verdict::StaleConnect { .. })),
            "a bind mount of a watched file: {out:?}"
        );
        assert_eq!(e.stats().ignored.connect_outside_watch, 0);
    }

    #[test]
    fn a_resolved_pinned_inode_names_its_binder_and_remover() {
        let mut e = engine();
        let out = refused_through_a_pinned_view(&mut e);
        let stale = out
            .iter()
            .find(|v| matches!(v, Verdict::StaleConnect { .. }))
            .expect("a stale connect");
        let Verdict::StaleConnect {
            kind,
            file,
            binder,
            removed_by,
            ..
        } = stale
        else {
            unreachable!()
        };
        assert_eq!(*kind, StaleKind::UnlinkedPinned);
        assert_eq!(*file, Some(fid(1)));
        assert_eq!(binder.as_ref().map(|p| p.tgid), Some(a().tgid));
        assert_eq!(removed_by.as_ref().map(|p| p.tgid), Some(b().tgid));
    }
}
