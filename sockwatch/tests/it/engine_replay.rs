//! Replaying a recorded JSON-lines log through the engine's public API, as `sockwatch replay`
//! would: S1's Multus incident as the kernel tier records it (default takeover window).
use sockwatch::engine::{CloseReason, Engine, Input, Limits, Relation, Verdict};

const LOG: &str = r#"
{"kind":"bind","ts_ns":1000,"proc":{"tgid":100,"pid":100,"comm":"multus","cgroup_id":11,"workload":{"pod_uid":"a","workload":"multus"}},"file":{"dev":42,"ino":10},"sock_ino":11,"path":"/run/multus/multus.sock"}
{"kind":"listen","ts_ns":1001,"proc":{"tgid":100,"pid":100,"comm":"multus","cgroup_id":11,"workload":{"pod_uid":"a","workload":"multus"}},"file":{"dev":42,"ino":10},"sock_ino":11}
{"kind":"unlink","ts_ns":2000,"proc":{"tgid":200,"pid":200,"comm":"multus","cgroup_id":22,"workload":{"pod_uid":"b","workload":"multus"}},"path":"/run/multus/multus.sock","file":{"dev":42,"ino":10},"fidelity":"exact","live":{"owner_tgid":100,"sock_ino":11,"listening":true,"unlinker_holds_fd":false}}
{"kind":"bind","ts_ns":2100,"proc":{"tgid":200,"pid":200,"comm":"multus","cgroup_id":22,"workload":{"pod_uid":"b","workload":"multus"}},"file":{"dev":42,"ino":20},"sock_ino":22,"path":"/run/multus/multus.sock"}
{"kind":"listen","ts_ns":2101,"proc":{"tgid":200,"pid":200,"comm":"multus","cgroup_id":22,"workload":{"pod_uid":"b","workload":"multus"}},"file":{"dev":42,"ino":20},"sock_ino":22}
{"kind":"unlink","ts_ns":3000,"proc":{"tgid":100,"pid":100,"comm":"multus","cgroup_id":11,"workload":{"pod_uid":"a","workload":"multus"}},"path":"/run/multus/multus.sock","file":{"dev":42,"ino":20},"fidelity":"exact","live":{"owner_tgid":200,"sock_ino":22,"listening":true,"unlinker_holds_fd":false}}
{"kind":"release","ts_ns":3001,"proc":{"tgid":100,"pid":100,"comm":"multus","cgroup_id":11,"workload":{"pod_uid":"a","workload":"multus"}},"file":{"dev":42,"ino":10},"sock_ino":11}
{"kind":"exit","ts_ns":3002,"tgid":100}
{"kind":"exit","ts_ns":9000,"tgid":200}
"#;

fn replay(log: &str) -> Vec<Verdict> {
    let mut engine = Engine::new(Limits::default()).expect("default limits are valid");
    let mut out = Vec::new();
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let input: Input = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        engine.apply_into(&input, &mut out);
    }
    out
}

#[test]
fn the_multus_incident_replays_into_a_takeover_a_foreign_unlink_and_the_orphan_lifecycle() {
    let verdicts = replay(LOG);
    let names: Vec<_> = verdicts.iter().map(Verdict::name).collect();
    assert_eq!(
        names,
        [
            "takeover",
            "orphan_opened",
            "foreign_unlink",
            "orphan_opened",
            "orphan_closed",
            "orphan_closed"
        ]
    );
    // B re-bound the path it removed 100 ns later: a takeover, naming both generations.
    assert!(matches!(
        &verdicts[0],
        Verdict::Takeover { remover, predecessor, successor, gap_ns: 100, old_sock_ino: 11, new_sock_ino: 22, .. }
            if (remover.tgid, predecessor.tgid, successor.tgid) == (200, 100, 200)
    ));
    let pairs: Vec<_> = verdicts
        .iter()
        .filter_map(|v| match v {
            Verdict::ForeignUnlink {
                actor,
                victim,
                relation,
                ..
            } => Some((actor.tgid, victim.tgid, *relation)),
            _ => None,
        })
        .collect();
    // A's unlink-on-close of B's socket is the incident.
    assert_eq!(pairs, [(100, 200, Relation::SameWorkloadOtherPod)]);
    assert!(matches!(
        verdicts.last(),
        Some(Verdict::OrphanClosed {
            reason: CloseReason::Exited,
            duration_ns: 6000,
            sock_ino: 22,
            ..
        })
    ));
    // Replays are deterministic, down to the printed JSON.
    let print = |vs: &[Verdict]| {
        vs.iter()
            .map(|v| serde_json::to_string(v).expect("serializes"))
            .collect::<Vec<_>>()
    };
    assert_eq!(print(&verdicts), print(&replay(LOG)));
}
