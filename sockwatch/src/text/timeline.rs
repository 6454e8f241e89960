//! `sockwatch explain PATH`: what a running agent answers about a path ([`PathAnswer`]) and
//! the lines a person reads from it: what happened to every socket file bound there, oldest
//! first (each socket's history, told by the verdict kept about it where there is one), then
//! what holds now. Without an agent, what a scan shows now ([`scanned`]).
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{
    verdict::sentence,
    words::{inode, inode_or_unknown, wall_of, who},
};
use crate::{
    engine::{FileId, HistoryEntry, HistoryEvent, OrphanCause, Proc, SocketState, Verdict},
    quote::quote,
    scan::{Holder, OnDisk, ScanReport, report::finding_lines},
};

/// Socket files an answer holds, the latest bound: a path bound anew at every restart would
/// otherwise answer with every socket the engine still keeps.
pub const MAX_SOCKETS: usize = 16;

/// The agent's answer to `GET /api/sockets?path=PATH`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathAnswer {
    pub path: String,
    /// The agent's node.
    pub node: String,
    /// The agent's wall clock minus its boot clock (ns), for the wall time of each `ts_ns`.
    pub boot_to_wall_ns: i64,
    /// The socket files bound at the path (or leading from it), oldest bind first.
    pub sockets: Vec<SocketView>,
    /// Older socket files at the path left out past [`MAX_SOCKETS`].
    pub sockets_omitted: usize,
    /// The verdicts the agent keeps about the path or one of these files, oldest first.
    pub verdicts: Vec<Verdict>,
    /// What is at the path as the agent answered (`lstat`); absent from older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_disk: Option<OnDisk>,
}

/// One socket file as the engine knows it, with its owner set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketView {
    #[serde(flatten)]
    pub state: SocketState,
    pub owners: Vec<Proc>,
}

impl PathAnswer {
    /// The answer about `path` from the engine's `sockets` there (any order) and the `kept`
    /// verdicts (oldest first): the latest [`MAX_SOCKETS`] sockets and the verdicts about
    /// the path or their files.
    pub fn new<'a>(
        (path, node): (&str, &str),
        boot_to_wall_ns: i64,
        mut sockets: Vec<SocketView>,
        kept: impl IntoIterator<Item = &'a Verdict>,
    ) -> Self {
        sockets.sort_by_key(|s| (s.state.bound_ns, s.state.file));
        let sockets_omitted = sockets.len().saturating_sub(MAX_SOCKETS);
        sockets.drain(..sockets_omitted);
        let verdicts = kept
            .into_iter()
            .filter(|v| {
                v.path() == Some(path) || sockets.iter().any(|s| v.names_file(s.state.file))
            })
            .cloned()
            .collect();
        Self {
            path: path.to_owned(),
            node: node.to_owned(),
            boot_to_wall_ns,
            sockets,
            sockets_omitted,
            verdicts,
            on_disk: None,
        }
    }

    /// With what is at the path now, on the filesystem.
    #[must_use]
    pub fn on_disk(mut self, on_disk: OnDisk) -> Self {
        self.on_disk = Some(on_disk);
        self
    }
}

/// The lines `explain` prints for a running agent's answer: a heading, what happened (each
/// `TIME  what`), then one `now:` line per socket file.
pub fn timeline(a: &PathAnswer) -> Vec<String> {
    let names = Names::of(a);
    let on = match a.node.as_str() {
        "" => String::new(),
        node => format!(" on {}", quote(node)),
    };
    let mut lines = vec![format!("{}, as the agent{on} saw it:", quote(&a.path))];
    if a.sockets_omitted > 0 {
        lines.push(format!(
            "({} older socket files bound at this path are left out)",
            a.sockets_omitted
        ));
    }
    if a.sockets.is_empty() && a.verdicts.is_empty() {
        lines.push(
            "the agent knows no socket at this path: none was bound there since it started, \
             or its entries were evicted"
                .into(),
        );
    } else {
        lines.extend(
            happenings(a, &names)
                .into_iter()
                .map(|(ts, what)| format!("{}  {what}", wall_of(ts, a.boot_to_wall_ns))),
        );
        let on_disk = a.on_disk.as_ref();
        lines.extend(
            a.sockets
                .iter()
                .map(|s| now(s, &names, a.boot_to_wall_ns, on_disk)),
        );
    }
    let socket_file = |file| known_socket_file(file, &a.sockets);
    lines.extend(a.on_disk.as_ref().map(|d| at_the_path(d, socket_file)));
    lines
}

