use super::{STATIC_UID, UID, UID_SYSTEMD};
use crate::attribution::{PodRef, parse_pod_log_dir, workload_name};

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
