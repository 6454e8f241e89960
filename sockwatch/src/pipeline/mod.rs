//! What happens to each kernel event: completed, written, and run through the engine, whose
//! verdicts are written as their own lines.
pub mod adapter;
mod claims;
pub mod events_file;
pub mod notice;
pub mod observer;
pub mod output;
pub mod pump;
pub mod reconcile;
pub mod replay;

use std::{
    collections::{BTreeSet, VecDeque},
    io,
    path::Path,
    sync::{Mutex, MutexGuard, PoisonError},
};

use sockwatch_common::{EventKind, Fidelity, FileId};

use crate::{
    config::EventsFilter,
    engine::{Engine, Fact, HandOver, Input, Verdict, inputs},
    events::{EventLine, KernelEvent, SeenIn, complete::Completer},
    host::{
        lookup::{self, Lookup},
        procfd,
    },
    kernel::live::{LiveTable, PENDING_STALE_NS},
    scan::ScanReport,
    text::timeline::{PathAnswer, SocketView},
};
use notice::Notice;
use observer::{Observer, Unobserved};
use output::JsonLines;

/// Verdicts kept for the API.
const RECENT_VERDICTS: usize = 1_024;

pub struct Pipeline {
    pub engine: Engine,
    out: JsonLines,
    live: Option<LiveTable>,
    recent: VecDeque<Verdict>,
    /// Write each event before its verdicts (`run`); off when replaying a recorded log.
    echo_events: bool,
    /// Completes kernel events into lines (replayed lines are complete already).
    completer: Completer,
    /// Who counts what the pipeline does: the metrics in `run`, nobody in a replay.
    observer: Box<dyn Observer>,
    /// The release hook is missing: a socket closed since the last sweep still looks live, so
    /// verdicts that say a socket is open are checked against its holder's descriptors.
    releases_unseen: bool,
    /// The receive hook is missing: a listener passed by SCM_RIGHTS is looked for in
    /// `/proc/*/fd` before its sender's exit would release it.
    receipts_unseen: bool,
    /// Event kinds whose handling failed at least once (each is logged once).
    failed_kinds: BTreeSet<&'static str>,
}

impl Pipeline {
    /// A live pipeline: events and verdicts are written, and lines its output refuses are
    /// dropped and counted (the agent outlives a full disk or a closed pipe); `live` (the
    /// kernel's table) completes refused connects.
    pub fn live(engine: Engine, out: JsonLines, live: LiveTable) -> Self {
        Self {
            engine: engine.holding_claims(),
            out: out.lossy(),
            live: Some(live),
            recent: VecDeque::new(),
            echo_events: true,
            completer: Completer::attributing(),
            observer: Box::new(Unobserved),
            releases_unseen: false,
            receipts_unseen: false,
            failed_kinds: BTreeSet::new(),
        }
    }

    /// A replay of recorded events: only verdicts are written.
    pub fn replay(engine: Engine, out: JsonLines) -> Self {
        Self {
            engine: engine.holding_claims(),
            out,
            live: None,
            recent: VecDeque::new(),
            echo_events: false,
            completer: Completer::default(),
            observer: Box::new(Unobserved),
            releases_unseen: false,
            receipts_unseen: false,
            failed_kinds: BTreeSet::new(),
        }
    }

    /// Completes, writes and correlates one kernel event.
    pub fn event(&mut self, ev: KernelEvent) -> io::Result<()> {
        if ev.kind == EventKind::Exit && self.receipts_unseen {
            self.receipts_before_exit(&ev)?;
        }
        let line = match &self.live {
            Some(live) => self.completer.complete(ev, Some(&|id| live.get(id))),
            None => self.completer.complete(ev, None),
        };
        self.observer.event(&line.event);
        if self.echo_events {
            self.out.write_event(&line)?;
        }
        self.line(line)
    }

    /// The sockets an exiting process alone holds, as far as the engine knows, that another
    /// process holds now: each becomes a receive line (`seen_in: proc`), written and
    /// correlated before the exit, so the exit releases nothing the receiver still serves
    /// and `replay` decides the same.
    fn receipts_before_exit(&mut self, exit: &KernelEvent) -> io::Result<()> {
        let held = self.engine.held_only_by(exit.tgid);
        if held.is_empty() {
            return Ok(());
        }
        let inos: Vec<u64> = held.iter().map(|&(_, ino)| ino).collect();
        let leaving = exit.tgid;
        // Past the deadline nobody else is known to hold them: the exit releases them.
        let holders = lookup::with_deadline(Lookup::Holders, move || {
            procfd::holders_of(Path::new("/proc"), &inos, leaving)
        })
        .unwrap_or_default();
        for (sock_ino, tgid) in holders {
            let Some(&(file, _)) = held.iter().find(|&&(_, ino)| ino == sock_ino) else {
                continue;
            };
            let Some(receipt) = receipt_seen_in_proc(exit, tgid, file, sock_ino) else {
                continue;
            };
            let mut line = self.completer.complete(receipt, None);
            line.seen_in = Some(SeenIn::Proc);
            if self.echo_events {
                self.out.write_event(&line)?;
            }
            self.line(line)?;
        }
        Ok(())
    }

