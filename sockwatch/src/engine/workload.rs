//! Who may serve a path again: the victim itself, its own workload, or someone else.
//!
//! A live socket's file removed and the path served again within the takeover window is no
//! incident when the victim's own workload serves it (a plugin re-registering after kubelet
//! emptied its directory, a rolling restart's successor, HAProxy's rename hand-over), and a
//! hijack when another workload does.
use serde::{Deserialize, Serialize};

use super::model::Proc;

/// Who serves a removed socket's path again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServedBy {
    /// The victim itself (or a holder of its socket) bound the path again.
    Owner,
    /// Another process of the victim's workload (see [`same_workload`]).
    Workload,
}

impl ServedBy {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            ServedBy::Owner => "owner",
            ServedBy::Workload => "workload",
        }
    }
}

/// How the path came to be served again.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandOver {
    /// The file was removed, then a new socket bound at the path.
    #[default]
    Rebind,
    /// A new socket's file was renamed over the old one (HAProxy's reload).
    Rename,
}

impl HandOver {
    pub fn is_rebind(&self) -> bool {
        *self == HandOver::Rebind
    }
}

/// The outcome of a removal whose path is served again.
pub(super) enum Outcome {
    Served(ServedBy),
    Hijacked,
}

/// The parties of a removed socket's path served again.
pub(super) struct Parties<'a> {
    pub victim: &'a Proc,
    pub remover: &'a Proc,
    pub successor: &'a Proc,
    /// The successor held the victim's socket.
    pub owns_old: bool,
}

/// Decides who serves the victim's path now that the successor does. A victim known only by
/// its tgid (a kernel-reported owner never seen) has no workload to compare: the successor is
/// then the remover's own (same process, cgroup or pod) or a stranger.
pub(super) fn outcome(p: &Parties) -> Outcome {
    let (victim, successor) = (p.victim, p.successor);
    if p.owns_old || victim.tgid == successor.tgid {
        Outcome::Served(ServedBy::Owner)
    } else if same_workload(victim, successor)
        || (victim.is_unknown() && close_to_remover(p.remover, successor))
    {
        Outcome::Served(ServedBy::Workload)
    } else {
        Outcome::Hijacked
    }
}

/// The root cgroup's id on cgroup v2: every process outside a service or container shares it,
/// so it says nothing about who belongs together.
const ROOT_CGROUP: u64 = 1;

/// The successor is the remover, of its cgroup (not the root one) or of its pod.
pub(super) fn close_to_remover(remover: &Proc, successor: &Proc) -> bool {
    let pod = |p: &Proc| p.workload.as_ref().and_then(|w| w.pod_uid.clone());
    remover.tgid == successor.tgid
        || (remover.cgroup_id > ROOT_CGROUP && remover.cgroup_id == successor.cgroup_id)
        || pod(remover).is_some_and(|uid| pod(successor) == Some(uid))
}

