//! Reconciliation: a scan of the kernel's sockets corrects the table after lost events or a
//! late start (S10, S11).
use std::collections::BTreeSet;

use super::{
    CloseReason, Engine, Verdict,
    model::{FileId, Proc, ScanSnapshot, ScannedSocket, is_path_bound},
    sockets::{HistoryEvent, Orphan, Removal, RemovalHow, SocketState},
    verdict::OrphanCause,
};

impl Engine {
    pub(super) fn on_scan(&mut self, snap: &ScanSnapshot, out: &mut Vec<Verdict>) {
        let ts_ns = snap.ts_ns;
        let mut seen = BTreeSet::new();
        for sc in &snap.sockets {
            if !is_path_bound(&sc.path) {
                self.counters.ignored.not_path_bound += 1;
                continue;
            }
            let Some(file) = sc.file else {
                self.counters.ignored.scan_without_file += 1;
                continue;
            };
            seen.insert(file);
            let known = self.sockets.get(&file);
            if known.is_some_and(|s| s.is_newer_than_scan(ts_ns, sc.sock_ino)) {
                continue;
            }
            if sc.outside_watch && !known.is_some_and(super::SocketState::is_live) {
                self.counters.ignored.scan_outside_watch += 1;
                continue;
            }
            self.reconcile(ts_ns, file, sc, out);
        }
        let unreadable: &[u32] = match (&snap.unreadable, snap.complete) {
            (_, true) => &[],
            (Some(tgids), false) => tgids,
            (None, false) => return,
        };
        // Whatever the kernel no longer has is closed, in file order: the table is hashed, and
        // the verdicts' order must not depend on its layout (a replay gives the same lines).
        let mut gone: Vec<FileId> = self
            .sockets
            .iter()
            // Bound after the scan began: the scan could not have seen it.
            .filter(|s| s.is_live() && !seen.contains(&s.file) && s.bound_ns <= ts_ns)
            .filter(|s| !self.held_by_any(s, unreadable))
            .map(|s| s.file)
            .collect();
        gone.sort_unstable();
        for f in gone {
            self.release(f, ts_ns, None, CloseReason::Released, out);
        }
    }

    /// Is one of `tgids` the socket's binder or in its owner set?
    fn held_by_any(&self, s: &super::SocketState, tgids: &[u32]) -> bool {
        !tgids.is_empty()
            && (tgids.contains(&s.binder.tgid)
                || self.owners.of(&s.file).iter().any(|t| tgids.contains(t)))
    }

    /// A socket the engine did not know (or knew by another socket's inode) as the scan
    /// found it: its first holder taken for its binder, its bind time unknown.
    fn adopt_scanned(&mut self, ts_ns: u64, file: FileId, sc: &ScannedSocket, removal: Removal) {
        let binder = sc
            .holders
            .first()
            .cloned()
            .unwrap_or_else(|| Proc::unknown(0));
        let mut s = SocketState::new(file, sc.sock_ino, binder, ts_ns);
        s.bound_exact = false;
        s.listening = sc.listening;
        s.bind_path = Some(sc.path.clone());
        if sc.file_linked == Some(false) {
            s.removed = Some(removal);
        } else {
            s.add_alias(&sc.path);
        }
        self.owners.forget_file(&file);
        self.insert_socket(s);
    }

    fn reconcile(&mut self, ts_ns: u64, file: FileId, sc: &ScannedSocket, out: &mut Vec<Verdict>) {
        let unknown_removal = Removal {
            ts_ns,
            by: None,
            how: RemovalHow::Unknown,
            foreign: None,
        };
        let known = self
            .sockets
            .get(&file)
            .map(|s| (s.is_live(), s.sock_ino, s.is_linked()));
        // A known listener whose file this scan is the first to find gone: the removal's own
        // event may still be on its way (its record is submitted after the unlink, and a
        // sweep can read the socket in between), and that event decides better (a takeover,
        // S22, is no orphan alert). Only a later scan that still finds it unexplained opens
        // the orphan.
        let mut first_seen_unlinked = false;
        match known {
            Some((true, ino, linked)) if ino == sc.sock_ino => {
                first_seen_unlinked = linked && sc.file_linked == Some(false);
                self.sockets.modify(&file, ts_ns, |s| {
                    s.listening = sc.listening;
                    match sc.file_linked {
                        Some(false) if linked => {
                            s.removed = Some(unknown_removal);
                            s.paths.clear();
                        }
                        Some(true) if !linked => {
                            s.removed = None;
                            s.add_alias(&sc.path);
                        }
                        _ => {}
                    }
                });
                if sc.file_linked == Some(true) && !linked {
                    self.close_orphan(file, ts_ns, CloseReason::Relinked, out);
                }
            }
            _ => {
                if known.is_some_and(|(live, _, _)| live) {
                    // Another socket holds the file's inode now: the old one's close was lost.
                    self.release(file, ts_ns, None, CloseReason::Released, out);
                }
                self.adopt_scanned(ts_ns, file, sc, unknown_removal);
            }
        }
        for h in &sc.holders {
            self.owners.add(file, h, ts_ns);
        }
        self.sockets.record(
            &file,
            ts_ns,
            sc.holders.first().map_or(0, |p| p.tgid),
            HistoryEvent::Scanned,
        );
        // A listener whose file went away unseen: an orphan since the first scan that found
        // it so, or some time before.
        let unseen_since = self
            .sockets
            .get(&file)
            .and_then(|s| s.removed.as_ref())
            .filter(|r| r.how == RemovalHow::Unknown)
            .map(|r| r.ts_ns);
        if let Some(since_ns) = unseen_since
            && sc.listening
            && sc.file_linked == Some(false)
            && !first_seen_unlinked
        {
            let orphan = Orphan {
                since_ns,
                since_exact: false,
                cause: OrphanCause::Scan,
                removed_by: None,
                successor: None,
            };
            self.open_orphan(file, ts_ns, orphan, out);
        }
    }
}
