use super::{CID, CID2, STATIC_UID, UID, UID_SYSTEMD};
use crate::attribution::{
    CgroupInfo, QosClass, parse_cgroup_path, parse_pod_log_dir, parse_proc_cgroup, workload_name,
};

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

/// Container `CID` of pod `UID`, in QoS class `qos`.
fn in_pod(qos: QosClass) -> Option<CgroupInfo> {
    Some(info(Some(CID), Some(UID), Some(qos)))
}

/// Container `CID`, in no pod.
fn no_pod() -> Option<CgroupInfo> {
    Some(info(Some(CID), None, None))
}

#[test]
fn systemd_containerd_burstable() {
    let f = format!(
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope\n"
    );
    assert_eq!(parse(&f), in_pod(QosClass::Burstable));
}

#[test]
fn systemd_crio_besteffort() {
    let f = format!(
        "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_SYSTEMD}.slice/crio-{CID}.scope\n"
    );
    assert_eq!(parse(&f), in_pod(QosClass::BestEffort));
}

#[test]
fn systemd_docker_guaranteed() {
    let f = format!("0::/kubepods.slice/kubepods-pod{UID_SYSTEMD}.slice/docker-{CID}.scope\n");
    assert_eq!(parse(&f), in_pod(QosClass::Guaranteed));
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
    assert_eq!(parse(&f), in_pod(QosClass::Burstable));
}

#[test]
fn cgroupfs_burstable_v1() {
    let p = format!("/kubepods/burstable/pod{UID}/{CID}");
    let f = format!(
        "11:memory:{p}\n10:cpu,cpuacct:{p}\n9:pids:{p}\n8:devices:{p}\n1:name=systemd:{p}\n"
    );
    assert_eq!(parse(&f), in_pod(QosClass::Burstable));
}

#[test]
fn cgroupfs_guaranteed_and_besteffort_v2() {
    assert_eq!(
        parse(&format!("0::/kubepods/pod{UID}/{CID}\n")),
        in_pod(QosClass::Guaranteed)
    );
    assert_eq!(
        parse(&format!("0::/kubepods/besteffort/pod{UID}/crio-{CID}\n")),
        in_pod(QosClass::BestEffort)
    );
}

#[test]
fn docker_outside_kubernetes() {
    assert_eq!(
        parse(&format!("0::/system.slice/docker-{CID}.scope\n")),
        no_pod()
    );
    let f = format!("12:memory:/docker/{CID}\n11:pids:/docker/{CID}\n0::/\n");
    assert_eq!(parse(&f), no_pod());
    assert_eq!(
        parse(&format!("0::/machine.slice/libpod-{CID}.scope/container\n")),
        no_pod()
    );
}

#[test]
fn kind_node_under_kubelet_slice() {
    let f = format!(
        "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope\n"
    );
    assert_eq!(parse(&f), in_pod(QosClass::BestEffort));
}

#[test]
fn kind_node_inside_docker_takes_the_pod_container() {
    let f = format!("0::/docker/{CID2}/kubepods/burstable/pod{UID}/{CID}\n");
    assert_eq!(parse(&f), in_pod(QosClass::Burstable));
}

#[test]
fn docker_in_docker_takes_the_innermost() {
    let f = format!("0::/docker/{CID2}/docker/{CID}\n");
    assert_eq!(parse(&f), no_pod());
}

#[test]
fn nested_cgroups_inside_a_pod_container_keep_the_pod_container() {
    let f = format!(
        "0::/kubepods.slice/kubepods-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope/docker/{CID2}\n"
    );
    assert_eq!(parse(&f), in_pod(QosClass::Guaranteed));
    let f =
        format!("0::/kubepods.slice/kubepods-pod{UID_SYSTEMD}.slice/crio-{CID}.scope/container\n");
    assert_eq!(parse(&f), in_pod(QosClass::Guaranteed));
}

#[test]
fn relative_to_a_private_cgroup_namespace() {
    let f = format!(
        "0::/../../kubepods-besteffort-pod{UID_SYSTEMD}.slice/cri-containerd-{CID}.scope\n"
    );
    assert_eq!(parse(&f), in_pod(QosClass::BestEffort));
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
        no_pod()
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