/// The `now:` line of what is at the path, from the filesystem; `socket_file` tells a socket
/// file there as the source of the answer knows it.
fn at_the_path(on_disk: &OnDisk, socket_file: impl Fn(FileId) -> String) -> String {
    match on_disk {
        OnDisk::Absent => "now: the path does not exist".into(),
        OnDisk::Socket { file } => socket_file(*file),
        OnDisk::Other { file_type } => {
            format!("now: the path is {}, not a socket file", file_type.noun())
        }
        OnDisk::Unreadable { error } => {
            format!("now: the path could not be looked up: {}", quote(error))
        }
    }
}

/// A socket file at the path: live when a socket the agent knows is bound to it.
fn known_socket_file(file: FileId, sockets: &[SocketView]) -> String {
    let f = inode(file);
    match sockets.iter().find(|s| s.state.file == file) {
        Some(s) if s.state.is_live() => {
            format!("now: the path is socket file inode {f}, bound to a live socket")
        }
        Some(_) => format!(
            "now: the path is socket file inode {f}, a stale one: its socket is closed, so \
             connects are refused"
        ),
        None => format!(
            "now: the path is socket file inode {f}, of no socket the agent knows (bound \
             before it started, or outside its watches)"
        ),
    }
}

/// Every history line of every socket, and every verdict none of them tells, in time order.
fn happenings(a: &PathAnswer, names: &Names) -> Vec<(u64, String)> {
    let mut told = vec![false; a.verdicts.len()];
    let mut out = Vec::new();
    for s in &a.sockets {
        for h in &s.state.history {
            let mut kept = a.verdicts.iter().zip(told.iter_mut());
            let what = match kept.find(|(v, _)| tells(v, h, s.state.file)) {
                Some((v, told)) => {
                    *told = true;
                    sentence(v)
                }
                None => plain(h, &s.state, names),
            };
            out.push((h.ts_ns, what));
        }
    }
    let untold = a.verdicts.iter().zip(&told).filter(|(_, told)| !**told);
    out.extend(untold.map(|(v, _)| (v.ts_ns(), sentence(v))));
    out.sort_by_key(|(ts, _)| *ts);
    out
}

/// Is `v` the verdict of history line `h` of the socket file `file`?
fn tells(v: &Verdict, h: &HistoryEntry, file: FileId) -> bool {
    if v.ts_ns() != h.ts_ns {
        return false;
    }
    match (h.event, v) {
        (HistoryEvent::ForeignUnlink, Verdict::ForeignUnlink { file: f, .. })
        | (HistoryEvent::Replaced, Verdict::Replaced { file: f, .. })
        | (HistoryEvent::Moved, Verdict::Moved { file: f, .. })
        | (HistoryEvent::TakenOver, Verdict::Takeover { old_file: f, .. })
        | (HistoryEvent::Hijacked, Verdict::Hijack { old_file: f, .. })
        | (HistoryEvent::OrphanOpened, Verdict::OrphanOpened { file: f, .. })
        | (HistoryEvent::OrphanClosed, Verdict::OrphanClosed { file: f, .. }) => *f == file,
        (HistoryEvent::StaleConnect, Verdict::StaleConnect { file: f, .. }) => *f == Some(file),
        (HistoryEvent::RemovalDenied, Verdict::UnlinkDenied(g)) => g.file == file,
        _ => false,
    }
}