/// Whether two processes are the same workload:
/// - in pods: the same pod, or the same controller (owner name) in the same namespace;
/// - one in a container and one not: never;
/// - otherwise (host processes, plain containers): the same executable path where both are
///   known, else the same command name.
///
/// It cannot tell apart two programs run by one interpreter (two Python scripts), nor two
/// copies of one binary run for different purposes; a workload that renames or relocates
/// its executable between versions looks like another workload.
pub fn same_workload(a: &Proc, b: &Proc) -> bool {
    fn container(p: &Proc) -> Option<&crate::engine::Workload> {
        p.workload.as_ref().filter(|w| w.container_id.is_some())
    }
    match (container(a), container(b)) {
        (Some(wa), Some(wb)) if wa.pod_uid.is_some() || wb.pod_uid.is_some() => {
            let same_pod = wa.pod_uid.is_some() && wa.pod_uid == wb.pod_uid;
            let same_controller =
                wa.workload.is_some() && wa.workload == wb.workload && wa.namespace == wb.namespace;
            same_pod || same_controller
        }
        (Some(_), None) | (None, Some(_)) => false,
        _ => match (&a.exe, &b.exe) {
            (Some(x), Some(y)) => x == y,
            _ => !a.comm.is_empty() && a.comm == b.comm,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Workload;

    fn host(tgid: u32, comm: &str, exe: Option<&str>) -> Proc {
        Proc {
            tgid,
            pid: tgid,
            comm: comm.into(),
            cgroup_id: 7,
            workload: None,
            exe: exe.map(str::to_owned),
            runtime: None,
        }
    }

    fn in_pod(tgid: u32, uid: &str, controller: &str, ns: &str) -> Proc {
        Proc {
            workload: Some(Workload {
                container_id: Some(format!("ctr-{tgid}")),
                pod_uid: Some(uid.into()),
                pod_name: Some(format!("{controller}-{uid}")),
                namespace: Some(ns.into()),
                workload: Some(controller.into()),
            }),
            ..host(tgid, "daemon", Some("/usr/bin/daemon"))
        }
    }

    #[test]
    fn host_processes_are_one_workload_by_their_executable() {
        let haproxy = |t| host(t, "haproxy", Some("/usr/sbin/haproxy"));
        assert!(same_workload(&haproxy(1), &haproxy(2)));
        let socat = host(3, "socat", Some("/usr/bin/socat"));
        assert!(!same_workload(&haproxy(1), &socat));
        // Same name, other binary: another program.
        let imposter = host(4, "haproxy", Some("/tmp/haproxy"));
        assert!(!same_workload(&haproxy(1), &imposter));
        // Without an executable on one side, the command name decides.
        assert!(same_workload(&haproxy(1), &host(5, "haproxy", None)));
        assert!(!same_workload(&host(6, "", None), &host(7, "", None)));
    }

    #[test]
    fn pods_are_one_workload_by_pod_or_controller() {
        let a = in_pod(1, "uid-a", "multus", "kube-system");
        assert!(same_workload(
            &a,
            &in_pod(2, "uid-b", "multus", "kube-system")
        ));
        assert!(same_workload(
            &a,
            &in_pod(3, "uid-a", "sidecar", "kube-system")
        ));
        assert!(!same_workload(&a, &in_pod(4, "uid-c", "multus", "default")));
        assert!(!same_workload(
            &a,
            &in_pod(5, "uid-d", "intruder", "kube-system")
        ));
        // A host process is never a pod's workload, whatever its executable.
        assert!(!same_workload(
            &a,
            &host(6, "daemon", Some("/usr/bin/daemon"))
        ));
    }

    #[test]
    fn the_owner_itself_serves_before_any_workload_rule() {
        let plugin = host(10, "plugin", Some("/plugin"));
        let kubelet = host(11, "kubelet", Some("/usr/bin/kubelet"));
        let parties = |successor, owns_old| Parties {
            victim: &plugin,
            remover: &kubelet,
            successor,
            owns_old,
        };
        assert!(matches!(
            outcome(&parties(&plugin, false)),
            Outcome::Served(ServedBy::Owner)
        ));
        assert!(matches!(
            outcome(&parties(&kubelet, true)),
            Outcome::Served(ServedBy::Owner)
        ));
        assert!(matches!(
            outcome(&parties(&kubelet, false)),
            Outcome::Hijacked
        ));
    }

    #[test]
    fn an_unknown_victim_is_served_by_the_removers_own() {
        let unknown = Proc::unknown(20);
        let remover = host(21, "daemon", Some("/usr/bin/daemon"));
        let parties = |successor| Parties {
            victim: &unknown,
            remover: &remover,
            successor,
            owns_old: false,
        };
        assert!(matches!(
            outcome(&parties(&remover)),
            Outcome::Served(ServedBy::Workload)
        ));
        let stranger = Proc {
            cgroup_id: 99,
            ..host(22, "other", Some("/other"))
        };
        assert!(matches!(outcome(&parties(&stranger)), Outcome::Hijacked));
    }
}
