//! The socket table: one entry per socket file, keyed by [`FileId`], with its indexes (path,
//! socket inode, eviction order, open orphans, pending stale files) kept in step by routing
//! every change through [`SocketTable::modify`].
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::{
    model::{FileId, NumberMap, Proc},
    verdict::OrphanCause,
};

/// Display paths kept per socket file (one per mount-namespace view, S13).
pub const MAX_ALIASES: usize = 4;

/// What the engine knows about one socket file and the socket bound to it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketState {
    pub file: FileId,
    /// The socket's own inode (`socket:[N]`).
    pub sock_ino: u64,
    /// The process that bound it (or the first holder a scan found).
    pub binder: Proc,
    /// The path as the binder named it.
    pub bind_path: Option<String>,
    pub bound_ns: u64,
    /// False when the bind was not seen (learned from a scan or the kernel at an unlink).
    pub bound_exact: bool,
    pub listening: bool,
    /// Paths that currently resolve to the file, as different processes named them.
    pub paths: Vec<String>,
    /// Set once the socket is closed.
    pub released: Option<Released>,
    /// Set once the file no longer resolves at its path.
    pub removed: Option<Removal>,
    /// Set while the socket is an open orphaned listener. Boxed: rare, and several
    /// processes long.
    pub orphan: Option<Box<Orphan>>,
    /// Released with the file linked, waiting for this tgid to exit before reporting it stale.
    pub stale_pending_tgid: Option<u32>,
    pub stale_reported: bool,
    /// Most recent events, oldest first, at most `max_history_per_socket`.
    pub history: VecDeque<HistoryEntry>,
    /// Last time the entry changed: its eviction age.
    pub touched_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Released {
    pub ts_ns: u64,
    /// The process that closed it last, when known.
    pub by: Option<Proc>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RemovalHow {
    Unlinked,
    Replaced,
    /// A scan found the file no longer linked; the removal itself was not seen.
    Unknown,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removal {
    pub ts_ns: u64,
    pub by: Option<Proc>,
    pub how: RemovalHow,
    /// Whether the remover was outside the owner set; `None` when unknown.
    pub foreign: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Orphan {
    pub since_ns: u64,
    pub since_exact: bool,
    pub cause: OrphanCause,
    pub removed_by: Option<Proc>,
    /// Who serves the path now, for a `taken_over` orphan.
    pub successor: Option<Proc>,
}

/// One line of a socket's history, for `explain`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub ts_ns: u64,
    pub tgid: u32,
    pub event: HistoryEvent,
}

impl HistoryEntry {
    /// `next` is a later scan right after this one.
    fn rescanned_by(&self, next: &HistoryEntry) -> bool {
        self.event == HistoryEvent::Scanned
            && next.event == HistoryEvent::Scanned
            && self.ts_ns <= next.ts_ns
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryEvent {
    Bound,
    Listen,
    FdReceived,
    Forked,
    OwnerUnlink,
    /// The file of a closed socket was removed (or renamed over): a cleanup, whoever made it.
    CleanedUp,
    /// One of several names of the file was removed (S20).
    LinkRemoved,
    ForeignUnlink,
    /// A removal the guard refused: the file stayed.
    RemovalDenied,
    /// Removed, and the path served again by the owner's workload.
    TakenOver,
    /// Removed, and the path served again by another workload.
    Hijacked,
    /// Bound (or renamed into place) at a path whose previous socket had just been removed.
    TookOver,
    Replaced,
    Moved,
    OrphanOpened,
    OrphanClosed,
    Released,
    OwnerExited,
    ConnectRefused,
    StaleConnect,
    Scanned,
}

impl SocketState {
    /// Boxed from the start: a state is over a kilobyte, and the table keeps it boxed.
    pub fn new(file: FileId, sock_ino: u64, binder: Proc, ts_ns: u64) -> Box<Self> {
        Box::new(Self {
            file,
            sock_ino,
            binder,
            bind_path: None,
            bound_ns: ts_ns,
            bound_exact: true,
            listening: false,
            paths: Vec::new(),
            released: None,
            removed: None,
            orphan: None,
            stale_pending_tgid: None,
            stale_reported: false,
            history: VecDeque::new(),
            touched_ns: ts_ns,
        })
    }

    /// Still bound by an open socket.
    pub fn is_live(&self) -> bool {
        self.released.is_none()
    }

    /// The file still resolves at its path.
    pub fn is_linked(&self) -> bool {
        self.removed.is_none()
    }

    /// The events applied while a scan begun at `scan_ns` ran already tell more than the
    /// scan's reading of socket `sock_ino` on this file: this socket was released or its file
    /// removed since (the scan may have read the path before the unlink), or it is another
    /// one, bound since on a file number the filesystem freed and reused.
    pub(super) fn is_newer_than_scan(&self, scan_ns: u64, sock_ino: u64) -> bool {
        self.released.as_ref().is_some_and(|r| r.ts_ns > scan_ns)
            || self.removed.as_ref().is_some_and(|r| r.ts_ns > scan_ns)
            || (self.sock_ino != sock_ino && self.bound_ns > scan_ns)
    }

    /// The best display path: the binder's, else any alias.
    pub fn display_path(&self) -> Option<String> {
        self.bind_path
            .clone()
            .or_else(|| self.paths.first().cloned())
    }

    /// Records a display path that resolves to the file; false when the alias list is full.
    pub fn add_alias(&mut self, path: &str) -> bool {
        if self.paths.iter().any(|p| p == path) {
            return true;
        }
        if self.paths.len() >= MAX_ALIASES {
            return false;
        }
        self.paths.push(path.to_owned());
        true
    }

    fn eviction_class(&self) -> u8 {
        match (self.is_live(), self.orphan.is_some()) {
            (false, _) => 0,
            (true, false) => 1,
            (true, true) => 2,
        }
    }
}

/// Why an entry left the table to make room.
#[derive(Debug)]
pub struct Evicted(pub Box<SocketState>);

#[derive(Debug)]
pub struct SocketTable {
    /// Hashed: every event looks its socket up here, and nothing walks the entries in order
    /// (eviction goes by `lru`). Boxed: a resize moves a box, not a state of a kilobyte.
    entries: NumberMap<FileId, Filed>,
    by_path: BTreeMap<String, BTreeSet<FileId>>,
    by_sock: NumberMap<u64, FileId>,
    lru: Lru,
    open_orphans: BTreeSet<FileId>,
    pending_stale: BTreeMap<u32, BTreeSet<FileId>>,
    max_entries: usize,
    max_history: usize,
    pub history_dropped: u64,
    /// An entry's paths before a [`modify`](Self::modify), NUL-separated (paths have no NUL):
    /// kept between calls so that comparing them allocates nothing.
    paths_before: String,
}

/// An entry and the key it is filed under in the eviction order.
#[derive(Debug)]
struct Filed {
    state: Box<SocketState>,
    /// (class, touched_ns) as filed: the class always the entry's, the age no later than its
    /// `touched_ns`. A touch alone does not refile the entry (most events are touches);
    /// eviction refiles an entry it finds filed too early, and takes the first that is not.
    lru: (u8, u64),
}

/// The eviction order, (class, touched_ns, file): released first, then live, then open
/// orphans; oldest first. Counts its live entries, so that the count is no walk.
#[derive(Debug, Default)]
struct Lru {
    order: BTreeSet<(u8, u64, FileId)>,
    live: usize,
}

impl Lru {
    fn insert(&mut self, key: (u8, u64, FileId)) {
        if self.order.insert(key) && key.0 > 0 {
            self.live += 1;
        }
    }

    fn remove(&mut self, key: &(u8, u64, FileId)) {
        if self.order.remove(key) && key.0 > 0 {
            self.live -= 1;
        }
    }

    fn pop_first(&mut self) -> Option<(u8, u64, FileId)> {
        let key = self.order.pop_first()?;
        if key.0 > 0 {
            self.live -= 1;
        }
        Some(key)
    }
}

/// What places an entry in the indexes other than by path.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Keys {
    live_sock: Option<u64>,
    class: u8,
    orphan: bool,
    stale_pending: Option<u32>,
}

impl Keys {
    fn of(e: &SocketState) -> Keys {
        Keys {
            live_sock: e.is_live().then_some(e.sock_ino),
            class: e.eviction_class(),
            orphan: e.orphan.is_some(),
            stale_pending: e.stale_pending_tgid,
        }
    }
}

impl SocketTable {
    pub fn new(max_entries: usize, max_history: usize) -> Self {
        Self {
            entries: NumberMap::default(),
            by_path: BTreeMap::new(),
            by_sock: NumberMap::default(),
            lru: Lru::default(),
            open_orphans: BTreeSet::new(),
            pending_stale: BTreeMap::new(),
            max_entries,
            max_history,
            history_dropped: 0,
            paths_before: String::new(),
        }
    }

    pub fn entry_count(&self) -> usize {
        self.entries.len()
    }

    pub fn live_count(&self) -> usize {
        self.lru.live
    }

    pub fn get(&self, file: &FileId) -> Option<&SocketState> {
        self.entries.get(file).map(|e| &*e.state)
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &SocketState> {
        self.entries.values().map(|e| &*e.state)
    }

    pub fn by_sock(&self, sock_ino: u64) -> Option<FileId> {
        self.by_sock.get(&sock_ino).copied()
    }

    /// Files whose path currently resolves as `path` (several when mount namespaces differ).
    pub fn linked_at(&self, path: &str) -> Vec<FileId> {
        self.by_path
            .get(path)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    pub fn open_orphans(&self) -> impl Iterator<Item = &SocketState> {
        self.open_orphans.iter().filter_map(|f| self.get(f))
    }

    pub fn open_orphan_files(&self) -> Vec<FileId> {
        self.open_orphans.iter().copied().collect()
    }

    pub fn open_orphan_count(&self) -> usize {
        self.open_orphans.len()
    }

    /// Files released by `tgid` with their file still linked.
    pub fn pending_stale_of(&mut self, tgid: u32) -> Vec<FileId> {
        self.pending_stale
            .get(&tgid)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Inserts (or replaces) an entry; returns what had to be evicted to make room.
    pub fn insert(&mut self, state: Box<SocketState>) -> Option<Evicted> {
        let file = state.file;
        let mut evicted = None;
        if let Some(old) = self.entries.remove(&file) {
            self.unindex(&old);
        } else if self.entries.len() >= self.max_entries {
            evicted = self.evict_one();
        }
        let lru = self.index(&state);
        self.entries.insert(file, Filed { state, lru });
        evicted
    }

    /// The entry first in the eviction order by its current age: an entry filed earlier than
    /// its last touch is refiled at it, and the search goes on.
    fn evict_one(&mut self) -> Option<Evicted> {
        loop {
            let (class, ts, file) = self.lru.pop_first()?;
            let e = self.entries.get_mut(&file)?;
            if e.state.touched_ns == ts {
                let old = self.entries.remove(&file)?;
                // lru already popped; unindex tolerates the missing key.
                self.unindex(&old);
                return Some(Evicted(old.state));
            }
            e.lru = (class, e.state.touched_ns);
            self.lru.insert((class, e.state.touched_ns, file));
        }
    }

    /// Changes one entry in place, keeping every index in step; `ts_ns` becomes its eviction
    /// age. Only the index keys the change moved are updated: this runs for most events, and
    /// most change no path.
    pub fn modify<R>(
        &mut self,
        file: &FileId,
        ts_ns: u64,
        f: impl FnOnce(&mut SocketState) -> R,
    ) -> Option<R> {
        let filed = self.entries.get_mut(file)?;
        let entry = &mut filed.state;
        let before = Keys::of(entry);
        let linked_before = entry.is_linked();
        join_paths(&mut self.paths_before, &entry.paths);
        entry.touched_ns = entry.touched_ns.max(ts_ns);
        let r = f(entry);
        let after = Keys::of(entry);
        let linked_after = entry.is_linked();
        // A new class is refiled at once (eviction trusts the filed class); a touch is not.
        let refiled = (before.class != after.class).then(|| {
            let was = filed.lru;
            filed.lru = (after.class, entry.touched_ns);
            (was, filed.lru)
        });
        if linked_before != linked_after || !same_paths(&self.paths_before, &entry.paths) {
            if linked_before {
                for p in self.paths_before.split_terminator('\0') {
                    unindex_path(&mut self.by_path, p, file);
                }
            }
            if linked_after {
                for p in &entry.paths {
                    self.by_path.entry(p.clone()).or_default().insert(*file);
                }
            }
        }
        if let Some((was, now)) = refiled {
            self.lru.remove(&(was.0, was.1, *file));
            self.lru.insert((now.0, now.1, *file));
        }
        self.rekey(file, before, after);
        Some(r)
    }

    /// Moves `file` in the indexes other than by path and age from `before`'s keys to
    /// `after`'s, to the state [`unindex`](Self::unindex) then [`index`](Self::index) would
    /// leave.
    fn rekey(&mut self, file: &FileId, before: Keys, after: Keys) {
        if let Some(s) = before.live_sock
            && after.live_sock != Some(s)
            && self.by_sock.get(&s) == Some(file)
        {
            self.by_sock.remove(&s);
        }
        if let Some(s) = after.live_sock {
            self.by_sock.insert(s, *file);
        }
        if after.orphan {
            self.open_orphans.insert(*file);
        } else if before.orphan {
            self.open_orphans.remove(file);
        }
        if let Some(t) = before.stale_pending
            && after.stale_pending != Some(t)
        {
            unindex_stale(&mut self.pending_stale, t, file);
        }
        if let Some(t) = after.stale_pending {
            self.pending_stale.entry(t).or_default().insert(*file);
        }
    }

    /// Adds to an entry's bounded history, in time order (a removal decided after its
    /// window goes where it happened). A scan after a scan only moves the last one's time:
    /// every sweep sees every socket, and would push its bind out of the history.
    pub fn record(&mut self, file: &FileId, ts_ns: u64, tgid: u32, event: HistoryEvent) {
        let Some(Filed { state: e, .. }) = self.entries.get_mut(file) else {
            return;
        };
        let entry = HistoryEntry { ts_ns, tgid, event };
        if let Some(last) = e
            .history
            .back_mut()
            .filter(|last| last.rescanned_by(&entry))
        {
            *last = entry;
            return;
        }
        let at = e.history.len()
            - e.history
                .iter()
                .rev()
                .take_while(|h| h.ts_ns > ts_ns)
                .count();
        e.history.insert(at, entry);
        while e.history.len() > self.max_history {
            e.history.pop_front();
            self.history_dropped += 1;
        }
    }

    /// Files a new entry in every index; returns its key in the eviction order.
    fn index(&mut self, e: &SocketState) -> (u8, u64) {
        if e.is_linked() {
            for p in &e.paths {
                self.by_path.entry(p.clone()).or_default().insert(e.file);
            }
        }
        if e.is_live() {
            self.by_sock.insert(e.sock_ino, e.file);
        }
        let lru = (e.eviction_class(), e.touched_ns);
        self.lru.insert((lru.0, lru.1, e.file));
        if e.orphan.is_some() {
            self.open_orphans.insert(e.file);
        }
        if let Some(t) = e.stale_pending_tgid {
            self.pending_stale.entry(t).or_default().insert(e.file);
        }
        lru
    }

    fn unindex(&mut self, filed: &Filed) {
        let e = &filed.state;
        for p in &e.paths {
            unindex_path(&mut self.by_path, p, &e.file);
        }
        if self.by_sock.get(&e.sock_ino) == Some(&e.file) {
            self.by_sock.remove(&e.sock_ino);
        }
        self.lru.remove(&(filed.lru.0, filed.lru.1, e.file));
        self.open_orphans.remove(&e.file);
        if let Some(t) = e.stale_pending_tgid {
            unindex_stale(&mut self.pending_stale, t, &e.file);
        }
    }

    /// Index sizes, for the bound checks in tests.
    #[cfg(test)]
    pub fn index_sizes(&self) -> (usize, usize, usize, usize) {
        (
            self.by_path.values().map(BTreeSet::len).sum(),
            self.by_sock.len(),
            self.lru.order.len(),
            self.pending_stale.values().map(BTreeSet::len).sum(),
        )
    }
}

fn unindex_path(by_path: &mut BTreeMap<String, BTreeSet<FileId>>, path: &str, file: &FileId) {
    if let Some(set) = by_path.get_mut(path) {
        set.remove(file);
        if set.is_empty() {
            by_path.remove(path);
        }
    }
}

fn unindex_stale(pending: &mut BTreeMap<u32, BTreeSet<FileId>>, tgid: u32, file: &FileId) {
    if let Some(set) = pending.get_mut(&tgid) {
        set.remove(file);
        if set.is_empty() {
            pending.remove(&tgid);
        }
    }
}

/// `paths`, each followed by a NUL, into `buf` (cleared first).
fn join_paths(buf: &mut String, paths: &[String]) {
    buf.clear();
    for p in paths {
        buf.push_str(p);
        buf.push('\0');
    }
}

/// Whether `joined` ([`join_paths`]) holds exactly `paths`, in order.
fn same_paths(joined: &str, paths: &[String]) -> bool {
    let mut rest = joined;
    for p in paths {
        match rest
            .strip_prefix(p.as_str())
            .and_then(|r| r.strip_prefix('\0'))
        {
            Some(r) => rest = r,
            None => return false,
        }
    }
    rest.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    impl SocketTable {
        /// The indexes a full rebuild from the entries gives, against the kept ones.
        fn assert_indexes_rebuild(&self) {
            let mut fresh = SocketTable::new(self.max_entries, self.max_history);
            let mut filed_order = BTreeSet::new();
            for e in self.entries.values() {
                fresh.index(&e.state);
                assert_eq!(e.lru.0, e.state.eviction_class(), "filed under its class");
                assert!(e.lru.1 <= e.state.touched_ns, "filed no later than touched");
                filed_order.insert((e.lru.0, e.lru.1, e.state.file));
            }
            assert_eq!(self.by_path, fresh.by_path, "by_path");
            assert_eq!(self.by_sock, fresh.by_sock, "by_sock");
            assert_eq!(
                self.lru.order, filed_order,
                "lru: each entry at its filed key"
            );
            assert_eq!(self.lru.live, fresh.lru.live, "live count");
            assert_eq!(self.open_orphans, fresh.open_orphans, "open orphans");
            assert_eq!(self.pending_stale, fresh.pending_stale, "pending stale");
        }
    }

    #[test]
    fn joined_paths_compare_exactly() {
        let mut buf = String::from("stale");
        let paths = vec!["/run/a.sock".to_owned(), "/host/run/a.sock".to_owned()];
        join_paths(&mut buf, &paths);
        assert!(same_paths(&buf, &paths));
        assert!(!same_paths(&buf, &paths[..1]));
        assert!(!same_paths(
            &buf,
            &["/run/a.sock".to_owned(), "/host/run/b.sock".to_owned()]
        ));
        assert!(!same_paths(
            &buf,
            &["/run/a.soc".to_owned(), "k".to_owned()]
        ));
        join_paths(&mut buf, &[]);
        assert!(same_paths(&buf, &[]) && !same_paths(&buf, &paths[..1]));
    }

    /// Every kind of change `modify` may make, in a sequence that touches every index, leaves
    /// the same indexes a rebuild from the entries would.
    #[test]
    fn in_place_changes_keep_every_index_as_a_rebuild_would() {
        let mut t = SocketTable::new(8, 4);
        let file = |n: u64| FileId { dev: 1, ino: n };
        for n in 0..12 {
            let mut s = SocketState::new(file(n), 100 + n, Proc::unknown(10), n);
            s.paths = vec![format!("/run/{}.sock", n % 3)];
            t.insert(s);
            t.assert_indexes_rebuild();
        }
        let ids: Vec<FileId> = t.iter().map(|e| e.file).collect();
        let changes: [fn(&mut SocketState); 12] = [
            |s| s.paths.push("/host/run/alias.sock".to_owned()),
            |s| {
                s.removed = Some(Removal {
                    ts_ns: 7,
                    by: None,
                    how: RemovalHow::Unlinked,
                    foreign: Some(true),
                });
            },
            |s| {
                s.orphan = Some(Box::new(Orphan {
                    since_ns: 7,
                    since_exact: true,
                    cause: OrphanCause::Unlinked,
                    removed_by: None,
                    successor: None,
                }));
            },
            |s| s.paths.clear(),
            |s| s.removed = None,
            |s| s.paths = vec!["/run/0.sock".to_owned()],
            |s| s.released = Some(Released { ts_ns: 5, by: None }),
            |s| s.orphan = None,
            |s| s.released = None,
            |s| s.stale_pending_tgid = Some(s.sock_ino as u32 % 2),
            |s| s.stale_pending_tgid = None,
            |s| s.sock_ino += 1000,
        ];
        for (i, id) in ids.iter().cycle().take(200).enumerate() {
            let change = changes[i % changes.len()];
            t.modify(id, 1_000 + (i as u64 / 3), change);
            t.assert_indexes_rebuild();
        }
    }

    /// A touch leaves an entry filed at its old age, yet eviction goes by its last touch:
    /// the least recently touched entry of the lowest class leaves first.
    #[test]
    fn eviction_takes_the_least_recently_touched_entry_though_touches_are_not_refiled() {
        let mut t = SocketTable::new(3, 4);
        let file = |n: u64| FileId { dev: 1, ino: n };
        for n in 1..=3 {
            t.insert(SocketState::new(file(n), 100 + n, Proc::unknown(10), n));
        }
        t.modify(&file(1), 10, |_| ());
        t.modify(&file(2), 11, |_| ());
        t.assert_indexes_rebuild();
        let evicted = t.insert(SocketState::new(file(4), 104, Proc::unknown(10), 12));
        assert_eq!(evicted.map(|Evicted(s)| s.file), Some(file(3)));
        let evicted = t.insert(SocketState::new(file(5), 105, Proc::unknown(10), 13));
        assert_eq!(
            evicted.map(|Evicted(s)| s.file),
            Some(file(1)),
            "refiled at 10"
        );
        t.modify(&file(4), 14, |s| {
            s.released = Some(Released {
                ts_ns: 14,
                by: None,
            });
        });
        let evicted = t.insert(SocketState::new(file(6), 106, Proc::unknown(10), 15));
        assert_eq!(
            evicted.map(|Evicted(s)| s.file),
            Some(file(4)),
            "released first"
        );
        t.assert_indexes_rebuild();
        assert_eq!(t.live_count(), 3);
    }
}