/// A history line of socket file `st` no kept verdict tells.
fn plain(h: &HistoryEntry, st: &SocketState, names: &Names) -> String {
    let (who, f) = (names.who(h.tgid), inode(st.file));
    match h.event {
        HistoryEvent::Bound => format!("{who} bound the path: inode {f}"),
        HistoryEvent::Listen => format!("{who} listens on inode {f}"),
        HistoryEvent::FdReceived => {
            format!("{who} received the socket of inode {f} (SCM_RIGHTS): an owner now")
        }
        HistoryEvent::Forked => format!("{who} inherited the socket of inode {f} by fork"),
        HistoryEvent::OwnerUnlink => format!("{who}, an owner, removed inode {f} from the path"),
        HistoryEvent::CleanedUp => {
            let whose = match was_owner(st, h.tgid) {
                true => "its own closed socket",
                false => "a closed socket",
            };
            format!("{who} removed inode {f}, the file of {whose}: a cleanup")
        }
        HistoryEvent::LinkRemoved => {
            format!("{who} removed one name of inode {f}; another name leads to it")
        }
        HistoryEvent::ForeignUnlink => {
            format!("{who} removed inode {f}, the file of a live socket it does not own")
        }
        HistoryEvent::RemovalDenied => {
            format!("{who} tried to remove inode {f}; the guard refused it")
        }
        HistoryEvent::TakenOver => {
            format!("{who} removed inode {f} and bound the path again: a takeover")
        }
        HistoryEvent::Hijacked => {
            format!("{who} removed inode {f}, and another workload serves the path now: a hijack")
        }
        HistoryEvent::TookOver => format!("{who} took the path over with inode {f}"),
        HistoryEvent::Replaced => {
            format!("{who} renamed another file over the path, displacing inode {f}")
        }
        HistoryEvent::Moved => format!("{who} renamed inode {f}"),
        HistoryEvent::OrphanOpened => {
            format!("the listener of {who} on inode {f} is orphaned: no path leads to it")
        }
        HistoryEvent::OrphanClosed => format!("the orphaned listener on inode {f} ended"),
        HistoryEvent::Released => format!("{who} closed the socket of inode {f}"),
        HistoryEvent::OwnerExited => format!("{who}, an owner of inode {f}, exited"),
        HistoryEvent::ConnectRefused => format!(
            "a connect by {who} to inode {f} was refused: bound, not listening (or its \
             backlog is full)"
        ),
        HistoryEvent::StaleConnect => format!(
            "a connect by {who} to inode {f} was refused: no socket is bound to it (a stale \
             connect)"
        ),
        HistoryEvent::Scanned => format!("a scan found inode {f}, held by {who}"),
    }
}

/// Did `tgid` bind or close the socket of `st`?
fn was_owner(st: &SocketState, tgid: u32) -> bool {
    let closer = st.released.as_ref().and_then(|r| r.by.as_ref());
    st.binder.tgid == tgid || closer.is_some_and(|p| p.tgid == tgid)
}

/// What holds now for one socket file: the engine's view, corrected by the filesystem's
/// (`on_disk`) where the engine still takes its file for linked: a removal the tier could
/// not see.
fn now(s: &SocketView, names: &Names, boot_to_wall_ns: i64, on_disk: Option<&OnDisk>) -> String {
    let st = &s.state;
    let f = inode(st.file);
    let owners = owners(&s.owners);
    let at_path = on_disk.and_then(|d| d.leads_to(st.file)) != Some(false);
    match (st.is_live(), st.is_linked() && at_path, &st.orphan) {
        (true, false, None) if st.is_linked() => format!(
            "now: inode {f} is still open (owners: {owners}) but the path no longer leads to it"
        ),
        (false, false, _) if st.is_linked() => {
            format!("now: inode {f} is gone: its socket closed, the path no longer leads to it")
        }
        (true, true, _) => {
            let how = match st.listening {
                true => "listening",
                false => "bound, not listening",
            };
            format!("now: inode {f} serves the path, {how}; owners: {owners}")
        }
        (true, false, Some(o)) => format!(
            "now: ORPHANED LISTENER: inode {f} still listens (owners: {owners}) but no path \
             leads to it, since {} ({})",
            wall_of(o.since_ns, boot_to_wall_ns),
            orphan_cause(o.cause, o.removed_by.as_ref().map(|p| names.who(p.tgid)))
        ),
        (true, false, None) => {
            format!("now: inode {f} is still open (owners: {owners}) but its file was removed")
        }
        (false, true, _) => format!(
            "now: inode {f} is a stale socket file: no socket is bound to it, so connects are \
             refused"
        ),
        (false, false, _) => format!("now: inode {f} is gone: its socket closed, its file removed"),
    }
}

fn orphan_cause(cause: OrphanCause, removed_by: Option<String>) -> String {
    let by = removed_by.map_or_else(String::new, |p| format!(" by {p}"));
    match cause {
        OrphanCause::Unlinked => format!("its file was removed{by}"),
        OrphanCause::Replaced => format!("its file was renamed over{by}"),
        OrphanCause::ListenAfterRemoval => "it listened after its file was removed".into(),
        OrphanCause::Scan => "a scan found it so".into(),
        OrphanCause::TakenOver => format!("its path was taken over{by}"),
        OrphanCause::Hijacked => format!("another workload serves its path{by}"),
    }
}