    /// Correlates one completed line (a live event's, or a recorded one); a removal the
    /// guard let through in audit mode is its audit first, then the removal.
    pub fn line(&mut self, line: EventLine) -> io::Result<()> {
        if let Some(audit) = adapter::would_deny_input(&line) {
            self.input(&audit)?;
        }
        self.input(&adapter::to_input(line))
    }

    /// A ring-buffer record that did not decode (and was dropped).
    pub fn decode_error(&self) {
        self.observer.decode_error();
    }

    /// Which lines are written (`run --events-filter`): with `verdicts`, no event line is; the
    /// engine and the metrics still see every event.
    pub fn filter_output(&mut self, filter: EventsFilter) {
        self.echo_events = filter == EventsFilter::All;
    }

    /// Writes notices under every filter (a reader of verdicts alone must know what the
    /// agent could not see), flushed at once as one batch: they are rare, and no drain may
    /// follow.
    pub fn notices<'a>(&mut self, notices: impl IntoIterator<Item = &'a Notice>) -> io::Result<()> {
        let mut any = false;
        for n in notices {
            self.out.write_notice(n)?;
            any = true;
        }
        if any { self.flush() } else { Ok(()) }
    }

    /// The handling of an event of `kind` panicked (`why`): it is skipped and counted, and
    /// said in the log the first time for each kind.
    pub fn event_failed(&mut self, kind: EventKind, why: &str) {
        if self.failed_kinds.insert(kind.name()) {
            log::error!(
                "handling a {} event failed ({why}); skipped, and so is any other that fails \
                 (counted in sockwatch_event_failures_total)",
                kind.name()
            );
        }
        self.observer.event_failed(kind);
    }

    /// The kernel gives no release events (the hook has no tier): see `releases_unseen`.
    pub fn without_release_hook(&mut self) {
        self.releases_unseen = true;
    }

    /// The kernel gives no receive events: see `receipts_unseen`.
    pub fn without_receive_hook(&mut self) {
        self.receipts_unseen = true;
    }

    /// Reports every event and verdict to `observer` (the metrics, in `run`).
    pub fn observe(&mut self, observer: impl Observer + 'static) {
        self.observer = Box::new(observer);
    }

    /// Time passed (boot clock): removals whose takeover window ended are decided, and their
    /// verdicts flushed (no drained event flushes them).
    pub fn tick(&mut self, ts_ns: u64) -> io::Result<()> {
        let mut verdicts = Vec::new();
        self.engine
            .apply_into(&Input::Tick(inputs::Tick { ts_ns }), &mut verdicts);
        // No recorded fact follows the pipeline's own tick.
        self.settle_replay(&mut verdicts);
        if self.decide(verdicts)? == 0 {
            return Ok(());
        }
        self.flush()
    }

    /// The input is over (a replay's end, the agent stopping): removals still waiting for a
    /// successor are decided as their window's end would.
    pub fn finish(&mut self) -> io::Result<()> {
        let mut verdicts = self.engine.flush();
        // The facts recorded at the run's end came before the end of its replay.
        self.settle_replay(&mut verdicts);
        self.decide(verdicts)?;
        self.flush()
    }

    /// Runs one engine input (a kernel event, a reconciliation scan or a recorded fact) and
    /// writes its verdicts.
    pub fn input(&mut self, input: &Input) -> io::Result<()> {
        let mut verdicts = Vec::new();
        if !matches!(input, Input::Fact(_)) {
            // The facts a run recorded follow the input whose verdicts claimed them.
            self.settle_replay(&mut verdicts);
        }
        self.engine.apply_into(input, &mut verdicts);
        self.decide(verdicts).map(drop)
    }

    /// In a replay, lets every held verdict stand that no recorded fact answered.
    fn settle_replay(&mut self, verdicts: &mut Vec<Verdict>) {
        if self.live.is_none() {
            self.engine.settle_into(verdicts);
        }
    }

    /// Writes `verdicts`, in `run` after the claims of those the engine held were answered.
    /// Returns how many verdicts were written.
    fn decide(&mut self, mut verdicts: Vec<Verdict>) -> io::Result<usize> {
        if self.live.is_some() {
            self.answer_claims(&mut verdicts)?;
        }
        // A replay's withheld verdicts are the run's, accounted for there.
        drop(self.engine.take_withheld());
        self.follow_moves(&verdicts);
        let written = verdicts.len();
        self.emit(verdicts)?;
        Ok(written)
    }

    /// `run`'s side of the engine's claims: each checked on this host, written as a `check`
    /// line (so `replay` decides alike) and handed back as a fact; the unanswered stand.
    fn answer_claims(&mut self, verdicts: &mut Vec<Verdict>) -> io::Result<()> {
        for (ts_ns, claim) in self.engine.open_claims() {
            let Some(holds) = claims::check(&claim, self.releases_unseen) else {
                continue;
            };
            let fact = Fact {
                claim,
                holds,
                ts_ns,
            };
            if self.echo_events {
                self.out.write_fact(&fact)?;
            }
            self.engine.apply_into(&Input::Fact(fact), verdicts);
        }
        self.engine.settle_into(verdicts);
        let withheld = self.engine.take_withheld();
        for v in &withheld {
            claims::withheld(v, self.observer.as_ref());
        }
        // A verdict withheld still moved a file the kernel's table must follow.
        self.follow_moves(&withheld);
        Ok(())
    }

    /// The kernel's live table learns the new base name of each live socket file the engine
    /// saw moved (renamed away, exchanged, or renamed over another), before the verdict is
    /// written: the tracepoint tier filters removals by the
    /// base name the table holds, and would otherwise miss an unlink of the new name.
    fn follow_moves(&mut self, verdicts: &[Verdict]) {
        let Some(live) = &mut self.live else {
            return;
        };
        for v in verdicts {
            let (file, to) = match v {
                Verdict::Moved {
                    file, to: Some(to), ..
                } => (file, to),
                Verdict::Replaced {
                    new_file: Some(file),
                    path,
                    ..
                } => (file, path),
                // A socket renamed over another (a hand-over or a hijack) bears its name now.
                Verdict::Takeover {
                    new_file: file,
                    path,
                    how: HandOver::Rename,
                    ..
                }
                | Verdict::Hijack {
                    new_file: file,
                    path,
                    how: HandOver::Rename,
                    ..
                } => (file, path),
                _ => continue,
            };
            let base = to.rsplit('/').next().unwrap_or(to);
            if let Err(e) = live.rename(*file, sockwatch_common::name_hash(base.as_bytes())) {
                log::warn!("the kernel's live table keeps the old name of {to}: {e}");
            }
        }
    }

    /// Writes verdicts, counts them and keeps them for the API.
    fn emit(&mut self, verdicts: Vec<Verdict>) -> io::Result<()> {
        for v in verdicts {
            self.observer.verdict(&v);
            self.out.write_verdict(&v)?;
            if self.recent.len() == RECENT_VERDICTS {
                self.recent.pop_front();
            }
            self.recent.push_back(v);
        }
        Ok(())
    }

    /// Applies a reconciliation scan begun at `ts_ns` (boot clock): the engine learns the
    /// kernel's current view, the kernel's live table gets the sockets it never saw bound,
    /// and completion the directories of every socket found. Returns how many were seeded.
    pub fn reconcile(&mut self, ts_ns: u64, report: &ScanReport) -> io::Result<usize> {
        let mut seeded = 0;
        if let Some(live) = &mut self.live {
            let (mut refused, mut first_error) = (0, None);
            for s in &report.sockets {
                let Some((file, entry)) = reconcile::live_entry(s, ts_ns) else {
                    continue;
                };
                let tracked =
                    |live: &mut LiveTable| s.holders.iter().try_for_each(|h| live.track(h.tgid));
                match live
                    .seed(file, entry)
                    .and_then(|added| tracked(live).map(|()| added))
                {
                    Ok(added) => seeded += usize::from(added),
                    Err(e) => {
                        refused += 1;
                        first_error.get_or_insert(e);
                    }
                }
            }
            // One line a scan, not one a socket: a full table refuses every one of them.
            if let Some(e) = first_error {
                log::warn!(
                    "seeding the kernel's live table: {refused} sockets refused (first: {e}); \
                     the sweeps try again"
                );
            }
        }
        for (dir, path) in reconcile::dirs(report) {
            self.completer.learn_dir(dir, path);
        }
        self.input(&Input::Scan(reconcile::snapshot(report, ts_ns)))?;
        self.prune_live();
        Ok(seeded)
    }

    /// Drops the kernel's live entries of sockets the engine now knows closed: a release no
    /// hook saw (close_range, close-on-exec on the tracepoint tier) would otherwise keep
    /// answering "bound" for a dead file, hiding its stale connects. Also the tracked
    /// processes that are gone, whose exit no hook saw, and the pending records no exit took.
    /// Then rebuilds the filters in front of the name index and the tracked processes.
    fn prune_live(&mut self) {
        let Some(live) = &mut self.live else {
            return;
        };
        let engine = &self.engine;
        let released = |file: &sockwatch_common::FileId, entry: &sockwatch_common::LiveSock| {
            engine
                .socket(*file)
                .is_some_and(|s| !s.is_live() && s.sock_ino == entry.sock_ino)
        };
        let pruned = [
            ("live", live.prune(released)),
            ("tracked", live.prune_tracked(process_exists)),
            ("pending", live.prune_pending(PENDING_STALE_NS)),
        ];
        for (table, result) in pruned {
            match result {
                Ok(0) => {}
                Ok(n) => {
                    log::info!("sweep: {n} stale entries removed from the kernel's {table} table");
                    self.observer.kernel_pruned(table, n);
                }
                Err(e) => log::warn!("pruning the kernel's {table} table: {e}"),
            }
        }
        // The generation not being rebuilt still holds every key: a filter only passes more.
        let rebuilt = [
            ("name", live.rebuild_name_filter().map(drop)),
            ("tracked process", live.rebuild_tracked_filter().map(drop)),
        ];
        for (filter, result) in rebuilt {
            if let Err(e) = result {
                log::warn!(
                    "rebuilding the kernel's {filter} filter: {e}; the next sweep tries again"
                );
            }
        }
    }

    /// The kernel's live table (None when replaying).
    pub fn live_table(&mut self) -> Option<&mut LiveTable> {
        self.live.as_mut()
    }

    /// The latest verdicts, oldest first.
    pub fn recent(&self) -> impl Iterator<Item = &Verdict> {
        self.recent.iter()
    }

    /// What `explain` reads about `path`: the engine's sockets there with their owners and
    /// history, the kept verdicts about them, timed by the clocks as of now, and what is at
    /// the path on the filesystem now.
    pub fn path_answer(&self, path: &str) -> PathAnswer {
        let sockets = self
            .engine
            .socket_by_path(path)
            .into_iter()
            .map(|s| SocketView {
                state: s.clone(),
                owners: self.engine.owners(s.file),
            })
            .collect();
        let at = (path, self.out.node());
        let answer = PathAnswer::new(at, output::boot_to_wall_ns(), sockets, &self.recent);
        // The agent's view of the node's files: only an absolute path is one to look up.
        match path.starts_with('/') {
            true => answer.on_disk(crate::scan::OnDisk::read(path)),
            false => answer,
        }
    }

    /// Reopens the events file when `trigger` asks for it (a no-op on stdout); a failed
    /// reopen is counted, the lines go on to the file already open.
    pub fn follow_events_file(&mut self, trigger: events_file::Trigger) {
        let followed = self.out.follow(trigger);
        if let Some(events_file::Followed::Failed { .. }) = followed {
            self.observer.events_file_reopen_failed();
        }
        if followed.is_none() && trigger == events_file::Trigger::Hangup {
            log::info!("SIGHUP: the events go to stdout, there is no file to reopen");
        }
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()?;
        let dropped = self.out.take_dropped();
        if dropped > 0 {
            self.observer.output_dropped(dropped);
        }
        Ok(())
    }
}

/// Locks `m` even when a thread panicked while holding it: the pipeline and the probes stay
/// usable (a panic while handling one event skips that event, see [`Pipeline::event_failed`]),
/// and a poisoned lock must not take the agent down with it.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A receive event for `tgid`, found holding `sock_ino` as `exit`'s process leaves: at the
/// exit's time, on its tier. None when `tgid` is gone already.
fn receipt_seen_in_proc(
    exit: &KernelEvent,
    tgid: u32,
    file: FileId,
    sock_ino: u64,
) -> Option<KernelEvent> {
    let holder = procfd::read_holder(Path::new("/proc"), tgid, None)?;
    Some(KernelEvent {
        kind: EventKind::Receive,
        fidelity: Fidelity::Exact,
        tgid,
        pid: tgid,
        comm: holder.comm,
        cgroup_id: 0,
        dev: file.dev,
        ino: file.ino,
        sock_ino,
        nlink: 0,
        path: String::new(),
        ret: 0,
        owner: None,
        ..exit.clone()
    })
}

/// Is `tgid` a process of this node (its `/proc` entry exists)?
fn process_exists(tgid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{tgid}")).exists()
}
