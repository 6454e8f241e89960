//! The correlation engine: kernel observations in, verdicts out.
//!
//! Pure and deterministic: no I/O, no clock, no globals, no randomness, ordered maps only.
//! Every timestamp comes from the input, so a recorded log (JSON lines of [`Input`]) replays
//! into the same verdicts. State is bounded by [`Limits`]; what the bounds push out is counted
//! in [`Stats::evictions`].
//!
//! Sockets are known by their file's [`FileId`] (S13, S14); paths are display only, plus an
//! index of the paths that currently resolve to each file for the path-only tier.
//!
//! A foreign unlink waits up to the takeover window for a bind at the same path
//! (`takeover.rs`): the victim's own workload serving it again is a takeover, another
//! workload a hijack (`workload.rs`); time passes only with the inputs' timestamps ([`Input::Tick`] when nothing
//! else happens), and [`Engine::flush`] decides what still waits at the end of the input.
//!
//! What the engine assumes of its inputs (the adapter's side of the contract):
//! - `Exit` means the whole thread group is gone. It may come before the `Release` of the
//!   sockets the process held (the kernel closes files after the exit tracepoint): the engine
//!   takes an owner set emptied by exits as a release, and ignores the late `Release`.
//! - `Unlink`/`Rename` `live: None` means "the kernel could not tell", not "not live": the
//!   engine then decides from its own state (`decided_by: engine`). Likewise
//!   `unlinker_holds_fd: None` leaves the ownership question to the engine.
//! - Every `Unlink`/`Rename` is taken as done. Tiers that report before the operation (LSM)
//!   should drop the ones that failed. A `RENAME_EXCHANGE` (`exchange`) displaces nothing: it
//!   swaps the two files' paths.
//! - `Listen`, `Release` and `FdReceived` of sockets never bound nor scanned are counted and
//!   ignored: only `Bind` and `Scan` (and the kernel's `live` at an unlink) create entries.
pub mod claims;
mod connect;
mod guard;
pub mod inputs;
mod lifecycle;
pub mod model;
mod owners;
mod removal;
mod rename;
mod scan;
mod scope;
pub mod sockets;
pub mod stats;
mod takeover;
pub mod verdict;
mod workload;

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

pub use claims::{Claim, Fact};
pub use model::{
    Fidelity, FileId, GuardDecision, GuardPolicy, Input, LiveAtUnlink, Proc, RemovalOp, Runtime,
    ScanSnapshot, ScannedSocket, Workload,
};
pub use scope::Scope;
pub use sockets::{HistoryEntry, HistoryEvent, Orphan, Released, Removal, RemovalHow, SocketState};
pub use stats::{Evictions, IgnoredCounters, QuietCounters, Stats, VerdictCounts};
pub use verdict::{CloseReason, DecidedBy, Guarded, OrphanCause, Relation, StaleKind, Verdict};
pub use workload::{HandOver, ServedBy, same_workload};

use claims::Held;
use owners::Owners;
use sockets::{Evicted, SocketTable};
use stats::Counters;
use takeover::PendingRemovals;

/// How long a removed live socket's remover has to bind the path again for the removal to be a
/// takeover rather than a foreign unlink (`takeover_window`).
pub const DEFAULT_TAKEOVER_WINDOW_NS: u64 = 3_000_000_000;
/// How long an exited process stays known (for naming it in late verdicts): the longest
/// takeover window the configuration allows.
pub const EXITED_HORIZON_NS: u64 = 60_000_000_000;