fn owners(procs: &[Proc]) -> String {
    match procs {
        [] => "none known".into(),
        procs => procs.iter().map(who).collect::<Vec<_>>().join(", "),
    }
}

/// The processes an answer names, by tgid: a history line keeps only the tgid.
struct Names<'a>(BTreeMap<u32, &'a Proc>);

impl<'a> Names<'a> {
    fn of(a: &'a PathAnswer) -> Self {
        let mut names = BTreeMap::new();
        let sockets = a.sockets.iter().flat_map(|s| {
            let st = &s.state;
            let removed = st.removed.as_ref().and_then(|r| r.by.as_ref());
            let released = st.released.as_ref().and_then(|r| r.by.as_ref());
            let orphan = st.orphan.iter().flat_map(|o| [&o.removed_by, &o.successor]);
            [Some(&st.binder), removed, released]
                .into_iter()
                .chain(orphan.map(Option::as_ref))
                .flatten()
                .chain(&s.owners)
        });
        for p in sockets.chain(a.verdicts.iter().flat_map(procs_of)) {
            if !p.is_unknown() {
                names.entry(p.tgid).or_insert(p);
            }
        }
        Self(names)
    }

    /// `comm (pid N, …)`, else `pid N`; tgid 0 is nobody the kernel named.
    fn who(&self, tgid: u32) -> String {
        match (self.0.get(&tgid), tgid) {
            (Some(p), _) => who(p),
            (None, 0) => "an unknown process".into(),
            (None, t) => format!("pid {t}"),
        }
    }
}

/// Every process a verdict names.
fn procs_of(v: &Verdict) -> Vec<&Proc> {
    match v {
        Verdict::ForeignUnlink { actor, victim, .. } | Verdict::Replaced { actor, victim, .. } => {
            vec![actor, victim]
        }
        Verdict::UnlinkDenied(g) | Verdict::UnlinkWouldDeny(g) => vec![&g.actor, &g.victim],
        Verdict::Moved { actor, owner, .. } => vec![actor, owner],
        Verdict::Takeover {
            remover,
            predecessor: victim,
            successor,
            ..
        }
        | Verdict::Hijack {
            remover,
            victim,
            successor,
            ..
        } => vec![remover, victim, successor],
        Verdict::OrphanOpened {
            owner,
            removed_by,
            successor,
            ..
        } => [Some(owner), removed_by.as_ref(), successor.as_ref()]
            .into_iter()
            .flatten()
            .collect(),
        Verdict::OrphanClosed { owner, .. } => vec![owner],
        Verdict::StaleConnect {
            actor,
            binder,
            removed_by,
            ..
        } => [Some(actor), binder.as_ref(), removed_by.as_ref()]
            .into_iter()
            .flatten()
            .collect(),
        Verdict::StaleSocketFile {
            binder,
            released_by,
            ..
        } => [Some(binder), released_by.as_ref()]
            .into_iter()
            .flatten()
            .collect(),
    }
}

/// The lines `explain` prints without an agent: what a scan of the node shows at `path` now
/// and what is at the path (`on_disk`); no history (only a running agent keeps one).
pub fn scanned(path: &str, report: &ScanReport, on_disk: &OnDisk) -> Vec<String> {
    let mut lines = vec![format!(
        "{}, as a scan of this node shows it now (no agent answered: no history):",
        quote(path)
    )];
    let here: Vec<String> = report
        .sockets
        .iter()
        .filter(|s| s.path == path)
        .map(|s| {
            let low32 = if s.ino_low32 { " (low 32 bits)" } else { "" };
            let f = format!("{}{low32}", inode_or_unknown(s.file));
            let socket = format!("socket:[{}]", s.sock_ino);
            let held = holders(&s.holders);
            match (s.file_linked, s.listening) {
                (Some(false), true) => format!(
                    "now: ORPHANED LISTENER: {socket} ({f}) listens, held by {held}, but the \
                     path no longer leads to it"
                ),
                (Some(false), false) => {
                    format!("now: {socket} ({f}), held by {held}, lost its file at the path")
                }
                (Some(true), true) => {
                    format!("now: {socket} ({f}) serves the path, held by {held}")
                }
                (Some(true), false) => format!(
                    "now: {socket} ({f}) is bound at the path, not listening, held by {held}"
                ),
                (None, _) => format!(
                    "now: {socket} ({f}) was bound at the path, held by {held}; whether the path \
                     still leads to it is unknown"
                ),
            }
        })
        .collect();
    if here.is_empty() {
        lines.push("now: no socket is bound at the path".into());
    }
    lines.extend(here);
    lines.push(at_the_path(on_disk, |file| {
        scanned_socket_file(file, report)
    }));
    let findings = finding_lines(&report.findings.about(path));
    lines.extend(findings.into_iter().map(|f| format!("finding: {f}")));
    lines
}

