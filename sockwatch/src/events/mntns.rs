//! Mount namespace → live processes in it: where a refused connect's path is resolved after
//! its client has exited.
//!
//! The client that hits a stale bind-mounted inode is often a short-lived exec probe, gone by
//! the time its event is completed; the container's main process outlives it and sees the
//! same mounts. The index is learned from events (binds, listens, connects of live
//! processes) and, when a namespace has no live member left, from one walk of `/proc`, at
//! most once per [`RESCAN_EVERY_NS`] of event time. Members are checked against their
//! `/proc/PID/ns/mnt` link on every use, so a reused pid is never trusted. A process already
//! remembered is not read again until its exit or its check fails: reading the link on every
//! bind and listen was a third of the agent's CPU at 50,000 events/s.
use std::{
    collections::{HashMap, VecDeque},
    fs,
    path::PathBuf,
};

use crate::host::procfs::{self, DEFAULT_PROC_ROOT};

/// Namespaces remembered; past it the one learned first is forgotten.
const MAX_NAMESPACES: usize = 1024;
/// Processes remembered per namespace: any live one will do. A full namespace takes no new
/// one until a check drops a dead one: evicting the first learned (the container's main
/// process, say) for exec probes that exit at once left no live member for a second.
const PIDS_PER_NS: usize = 4;
/// A namespace with no live member rescans `/proc` at most this often (event time, ns).
const RESCAN_EVERY_NS: u64 = 1_000_000_000;

/// A bounded map from mount namespace id to some of its processes.
#[derive(Debug)]
pub struct MntnsIndex {
    proc_root: PathBuf,
    pids: HashMap<u32, Vec<u32>>,
    /// Every remembered process, with its namespace: the reverse of `pids`.
    members_of: HashMap<u32, u32>,
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
            members_of: HashMap::new(),
            order: VecDeque::new(),
            last_rescan_ns: None,
        }
    }

    /// Remembers that `tgid` lives in `mntns`.
    pub fn learn(&mut self, mntns: u32, tgid: u32) {
        if self.members_of.get(&tgid) == Some(&mntns) {
            return;
        }
        self.forget(tgid);
        if !self.pids.contains_key(&mntns) {
            self.make_room();
            self.order.push_back(mntns);
        }
        let pids = self.pids.entry(mntns).or_default();
        if pids.len() == PIDS_PER_NS {
            return;
        }
        pids.push(tgid);
        self.members_of.insert(tgid, mntns);
    }

    /// Forgets the namespace learned first when the index is full.
    fn make_room(&mut self) {
        if self.order.len() < MAX_NAMESPACES {
            return;
        }
        if let Some(old) = self.order.pop_front() {
            for pid in self.pids.remove(&old).unwrap_or_default() {
                self.members_of.remove(&pid);
            }
        }
    }

    /// Learns the namespace of a live process from `/proc` (gone: nothing learned), unless
    /// it is remembered already.
    pub fn learn_pid(&mut self, tgid: u32) {
        if self.members_of.contains_key(&tgid) {
            return;
        }
        if let Some(ns) = self.ns_of(tgid) {
            self.learn(ns, tgid);
        }
    }

    /// Forgets a process (it exited): its pid may be reused in another namespace.
    pub fn forget(&mut self, tgid: u32) {
        if let Some(ns) = self.members_of.remove(&tgid)
            && let Some(pids) = self.pids.get_mut(&ns)
        {
            pids.retain(|&p| p != tgid);
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
        let (live, dead): (Vec<u32>, Vec<u32>) = known
            .into_iter()
            .partition(|&p| self.ns_of(p) == Some(mntns));
        for pid in dead {
            self.forget(pid);
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
                idx.learn(ns, ns * 100 + pid);
            }
        }
        assert_eq!(idx.pids.len(), MAX_NAMESPACES);
        assert_eq!(idx.order.len(), MAX_NAMESPACES);
        assert!(!idx.pids.contains_key(&9) && idx.pids.contains_key(&10));
        assert!(idx.pids.values().all(|p| p.len() == PIDS_PER_NS));
        assert_eq!(idx.pids[&10], vec![1000, 1001, 1002, 1003]);
        assert_eq!(idx.members_of.len(), MAX_NAMESPACES * PIDS_PER_NS);
    }

    /// A fake `/proc` whose process 42 is in mount namespace `ns`.
    fn fake_proc(root: &std::path::Path, ns: u32) {
        let dir = root.join("42/ns");
        fs::create_dir_all(&dir).unwrap();
        let link = dir.join("mnt");
        let _ = fs::remove_file(&link);
        std::os::unix::fs::symlink(format!("mnt:[{ns}]"), link).unwrap();
    }

    #[test]
    fn a_remembered_process_is_read_again_only_after_its_exit() {
        let tmp = tempfile::tempdir().unwrap();
        let mut idx = MntnsIndex::new(tmp.path().to_path_buf());
        fake_proc(tmp.path(), 5);
        idx.learn_pid(42);
        fake_proc(tmp.path(), 6);
        idx.learn_pid(42);
        assert_eq!(idx.members_of[&42], 5, "read once, not on every bind");
        idx.forget(42);
        assert!(idx.pids[&5].is_empty());
        idx.learn_pid(42);
        assert_eq!(idx.members_of[&42], 6);
        assert_eq!(idx.members(6, 0), vec![42]);
        assert!(idx.members(5, 0).is_empty());
    }

    #[test]
    fn a_member_found_moved_is_forgotten() {
        let tmp = tempfile::tempdir().unwrap();
        let mut idx = MntnsIndex::new(tmp.path().to_path_buf());
        fake_proc(tmp.path(), 5);
        idx.learn_pid(42);
        fake_proc(tmp.path(), 6);
        assert!(idx.members(5, 0).is_empty());
        // The check dropped it from namespace 5; the rescan that followed found it in 6.
        assert!(idx.pids[&5].is_empty());
        assert_eq!(idx.members_of[&42], 6);
    }

    #[test]
    fn a_full_namespace_keeps_its_first_members_until_one_is_found_dead() {
        let tmp = tempfile::tempdir().unwrap();
        let mut idx = MntnsIndex::new(tmp.path().to_path_buf());
        fake_proc(tmp.path(), 5); // 42 lives in 5; 1..=4 do not exist
        idx.learn_pid(42);
        for client in 1..=4 {
            idx.learn(5, client);
        }
        assert_eq!(
            idx.pids[&5],
            vec![42, 1, 2, 3],
            "the long-lived member stays"
        );
        assert_eq!(idx.members(5, 0), vec![42]);
        idx.learn(5, 4);
        assert_eq!(
            idx.pids[&5],
            vec![42, 4],
            "room again once the dead were dropped"
        );
    }
}