/// Bounds on the engine's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Socket files tracked (live, orphaned and recently released).
    pub max_sockets: usize,
    /// Processes tracked (owners and recently exited owners).
    pub max_procs: usize,
    /// History lines kept per socket for `explain`; 0 keeps none.
    pub max_history_per_socket: usize,
    /// Removals waiting for a successor's bind (the takeover window).
    pub max_pending_removals: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_sockets: 16_384,
            max_procs: 16_384,
            max_history_per_socket: 32,
            max_pending_removals: 1_024,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EngineError {
    #[error("limit {0} must be at least 1")]
    ZeroLimit(&'static str),
}

/// An open orphaned listener, as [`Engine::orphans`] lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OrphanInfo {
    pub file: FileId,
    pub sock_ino: u64,
    pub owner: Proc,
    pub path: Option<String>,
    pub since_ns: u64,
    pub since_exact: bool,
    pub age_ns: u64,
    pub cause: OrphanCause,
    pub removed_by: Option<Proc>,
    pub successor: Option<Proc>,
}

/// The correlation engine. See the module docs.
#[derive(Debug)]
pub struct Engine {
    sockets: SocketTable,
    owners: Owners,
    pending: PendingRemovals,
    counters: Counters,
    /// The watched directories, for what the kernel could not keep to them.
    scope: Scope,
    /// Verdicts waiting for the host's answers, when the caller gives them
    /// ([`Engine::holding_claims`]).
    held: Option<Held>,
}

impl Engine {
    pub fn new(limits: Limits) -> Result<Self, EngineError> {
        if limits.max_sockets == 0 {
            return Err(EngineError::ZeroLimit("max_sockets"));
        }
        if limits.max_procs == 0 {
            return Err(EngineError::ZeroLimit("max_procs"));
        }
        if limits.max_pending_removals == 0 {
            return Err(EngineError::ZeroLimit("max_pending_removals"));
        }
        Ok(Self {
            sockets: SocketTable::new(limits.max_sockets, limits.max_history_per_socket),
            owners: Owners::new(limits.max_procs),
            pending: PendingRemovals::new(limits.max_pending_removals, DEFAULT_TAKEOVER_WINDOW_NS),
            counters: Counters::default(),
            scope: Scope::default(),
            held: None,
        })
    }

    /// Sets the takeover window (boot-clock nanoseconds); 0 reports every foreign removal at
    /// once, as a foreign unlink.
    #[must_use]
    pub fn with_takeover_window(mut self, window_ns: u64) -> Self {
        self.pending.window_ns = window_ns;
        self
    }

    /// Keeps verdicts to the watched directories (see [`Scope`]); by default the whole node.
    #[must_use]
    pub fn with_scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// Holds each verdict that makes a [`Claim`] about the host, and those after it, until
    /// a [`Fact`] input answers it or [`Engine::settle_into`] lets it stand; by default every
    /// verdict is given out at once.
    #[must_use]
    pub fn holding_claims(mut self) -> Self {
        self.held = Some(Held::default());
        self
    }

    /// Decides every removal still waiting for a successor, as the window's end would (the
    /// end of a replayed log, or the agent stopping).
    pub fn flush(&mut self) -> Vec<Verdict> {
        let mut out = Vec::new();
        self.expire_pending(u64::MAX, &mut out);
        for v in &out {
            self.counters.verdicts.count(v);
        }
        self.hold(&Input::Tick(inputs::Tick { ts_ns: u64::MAX }), &mut out, 0);
        out
    }

    /// The claims held verdicts wait on, each with the time of the first verdict making it.
    pub fn open_claims(&self) -> Vec<(u64, Claim)> {
        self.held
            .as_ref()
            .map(Held::open_claims)
            .unwrap_or_default()
    }

    /// Gives out every held verdict: the claims nobody answered stand.
    pub fn settle_into(&mut self, out: &mut Vec<Verdict>) {
        if let Some(held) = &mut self.held {
            held.settle(out);
        }
    }

    /// The verdicts a false claim withheld since the last call.
    pub fn take_withheld(&mut self) -> Vec<Verdict> {
        self.held
            .as_mut()
            .map(Held::take_withheld)
            .unwrap_or_default()
    }

