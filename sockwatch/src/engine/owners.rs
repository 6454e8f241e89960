//! Owner sets (which processes hold a bound socket open) and the bounded table of the
//! processes in them.
//!
//! A tgid is in an owner set only while its process is in the table: evicting a process drops
//! it from every owner set, so the relation stays bounded by `max_procs × max_sockets`.
use std::collections::BTreeSet;

use super::model::{FileId, NumberMap, Proc};

#[derive(Debug)]
struct ProcEntry {
    proc: Proc,
    exited_ns: Option<u64>,
    touched_ns: u64,
}

#[derive(Debug)]
pub struct Owners {
    procs: NumberMap<u32, ProcEntry>,
    /// (class, touched_ns, tgid): exited first, then live non-owners, then owners.
    lru: BTreeSet<(u8, u64, u32)>,
    by_file: NumberMap<FileId, TgidSet>,
    by_tgid: NumberMap<u32, BTreeSet<FileId>>,
    max_procs: usize,
    pub evicted: u64,
    /// Evicted while still owning sockets.
    pub evicted_owners: u64,
}

impl Owners {
    pub fn new(max_procs: usize) -> Self {
        Self {
            procs: NumberMap::default(),
            lru: BTreeSet::new(),
            by_file: NumberMap::default(),
            by_tgid: NumberMap::default(),
            max_procs,
            evicted: 0,
            evicted_owners: 0,
        }
    }

    pub fn proc_count(&self) -> usize {
        self.procs.len()
    }

