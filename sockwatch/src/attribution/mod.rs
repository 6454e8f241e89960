//! Which workload a process runs in, from node-local sources only: no API server, no CRI.
//!
//! - `/proc/<tgid>/cgroup` gives the container id, the pod uid and the QoS class, for the
//!   layouts kubelet and the usual runtimes create (systemd and cgroupfs drivers; containerd,
//!   CRI-O, Docker; Docker, nerdctl and Podman outside Kubernetes). See [`parse_cgroup_path`].
//! - kubelet's pod log directories, `/var/log/pods/<namespace>_<pod-name>_<pod-uid>/`, give the
//!   namespace and pod name of a pod uid (see [`parse_pod_log_dir`]), and the pod name gives a
//!   best guess of its owner's name (see [`workload_name`]).
//!
//! - `/proc/<tgid>/exe` gives the program, and the runtime it is (see [`runtime`]).
//!
//! [`Attributor`] puts the two together behind a bounded per-tgid cache, cheap enough to call
//! for every event. A plain host process has no workload: `None`, never a guess.
//!
//! Cgroup paths are read as the agent's cgroup namespace shows them: an agent in a private
//! cgroup namespace sees other pods' paths as `/../../<...>`, which parses as long as the pod
//! and container components are below the `..` (the systemd layout always names them in full).
mod cache;
mod cgroup;
mod pods;
pub mod runtime;

pub use crate::host::procfs::DEFAULT_PROC_ROOT;
pub use cache::{Attributor, DEFAULT_CAPACITY, Program};
pub use cgroup::{CgroupInfo, QosClass, parse_cgroup_path, parse_proc_cgroup};
pub use pods::{
    DEFAULT_PODS_LOG_ROOT, DEFAULT_REFRESH_INTERVAL, MAX_POD_DIRS, PodRef, parse_pod_log_dir,
    workload_name,
};

#[cfg(test)]
mod tests;