    /// Holds what `input` decided in `out[start..]` that waits on a claim, and answers a fact.
    fn hold(&mut self, input: &Input, out: &mut Vec<Verdict>, start: usize) {
        let Some(held) = &mut self.held else {
            return;
        };
        held.hold(out, start);
        match input {
            Input::Fact(fact) => held.answer(fact, out),
            _ => held.forget_early(),
        }
    }

    /// Applies one input and returns the verdicts it caused.
    pub fn apply(&mut self, input: &Input) -> Vec<Verdict> {
        let mut out = Vec::new();
        self.apply_into(input, &mut out);
        out
    }

    /// Applies one input, appending the verdicts it caused to `out`.
    pub fn apply_into(&mut self, input: &Input, out: &mut Vec<Verdict>) {
        if !matches!(input, Input::Tick(_) | Input::Fact(_)) {
            self.counters.inputs += 1;
        }
        let start = out.len();
        if !matches!(input, Input::Fact(_)) {
            // A fact moves no clock: it answers what an input at its time or later decided.
            self.expire_pending(input.ts_ns(), out);
        }
        match input {
            Input::Unlink(u) => self.apply_unlink(u, out),
            Input::Rename(r) => self.on_rename(r, out),
            Input::Denied(d) => self.on_denied(d, out),
            Input::Connect(c) => self.apply_connect(c, out),
            Input::Bind(b) => self.on_bind(b, out),
            Input::Listen(l) => self.on_listen(l, out),
            Input::Release(r) => self.on_release(r, out),
            Input::FdReceived(r) => self.on_fd_received(r),
            Input::Fork(f) => self.on_fork(f),
            Input::Exit(e) => self.on_exit(e, out),
            Input::Scan(snapshot) => self.on_scan(snapshot, out),
            Input::Tick(_) | Input::Fact(_) => {}
        }
        for v in &out[start..] {
            self.counters.verdicts.count(v);
        }
        self.hold(input, out, start);
    }

    /// An unlink: one file removed.
    fn apply_unlink(&mut self, u: &inputs::Unlink, out: &mut Vec<Verdict>) {
        let op = removal::PathOp {
            ts_ns: u.ts_ns,
            actor: &u.proc,
            path: &u.path,
            fidelity: u.fidelity,
            live: u.live.as_ref(),
        };
        self.on_unlink(op, u.file, out);
    }

    /// A connect by path.
    fn apply_connect(&mut self, c: &inputs::Connect, out: &mut Vec<Verdict>) {
        let connect = connect::Connect {
            ts_ns: c.ts_ns,
            actor: &c.proc,
            path: &c.path,
            errno: c.errno,
            target: c.target,
            view: connect::TargetView {
                nlink: c.target_nlink,
                bound: c.target_bound,
                listening: c.target_listening,
            },
        };
        self.on_connect(connect, out);
    }

    /// Open orphaned listeners, oldest first, with their age at `now_ns`.
    pub fn orphans(&self, now_ns: u64) -> Vec<OrphanInfo> {
        let mut list: Vec<OrphanInfo> = self
            .sockets
            .open_orphans()
            .filter_map(|s| {
                let o = s.orphan.as_ref()?;
                Some(OrphanInfo {
                    file: s.file,
                    sock_ino: s.sock_ino,
                    owner: s.binder.clone(),
                    path: s.display_path(),
                    since_ns: o.since_ns,
                    since_exact: o.since_exact,
                    age_ns: now_ns.saturating_sub(o.since_ns),
                    cause: o.cause,
                    removed_by: o.removed_by.clone(),
                    successor: o.successor.clone(),
                })
            })
            .collect();
        list.sort_by_key(|o| (o.since_ns, o.file));
        list
    }

    /// The socket file with this identity.
    pub fn socket(&self, file: FileId) -> Option<&SocketState> {
        self.sockets.get(&file)
    }

