//! Which workload a process runs in, from node-local sources only: no API server, no CRI.
//!
//! - `/proc/<tgid>/cgroup` gives the container id, the pod uid and the QoS class, for the
//!   layouts kubelet and the usual runtimes create (systemd and cgroupfs drivers; containerd,
//!   CRI-O, Docker; Docker, nerdctl and Podman outside Kubernetes). See [`parse_cgroup_path`].
//! - kubelet's pod log directories, `/var/log/pods/<namespace>_<pod-name>_<pod-uid>/`, give the
//!   namespace and pod name of a pod uid (see [`parse_pod_log_dir`]), and the pod name gives a
//!   best guess of its owner's name (see [`workload_name`]).
//!
//! [`Attributor`] puts the two together behind a bounded per-tgid cache, cheap enough to call
//! for every event. A plain host process has no workload: `None`, never a guess.
//!
//! Cgroup paths are read as the agent's cgroup namespace shows them: an agent in a private
//! cgroup namespace sees other pods' paths as `/../../<...>`, which parses as long as the pod
//! and container components are below the `..` (the systemd layout always names them in full).
use std::{
    collections::{BTreeMap, HashMap},
    fs, io,
    ops::RangeInclusive,
    path::PathBuf,
    time::{Duration, Instant},
};

use serde::Serialize;

use crate::engine::Workload;

/// Where the processes are.
pub const DEFAULT_PROC_ROOT: &str = "/proc";
/// Where kubelet keeps one directory per pod.
pub const DEFAULT_PODS_LOG_ROOT: &str = "/var/log/pods";
/// Processes remembered by [`Attributor::default`].
pub const DEFAULT_CAPACITY: usize = 16_384;
/// Shortest time between two scans of the pod log root.
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(5);
/// Pod log directories read per scan, at most: a bound, not an expected size.
pub const MAX_POD_DIRS: usize = 65_536;

/// A pod's Kubernetes QoS class, as its cgroup placement tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

/// What a cgroup path says. At least one of `container_id` and `pod_uid` is set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupInfo {
    /// Full 64-hex runtime id, as `crictl ps` / `docker ps --no-trunc` print it.
    pub container_id: Option<String>,
    /// With dashes, as the API server shows it (the systemd driver writes `_` instead).
    pub pod_uid: Option<String>,
    /// None outside Kubernetes, and for a cgroupfs path whose QoS level is hidden above the
    /// agent's cgroup namespace root.
    pub qos: Option<QosClass>,
}

/// Prefixes runtimes put before the container id in a cgroup name: containerd's CRI plugin,
/// CRI-O, Docker (and dockershim / cri-dockerd), Podman, nerdctl.
const RUNTIME_PREFIXES: [&str; 5] = ["cri-containerd-", "crio-", "docker-", "libpod-", "nerdctl-"];

