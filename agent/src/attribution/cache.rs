//! [`Attributor`]: a process's workload, from its cgroup file and the pod index, cached per
//! tgid.
use std::{
    collections::{BTreeMap, HashMap},
    fs,
    path::PathBuf,
    time::{Duration, Instant},
};

use serde::Serialize;

use super::{
    cgroup::parse_proc_cgroup,
    pods::{MAX_POD_DIRS, PodRef, is_static_pod_uid, parse_pod_log_dir, workload_name},
};
use crate::{engine::Workload, scan::procfs};

/// Where the processes are.
pub const DEFAULT_PROC_ROOT: &str = "/proc";
/// Where kubelet keeps one directory per pod.
pub const DEFAULT_PODS_LOG_ROOT: &str = "/var/log/pods";
/// Processes remembered by [`Attributor::default`].
pub const DEFAULT_CAPACITY: usize = 16_384;
/// Shortest time between two scans of the pod log root.
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AttributionStats {
    /// Answered from the cache.
    pub hits: u64,
    /// Not cached: `/proc/<tgid>/cgroup` was read (or tried).
    pub misses: u64,
    /// The process was gone when its cgroup file was read (not cached).
    pub vanished: u64,
    /// The cgroup file could not be read for another reason (not cached).
    pub unreadable: u64,
    /// Entries dropped, oldest first, to stay within capacity.
    pub evictions: u64,
    /// Scans of the pod log root.
    pub index_refreshes: u64,
    /// Pod lookups that found no log directory for the uid, even after any refresh then
    /// permitted (the directory is not there yet, or the pod log root is not mounted).
    pub pods_unresolved: u64,
    /// Processes in the cache now.
    pub cached: usize,
    /// Pods in the index now.
    pub pods_indexed: usize,
}

struct Entry {
    /// Insertion number: the key in `Attributor::order`.
    seq: u64,
    workload: Option<Workload>,
}

/// Attributes processes to workloads, caching one answer per tgid.
///
/// A cached answer lasts until [`Self::forget`] (call it on exit) or eviction: a process is
/// not expected to change cgroup after its first event (exec does not move it). If an exit is
/// missed and the tgid is reused, the new process gets the old answer until evicted. An answer
/// with a pod uid but no pod name (the log directory was not there yet) is completed on a
/// later call.
///
/// The pod log root is scanned lazily: on the first pod uid not in the index, then again on a
/// miss at most once per refresh interval. Nothing is logged; see [`Self::stats`].
pub struct Attributor {
    proc_root: PathBuf,
    pods_log_root: PathBuf,
    capacity: usize,
    refresh_interval: Duration,
    entries: HashMap<u32, Entry>,
    /// Insertion order, oldest first: seq → tgid.
    order: BTreeMap<u64, u32>,
    next_seq: u64,
    pods: HashMap<String, PodRef>,
    indexed_at: Option<Instant>,
    stats: AttributionStats,
}

impl Default for Attributor {
    fn default() -> Self {
        Self::new(
            DEFAULT_PROC_ROOT.into(),
            DEFAULT_PODS_LOG_ROOT.into(),
            DEFAULT_CAPACITY,
        )
    }
}

impl Attributor {
    /// `capacity` is the number of processes remembered (at least 1).
    pub fn new(proc_root: PathBuf, pods_log_root: PathBuf, capacity: usize) -> Self {
        Self {
            proc_root,
            pods_log_root,
            capacity: capacity.max(1),
            refresh_interval: DEFAULT_REFRESH_INTERVAL,
            entries: HashMap::new(),
            order: BTreeMap::new(),
            next_seq: 0,
            pods: HashMap::new(),
            indexed_at: None,
            stats: AttributionStats::default(),
        }
    }

    /// Shortest time between two scans of the pod log root.
    pub fn with_refresh_interval(mut self, interval: Duration) -> Self {
        self.refresh_interval = interval;
        self
    }

    /// The workload of process `tgid`; `None` for a host process or a vanished one.
    pub fn workload(&mut self, tgid: u32) -> Option<Workload> {
        if let Some(entry) = self.entries.get(&tgid) {
            self.stats.hits += 1;
            let mut workload = entry.workload.clone();
            if let Some(w) = workload.as_mut()
                && w.pod_uid.is_some()
                && w.pod_name.is_none()
            {
                self.fill_pod(w);
                if w.pod_name.is_some()
                    && let Some(entry) = self.entries.get_mut(&tgid)
                {
                    entry.workload = Some(w.clone());
                }
            }
            return workload;
        }
        self.stats.misses += 1;
        let content = match procfs::read_pid_file(&self.proc_root, tgid, "cgroup") {
            Ok(c) => c,
            Err(e) if procfs::is_gone(&e) => {
                self.stats.vanished += 1;
                return None;
            }
            Err(_) => {
                self.stats.unreadable += 1;
                return None;
            }
        };
        let workload = parse_proc_cgroup(&content).map(|info| {
            let mut w = Workload {
                container_id: info.container_id,
                pod_uid: info.pod_uid,
                ..Workload::default()
            };
            self.fill_pod(&mut w);
            w
        });
        self.insert(tgid, workload.clone());
        workload
    }

    /// Drops what is known of `tgid` (on its exit).
    pub fn forget(&mut self, tgid: u32) {
        if let Some(entry) = self.entries.remove(&tgid) {
            self.order.remove(&entry.seq);
        }
    }

    pub fn stats(&self) -> AttributionStats {
        AttributionStats {
            cached: self.entries.len(),
            pods_indexed: self.pods.len(),
            ..self.stats
        }
    }

    fn insert(&mut self, tgid: u32, workload: Option<Workload>) {
        while self.entries.len() >= self.capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
            self.stats.evictions += 1;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.order.insert(seq, tgid);
        self.entries.insert(tgid, Entry { seq, workload });
    }

    /// Sets namespace, pod name and owner from the pod log root, if the pod is there.
    fn fill_pod(&mut self, w: &mut Workload) {
        let Some(uid) = w.pod_uid.as_deref() else {
            return;
        };
        if !self.pods.contains_key(uid) {
            let due = self
                .indexed_at
                .is_none_or(|t| t.elapsed() >= self.refresh_interval);
            if due {
                self.reindex();
            }
        }
        let Some(pod) = self.pods.get(uid) else {
            self.stats.pods_unresolved += 1;
            return;
        };
        w.namespace = Some(pod.namespace.clone());
        w.pod_name = Some(pod.pod_name.clone());
        // A static pod's name is `<manifest name>-<node name>`: no controller behind it.
        w.workload = (!is_static_pod_uid(&pod.pod_uid))
            .then(|| workload_name(&pod.pod_name).map(str::to_owned))
            .flatten();
    }

    fn reindex(&mut self) {
        self.indexed_at = Some(Instant::now());
        self.stats.index_refreshes += 1;
        self.pods.clear();
        // Absent on a host that is not a Kubernetes node: an empty index, not an error.
        let Ok(dir) = fs::read_dir(&self.pods_log_root) else {
            return;
        };
        for entry in dir.flatten().take(MAX_POD_DIRS) {
            if let Some(pod) = entry.file_name().to_str().and_then(parse_pod_log_dir) {
                self.pods.insert(pod.pod_uid.clone(), pod);
            }
        }
    }
}
