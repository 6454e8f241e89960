//! Mount namespace → live processes in it: where a refused connect's path is resolved after
//! its client has exited.
//!
//! The client that hits a stale bind-mounted inode is often a short-lived exec probe, gone by
//! the time its event is completed; the container's main process outlives it and sees the
//! same mounts. The index is learned from events (binds, listens, connects of live
//! processes) and, when a namespace has no live member left, from one walk of `/proc`, at
//! most once per [`RESCAN_EVERY_NS`] of event time. Members are checked against their
//! `/proc/PID/ns/mnt` link on every use, so a reused pid is never trusted.
use std::{
    collections::{HashMap, VecDeque},
    fs,
    path::PathBuf,
};

use crate::scan::procfs::{self, DEFAULT_PROC_ROOT};

/// Namespaces remembered; past it the one learned first is forgotten.
const MAX_NAMESPACES: usize = 1024;
/// Processes remembered per namespace: any live one will do.
const PIDS_PER_NS: usize = 4;
/// A namespace with no live member rescans `/proc` at most this often (event time, ns).
const RESCAN_EVERY_NS: u64 = 1_000_000_000;

/// A bounded map from mount namespace id to some of its processes.
#[derive(Debug)]
pub struct MntnsIndex {
    proc_root: PathBuf,
    pids: HashMap<u32, Vec<u32>>,
    /// Namespaces in the order they were learned, for eviction.
    order: VecDeque<u32>,
    last_rescan_ns: Option<u64>,
}

impl Default for MntnsIndex {
    fn default() -> Self {
        Self::new(PathBuf::from(DEFAULT_PROC_ROOT))
    }
}

impl MntnsIndex {
    pub fn new(proc_root: PathBuf) -> Self {
        Self {
            proc_root,
            pids: HashMap::new(),
            order: VecDeque::new(),
            last_rescan_ns: None,
        }
    }

    /// Remembers that `tgid` lives in `mntns`.
    pub fn learn(&mut self, mntns: u32, tgid: u32) {
        if let Some(pids) = self.pids.get_mut(&mntns) {
            if !pids.contains(&tgid) {
                if pids.len() == PIDS_PER_NS {
                    pids.remove(0);
                }
                pids.push(tgid);
            }
            return;
        }
        if self.order.len() == MAX_NAMESPACES
            && let Some(old) = self.order.pop_front()
        {
            self.pids.remove(&old);
        }
        self.order.push_back(mntns);
        self.pids.insert(mntns, vec![tgid]);
    }

    /// Learns the namespace of a live process from `/proc` (gone: nothing learned).
    pub fn learn_pid(&mut self, tgid: u32) {
        if let Some(ns) = self.ns_of(tgid) {
            self.learn(ns, tgid);
        }
    }

    /// Live processes of `mntns`, each checked against its namespace link; dead ones are
    /// forgotten. With none left, `/proc` is walked again unless it was within the last
    /// [`RESCAN_EVERY_NS`] before `ts_ns`.
    pub fn members(&mut self, mntns: u32, ts_ns: u64) -> Vec<u32> {
        let live = self.live_members(mntns);
        if !live.is_empty() || !self.may_rescan(ts_ns) {
            return live;
        }
        self.rescan();
        self.live_members(mntns)
    }

    fn live_members(&mut self, mntns: u32) -> Vec<u32> {
        let Some(known) = self.pids.get(&mntns).cloned() else {
            return Vec::new();
        };
        let live: Vec<u32> = known
            .into_iter()
            .filter(|&p| self.ns_of(p) == Some(mntns))
            .collect();
        if let Some(pids) = self.pids.get_mut(&mntns) {
            pids.clone_from(&live);
        }
        live
    }

    fn may_rescan(&mut self, ts_ns: u64) -> bool {
        if self
            .last_rescan_ns
            .is_some_and(|last| ts_ns.saturating_sub(last) < RESCAN_EVERY_NS)
        {
            return false;
        }
        self.last_rescan_ns = Some(ts_ns);
        true
    }

    /// One walk of `/proc`: every process's mount namespace.
    fn rescan(&mut self) {
        let Ok(dir) = fs::read_dir(&self.proc_root) else {
            return;
        };
        let tgids = dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok());
        for tgid in tgids.collect::<Vec<_>>() {
            self.learn_pid(tgid);
        }
    }

    /// Is thread `tid` of `tgid` still in `mntns`? A thread may have its own namespace
    /// (after `unshare`), so the thread's link is read, not the process's.
    pub fn thread_in(&self, mntns: u32, tgid: u32, tid: u32) -> bool {
        self.ns_at(format!("{tgid}/task/{tid}")) == Some(mntns)
    }

    /// The mount namespace `/proc/PID/ns/mnt` names, if the process is there.
    fn ns_of(&self, tgid: u32) -> Option<u32> {
        self.ns_at(tgid)
    }

    fn ns_at(&self, pid: impl std::fmt::Display) -> Option<u32> {
        let id = procfs::ns_id(&self.proc_root, pid, "mnt").ok()??;
        u32::try_from(id).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own_ns() -> u32 {
        MntnsIndex::default()
            .ns_of(std::process::id())
            .expect("this process's mount namespace")
    }

    #[test]
    fn a_live_member_is_found_and_a_dead_one_forgotten() {
        let ns = own_ns();
        let mut idx = MntnsIndex::default();
        // Pid u32::MAX never exists (pid_max is at most 2^22).
        idx.learn(ns, u32::MAX);
        idx.learn(ns, std::process::id());
        assert_eq!(idx.members(ns, 0), vec![std::process::id()]);
        assert_eq!(idx.pids[&ns], vec![std::process::id()]);
    }

    #[test]
    fn a_namespace_with_no_member_known_is_found_by_a_rescan_at_most_once_a_second() {
        let ns = own_ns();
        let mut idx = MntnsIndex::default();
        let found = idx.members(ns, 5);
        assert!(!found.is_empty());
        assert!(found.iter().all(|&p| idx.ns_of(p) == Some(ns)), "{found:?}");
        idx.pids.clear();
        idx.order.clear();
        assert!(idx.members(ns, 5 + RESCAN_EVERY_NS - 1).is_empty());
        assert!(!idx.members(ns, 5 + RESCAN_EVERY_NS).is_empty());
    }

    #[test]
    fn a_thread_is_checked_by_its_own_link() {
        let (ns, me) = (own_ns(), std::process::id());
        let idx = MntnsIndex::default();
        assert!(idx.thread_in(ns, me, me));
        assert!(!idx.thread_in(ns.wrapping_add(1), me, me));
        assert!(!idx.thread_in(ns, me, u32::MAX));
    }

    #[test]
    fn the_index_stays_bounded() {
        let mut idx = MntnsIndex::new(PathBuf::from("/nonexistent"));
        for ns in 0..(MAX_NAMESPACES as u32 + 10) {
            for pid in 0..(PIDS_PER_NS as u32 + 3) {
                idx.learn(ns, pid);
            }
        }
        assert_eq!(idx.pids.len(), MAX_NAMESPACES);
        assert_eq!(idx.order.len(), MAX_NAMESPACES);
        assert!(!idx.pids.contains_key(&9) && idx.pids.contains_key(&10));
        assert!(idx.pids.values().all(|p| p.len() == PIDS_PER_NS));
        assert_eq!(idx.pids[&10], vec![3, 4, 5, 6]);
    }
}