/// Parses the contents of `/proc/<pid>/cgroup`.
///
/// The cgroup v2 line (`0::<path>`) is tried first; if it says nothing (a hybrid host, where
/// the v2 hierarchy may hold nothing), the v1 lines (`<id>:<controllers>:<path>`) in file
/// order. Unknown layouts, garbage and empty input give `None`.
pub fn parse_proc_cgroup(content: &str) -> Option<CgroupInfo> {
    let v2 = content.lines().filter_map(|l| l.strip_prefix("0::"));
    let v1 = content.lines().filter_map(|l| {
        let mut fields = l.splitn(3, ':');
        let (id, _controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        (id != "0").then_some(path)
    });
    v2.chain(v1).find_map(parse_cgroup_path)
}

/// Parses one cgroup path.
///
/// Components are matched one by one, so the layouts are found at any depth (under kind's
/// `kubelet.slice`, inside a Docker container, below a cgroup namespace's `..`):
///
/// - pod, systemd driver: `kubepods-pod<uid>.slice` (Guaranteed),
///   `kubepods-burstable-pod<uid>.slice`, `kubepods-besteffort-pod<uid>.slice`, with `_` for
///   the uid's dashes; kind's `kubelet-kubepods-...` too;
/// - pod, cgroupfs driver: `pod<uid>`, QoS from its parent (`kubepods` Guaranteed, `burstable`,
///   `besteffort`);
/// - container: `[<runtime>-]<64 lowercase hex>[.scope]`, the runtime one of containerd's CRI
///   plugin, CRI-O, Docker, Podman, nerdctl.
///
/// A pod uid is a UUID or, for a static pod, 32 hex digits (kubelet's hash of the manifest).
/// Inside a pod the container is the first container component below the pod (what is below
/// it is the container's own business, e.g. Docker-in-Docker); outside a pod it is the
/// innermost one. A process in a pod but in no container (CRI-O's `crio-conmon-<id>.scope`)
/// gets the pod alone.
pub fn parse_cgroup_path(path: &str) -> Option<CgroupInfo> {
    let path = path.trim_end();
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    if !path.starts_with('/') {
        return None;
    }
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let mut pod = None;
    for (i, comp) in comps.iter().enumerate() {
        let parent = i.checked_sub(1).map_or("", |p| comps[p]);
        if let Some((uid, qos)) = systemd_pod(comp).or_else(|| cgroupfs_pod(comp, parent)) {
            pod = Some((i, uid, qos));
        }
    }
    let (pod_uid, qos, container_id) = match pod {
        Some((i, uid, qos)) => {
            let container = comps[i + 1..].iter().find_map(|c| container_id(c));
            (Some(uid), qos, container)
        }
        None => (None, None, comps.iter().rev().find_map(|c| container_id(c))),
    };
    (pod_uid.is_some() || container_id.is_some()).then_some(CgroupInfo {
        container_id,
        pod_uid,
        qos,
    })
}

/// `[<prefix>-]kubepods[-<qos>]-pod<uid with _>.slice`.
fn systemd_pod(comp: &str) -> Option<(String, Option<QosClass>)> {
    let (prefix, raw) = comp.strip_suffix(".slice")?.rsplit_once("-pod")?;
    let (base, qos) = if let Some(b) = prefix.strip_suffix("-burstable") {
        (b, QosClass::Burstable)
    } else if let Some(b) = prefix.strip_suffix("-besteffort") {
        (b, QosClass::BestEffort)
    } else {
        (prefix, QosClass::Guaranteed)
    };
    if base != "kubepods" && !base.ends_with("-kubepods") {
        return None;
    }
    Some((pod_uid(&raw.replace('_', "-"))?, Some(qos)))
}

/// `pod<uid>`, the QoS class from the parent component.
fn cgroupfs_pod(comp: &str, parent: &str) -> Option<(String, Option<QosClass>)> {
    let uid = pod_uid(comp.strip_prefix("pod")?)?;
    let qos = match parent {
        "kubepods" => Some(QosClass::Guaranteed),
        "burstable" => Some(QosClass::Burstable),
        "besteffort" => Some(QosClass::BestEffort),
        _ => None,
    };
    Some((uid, qos))
}

/// A UUID (`8-4-4-4-12` hex) or a static pod's 32-hex hash.
fn pod_uid(s: &str) -> Option<String> {
    (is_uuid(s) || is_static_pod_uid(s)).then(|| s.to_owned())
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Kubelet names a pod from a manifest file or URL by the MD5 of its content.
fn is_static_pod_uid(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|c| c.is_ascii_hexdigit())
}

fn container_id(comp: &str) -> Option<String> {
    let stem = comp.strip_suffix(".scope").unwrap_or(comp);
    let id = RUNTIME_PREFIXES
        .iter()
        .find_map(|p| stem.strip_prefix(p))
        .unwrap_or(stem);
    let lower_hex = |c: u8| c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
    (id.len() == 64 && id.bytes().all(lower_hex)).then(|| id.to_owned())
}

/// A pod as its kubelet log directory names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    pub namespace: String,
    pub pod_name: String,
    pub pod_uid: String,
}