    /// Socket files known under `path`: those it currently resolves to first (several when
    /// mount namespaces differ), then removed ones that were bound there.
    pub fn socket_by_path(&self, path: &str) -> Vec<&SocketState> {
        let linked = self.sockets.linked_at(path);
        let mut found: Vec<&SocketState> =
            linked.iter().filter_map(|f| self.sockets.get(f)).collect();
        found.extend(
            self.sockets
                .iter()
                .filter(|s| !linked.contains(&s.file) && s.bind_path.as_deref() == Some(path)),
        );
        found
    }

    /// Live sockets `tgid` alone holds, with their socket inodes: what its exit would
    /// release. A tier with no receive hook asks before the exit whether someone else has
    /// come to hold them.
    pub fn held_only_by(&self, tgid: u32) -> Vec<(FileId, u64)> {
        self.owners
            .files_of(tgid)
            .into_iter()
            .filter(|f| self.owners.of(f) == [tgid])
            .filter_map(|f| self.sockets.get(&f).filter(|s| s.is_live()))
            .map(|s| (s.file, s.sock_ino))
            .collect()
    }

    /// The processes in a socket's owner set, lowest tgid first.
    pub fn owners(&self, file: FileId) -> Vec<Proc> {
        self.owners
            .of(&file)
            .into_iter()
            .map(|t| self.proc_or_unknown(t))
            .collect()
    }

    /// Table sizes and counters.
    pub fn stats(&self) -> Stats {
        let c = &self.counters;
        let mut evictions = c.evictions.clone();
        evictions.procs = self.owners.evicted;
        evictions.owner_procs = self.owners.evicted_owners;
        evictions.history = self.sockets.history_dropped;
        evictions.pending_removals = self.pending.evicted;
        Stats {
            inputs: c.inputs,
            sockets: self.sockets.entry_count(),
            live_sockets: self.sockets.live_count(),
            open_orphans: self.sockets.open_orphan_count(),
            pending_removals: self.pending.len(),
            procs: self.owners.proc_count(),
            owner_pairs: self.owners.pair_count(),
            quiet: c.quiet.clone(),
            ignored: c.ignored.clone(),
            evictions,
            verdicts: c.verdicts.clone(),
        }
    }

    // ---- helpers shared by the input handlers ----

    fn proc_or_unknown(&self, tgid: u32) -> Proc {
        self.owners
            .proc(tgid)
            .cloned()
            .unwrap_or_else(|| Proc::unknown(tgid))
    }

    /// Inserts a socket entry, evicting (and counting) what has to go.
    fn insert_socket(&mut self, state: Box<SocketState>) {
        let file = state.file;
        if let Some(Evicted(old)) = self.sockets.insert(state) {
            let e = &mut self.counters.evictions;
            e.sockets += 1;
            if old.is_live() {
                e.live_sockets += 1;
            }
            if old.orphan.is_some() {
                e.orphans += 1;
            }
            debug_assert_ne!(old.file, file);
            self.owners.forget_file(&old.file);
        }
    }

    /// The owner a verdict names as victim: the kernel's owner (unless it has exited while
    /// others hold the socket: a fork or hand-over outlived it), else the binder while it
    /// holds the socket, else the lowest owner tgid, else the binder.
    fn victim(&self, s: &SocketState, kernel_owner: Option<u32>) -> Proc {
        let outlived = |t: &u32| self.owners.is_exited(*t) && !self.owners.of(&s.file).is_empty();
        if let Some(t) = kernel_owner.filter(|t| !outlived(t)) {
            if t == s.binder.tgid {
                return s.binder.clone();
            }
            return self.proc_or_unknown(t);
        }
        let owners = self.owners.of(&s.file);
        if owners.is_empty() || owners.contains(&s.binder.tgid) {
            return s.binder.clone();
        }
        self.proc_or_unknown(owners[0])
    }

