//! Socket and process lifecycle: bind, listen, release, fork, exit, fd receipt.
use super::{
    CloseReason, EXITED_HORIZON_NS, Engine, Verdict,
    inputs::{Bind, Exit, Fork, Socket},
    model::{FileId, Proc, is_path_bound},
    sockets::{HistoryEvent, Orphan, RemovalHow, SocketState},
    takeover::Successor,
    verdict::OrphanCause,
};

impl Engine {
    pub(super) fn on_bind(&mut self, b: &Bind, out: &mut Vec<Verdict>) {
        let (ts_ns, proc, file, sock_ino, path) =
            (b.ts_ns, &b.proc, b.file, b.sock_ino, b.path.as_str());
        if !is_path_bound(path) {
            self.counters.ignored.not_path_bound += 1;
            return;
        }
        self.bind_socket(ts_ns, proc, file, sock_ino, path, out);
        let successor = Successor {
            ts_ns,
            proc,
            path,
            file,
            sock_ino,
        };
        self.take_over(&successor, out);
    }

    fn bind_socket(
        &mut self,
        ts_ns: u64,
        proc: &Proc,
        file: FileId,
        sock_ino: u64,
        path: &str,
        out: &mut Vec<Verdict>,
    ) {
        // The owner of an orphaned listener binding the same path again ends the orphan.
        for f in self.sockets.open_orphan_files() {
            let Some(s) = self.sockets.get(&f) else {
                continue;
            };
            if f != file
                && s.bind_path.as_deref() == Some(path)
                && (self.owners.is_owner(&f, proc.tgid) || s.binder.tgid == proc.tgid)
            {
                self.close_orphan(f, ts_ns, CloseReason::Rebound, out);
            }
        }
        if let Some(s) = self.sockets.get(&file) {
            if s.is_live() && s.sock_ino == sock_ino {
                // Seen already (a scan came first, or a replayed duplicate).
                self.sockets.modify(&file, ts_ns, |s| {
                    s.bind_path.get_or_insert_with(|| path.to_owned());
                    if s.is_linked() {
                        s.add_alias(path);
                    }
                });
                self.owners.add(file, proc, ts_ns);
                return;
            }
            if s.is_live() {
                // The file's inode is bound by a new socket: the old one's close was lost.
                self.release(file, ts_ns, None, CloseReason::Released, out);
            }
            self.owners.forget_file(&file);
        }
        let mut s = SocketState::new(file, sock_ino, proc.clone(), ts_ns);
        s.bind_path = Some(path.to_owned());
        s.add_alias(path);
        self.insert_socket(s);
        self.owners.add(file, proc, ts_ns);
        self.sockets
            .record(&file, ts_ns, proc.tgid, HistoryEvent::Bound);
    }

    pub(super) fn on_listen(&mut self, l: &Socket, out: &mut Vec<Verdict>) {
        let (ts_ns, proc, file, sock_ino) = (l.ts_ns, &l.proc, l.file, l.sock_ino);
        let Some(file) = self.live_file(file, sock_ino) else {
            self.counters.ignored.unknown_socket += 1;
            return;
        };
        self.sockets.modify(&file, ts_ns, |s| s.listening = true);
        self.owners.add(file, proc, ts_ns);
        self.sockets
            .record(&file, ts_ns, proc.tgid, HistoryEvent::Listen);
        // Listening on a file someone else already removed: an orphan from the start.
        if let Some(r) = self.sockets.get(&file).and_then(|s| s.removed.clone())
            && (r.how == RemovalHow::Replaced || r.foreign != Some(false))
        {
            let orphan = Orphan {
                since_ns: ts_ns,
                since_exact: true,
                cause: OrphanCause::ListenAfterRemoval,
                removed_by: r.by,
                successor: None,
            };
            self.open_orphan(file, ts_ns, orphan, out);
        }
    }

    pub(super) fn on_release(&mut self, r: &Socket, out: &mut Vec<Verdict>) {
        let (ts_ns, proc, file, sock_ino) = (r.ts_ns, &r.proc, r.file, r.sock_ino);
        match self.sockets.get(&file) {
            // Already released (the exit of its last owner came first).
            Some(s) if s.sock_ino == sock_ino && !s.is_live() => {}
            _ => match self.live_file(file, sock_ino) {
                Some(f) => self.release(f, ts_ns, Some(proc.clone()), CloseReason::Released, out),
                None => self.counters.ignored.unknown_socket += 1,
            },
        }
    }

    pub(super) fn on_fork(&mut self, f: &Fork) {
        for file in self.owners.fork(&f.parent, f.child_tgid, f.ts_ns) {
            self.sockets
                .record(&file, f.ts_ns, f.child_tgid, HistoryEvent::Forked);
        }
    }

    pub(super) fn on_exit(&mut self, e: &Exit, out: &mut Vec<Verdict>) {
        let (ts_ns, tgid) = (e.ts_ns, e.tgid);
        self.remover_exited(tgid, ts_ns, out);
        let exiting = self.proc_or_unknown(tgid);
        for f in self.owners.exited(tgid, ts_ns) {
            let live = self
                .sockets
                .get(&f)
                .is_some_and(super::sockets::SocketState::is_live);
            if live && self.owners.of(&f).is_empty() {
                // Its last owner is gone, so is the socket (its release may come later).
                self.release(f, ts_ns, Some(exiting.clone()), CloseReason::Exited, out);
            } else {
                self.sockets
                    .record(&f, ts_ns, tgid, HistoryEvent::OwnerExited);
            }
        }
        for f in self.sockets.pending_stale_of(tgid) {
            self.report_stale(f, ts_ns, out);
        }
        // Nothing waits on an exited process longer than a takeover window: forget those
        // older, so a churn of short-lived processes does not fill the table.
        let horizon = self.pending.window_ns.max(EXITED_HORIZON_NS);
        self.owners.expire_exited(ts_ns, horizon);
    }

    /// A receiver of the socket's descriptor joins its owner set (a hand-over: the sender's
    /// exit then leaves the socket live, and the receiver's own unlink is quiet).
    pub(super) fn on_fd_received(&mut self, r: &Socket) {
        let (ts_ns, proc, file, sock_ino) = (r.ts_ns, &r.proc, r.file, r.sock_ino);
        let Some(file) = self.live_file(file, sock_ino) else {
            self.counters.ignored.unknown_socket += 1;
            return;
        };
        self.owners.add(file, proc, ts_ns);
        self.sockets
            .record(&file, ts_ns, proc.tgid, HistoryEvent::FdReceived);
    }

    /// The live entry a (file, socket) pair names: by file when the socket matches, else by
    /// socket inode.
    fn live_file(&self, file: FileId, sock_ino: u64) -> Option<FileId> {
        match self.sockets.get(&file) {
            Some(s) if s.is_live() && s.sock_ino == sock_ino => Some(file),
            _ => self.sockets.by_sock(sock_ino),
        }
    }
}