/// Parses a directory name under `/var/log/pods`: `<namespace>_<pod-name>_<pod-uid>`.
///
/// Neither names nor uids contain `_` (DNS labels and subdomains), so the split is exact. The
/// pre-1.14 layout (`/var/log/pods/<uid>/`) has no names and gives `None`.
pub fn parse_pod_log_dir(name: &str) -> Option<PodRef> {
    let mut parts = name.split('_');
    let (namespace, pod_name, uid) = (parts.next()?, parts.next()?, parts.next()?);
    let dns = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.')
    };
    if parts.next().is_some() || !dns(namespace) || !dns(pod_name) {
        return None;
    }
    Some(PodRef {
        namespace: namespace.to_owned(),
        pod_name: pod_name.to_owned(),
        pod_uid: pod_uid(uid)?,
    })
}

/// The characters Kubernetes draws generated name suffixes and pod-template hashes from
/// (`k8s.io/apimachinery/pkg/util/rand`: no vowels, no `0`, `1`, `3`).
const GENERATED_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn generated(s: &str, len: RangeInclusive<usize>) -> bool {
    len.contains(&s.len()) && s.bytes().all(|c| GENERATED_ALPHABET.contains(&c))
}

fn ordinal(s: &str) -> bool {
    (1..=9).contains(&s.len())
        && s.bytes().all(|c| c.is_ascii_digit())
        && (s == "0" || !s.starts_with('0'))
}

/// A heuristic: the name of the controller that most likely created a pod, from the pod's
/// name alone, with no API server to ask.
///
/// - Deployment: `<name>-<pod-template-hash, 8 to 10>-<5>` gives `<name>`;
/// - DaemonSet (and Job): `<name>-<5>` gives `<name>`;
/// - StatefulSet: `<name>-<ordinal>` gives `<name>`.
///
/// Generated parts must use Kubernetes' generated-name alphabet, so `multus-abcde` (vowels)
/// is not taken for a generated name. Known misses: a hash shorter than 8 characters (about
/// 0.2% of Deployments) yields the ReplicaSet's name; a pod name Kubernetes truncated (owner
/// names longer than 57 characters) yields the truncated name; a hand-named pod that happens
/// to look generated yields a wrong owner. `None` when nothing looks generated.
pub fn workload_name(pod_name: &str) -> Option<&str> {
    let (rest, last) = pod_name.rsplit_once('-')?;
    let owner = if generated(last, 5..=5) {
        match rest.rsplit_once('-') {
            Some((base, hash)) if generated(hash, 8..=10) && !base.is_empty() => base,
            _ => rest,
        }
    } else if ordinal(last) {
        rest
    } else {
        return None;
    };
    (!owner.is_empty()).then_some(owner)
}

