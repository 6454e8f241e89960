//! What a process's cgroup path says: its container id, pod uid and QoS class.
use serde::Serialize;

use super::pods::pod_uid;
use crate::host::procfs::{CgroupLine, cgroup_lines};

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
    let v2 = cgroup_lines(content).filter(CgroupLine::is_unified);
    let v1 = cgroup_lines(content).filter(|l| l.hierarchy != "0");
    v2.chain(v1).find_map(|l| parse_cgroup_path(l.path))
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

fn container_id(comp: &str) -> Option<String> {
    let stem = comp.strip_suffix(".scope").unwrap_or(comp);
    let id = RUNTIME_PREFIXES
        .iter()
        .find_map(|p| stem.strip_prefix(p))
        .unwrap_or(stem);
    let lower_hex = |c: u8| c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
    (id.len() == 64 && id.bytes().all(lower_hex)).then(|| id.to_owned())
}