/// A socket file at the path: live when the scan found a socket bound to it.
fn scanned_socket_file(file: FileId, report: &ScanReport) -> String {
    let f = inode(file);
    let bound = report.sockets.iter().any(|s| {
        s.file.is_some_and(|b| match s.ino_low32 {
            true => b.dev == file.dev && b.ino == u64::from(file.ino as u32),
            false => b == file,
        })
    });
    match bound {
        true => format!("now: the path is socket file inode {f}, bound to a live socket"),
        false => format!(
            "now: the path is socket file inode {f}, a stale one: the scan found no socket \
             bound to it, so connects are refused"
        ),
    }
}

fn holders(h: &[Holder]) -> String {
    match h {
        [] => "no known process".into(),
        h => h
            .iter()
            .map(|h| format!("{} (pid {})", quote(&h.comm), h.tgid))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

#[cfg(test)]
#[expect(
    clippy::indexing_slicing,
    reason = "the tests index the lines they expect; a panic fails the test"
)]
mod tests {
    use super::*;
    use crate::{
        engine::{Engine, Input, Limits, LiveAtUnlink, Runtime, inputs},
        scan::{Findings, OrphanCause as ScanCause, OrphanedListener, ScannedSocket},
    };

    const P: &str = "/run/multus/multus.sock";
    const S: u64 = 1_000_000_000;
    /// Boot-clock second 0 is 2026-12-02T17:20:00Z.
    const WALL: i64 = 1_796_232_000_000_000_000;

    fn proc(tgid: u32, comm: &str) -> Proc {
        Proc {
            tgid,
            pid: tgid,
            comm: comm.into(),
            cgroup_id: 9,
            workload: None,
            exe: Some("/usr/bin/multus".into()),
            runtime: Some(Runtime::Go),
        }
    }

    fn file(ino: u64) -> FileId {
        FileId { dev: 2049, ino }
    }

    fn bind(ts_ns: u64, p: &Proc, ino: u64) -> [Input; 2] {
        let (file, sock_ino) = (file(ino), ino * 10);
        [
            Input::Bind(inputs::Bind {
                ts_ns,
                proc: p.clone(),
                file,
                sock_ino,
                path: P.into(),
            }),
            Input::Listen(inputs::Socket {
                ts_ns: ts_ns + 1,
                proc: p.clone(),
                file,
                sock_ino,
            }),
        ]
    }

    fn unlink(ts_ns: u64, p: &Proc, ino: u64, owner: u32) -> Input {
        Input::Unlink(inputs::Unlink {
            ts_ns,
            proc: p.clone(),
            path: P.into(),
            file: Some(file(ino)),
            fidelity: sockwatch_common::Fidelity::Exact,
            live: Some(LiveAtUnlink {
                owner_tgid: owner,
                sock_ino: ino * 10,
                listening: true,
                unlinker_holds_fd: Some(false),
                links: Some(1),
            }),
        })
    }

    /// S1 through the engine: A (golistener) listens, B removes its socket and binds again,
    /// A's Close unlinks B's socket and closes its own.
    fn s1() -> (Engine, Vec<Verdict>) {
        let (a, b) = (proc(100, "golistener"), proc(200, "multus"));
        let mut e = Engine::new(Limits::default()).expect("valid limits");
        let mut inputs = Vec::from(bind(S, &a, 1));
        inputs.push(unlink(2 * S, &b, 1, 100));
        inputs.extend(bind(2 * S + 5_000_000, &b, 2));
        inputs.push(unlink(3 * S, &a, 2, 200));
        inputs.push(Input::Release(inputs::Socket {
            ts_ns: 3 * S + 1_000_000,
            proc: a.clone(),
            file: file(1),
            sock_ino: 10,
        }));
        let verdicts = inputs.iter().flat_map(|i| e.apply(i)).collect();
        (e, verdicts)
    }