/// Counters of an [`Attributor`], for self-health metrics.
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
        let path = self.proc_root.join(tgid.to_string()).join("cgroup");
        let content = match fs::read_to_string(path) {
            Ok(c) => c,
            Err(e) if vanished(&e) => {
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

/// The process exited before or while its cgroup file was read.
fn vanished(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const UID: &str = "0e5f1c2a-7b3d-4c8e-9f10-2a3b4c5d6e7f";
    const UID_SYSTEMD: &str = "0e5f1c2a_7b3d_4c8e_9f10_2a3b4c5d6e7f";
    const CID: &str = "c6d003276ac8c9e54528c189b9516d81bb78fc0035f09bd80004b3b8ace0e10d";
    const CID2: &str = "d9298a10d1b0735837dc4bd85dac641b0f3cef27a47e5d53a54f2f3f5b2fcffa";
    const STATIC_UID: &str = "a226e9fbdfc1c8dd7e7fef4d333f86ed";

    fn info(container: Option<&str>, pod: Option<&str>, qos: Option<QosClass>) -> CgroupInfo {
        CgroupInfo {
            container_id: container.map(str::to_owned),
            pod_uid: pod.map(str::to_owned),
            qos,
        }
    }

    fn parse(content: &str) -> Option<CgroupInfo> {
        parse_proc_cgroup(content)
    }

    #[test]
    fn systemd_containerd_burstable() {
        let f = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope\n"
        );
        assert_eq!(
            parse(&f),
            Some(info(Some(CID), Some(UID), Some(QosClass::Burstable)))
        );
    }

    #[test]
    fn systemd_crio_besteffort() {
        let f = format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_SYSTEMD}.slice/crio-{CID}.scope\n"
        );
        assert_eq!(
            parse(&f),
            Some(info(Some(CID), Some(UID), Some(QosClass::BestEffort)))
        );
    }

    #[test]
    fn systemd_docker_guaranteed() {
        let f = format!("0::/kubepods.slice/kubepods-pod{UID_SYSTEMD}.slice/docker-{CID}.scope\n");
        assert_eq!(
            parse(&f),
            Some(info(Some(CID), Some(UID), Some(QosClass::Guaranteed)))
        );
    }

    #[test]
    fn systemd_v1_all_controllers() {
        let p = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope"
        );
        let f = format!(
            "12:hugetlb:{p}\n11:pids:{p}\n10:memory:{p}\n9:cpu,cpuacct:{p}\n8:devices:{p}\n\
             7:net_cls,net_prio:{p}\n6:blkio:{p}\n5:cpuset:{p}\n4:freezer:{p}\n\
             3:perf_event:{p}\n2:rdma:/\n1:name=systemd:{p}\n0::/\n"
        );
        assert_eq!(
            parse(&f),
            Some(info(Some(CID), Some(UID), Some(QosClass::Burstable)))
        );
    }

    #[test]
    fn cgroupfs_burstable_v1() {
        let p = format!("/kubepods/burstable/pod{UID}/{CID}");
        let f = format!(
            "11:memory:{p}\n10:cpu,cpuacct:{p}\n9:pids:{p}\n8:devices:{p}\n1:name=systemd:{p}\n"
        );
        assert_eq!(
            parse(&f),
            Some(info(Some(CID), Some(UID), Some(QosClass::Burstable)))
        );
    }

    #[test]
    fn cgroupfs_guaranteed_and_besteffort_v2() {
        assert_eq!(
            parse(&format!("0::/kubepods/pod{UID}/{CID}\n")),
            Some(info(Some(CID), Some(UID), Some(QosClass::Guaranteed)))
        );
        assert_eq!(
            parse(&format!("0::/kubepods/besteffort/pod{UID}/crio-{CID}\n")),
            Some(info(Some(CID), Some(UID), Some(QosClass::BestEffort)))
        );
    }

    #[test]
    fn docker_outside_kubernetes() {
        assert_eq!(
            parse(&format!("0::/system.slice/docker-{CID}.scope\n")),
            Some(info(Some(CID), None, None))
        );
        let f = format!("12:memory:/docker/{CID}\n11:pids:/docker/{CID}\n0::/\n");
        assert_eq!(parse(&f), Some(info(Some(CID), None, None)));
        assert_eq!(
            parse(&format!("0::/machine.slice/libpod-{CID}.scope/container\n")),
            Some(info(Some(CID), None, None))
        );
    }

    #[test]
    fn kind_node_under_kubelet_slice() {
        let f = format!(
            "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope\n"
        );
        assert_eq!(
            parse(&f),
            Some(info(Some(CID), Some(UID), Some(QosClass::BestEffort)))
        );
    }

    #[test]
    fn kind_node_inside_docker_takes_the_pod_container() {
        let f = format!("0::/docker/{CID2}/kubepods/burstable/pod{UID}/{CID}\n");
        assert_eq!(
            parse(&f),
            Some(info(Some(CID), Some(UID), Some(QosClass::Burstable)))
        );
    }

    #[test]
    fn docker_in_docker_takes_the_innermost() {
        let f = format!("0::/docker/{CID2}/docker/{CID}\n");
        assert_eq!(parse(&f), Some(info(Some(CID), None, None)));
    }

    #[test]
    fn nested_cgroups_inside_a_pod_container_keep_the_pod_container() {
        let f = format!(
            "0::/kubepods.slice/kubepods-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope/docker/{CID2}\n"
        );
        assert_eq!(
            parse(&f),
            Some(info(Some(CID), Some(UID), Some(QosClass::Guaranteed)))
        );
        let f = format!(
            "0::/kubepods.slice/kubepods-pod{UID_SYSTEMD}.slice/crio-{CID}.scope/container\n"
        );
        assert_eq!(
            parse(&f),
            Some(info(Some(CID), Some(UID), Some(QosClass::Guaranteed)))
        );
    }

    #[test]
    fn relative_to_a_private_cgroup_namespace() {
        let f = format!(
            "0::/../../kubepods-besteffort-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope\n"
        );
        assert_eq!(
            parse(&f),
            Some(info(Some(CID), Some(UID), Some(QosClass::BestEffort)))
        );
        // cgroupfs: the QoS level is above the namespace root.
        assert_eq!(
            parse(&format!("0::/../../pod{UID}/{CID}\n")),
            Some(info(Some(CID), Some(UID), None))
        );
    }

    #[test]
    fn static_pod_uid() {
        let f = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC_UID}.slice/cri-containerd-{CID}.scope\n"
        );
        assert_eq!(
            parse(&f),
            Some(info(Some(CID), Some(STATIC_UID), Some(QosClass::Burstable)))
        );
    }

    #[test]
    fn crio_conmon_is_the_pod_without_a_container() {
        let f = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_SYSTEMD}.slice/crio-conmon-{CID}.scope\n"
        );
        assert_eq!(
            parse(&f),
            Some(info(None, Some(UID), Some(QosClass::Burstable)))
        );
    }

    #[test]
    fn deleted_cgroup() {
        assert_eq!(
            parse(&format!("0::/system.slice/docker-{CID}.scope (deleted)\n")),
            Some(info(Some(CID), None, None))
        );
    }

    #[test]
    fn host_processes_and_garbage_are_none() {
        let short = &CID[..63];
        let upper = CID.to_ascii_uppercase();
        for f in [
            String::new(),
            "\n\n".into(),
            "garbage".into(),
            "0::/\n".into(),
            "0::/init.scope\n".into(),
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/tmux.scope\n".into(),
            "0::/system.slice/containerd.service\n".into(),
            "0::/system.slice/kubelet.service\n".into(),
            "0::/kubepods.slice/kubepods-burstable.slice\n".into(),
            "0::/kubepods/burstable\n".into(),
            // This machine's kind of file: a 32-hex name that is no pod and no container.
            "4:memory:/process_api/52f88530308fd9ba822551530d8e3be1\n1:cpu:/\n0::/\n".into(),
            format!("0::/system.slice/docker-{short}.scope\n"),
            format!("0::/system.slice/docker-{upper}.scope\n"),
            format!("0::/system.slice/docker-{CID}x.scope\n"),
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podxyz.slice\n".into(),
            format!("0::/kubepods.slice/notkubepods-pod{UID_SYSTEMD}.slice\n"),
            format!("0::/kubepods/burstable/pod{}/x\n", &UID[..35]),
            format!("0::/kubepods/burstable/pod{UID_SYSTEMD}\n"),
            format!("0::kubepods/pod{UID}/{CID}\n"),
            format!("12-memory-/docker/{CID}\n"),
            "0::\0\u{fffd}/\u{1f980}/pod/..\n".into(),
        ] {
            assert_eq!(parse(&f), None, "{f:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC*") {
            let _ = parse_proc_cgroup(&s);
            let _ = parse_pod_log_dir(&s);
            let _ = workload_name(&s);
        }

        #[test]
        fn any_path_component_soup_never_panics(
            comps in proptest::collection::vec(
                "(kubepods|burstable|besteffort|\\.\\.|pod[0-9a-f_-]{0,40}|[a-z-]{0,20}\\.slice|[a-z-]{0,16}[0-9a-f]{60,66}(\\.scope)?)",
                0..8,
            )
        ) {
            let _ = parse_cgroup_path(&format!("/{}", comps.join("/")));
        }
    }

    #[test]
    fn pod_log_dirs() {
        assert_eq!(
            parse_pod_log_dir(&format!("kube-system_kube-multus-ds-x7k2p_{UID}")),
            Some(PodRef {
                namespace: "kube-system".into(),
                pod_name: "kube-multus-ds-x7k2p".into(),
                pod_uid: UID.into(),
            })
        );
        assert_eq!(
            parse_pod_log_dir(&format!("kube-system_etcd-node1.example.com_{STATIC_UID}"))
                .map(|p| p.pod_name),
            Some("etcd-node1.example.com".into())
        );
        for bad in [
            String::new(),
            UID.into(),
            format!("kube-system_{UID}"),
            format!("_multus_{UID}"),
            format!("kube-system__{UID}"),
            format!("kube-system_multus_{UID}_x"),
            format!("Kube-System_multus_{UID}"),
            "kube-system_multus_not-a-uid".into(),
            format!("kube-system_multus_{UID_SYSTEMD}"),
        ] {
            assert_eq!(parse_pod_log_dir(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn workload_names() {
        for (pod, owner) in [
            ("kube-multus-ds-x7k2p", Some("kube-multus-ds")),
            ("multus-x7k2p", Some("multus")),
            ("coredns-787d4945fb-2jvmz", Some("coredns")),
            ("my-api-5d78c9869-bq2xw", Some("my-api")),
            ("web-0", Some("web")),
            ("db-cluster-12", Some("db-cluster")),
            // A 7-character hash is taken for a DaemonSet suffix: the ReplicaSet's name.
            ("my-api-5d78c98-bq2xw", Some("my-api-5d78c98")),
            // Vowels: no generated suffix has them.
            ("multus-abcde", None),
            ("kube-apiserver-node1", None),
            ("web-007", None),
            ("nginx", None),
            ("-x7k2p", None),
            ("-0", None),
            ("", None),
        ] {
            assert_eq!(workload_name(pod), owner, "{pod}");
        }
    }

    /// A proc root and a pod log root in a temp dir.
    struct Node {
        dir: tempfile::TempDir,
    }

    impl Node {
        fn new() -> Self {
            let dir = tempfile::tempdir().expect("temp dir");
            fs::create_dir(dir.path().join("proc")).expect("proc root");
            fs::create_dir(dir.path().join("pods")).expect("pods root");
            Self { dir }
        }

        fn proc_root(&self) -> PathBuf {
            self.dir.path().join("proc")
        }

        fn pods_root(&self) -> PathBuf {
            self.dir.path().join("pods")
        }

        fn process(&self, tgid: u32, cgroup: &str) {
            let d = self.proc_root().join(tgid.to_string());
            fs::create_dir_all(&d).expect("proc dir");
            fs::write(d.join("cgroup"), cgroup).expect("cgroup file");
        }

        fn exit(&self, tgid: u32) {
            fs::remove_dir_all(self.proc_root().join(tgid.to_string())).expect("remove proc dir");
        }

        fn pod(&self, name: &str) {
            let d = self.pods_root().join(name);
            fs::create_dir_all(d.join("kube-multus")).expect("pod log dir");
            fs::write(d.join("kube-multus/0.log"), "").expect("log file");
        }

        fn attributor(&self, capacity: usize) -> Attributor {
            Attributor::new(self.proc_root(), self.pods_root(), capacity)
        }
    }

    fn multus_cgroup() -> String {
        format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope\n"
        )
    }

    fn multus() -> Workload {
        Workload {
            container_id: Some(CID.into()),
            pod_uid: Some(UID.into()),
            pod_name: Some("multus-x7k2p".into()),
            namespace: Some("kube-system".into()),
            workload: Some("multus".into()),
        }
    }

    #[test]
    fn attributes_a_pod_process_and_caches_it() {
        let node = Node::new();
        node.process(123, &multus_cgroup());
        node.pod(&format!("kube-system_multus-x7k2p_{UID}"));
        node.pod(&format!(
            "default_web-0_{}",
            "11111111-2222-3333-4444-555555555555"
        ));
        fs::write(node.pods_root().join("stray-file"), "").expect("stray file");
        let mut a = node.attributor(8);

        assert_eq!(a.workload(123), Some(multus()));
        node.exit(123);
        assert_eq!(a.workload(123), Some(multus()), "answered from the cache");
        let s = a.stats();
        assert_eq!(
            (
                s.misses,
                s.hits,
                s.cached,
                s.index_refreshes,
                s.pods_indexed
            ),
            (1, 1, 1, 1, 2)
        );

        a.forget(123);
        assert_eq!(a.workload(123), None, "gone after forget and exit");
        let s = a.stats();
        assert_eq!((s.vanished, s.cached, s.pods_unresolved), (1, 0, 0));
    }

    #[test]
    fn host_and_docker_processes_never_touch_the_pod_index() {
        let node = Node::new();
        node.process(1, "0::/init.scope\n");
        node.process(2, &format!("0::/system.slice/docker-{CID}.scope\n"));
        let mut a = node.attributor(8);

        assert_eq!(a.workload(1), None);
        assert_eq!(
            a.workload(2),
            Some(Workload {
                container_id: Some(CID.into()),
                ..Workload::default()
            })
        );
        assert_eq!(a.workload(1), None, "a host process is cached too");
        let s = a.stats();
        assert_eq!(
            (s.misses, s.hits, s.cached, s.index_refreshes),
            (2, 1, 2, 0)
        );
    }

    #[test]
    fn vanished_process_is_none_and_not_cached() {
        let node = Node::new();
        let mut a = node.attributor(8);
        assert_eq!(a.workload(999), None);
        assert_eq!(a.workload(999), None);
        let s = a.stats();
        assert_eq!((s.misses, s.vanished, s.unreadable, s.cached), (2, 2, 0, 0));
    }

    #[test]
    fn missing_pods_log_root_is_an_empty_index() {
        let node = Node::new();
        node.process(123, &multus_cgroup());
        let mut a = Attributor::new(node.proc_root(), node.dir.path().join("absent"), 8);
        assert_eq!(
            a.workload(123),
            Some(Workload {
                container_id: Some(CID.into()),
                pod_uid: Some(UID.into()),
                ..Workload::default()
            })
        );
        assert_eq!(a.stats().pods_unresolved, 1);
    }

    #[test]
    fn a_pod_dir_that_appears_later_completes_the_cached_answer() {
        let node = Node::new();
        node.process(123, &multus_cgroup());
        let mut a = node.attributor(8).with_refresh_interval(Duration::ZERO);
        assert_eq!(a.workload(123).and_then(|w| w.pod_name), None);
        node.pod(&format!("kube-system_multus-x7k2p_{UID}"));
        assert_eq!(a.workload(123), Some(multus()));
        assert_eq!(a.workload(123), Some(multus()));
        let s = a.stats();
        assert_eq!(
            (s.misses, s.hits, s.index_refreshes, s.pods_unresolved),
            (1, 2, 2, 1),
            "completed once, then served from the cache"
        );
    }

    #[test]
    fn index_refreshes_are_rate_limited() {
        let node = Node::new();
        node.process(123, &multus_cgroup());
        node.process(124, &multus_cgroup());
        let mut a = node
            .attributor(8)
            .with_refresh_interval(Duration::from_secs(3600));
        assert_eq!(a.workload(123).and_then(|w| w.pod_name), None);
        node.pod(&format!("kube-system_multus-x7k2p_{UID}"));
        assert_eq!(a.workload(123).and_then(|w| w.pod_name), None);
        assert_eq!(a.workload(124).and_then(|w| w.pod_name), None);
        let s = a.stats();
        assert_eq!((s.index_refreshes, s.pods_unresolved), (1, 3));
    }

    #[test]
    fn static_pod_has_no_workload_name() {
        let node = Node::new();
        node.process(
            7,
            &format!(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{STATIC_UID}.slice/cri-containerd-{CID}.scope\n"
            ),
        );
        node.pod(&format!("kube-system_etcd-node-1_{STATIC_UID}"));
        let mut a = node.attributor(8);
        assert_eq!(
            a.workload(7),
            Some(Workload {
                container_id: Some(CID.into()),
                pod_uid: Some(STATIC_UID.into()),
                pod_name: Some("etcd-node-1".into()),
                namespace: Some("kube-system".into()),
                workload: None,
            })
        );
    }

    #[test]
    fn capacity_is_honoured_oldest_first() {
        let node = Node::new();
        for tgid in 1..=5 {
            node.process(tgid, &format!("0::/docker/{CID}\n"));
        }
        let mut a = node.attributor(3);
        for tgid in 1..=5 {
            assert!(a.workload(tgid).is_some());
        }
        let s = a.stats();
        assert_eq!((s.cached, s.evictions, s.misses), (3, 2, 5));

        // 3, 4, 5 are cached; 1 and 2 were evicted.
        for tgid in 3..=5 {
            a.workload(tgid);
        }
        assert_eq!(a.stats().hits, 3);
        a.workload(1);
        let s = a.stats();
        assert_eq!((s.misses, s.evictions, s.cached), (6, 3, 3), "1 evicted 3");
        a.workload(3);
        assert_eq!(a.stats().misses, 7, "3 was the oldest");
    }

    #[test]
    fn forget_then_reinsert_keeps_the_order_exact() {
        let node = Node::new();
        for tgid in 1..=3 {
            node.process(tgid, &format!("0::/docker/{CID}\n"));
        }
        let mut a = node.attributor(2);
        a.workload(1);
        a.workload(2);
        a.forget(1);
        a.forget(42); // never seen: nothing happens
        assert_eq!(a.stats().cached, 1);
        a.workload(1); // now newer than 2
        a.workload(3); // evicts 2, not 1
        let s = a.stats();
        assert_eq!((s.cached, s.evictions), (2, 1));
        a.workload(1);
        assert_eq!(a.stats().hits, 1, "1 survived: it was reinserted after 2");
    }

    #[test]
    fn zero_capacity_still_answers() {
        let node = Node::new();
        node.process(1, &format!("0::/docker/{CID}\n"));
        let mut a = node.attributor(0);
        assert!(a.workload(1).is_some());
        assert!(a.workload(1).is_some());
        assert_eq!(a.stats().cached, 1);
    }

    #[test]
    fn this_process_on_this_machine() {
        // Not a Kubernetes node: None, or Some for a container id if run in one. No panic.
        let content = fs::read_to_string("/proc/self/cgroup").expect("read /proc/self/cgroup");
        let parsed = parse_proc_cgroup(&content);
        let pods = tempfile::tempdir().expect("temp dir");
        let mut a = Attributor::new(Path::new("/proc").into(), pods.path().into(), 4);
        let w = a.workload(std::process::id());
        assert_eq!(
            w.as_ref()
                .map(|w| (w.container_id.clone(), w.pod_uid.clone())),
            parsed.map(|i| (i.container_id, i.pod_uid)),
            "the attributor agrees with the parser: {content:?}"
        );
        if let Some(w) = &w {
            assert!(w.container_id.is_some() || w.pod_uid.is_some(), "{w:?}");
        }
        assert_eq!(a.stats().misses, 1);
        let d = Attributor::default();
        assert_eq!(d.stats(), AttributionStats::default());
    }
}
