use std::{
    fs,
    path::{Path, PathBuf},
    time::Duration,
};

use super::{CID, CID2, STATIC_UID, UID, UID_SYSTEMD};
use crate::{
    attribution::{Attributor, parse_proc_cgroup},
    engine::Workload,
};

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

/// A process in a Docker container `cid`.
fn docker(cid: &str) -> String {
    format!("0::/docker/{cid}\n")
}

fn container(w: Option<Workload>) -> Option<String> {
    w.and_then(|w| w.container_id)
}

#[test]
fn attributes_a_pod_process_and_caches_it() {
    let node = Node::new();
    node.process(123, &multus_cgroup());
    node.pod(&format!("kube-system_multus-x7k2p_{UID}"));
    let web_uid = "11111111-2222-3333-4444-555555555555";
    node.pod(&format!("default_web-0_{web_uid}"));
    fs::write(node.pods_root().join("stray-file"), "").expect("stray file");
    let mut a = node.attributor(8);

    assert_eq!(a.workload(123), Some(multus()));
    node.exit(123);
    assert_eq!(a.workload(123), Some(multus()), "answered from the cache");
    // The one scan indexed both pods, past the stray file.
    node.process(124, &format!("0::/kubepods/pod{web_uid}/{CID}\n"));
    assert_eq!(a.workload(124).and_then(|w| w.workload), Some("web".into()));

    a.forget(123);
    assert_eq!(a.workload(123), None, "gone after forget and exit");
}

#[test]
fn host_and_docker_processes_never_touch_the_pod_index() {
    let node = Node::new();
    node.process(1, "0::/init.scope\n");
    node.process(2, &format!("0::/system.slice/docker-{CID}.scope\n"));
    let mut a = node
        .attributor(8)
        .with_refresh_interval(Duration::from_secs(3600));

    assert_eq!(a.workload(1), None);
    assert_eq!(
        a.workload(2),
        Some(Workload {
            container_id: Some(CID.into()),
            ..Workload::default()
        })
    );
    node.process(1, &docker(CID2));
    assert_eq!(a.workload(1), None, "a host process is cached too");
    // Had the index been scanned already, this pod would wait for the refresh interval.
    node.pod(&format!("kube-system_multus-x7k2p_{UID}"));
    node.process(3, &multus_cgroup());
    assert_eq!(a.workload(3), Some(multus()));
}

#[test]
fn vanished_process_is_none_and_not_cached() {
    let node = Node::new();
    let mut a = node.attributor(8);
    assert_eq!(a.workload(999), None);
    assert_eq!(a.workload(999), None);
    node.process(999, &docker(CID));
    assert_eq!(container(a.workload(999)), Some(CID.into()), "not cached");
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
}

#[test]
fn a_pod_dir_that_appears_later_completes_the_cached_answer() {
    let node = Node::new();
    node.process(123, &multus_cgroup());
    let mut a = node.attributor(8).with_refresh_interval(Duration::ZERO);
    assert_eq!(a.workload(123).and_then(|w| w.pod_name), None);
    let pod = format!("kube-system_multus-x7k2p_{UID}");
    node.pod(&pod);
    assert_eq!(a.workload(123), Some(multus()));
    node.exit(123);
    fs::remove_dir_all(node.pods_root().join(pod)).expect("remove pod dir");
    assert_eq!(
        a.workload(123),
        Some(multus()),
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

/// Processes `tgids` in Docker container `cid`; moving them to another shows which answers
/// are cached.
fn in_docker(node: &Node, tgids: std::ops::RangeInclusive<u32>, cid: &str) {
    for tgid in tgids {
        node.process(tgid, &docker(cid));
    }
}

#[test]
fn capacity_is_honoured_oldest_first() {
    let node = Node::new();
    in_docker(&node, 1..=5, CID);
    let mut a = node.attributor(3);
    for tgid in 1..=5 {
        assert!(a.workload(tgid).is_some());
    }
    in_docker(&node, 1..=5, CID2);

    // 3, 4, 5 are cached; 1 and 2 were evicted.
    for tgid in 3..=5 {
        assert_eq!(container(a.workload(tgid)), Some(CID.into()), "{tgid}");
    }
    assert_eq!(container(a.workload(1)), Some(CID2.into()), "1 evicted 3");
    assert_eq!(
        container(a.workload(3)),
        Some(CID2.into()),
        "3 was the oldest"
    );
}

#[test]
fn forget_then_reinsert_keeps_the_order_exact() {
    let node = Node::new();
    in_docker(&node, 1..=3, CID);
    let mut a = node.attributor(2);
    a.workload(1);
    a.workload(2);
    a.forget(1);
    a.forget(42); // never seen: nothing happens
    a.workload(1); // now newer than 2
    a.workload(3); // evicts 2, not 1
    in_docker(&node, 1..=3, CID2);
    assert_eq!(
        container(a.workload(1)),
        Some(CID.into()),
        "1 survived: it was reinserted after 2"
    );
    assert_eq!(container(a.workload(3)), Some(CID.into()));
    assert_eq!(container(a.workload(2)), Some(CID2.into()), "2 was evicted");
}

#[test]
fn zero_capacity_still_answers() {
    let node = Node::new();
    in_docker(&node, 1..=1, CID);
    let mut a = node.attributor(0);
    assert!(a.workload(1).is_some());
    in_docker(&node, 1..=1, CID2);
    assert_eq!(container(a.workload(1)), Some(CID.into()), "one is cached");
}

#[test]
fn this_process_on_this_machine() {
    // Not a Kubernetes node: None, or Some for a container id if run in one. No panic.
    let content = fs::read_to_string("/proc/self/cgroup").expect("read /proc/self/cgroup");
    let parsed = parse_proc_cgroup(&content).map(|i| (i.container_id, i.pod_uid));
    let pods = tempfile::tempdir().expect("temp dir");
    let mut a = Attributor::new(Path::new("/proc").into(), pods.path().into(), 4);
    let w = a.workload(std::process::id());
    let ids = |w: &Option<Workload>| {
        w.as_ref()
            .map(|w| (w.container_id.clone(), w.pod_uid.clone()))
    };
    assert_eq!(
        ids(&w),
        parsed,
        "the attributor agrees with the parser: {content:?}"
    );
    if let Some(w) = &w {
        assert!(w.container_id.is_some() || w.pod_uid.is_some(), "{w:?}");
    }
    let d = Attributor::default().workload(std::process::id());
    assert_eq!(ids(&d), parsed, "the default reads /proc too");
}
