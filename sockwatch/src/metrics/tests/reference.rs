//! The reference: labels as the engine names them, the specs against the registry, and
//! `docs/metrics.md` against the specs.
use std::{collections::BTreeMap, path::PathBuf};

use sockwatch_common::{EventKind, Tier};

use super::{Scraped, foreign_unlink, sock_event};
use crate::{
    engine::{Relation, StaleKind, VerdictCounts},
    metrics::{
        Described, Metrics, Scan,
        labels::{Label, count_names},
        reference_markdown,
    },
};

#[test]
fn label_names_match_the_engines_serialization() {
    for r in Relation::ALL {
        let json = serde_json::to_string(r).expect("serializes");
        assert_eq!(json.trim_matches('"'), r.label());
    }
    for k in StaleKind::ALL {
        let json = serde_json::to_string(k).expect("serializes");
        assert_eq!(json.trim_matches('"'), k.label());
    }
}

#[test]
fn verdict_labels_are_the_verdicts_names_in_the_engines_order() {
    let names = count_names::<VerdictCounts>();
    assert_eq!(names.first().map(String::as_str), Some("foreign_unlink"));
    assert!(names.contains(&foreign_unlink(Relation::Other).name().to_string()));
}

/// Every family the registry exports is described, with the same type and help, and
/// every described family is exported once each method has run.
#[test]
fn describe_matches_the_registry() {
    let s = Scraped::new(Default::default());
    s.engine.lock().expect("engine").maps = vec![crate::metrics::MapFill {
        map: "LIVE",
        entries: 1,
        capacity: 2,
    }];
    let m = &s.metrics;
    m.probes(&[]);
    m.event(&sock_event(EventKind::Bind, Tier::Fentry, 0));
    m.scan(Scan::Startup, 0.1, 0, 0);
    let described = Metrics::describe();
    let gathered = m.registry.gather();
    assert_eq!(gathered.len(), described.len());
    let text = m.render();
    for f in &gathered {
        let d = described
            .iter()
            .find(|d| d.name == f.name())
            .unwrap_or_else(|| panic!("{} is not described", f.name()));
        assert_eq!(d.help, f.help(), "{}", f.name());
        let type_line = format!("# TYPE {} {}", d.name, d.kind);
        assert!(text.lines().any(|l| l == type_line), "{type_line}");
    }
    for d in &described {
        assert!(
            d.name.starts_with("process_") || d.name.starts_with("sockwatch_"),
            "{}",
            d.name
        );
        let counter = d.kind == "counter";
        assert_eq!(
            counter,
            d.name.ends_with("_total"),
            "{}: counters end in _total",
            d.name
        );
    }
}

/// The names a metric takes in the OpenMetrics model: a counter `x_total` is the family `x`
/// (samples `x_total`, `x_created`), a histogram `x` also has `x_bucket`, `x_count`, `x_sum`.
fn openmetrics_names(d: &Described) -> Vec<String> {
    let suffixes: &[&str] = match d.kind {
        "counter" => return counter_names(&d.name),
        "histogram" => &["", "_bucket", "_count", "_sum", "_created"],
        _ => &[""],
    };
    suffixes.iter().map(|s| format!("{}{s}", d.name)).collect()
}

fn counter_names(name: &str) -> Vec<String> {
    let family = name.strip_suffix("_total").unwrap_or(name);
    vec![family.into(), name.into(), format!("{family}_created")]
}

/// A gauge `x` next to a counter `x_total` is one family under OpenMetrics: scrapers that
/// parse it refuse or merge them.
#[test]
fn no_two_metrics_share_an_openmetrics_name() {
    let mut owner: BTreeMap<String, String> = BTreeMap::new();
    for d in Metrics::describe() {
        for name in openmetrics_names(&d) {
            if let Some(other) = owner.insert(name.clone(), d.name.clone()) {
                panic!("{} and {other} both claim {name}", d.name);
            }
        }
    }
}

#[test]
fn docs_metrics_md_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/metrics.md");
    let want = reference_markdown();
    if std::env::var_os("SOCKWATCH_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &want).expect("write docs/metrics.md");
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/metrics.md is out of date with Metrics::describe(): regenerate it with \
         `SOCKWATCH_BLESS=1 cargo test -p sockwatch --lib metrics::tests::reference::docs_metrics_md_is_current`"
    );
}