    fn answer(e: &Engine, verdicts: &[Verdict]) -> PathAnswer {
        let views = e
            .socket_by_path(P)
            .into_iter()
            .map(|s| SocketView {
                state: s.clone(),
                owners: e.owners(s.file),
            })
            .collect();
        PathAnswer::new((P, "node-1"), WALL, views, verdicts)
    }

    #[test]
    fn s1s_timeline_tells_each_step_by_its_verdict_and_what_holds_now() {
        let (e, verdicts) = s1();
        let lines = timeline(&answer(&e, &verdicts));
        let expected = [
            "/run/multus/multus.sock, as the agent on node-1 saw it:",
            "2026-12-02T17:20:01.000Z  golistener (pid 100) bound the path: inode 2049:1",
            "2026-12-02T17:20:01.000Z  golistener (pid 100) listens on inode 2049:1",
            "2026-12-02T17:20:02.000Z  TAKEOVER: multus (pid 200) removed \
             /run/multus/multus.sock (inode 2049:1), the file of the live socket of golistener \
             (pid 100), and bound a new socket there (inode 2049:2) 5 ms later: a healthy \
             rollout of the same workload, nothing to fix; the old listener should close as \
             its process shuts down.",
            "2026-12-02T17:20:02.005Z  ORPHANED LISTENER: golistener (pid 100) still listens \
             on inode 2049:1, whose path /run/multus/multus.sock was taken over by multus (pid \
             200): expected while the old process shuts down; if it lingers, its shutdown is \
             stuck.",
            "2026-12-02T17:20:02.005Z  multus (pid 200) bound the path: inode 2049:2",
            "2026-12-02T17:20:02.005Z  multus (pid 200) took the path over with inode 2049:2",
            "2026-12-02T17:20:02.005Z  multus (pid 200) listens on inode 2049:2",
            "2026-12-02T17:20:03.000Z  FOREIGN UNLINK: golistener (pid 100) removed \
             /run/multus/multus.sock (inode 2049:2), the file of the listening socket of multus \
             (pid 200), so clients can no longer reach it by path; likely cause: the remover is \
             a stale owner, its own listener at this path was already replaced, yet its Close \
             unlinked the path (Go's net.UnixListener unlinks its path on Close); fix: call \
             SetUnlinkOnClose(false) or remove only your own inode.",
            "2026-12-02T17:20:03.000Z  ORPHANED LISTENER: multus (pid 200) listens on inode \
             2049:2, whose path /run/multus/multus.sock was removed by golistener (pid 100): no \
             client can reach it by path until its owner binds again or exits.",
            "2026-12-02T17:20:03.001Z  ORPHAN CLOSED: the orphaned listener of golistener (pid \
             100) on inode 2049:1 (once /run/multus/multus.sock) ended after 1.0 s: it was \
             closed.",
            "2026-12-02T17:20:03.001Z  golistener (pid 100) closed the socket of inode 2049:1",
            "now: inode 2049:1 is gone: its socket closed, its file removed",
            "now: ORPHANED LISTENER: inode 2049:2 still listens (owners: multus (pid 200)) but \
             no path leads to it, since 2026-12-02T17:20:03.000Z (its file was removed by \
             golistener (pid 100))",
        ];
        assert_eq!(lines, expected);
    }

    #[test]
    fn without_its_verdicts_a_timeline_tells_the_history_plainly() {
        let (e, _) = s1();
        let lines = timeline(&answer(&e, &[]));
        assert_eq!(
            lines[3..5],
            [
                "2026-12-02T17:20:02.000Z  multus (pid 200) removed inode 2049:1 and bound the \
                 path again: a takeover",
                "2026-12-02T17:20:02.005Z  the listener of golistener (pid 100) on inode 2049:1 \
                 is orphaned: no path leads to it",
            ]
        );
    }