    /// Owner tgids of a file, lowest first.
    pub fn of(&self, file: &FileId) -> Vec<u32> {
        self.by_file
            .get(file)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    pub fn is_owner(&self, file: &FileId, tgid: u32) -> bool {
        self.by_file.get(file).is_some_and(|s| s.contains(&tgid))
    }

    pub fn files_of(&self, tgid: u32) -> Vec<FileId> {
        self.by_tgid
            .get(&tgid)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    pub fn proc(&self, tgid: u32) -> Option<&Proc> {
        self.procs.get(&tgid).map(|e| &e.proc)
    }

    pub fn is_exited(&self, tgid: u32) -> bool {
        self.procs.get(&tgid).is_some_and(|e| e.exited_ns.is_some())
    }

    /// Pair count of the owner relation, for bound checks.
    pub fn pair_count(&self) -> usize {
        self.by_file.values().map(TgidSet::len).sum()
    }

    /// Adds `proc` to the owner set of `file`.
    pub fn add(&mut self, file: FileId, proc: &Proc, ts_ns: u64) {
        self.remember(proc, ts_ns);
        self.by_file.entry(file).or_default().insert(proc.tgid);
        let files = self.by_tgid.entry(proc.tgid).or_default();
        // An owner already (of any file) stays in the owners' eviction class, where
        // `remember` just placed it: only a first file moves it.
        let first = files.is_empty();
        files.insert(file);
        if first {
            self.reclass(proc.tgid, None);
        }
    }

    /// Empties the owner set of `file` (the socket was closed or forgotten).
    pub fn forget_file(&mut self, file: &FileId) {
        for tgid in self.by_file.remove(file).unwrap_or_default().0 {
            self.unlink_tgid(tgid, file);
        }
    }

    /// Marks `tgid` exited and drops it from every owner set; returns the files it owned.
    pub fn exited(&mut self, tgid: u32, ts_ns: u64) -> Vec<FileId> {
        let files: Vec<FileId> = self
            .by_tgid
            .remove(&tgid)
            .unwrap_or_default()
            .into_iter()
            .collect();
        for f in &files {
            if let Some(set) = self.by_file.get_mut(f) {
                set.remove(&tgid);
                if set.is_empty() {
                    self.by_file.remove(f);
                }
            }
        }
        if self.procs.contains_key(&tgid) {
            self.reclass(tgid, Some(ts_ns));
        }
        files
    }

    /// Forgets the processes that exited more than `horizon_ns` before `now_ns` (they own
    /// nothing); the oldest exits lead the eviction order, so this stops at the first younger.
    pub fn expire_exited(&mut self, now_ns: u64, horizon_ns: u64) {
        let cutoff = now_ns.saturating_sub(horizon_ns);
        while let Some(&(class, touched_ns, tgid)) = self.lru.first() {
            if class != EXITED || touched_ns >= cutoff {
                break;
            }
            self.lru.pop_first();
            self.procs.remove(&tgid);
        }
    }

    /// A fork: the child inherits every socket the parent holds (only recorded when it holds
    /// some, so fork storms of non-owners cost nothing).
    pub fn fork(&mut self, parent: &Proc, child_tgid: u32, ts_ns: u64) -> Vec<FileId> {
        if child_tgid == parent.tgid {
            return Vec::new();
        }
        let files = self.files_of(parent.tgid);
        if files.is_empty() {
            return files;
        }
        let child = Proc {
            tgid: child_tgid,
            pid: child_tgid,
            ..parent.clone()
        };
        for f in &files {
            self.add(*f, &child, ts_ns);
        }
        files
    }

    /// Records or refreshes a process; evicts the oldest (exited first) when full.
    pub fn remember(&mut self, proc: &Proc, ts_ns: u64) {
        if let Some(e) = self.procs.get_mut(&proc.tgid) {
            let key = (
                class_of(e, &self.by_tgid, proc.tgid),
                e.touched_ns,
                proc.tgid,
            );
            self.lru.remove(&key);
            // A known process keeps its details unless this sighting is more informative
            // (compared first: most sightings repeat them, and a clone allocates).
            if !proc.is_unknown() && e.proc.differs_from(proc) {
                let exe = proc.exe.clone().or_else(|| e.proc.exe.take());
                let runtime = proc.runtime.or(e.proc.runtime);
                e.proc = Proc {
                    exe,
                    runtime,
                    ..proc.clone()
                };
            }
            e.exited_ns = None;
            e.touched_ns = e.touched_ns.max(ts_ns);
            let key = (
                class_of(e, &self.by_tgid, proc.tgid),
                e.touched_ns,
                proc.tgid,
            );
            self.lru.insert(key);
            return;
        }
        if self.procs.len() >= self.max_procs {
            self.evict_one();
        }
        let e = ProcEntry {
            proc: proc.clone(),
            exited_ns: None,
            touched_ns: ts_ns,
        };
        self.lru
            .insert((class_of(&e, &self.by_tgid, proc.tgid), ts_ns, proc.tgid));
        self.procs.insert(proc.tgid, e);
    }

    fn evict_one(&mut self) {
        let Some((_, _, tgid)) = self.lru.pop_first() else {
            return;
        };
        self.procs.remove(&tgid);
        self.evicted += 1;
        if let Some(files) = self.by_tgid.remove(&tgid) {
            self.evicted_owners += 1;
            for f in files {
                if let Some(set) = self.by_file.get_mut(&f) {
                    set.remove(&tgid);
                    if set.is_empty() {
                        self.by_file.remove(&f);
                    }
                }
            }
        }
    }

    fn unlink_tgid(&mut self, tgid: u32, file: &FileId) {
        if let Some(set) = self.by_tgid.get_mut(&tgid) {
            set.remove(file);
            if set.is_empty() {
                self.by_tgid.remove(&tgid);
                self.reclass(tgid, None);
            }
        }
    }

    /// Recomputes a process's eviction key after its ownership or exit state changed.
    fn reclass(&mut self, tgid: u32, exited_ns: Option<u64>) {
        let Some(e) = self.procs.get_mut(&tgid) else {
            return;
        };
        for class in 0..3 {
            self.lru.remove(&(class, e.touched_ns, tgid));
        }
        if let Some(ts) = exited_ns {
            e.exited_ns = Some(ts);
            e.touched_ns = e.touched_ns.max(ts);
        }
        self.lru
            .insert((class_of(e, &self.by_tgid, tgid), e.touched_ns, tgid));
    }
}

#[cfg(test)]
impl Owners {
    /// The eviction order holds each known process once, at the key its state gives.
    pub fn assert_order_consistent(&self) {
        let want: BTreeSet<(u8, u64, u32)> = self
            .procs
            .iter()
            .map(|(&tgid, e)| (class_of(e, &self.by_tgid, tgid), e.touched_ns, tgid))
            .collect();
        assert_eq!(self.lru, want, "owners' eviction order");
    }
}

/// The owner tgids of one file, sorted: most files have one or two, where a vector is
/// cheaper to fill, search and free than a tree.
#[derive(Debug, Default)]
struct TgidSet(Vec<u32>);

impl TgidSet {
    fn insert(&mut self, tgid: u32) {
        if let Err(at) = self.0.binary_search(&tgid) {
            self.0.insert(at, tgid);
        }
    }

    fn remove(&mut self, tgid: &u32) {
        if let Ok(at) = self.0.binary_search(tgid) {
            self.0.remove(at);
        }
    }

    fn contains(&self, tgid: &u32) -> bool {
        self.0.binary_search(tgid).is_ok()
    }

    fn iter(&self) -> std::slice::Iter<'_, u32> {
        self.0.iter()
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The eviction class of exited processes: first to go.
const EXITED: u8 = 0;

fn class_of(e: &ProcEntry, by_tgid: &NumberMap<u32, BTreeSet<FileId>>, tgid: u32) -> u8 {
    if e.exited_ns.is_some() {
        EXITED
    } else if by_tgid.contains_key(&tgid) {
        2
    } else {
        1
    }
}
