//! The pushed metrics: probes, events, verdicts, watches, scans.
use std::collections::BTreeSet;

use sockwatch_common::{EventKind, Tier};

use super::{Scraped, assert_values, foreign_unlink, sock_event, value};
use crate::{
    config::{NO_WATCH, OTHER_WATCH, WATCH_LABELS},
    engine::{DecidedBy, HandOver, Proc, Relation, ServedBy, StaleKind, Verdict},
    kernel::{
        loader::HookReport,
        probes::{Hook, PROBES},
    },
    metrics::{Metrics, Scan, probes::git_revision},
};

#[test]
fn probes_export_every_tier_and_the_fallback_level() {
    let m = Metrics::new();
    m.probes(&[
        HookReport {
            hook: Hook::Bind,
            attached: Some(Tier::Tracepoint),
            refused: vec![(Tier::Fentry, "no".into()), (Tier::Kprobe, "no".into())],
            degraded: vec![],
            programs: vec![],
        },
        HookReport {
            hook: Hook::Connect,
            attached: Some(Tier::Fentry),
            refused: vec![],
            degraded: vec!["connect_target_fexit: inlined".into()],
            programs: vec![],
        },
        HookReport {
            hook: Hook::Exit,
            attached: None,
            refused: vec![(Tier::Tracepoint, "too large".into())],
            degraded: vec![],
            programs: vec![],
        },
    ]);
    let t = m.render();
    assert_values(
        &t,
        &[
            (
                r#"sockwatch_probe_attached{hook="bind",tier="tracepoint"}"#,
                1.0,
            ),
            (
                r#"sockwatch_probe_attached{hook="bind",tier="fentry"}"#,
                0.0,
            ),
            (
                r#"sockwatch_probe_attached{hook="bind",tier="kprobe"}"#,
                0.0,
            ),
            (r#"sockwatch_probe_fallback_level{hook="bind"}"#, 2.0),
            (r#"sockwatch_probe_fallback_level{hook="connect"}"#, 0.0),
            (r#"sockwatch_probe_degraded{hook="connect"}"#, 1.0),
            (r#"sockwatch_probe_degraded{hook="bind"}"#, 0.0),
            (r#"sockwatch_hook_missing{hook="exit"}"#, 1.0),
            (r#"sockwatch_hook_missing{hook="bind"}"#, 0.0),
            (
                r#"sockwatch_probe_attached{hook="exit",tier="tracepoint"}"#,
                0.0,
            ),
        ],
    );
    // A hook missing from the report is attached at no tier.
    assert_values(
        &t,
        &[
            (r#"sockwatch_probe_attached{hook="unlink",tier="lsm"}"#, 0.0),
            (r#"sockwatch_probe_fallback_level{hook="unlink"}"#, 4.0),
        ],
    );
    // Every (hook, tier) of the probe table is exported.
    let n = PROBES.iter().map(|h| h.tiers.len()).sum::<usize>();
    assert_eq!(
        t.lines()
            .filter(|l| l.starts_with("sockwatch_probe_attached{"))
            .count(),
        n
    );
}

#[test]
fn events_and_connect_errors_by_errno_name() {
    let m = Metrics::new();
    m.event(&sock_event(EventKind::Bind, Tier::Fentry, 0));
    m.event(&sock_event(
        EventKind::Connect,
        Tier::Tracepoint,
        -libc::ECONNREFUSED,
    ));
    m.event(&sock_event(
        EventKind::Connect,
        Tier::Tracepoint,
        -libc::ENOENT,
    ));
    m.event(&sock_event(
        EventKind::Connect,
        Tier::Tracepoint,
        -libc::EXDEV,
    ));
    m.decode_error();
    let t = m.render();
    assert_values(
        &t,
        &[
            (r#"sockwatch_events_total{kind="bind",tier="fentry"}"#, 1.0),
            (
                r#"sockwatch_events_total{kind="connect",tier="tracepoint"}"#,
                3.0,
            ),
            (
                r#"sockwatch_connect_errors_total{errno="ECONNREFUSED"}"#,
                1.0,
            ),
            (r#"sockwatch_connect_errors_total{errno="ENOENT"}"#, 1.0),
            (r#"sockwatch_connect_errors_total{errno="other"}"#, 1.0),
            (r#"sockwatch_connect_errors_total{errno="EACCES"}"#, 0.0),
            ("sockwatch_decode_errors_total", 1.0),
        ],
    );
}

/// A rolling restart's takeover at `/run/multus/m.sock`.
fn takeover(relation: Relation) -> Verdict {
    use sockwatch_common::{Fidelity, FileId};
    Verdict::Takeover {
        ts_ns: 1,
        remover: Proc::unknown(2),
        predecessor: Proc::unknown(1),
        successor: Proc::unknown(2),
        relation,
        successor_relation: Relation::SameProcess,
        served_by: ServedBy::Workload,
        how: HandOver::Rebind,
        path: "/run/multus/m.sock".into(),
        old_file: FileId { dev: 1, ino: 10 },
        new_file: FileId { dev: 1, ino: 20 },
        old_sock_ino: 11,
        new_sock_ino: 21,
        gap_ns: 5,
        decided_by: DecidedBy::Kernel,
        fidelity: Fidelity::Exact,
    }
}

#[test]
fn verdicts_by_kind_relation_and_watch() {
    let m = Metrics::new();
    m.watches(["multus"]);
    m.verdict(&foreign_unlink(Relation::SameWorkloadOtherPod), "multus");
    m.verdict(&foreign_unlink(Relation::Unknown), "");
    m.verdict(
        &Verdict::StaleConnect {
            ts_ns: 1,
            kind: StaleKind::UnlinkedPinned,
            actor: Proc::unknown(3),
            path: "/q".into(),
            file: None,
            binder: None,
            removed_by: None,
            decided_by: DecidedBy::Engine,
        },
        "multus",
    );
    m.verdict(&takeover(Relation::SameWorkloadOtherPod), "multus");
    let t = m.render();
    assert_values(
        &t,
        &[
            (
                r#"sockwatch_foreign_unlinks_total{relation="same_workload_other_pod",watch="multus"}"#,
                1.0,
            ),
            (
                r#"sockwatch_takeovers_total{relation="same_workload_other_pod",served_by="workload",watch="multus"}"#,
                1.0,
            ),
            (
                r#"sockwatch_takeovers_total{relation="other",served_by="workload",watch="multus"}"#,
                0.0,
            ),
            (
                r#"sockwatch_verdicts_total{verdict="takeover",watch="multus"}"#,
                1.0,
            ),
            (
                r#"sockwatch_foreign_unlinks_total{relation="unknown",watch="none"}"#,
                1.0,
            ),
            (
                r#"sockwatch_verdicts_total{verdict="foreign_unlink",watch="multus"}"#,
                1.0,
            ),
            (
                r#"sockwatch_verdicts_total{verdict="stale_connect",watch="multus"}"#,
                1.0,
            ),
            (
                r#"sockwatch_stale_connects_total{kind="unlinked_pinned",watch="multus"}"#,
                1.0,
            ),
            (
                r#"sockwatch_stale_connects_total{kind="dead_listener",watch="multus"}"#,
                0.0,
            ),
            (
                r#"sockwatch_replacements_total{relation="other",watch="multus"}"#,
                0.0,
            ),
        ],
    );
}

#[test]
fn watch_labels_are_bounded() {
    let scraped = Scraped::new(Default::default());
    let m = &scraped.metrics;
    for i in 0..(WATCH_LABELS + 10) {
        m.verdict(&foreign_unlink(Relation::Other), &format!("w{i}"));
    }
    let t = m.render();
    let watches: BTreeSet<&str> = t
        .lines()
        .filter(|l| l.starts_with("sockwatch_orphaned_listeners{"))
        .map(|l| l.split("watch=\"").nth(1).expect("watch label"))
        .map(|v| v.split('"').next().expect("quoted"))
        .collect();
    assert_eq!(watches.len(), WATCH_LABELS + 1, "{watches:?}");
    assert!(watches.contains(OTHER_WATCH));
    // "none" is pre-created, so WATCH_LABELS - 1 of the w* names fit.
    let other = value(
        &t,
        r#"sockwatch_foreign_unlinks_total{relation="other",watch="other"}"#,
    );
    assert_eq!(other, Some(11.0));
}

#[test]
fn build_info_and_series_at_zero() {
    let t = Metrics::new().render();
    let info = format!(
        "sockwatch_build_info{{revision=\"{}\",version=\"{}\"}}",
        git_revision(),
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(value(&t, &info), Some(1.0), "{t}");
    let none = |series: &str| format!("{series}watch=\"{NO_WATCH}\"}}");
    for series in [
        r#"sockwatch_foreign_unlinks_total{relation="other","#,
        r#"sockwatch_verdicts_total{verdict="orphan_closed","#,
        r#"sockwatch_stale_connects_total{kind="dead_listener","#,
        "sockwatch_stale_socket_files_total{",
    ] {
        assert_eq!(value(&t, &none(series)), Some(0.0), "{series}");
    }
    assert_values(
        &t,
        &[
            (
                r#"sockwatch_verdicts_withheld_total{verdict="replaced"}"#,
                0.0,
            ),
            ("sockwatch_decode_errors_total", 0.0),
        ],
    );
    assert!(t.contains("process_resident_memory_bytes"), "{t}");
}

#[test]
fn scans_by_kind_and_what_the_last_one_found() {
    let m = Metrics::new();
    assert_eq!(
        value(
            &m.render(),
            r#"sockwatch_scan_duration_seconds_count{scan="periodic"}"#
        ),
        Some(0.0)
    );
    m.scan(Scan::Startup, 0.2, 1, 2);
    m.scan(Scan::Periodic, 0.03, 0, 2);
    m.scan(Scan::Periodic, 0.03, 0, 3);
    let t = m.render();
    assert_values(
        &t,
        &[
            (
                r#"sockwatch_scan_duration_seconds_count{scan="startup"}"#,
                1.0,
            ),
            (
                r#"sockwatch_scan_duration_seconds_count{scan="periodic"}"#,
                2.0,
            ),
            ("sockwatch_stale_bind_mounts", 0.0),
            ("sockwatch_stale_socket_files_found", 3.0),
        ],
    );
}

#[test]
fn socket_file_mounts_by_watch_with_every_watch_at_zero() {
    let m = Metrics::new();
    m.watches(["multus", "kubelet"]);
    let t = m.render();
    assert_eq!(
        value(&t, r#"sockwatch_socket_file_mounts{watch="kubelet"}"#),
        Some(0.0),
        "{t}"
    );
    m.socket_file_mounts(["multus", "multus", ""]);
    assert_values(
        &m.render(),
        &[
            (r#"sockwatch_socket_file_mounts{watch="multus"}"#, 2.0),
            (r#"sockwatch_socket_file_mounts{watch="none"}"#, 1.0),
            (r#"sockwatch_socket_file_mounts{watch="kubelet"}"#, 0.0),
        ],
    );
    m.socket_file_mounts([]);
    assert_eq!(
        value(
            &m.render(),
            r#"sockwatch_socket_file_mounts{watch="multus"}"#
        ),
        Some(0.0),
        "a later scan without them"
    );
}