    #[test]
    fn an_answer_keeps_the_latest_sockets_and_the_verdicts_about_them() {
        let (e, mut verdicts) = s1();
        let elsewhere = Verdict::StaleConnect {
            ts_ns: 4 * S,
            kind: crate::engine::StaleKind::DeadListener,
            actor: proc(300, "curl"),
            path: "/run/other.sock".into(),
            file: Some(file(7)),
            binder: None,
            removed_by: None,
            decided_by: crate::engine::DecidedBy::Kernel,
        };
        verdicts.push(elsewhere);
        let a = answer(&e, &verdicts);
        assert_eq!(a.verdicts.len(), verdicts.len() - 1, "not about this path");
        let many: Vec<SocketView> = (0..MAX_SOCKETS as u64 + 3)
            .map(|i| {
                let mut state = a.sockets[0].state.clone();
                (state.file, state.bound_ns) = (file(100 + i), i);
                SocketView {
                    state,
                    owners: Vec::new(),
                }
            })
            .collect();
        let bounded = PathAnswer::new((P, ""), 0, many, &[]);
        assert_eq!(
            (bounded.sockets.len(), bounded.sockets_omitted),
            (MAX_SOCKETS, 3)
        );
        assert_eq!(bounded.sockets[0].state.bound_ns, 3, "the oldest left out");
        assert_eq!(
            timeline(&bounded)[..2],
            [
                "/run/multus/multus.sock, as the agent saw it:",
                "(3 older socket files bound at this path are left out)"
            ]
        );
    }

