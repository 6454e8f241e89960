//! [`Attributor`]: a process's workload, from its cgroup file and the pod index, cached per
//! tgid.
use std::{
    collections::{BTreeMap, HashMap},
    fs::File,
    path::PathBuf,
    time::Duration,
};

use super::{
    cgroup::parse_proc_cgroup,
    pods::{DEFAULT_PODS_LOG_ROOT, PodIndex, is_static_pod_uid, workload_name},
    runtime,
};
use crate::{
    engine::{Runtime, Workload},
    host::{
        lookup::{self, Lookup},
        procfs::{self, DEFAULT_PROC_ROOT},
    },
};

/// Processes remembered by [`Attributor::default`].
pub const DEFAULT_CAPACITY: usize = 16_384;

struct Entry {
    /// Insertion number: the key in `Attributor::order`.
    seq: u64,
    workload: Option<Workload>,
    /// The program and the command name it was read under (an exec changes both).
    program: Option<(String, Program)>,
}

/// A process's program: its executable and the runtime recognised in it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Program {
    pub exe: Option<String>,
    pub runtime: Option<Runtime>,
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
/// miss at most once per refresh interval. Nothing is logged.
pub struct Attributor {
    proc_root: PathBuf,
    capacity: usize,
    entries: HashMap<u32, Entry>,
    /// Insertion order, oldest first: seq → tgid.
    order: BTreeMap<u64, u32>,
    next_seq: u64,
    pods: PodIndex,
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
            capacity: capacity.max(1),
            entries: HashMap::new(),
            order: BTreeMap::new(),
            next_seq: 0,
            pods: PodIndex::new(pods_log_root),
        }
    }

    /// Shortest time between two scans of the pod log root.
    pub fn with_refresh_interval(mut self, interval: Duration) -> Self {
        self.pods.refresh_interval = interval;
        self
    }

    /// The workload of process `tgid`; `None` for a host process or a vanished one.
    pub fn workload(&mut self, tgid: u32) -> Option<Workload> {
        if self.entries.contains_key(&tgid) {
            return self.cached(tgid);
        }
        // Not cached when unreadable (the process is gone, or may be readable later) or
        // when the read did not answer in time.
        let root = self.proc_root.clone();
        let read = move || procfs::read_pid_file(&root, tgid, "cgroup");
        let content = lookup::with_deadline(Lookup::Cgroup, read).ok()?.ok()?;
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

    /// The program of process `tgid`, whose thread reported `comm`: read once per program
    /// the process runs (a changed command name means an exec, so it is read again). Nothing
    /// is known of a vanished process or an unreadable link.
    pub fn program(&mut self, tgid: u32, comm: &str) -> Program {
        if let Some((seen, program)) = self.entries.get(&tgid).and_then(|e| e.program.as_ref())
            && seen == comm
        {
            return program.clone();
        }
        let link = procfs::pid_path(&self.proc_root, tgid, "exe");
        // A read that did not answer in time is not remembered: the next bind tries again.
        let Ok(program) = lookup::with_deadline(Lookup::Exe, move || {
            let exe = procfs::read_link_bytes(&link).ok().map(|b| exe_name(&b));
            let runtime = exe
                .as_deref()
                .and_then(|name| runtime::recognise(name, || File::open(&link)));
            Program { exe, runtime }
        }) else {
            return Program::default();
        };
        if let Some(entry) = self.entries.get_mut(&tgid) {
            entry.program = Some((comm.to_owned(), program.clone()));
        }
        program
    }

    /// Drops what is known of `tgid` (on its exit).
    pub fn forget(&mut self, tgid: u32) {
        if let Some(entry) = self.entries.remove(&tgid) {
            self.order.remove(&entry.seq);
        }
    }

    /// The cached answer for `tgid`, completed with its pod if that has appeared since.
    fn cached(&mut self, tgid: u32) -> Option<Workload> {
        let mut workload = self.entries.get(&tgid)?.workload.clone();
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
        workload
    }

    fn insert(&mut self, tgid: u32, workload: Option<Workload>) {
        while self.entries.len() >= self.capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.order.insert(seq, tgid);
        self.entries.insert(
            tgid,
            Entry {
                seq,
                workload,
                program: None,
            },
        );
    }

    /// Sets namespace, pod name and owner from the pod log root, if the pod is there.
    fn fill_pod(&mut self, w: &mut Workload) {
        let Some(pod) = w.pod_uid.as_deref().and_then(|uid| self.pods.get(uid)) else {
            return;
        };
        w.namespace = Some(pod.namespace.clone());
        w.pod_name = Some(pod.pod_name.clone());
        // A static pod's name is `<manifest name>-<node name>`: no controller behind it.
        w.workload = (!is_static_pod_uid(&pod.pod_uid))
            .then(|| workload_name(&pod.pod_name).map(str::to_owned))
            .flatten();
    }
}

/// An executable's path as `/proc/PID/exe` reads, without the ` (deleted)` the kernel adds
/// once the file was replaced (a package upgrade under a running daemon).
fn exe_name(link: &[u8]) -> String {
    let link = link.strip_suffix(b" (deleted)").unwrap_or(link);
    String::from_utf8_lossy(link).into_owned()
}