    fn open_orphan(
        &mut self,
        file: FileId,
        ts_ns: u64,
        orphan: sockets::Orphan,
        out: &mut Vec<Verdict>,
    ) {
        let Some(s) = self.sockets.get(&file) else {
            return;
        };
        if s.orphan.is_some() || !s.is_live() || !s.listening {
            return;
        }
        out.push(Verdict::OrphanOpened {
            ts_ns,
            since_ns: orphan.since_ns,
            since_exact: orphan.since_exact,
            cause: orphan.cause,
            owner: self.victim(s, None),
            removed_by: orphan.removed_by.clone(),
            successor: orphan.successor.clone(),
            path: s.display_path(),
            file,
            sock_ino: s.sock_ino,
        });
        let tgid = s.binder.tgid;
        self.sockets
            .modify(&file, ts_ns, |s| s.orphan = Some(Box::new(orphan)));
        self.sockets
            .record(&file, ts_ns, tgid, sockets::HistoryEvent::OrphanOpened);
    }

    fn close_orphan(
        &mut self,
        file: FileId,
        ts_ns: u64,
        reason: CloseReason,
        out: &mut Vec<Verdict>,
    ) {
        let Some(s) = self.sockets.get(&file) else {
            return;
        };
        let Some(o) = &s.orphan else {
            return;
        };
        out.push(Verdict::OrphanClosed {
            ts_ns,
            since_ns: o.since_ns,
            duration_ns: ts_ns.saturating_sub(o.since_ns),
            reason,
            owner: self.victim(s, None),
            path: s.display_path(),
            file,
            sock_ino: s.sock_ino,
        });
        let tgid = s.binder.tgid;
        self.sockets.modify(&file, ts_ns, |s| s.orphan = None);
        self.sockets
            .record(&file, ts_ns, tgid, sockets::HistoryEvent::OrphanClosed);
    }

    /// The socket bound to `file` is gone: closes its orphan, empties its owner set, and
    /// reports its file stale when it is still linked and its closer has exited.
    fn release(
        &mut self,
        file: FileId,
        ts_ns: u64,
        by: Option<Proc>,
        reason: CloseReason,
        out: &mut Vec<Verdict>,
    ) {
        let Some(s) = self.sockets.get(&file) else {
            return;
        };
        if !s.is_live() {
            return;
        }
        self.close_orphan(file, ts_ns, reason, out);
        self.owners.forget_file(&file);
        let by_tgid = by.as_ref().map(|p| p.tgid);
        let closer_gone =
            reason == CloseReason::Exited || by_tgid.is_some_and(|t| self.owners.is_exited(t));
        self.sockets.modify(&file, ts_ns, |s| {
            s.released = Some(sockets::Released {
                ts_ns,
                by: by.clone(),
            });
            if s.is_linked() && !closer_gone {
                s.stale_pending_tgid = by_tgid;
            }
        });
        self.sockets.record(
            &file,
            ts_ns,
            by_tgid.unwrap_or(0),
            sockets::HistoryEvent::Released,
        );
        if closer_gone {
            self.report_stale(file, ts_ns, out);
        }
    }

    /// Reports a released socket's still-linked file, once.
    fn report_stale(&mut self, file: FileId, ts_ns: u64, out: &mut Vec<Verdict>) {
        let Some(s) = self.sockets.get(&file) else {
            return;
        };
        if s.is_live() || !s.is_linked() || s.stale_reported {
            if s.stale_pending_tgid.is_some() {
                self.sockets
                    .modify(&file, ts_ns, |s| s.stale_pending_tgid = None);
            }
            return;
        }
        let released = s
            .released
            .clone()
            .unwrap_or(sockets::Released { ts_ns, by: None });
        out.push(Verdict::StaleSocketFile {
            ts_ns,
            binder: s.binder.clone(),
            released_by: released.by,
            path: s.display_path(),
            file,
            sock_ino: s.sock_ino,
            bound_ns: s.bound_ns,
            released_ns: released.ts_ns,
        });
        self.sockets.modify(&file, ts_ns, |s| {
            s.stale_reported = true;
            s.stale_pending_tgid = None;
        });
    }
}