    #[test]
    fn an_answer_reads_back_as_it_was_served() {
        let (e, verdicts) = s1();
        let a = answer(&e, &verdicts);
        let served = serde_json::to_string(&a).expect("serializes");
        assert!(
            served.contains(r#""sockets":[{"file":{"dev":2049,"ino":1}"#),
            "{served}"
        );
        assert_eq!(
            serde_json::from_str::<PathAnswer>(&served).expect("parses"),
            a
        );
    }

    #[test]
    fn a_path_nobody_bound_says_so() {
        let a = PathAnswer::new((P, "node-1"), WALL, Vec::new(), &[]);
        assert_eq!(
            timeline(&a),
            [
                "/run/multus/multus.sock, as the agent on node-1 saw it:",
                "the agent knows no socket at this path: none was bound there since it started, \
                 or its entries were evicted"
            ]
        );
    }

    /// A daemon binds and listens, closes its socket, and (`unlinked`) removes its file.
    fn closed_then(unlinked: bool) -> Engine {
        let a = proc(100, "daemon");
        let mut e = Engine::new(Limits::default()).expect("valid limits");
        let mut inputs = Vec::from(bind(S, &a, 1));
        inputs.push(Input::Release(inputs::Socket {
            ts_ns: 2 * S,
            proc: a.clone(),
            file: file(1),
            sock_ino: 10,
        }));
        if unlinked {
            inputs.push(Input::Unlink(inputs::Unlink {
                ts_ns: 3 * S,
                proc: a,
                path: P.into(),
                file: None,
                fidelity: sockwatch_common::Fidelity::PathOnly,
                live: None,
            }));
        }
        for i in &inputs {
            assert_eq!(e.apply(i), [], "quiet: {i:?}");
        }
        e
    }

    #[test]
    fn an_owners_close_then_unlink_is_a_quiet_cleanup_and_the_path_is_absent_now() {
        let e = closed_then(true);
        let lines = timeline(&answer(&e, &[]).on_disk(OnDisk::Absent));
        assert_eq!(
            lines,
            [
                "/run/multus/multus.sock, as the agent on node-1 saw it:",
                "2026-12-02T17:20:01.000Z  daemon (pid 100) bound the path: inode 2049:1",
                "2026-12-02T17:20:01.000Z  daemon (pid 100) listens on inode 2049:1",
                "2026-12-02T17:20:02.000Z  daemon (pid 100) closed the socket of inode 2049:1",
                "2026-12-02T17:20:03.000Z  daemon (pid 100) removed inode 2049:1, the file of its \
                 own closed socket: a cleanup",
                "now: inode 2049:1 is gone: its socket closed, its file removed",
                "now: the path does not exist",
            ]
        );
    }

    #[test]
    fn another_process_removing_a_closed_sockets_file_is_a_cleanup_too() {
        let mut e = closed_then(false);
        let b = proc(200, "tmpreaper");
        let removal = Input::Unlink(inputs::Unlink {
            ts_ns: 3 * S,
            proc: b,
            path: P.into(),
            file: Some(file(1)),
            fidelity: sockwatch_common::Fidelity::Exact,
            live: None,
        });
        assert_eq!(e.apply(&removal), []);
        let lines = timeline(&answer(&e, &[]));
        assert_eq!(
            lines[4],
            "2026-12-02T17:20:03.000Z  tmpreaper (pid 200) removed inode 2049:1, the file of a \
             closed socket: a cleanup"
        );
    }

    #[test]
    fn the_filesystem_corrects_a_file_the_agent_last_saw_linked() {
        let e = closed_then(false);
        let now = |on_disk: OnDisk| {
            let lines = timeline(&answer(&e, &[]).on_disk(on_disk));
            lines[lines.len() - 2..].to_vec()
        };
        assert_eq!(
            now(OnDisk::Absent),
            [
                "now: inode 2049:1 is gone: its socket closed, the path no longer leads to it",
                "now: the path does not exist",
            ]
        );
        assert_eq!(
            now(OnDisk::Socket { file: file(1) }),
            [
                "now: inode 2049:1 is a stale socket file: no socket is bound to it, so \
                 connects are refused",
                "now: the path is socket file inode 2049:1, a stale one: its socket is closed, \
                 so connects are refused",
            ]
        );
        assert_eq!(
            now(OnDisk::Other {
                file_type: crate::scan::FileType::Regular
            }),
            [
                "now: inode 2049:1 is gone: its socket closed, the path no longer leads to it",
                "now: the path is a regular file, not a socket file",
            ]
        );
        let (live, _) = s1();
        let lines = timeline(&answer(&live, &[]).on_disk(OnDisk::Socket { file: file(9) }));
        assert_eq!(
            lines[lines.len() - 3..],
            [
                "now: inode 2049:1 is gone: its socket closed, its file removed",
                "now: ORPHANED LISTENER: inode 2049:2 still listens (owners: multus (pid 200)) \
                 but no path leads to it, since 2026-12-02T17:20:03.000Z (its file was removed \
                 by golistener (pid 100))",
                "now: the path is socket file inode 2049:9, of no socket the agent knows (bound \
                 before it started, or outside its watches)",
            ]
        );
    }

    fn scanned_socket(sock_ino: u64, linked: Option<bool>, listening: bool) -> ScannedSocket {
        ScannedSocket {
            sock_ino,
            file: Some(file(sock_ino)),
            ino_low32: false,
            path: P.into(),
            listening,
            sock_type: 1,
            state: 10,
            holders: vec![Holder {
                tgid: 200,
                comm: "multus".into(),
                cgroup: "/".into(),
                cgroup_id: None,
            }],
            file_linked: linked,
            dir: None,
            outside_watch: false,
        }
    }

    #[test]
    fn a_scan_tells_what_holds_now_and_its_findings_about_the_path() {
        let orphan = OrphanedListener {
            path: P.into(),
            sock_ino: 2,
            file: file(2),
            ino_low32: false,
            cause: ScanCause::Unlinked,
            pending: None,
            backlog: None,
            holders: Vec::new(),
        };
        let other = OrphanedListener {
            path: "/run/other.sock".into(),
            ..orphan.clone()
        };
        let report = ScanReport {
            sockets: vec![
                scanned_socket(2, Some(false), true),
                scanned_socket(3, Some(true), true),
                ScannedSocket {
                    ino_low32: true,
                    ..scanned_socket(4, None, false)
                },
            ],
            findings: Findings {
                orphaned_listeners: vec![orphan, other],
                ..Findings::default()
            },
            counts: crate::scan::Counts::default(),
            warnings: Vec::new(),
            complete: true,
            unreadable: None,
        };
        assert_eq!(
            scanned(P, &report, &OnDisk::Socket { file: file(3) }),
            [
                "/run/multus/multus.sock, as a scan of this node shows it now (no agent \
                 answered: no history):",
                "now: ORPHANED LISTENER: socket:[2] (inode 2049:2) listens, held by multus (pid \
                 200), but the path no longer leads to it",
                "now: socket:[3] (inode 2049:3) serves the path, held by multus (pid 200)",
                "now: socket:[4] (inode 2049:4 (low 32 bits)) was bound at the path, held by \
                 multus (pid 200); whether the path still leads to it is unknown",
                "now: the path is socket file inode 2049:3, bound to a live socket",
                "finding: orphaned-listener  /run/multus/multus.sock  unlinked; socket:[2] on \
                 dev 8:1 ino 2; held by no known holder",
            ]
        );
        let empty = ScanReport {
            sockets: Vec::new(),
            findings: Findings::default(),
            ..report
        };
        assert_eq!(
            scanned(P, &empty, &OnDisk::Socket { file: file(2) })[1..],
            [
                "now: no socket is bound at the path",
                "now: the path is socket file inode 2049:2, a stale one: the scan found no socket \
                 bound to it, so connects are refused"
            ]
        );
    }
}
