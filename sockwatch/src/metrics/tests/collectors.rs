//! The collectors: kernel counters and engine state, read at scrape time.
use std::{
    ops::RangeInclusive,
    sync::{Arc, Mutex},
    time::{SystemTime, UNIX_EPOCH},
};

use super::{Scraped, assert_values, kernel_counters, value, watching};
use crate::{
    engine::{FileId, OrphanCause, OrphanInfo, Proc, Stats},
    metrics::{EngineSnapshot, MapFill, Metrics, engine::MAX_MAPS},
};

fn orphan(path: &str, age_s: u64) -> OrphanInfo {
    OrphanInfo {
        file: FileId { dev: 1, ino: 2 },
        sock_ino: 3,
        owner: Proc::unknown(4),
        path: Some(path.into()),
        since_ns: 0,
        since_exact: true,
        age_ns: age_s * 1_000_000_000,
        cause: OrphanCause::Unlinked,
        removed_by: None,
        successor: None,
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

/// Asserts that `series` dates an orphan `age_s` old at some time in `rendered`, the wall-clock
/// seconds around the scrape.
fn assert_opened_ago(text: &str, series: &str, age_s: f64, rendered: &RangeInclusive<f64>) {
    let opened = value(text, series).unwrap_or_else(|| panic!("{series} in\n{text}"));
    let between = (rendered.start() - age_s)..=(rendered.end() - age_s);
    assert!(
        between.contains(&opened),
        "{series} = {opened}, want within {between:?}"
    );
}

#[test]
fn every_collected_series_is_there_from_the_first_scrape() {
    let t = Scraped::new(Default::default()).render();
    assert_values(
        &t,
        &[
            (r#"sockwatch_events_lost_total{kind="unlink"}"#, 0.0),
            (
                r#"sockwatch_kernel_errors_total{reason="fd_walk_partial"}"#,
                0.0,
            ),
            (
                r#"sockwatch_orphaned_listeners{cause="unlinked",watch="none"}"#,
                0.0,
            ),
            (
                r#"sockwatch_orphaned_listeners{cause="taken_over",watch="none"}"#,
                0.0,
            ),
            (r#"sockwatch_engine_evictions_total{table="history"}"#, 0.0),
            (
                r#"sockwatch_engine_ignored_total{reason="not_path_bound"}"#,
                0.0,
            ),
            ("sockwatch_engine_sockets", 0.0),
        ],
    );
}

#[test]
fn kernel_counters_are_what_the_kernel_holds_at_each_scrape() {
    let s = Scraped::new(Default::default());
    *s.kernel.lock().expect("kernel") = kernel_counters(5, 1, 7);
    let t = s.render();
    assert_values(
        &t,
        &[
            (r#"sockwatch_events_lost_total{kind="unlink"}"#, 5.0),
            (r#"sockwatch_kernel_errors_total{reason="map_full"}"#, 1.0),
            (
                r#"sockwatch_kernel_errors_total{reason="read_failed"}"#,
                0.0,
            ),
            ("sockwatch_connects_ok_total", 7.0),
            (
                r#"sockwatch_kernel_events_submitted_total{kind="unlink"}"#,
                100.0,
            ),
        ],
    );
    *s.kernel.lock().expect("kernel") = kernel_counters(8, 1, 9);
    let t = s.render();
    assert_values(
        &t,
        &[
            (r#"sockwatch_events_lost_total{kind="unlink"}"#, 8.0),
            ("sockwatch_connects_ok_total", 9.0),
        ],
    );
}

#[test]
fn engine_orphans_per_watch_and_zero_when_gone() {
    let s = Scraped::new(watching(&[
        ("multus", "/run/multus"),
        ("crio", "/run/crio"),
    ]));
    let mut stats = Stats {
        sockets: 7,
        live_sockets: 5,
        procs: 3,
        ..Stats::default()
    };
    stats.evictions.sockets = 2;
    stats.ignored.unlink_ambiguous = 4;
    *s.engine.lock().expect("engine") = EngineSnapshot {
        stats: stats.clone(),
        orphans: vec![
            orphan("/run/multus/a.sock", 30),
            orphan("/run/multus/b.sock", 90),
            orphan("/tmp/x.sock", 5),
            // A predecessor in its graceful shutdown: a series of its own, kept out of the
            // unlinked orphans' count and age.
            OrphanInfo {
                cause: OrphanCause::TakenOver,
                ..orphan("/run/multus/c.sock", 400)
            },
        ],
        maps: vec![],
    };
    let before = unix_now();
    let t = s.render();
    let rendered = before..=unix_now();
    assert_values(
        &t,
        &[
            (
                r#"sockwatch_orphaned_listeners{cause="unlinked",watch="multus"}"#,
                2.0,
            ),
            (
                r#"sockwatch_orphaned_listeners{cause="unlinked",watch="none"}"#,
                1.0,
            ),
            (
                r#"sockwatch_orphaned_listeners{cause="unlinked",watch="crio"}"#,
                0.0,
            ),
            (
                r#"sockwatch_orphaned_listeners{cause="taken_over",watch="multus"}"#,
                1.0,
            ),
            (
                r#"sockwatch_orphaned_listeners{cause="taken_over",watch="none"}"#,
                0.0,
            ),
            ("sockwatch_engine_sockets", 7.0),
            ("sockwatch_engine_live_sockets", 5.0),
            ("sockwatch_engine_processes", 3.0),
            (r#"sockwatch_engine_evictions_total{table="sockets"}"#, 2.0),
            (
                r#"sockwatch_engine_ignored_total{reason="unlink_ambiguous"}"#,
                4.0,
            ),
        ],
    );
    // The oldest of each watch and cause, dated on the wall clock.
    for (series, age_s) in [
        (r#"{cause="unlinked",watch="multus"}"#, 90.0),
        (r#"{cause="unlinked",watch="none"}"#, 5.0),
        (r#"{cause="taken_over",watch="multus"}"#, 400.0),
    ] {
        let series = format!("sockwatch_orphaned_listener_oldest_opened_timestamp_seconds{series}");
        assert_opened_ago(&t, &series, age_s, &rendered);
    }
    assert_values(
        &t,
        &[(
            r#"sockwatch_orphaned_listener_oldest_opened_timestamp_seconds{cause="unlinked",watch="crio"}"#,
            0.0,
        )],
    );
    s.engine.lock().expect("engine").orphans.clear();
    let t = s.render();
    assert_values(
        &t,
        &[
            (
                r#"sockwatch_orphaned_listeners{cause="unlinked",watch="multus"}"#,
                0.0,
            ),
            (
                r#"sockwatch_orphaned_listener_oldest_opened_timestamp_seconds{cause="unlinked",watch="multus"}"#,
                0.0,
            ),
            (r#"sockwatch_engine_evictions_total{table="sockets"}"#, 2.0),
        ],
    );
}

/// 0 means "none": an orphan made this instant is dated, not 0.
#[test]
fn an_orphan_of_age_zero_has_its_timestamp() {
    let s = Scraped::new(Default::default());
    s.engine.lock().expect("engine").orphans = vec![orphan("/tmp/y.sock", 0)];
    let before = unix_now();
    let t = s.render();
    let series = r#"sockwatch_orphaned_listener_oldest_opened_timestamp_seconds{cause="unlinked",watch="none"}"#;
    assert_opened_ago(&t, series, 0.0, &(before..=unix_now()));
}

#[test]
fn map_fill_of_at_most_max_maps() {
    let s = Scraped::new(Default::default());
    let name = |i: usize| -> &'static str { Box::leak(format!("M{i}").into_boxed_str()) };
    s.engine.lock().expect("engine").maps = (0..MAX_MAPS + 5)
        .map(|i| MapFill {
            map: name(i),
            entries: 10 + i as u64,
            capacity: 100,
        })
        .collect();
    let t = s.render();
    assert_values(
        &t,
        &[
            (r#"sockwatch_map_entries{map="M1"}"#, 11.0),
            (r#"sockwatch_map_capacity{map="M1"}"#, 100.0),
        ],
    );
    assert_eq!(
        t.lines()
            .filter(|l| l.starts_with("sockwatch_map_entries{"))
            .count(),
        MAX_MAPS
    );
}

#[test]
fn sources_gone_leave_their_families_out() {
    let m = Metrics::new();
    let kernel = Arc::new(Mutex::new(kernel_counters(1, 0, 0)));
    let engine = Arc::new(Mutex::new(EngineSnapshot::default()));
    m.collect_kernel(&kernel);
    m.collect_engine(&engine, Default::default());
    assert!(m.render().contains("sockwatch_events_lost_total{"));
    drop((kernel, engine));
    let t = m.render();
    assert!(!t.contains("sockwatch_events_lost_total"), "{t}");
    assert!(!t.contains("sockwatch_engine_sockets"), "{t}");
    assert!(t.contains("sockwatch_decode_errors_total 0"), "{t}");
}
