//! `docs/metrics.md`: the metric reference, from the specs and the label types.
use std::fmt::Write as _;

use sockwatch_common::{EventKind, Tier};

use super::{
    Metrics,
    engine::MAX_MAPS,
    labels::{GuardState, Label, Scan, count_names, errno_names, hooks, kernel_errors},
    specs::{SPECS, type_name},
};
use crate::{
    config::{NO_WATCH, OTHER_WATCH, WATCH_LABELS},
    engine::{Evictions, IgnoredCounters, Relation, StaleKind, VerdictCounts},
    http::Dropped,
};

/// One exported metric, as the reference describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Described {
    pub name: String,
    pub kind: &'static str,
    pub help: String,
    pub labels: Vec<String>,
}

impl Metrics {
    /// Every metric exported: sockwatch's own first, then the process metrics of the
    /// Prometheus client (Linux).
    pub fn describe() -> Vec<Described> {
        let own = SPECS.iter().map(|s| Described {
            name: s.name.into(),
            kind: s.kind.name(),
            help: s.help.into(),
            labels: s
                .labels
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
        });
        own.chain(process_metrics()).collect()
    }

    /// The values each bounded label takes (`watch` and `map` are described in words).
    pub fn label_values() -> Vec<(&'static str, Vec<String>)> {
        vec![
            ("hook", strings(hooks())),
            ("tier", all::<Tier>()),
            ("kind (events)", all::<EventKind>()),
            ("kind (stale connects)", all::<StaleKind>()),
            ("verdict", count_names::<VerdictCounts>()),
            ("relation", all::<Relation>()),
            ("errno", strings(errno_names())),
            (
                "reason (kernel errors)",
                strings(kernel_errors().map(sockwatch_common::Counter::name)),
            ),
            ("reason (engine ignored)", count_names::<IgnoredCounters>()),
            ("table", count_names::<Evictions>()),
            ("scan", all::<Scan>()),
            ("reason (HTTP connections dropped)", all::<Dropped>()),
            ("state", all::<GuardState>()),
            ("policy", strings(["stale_owner", "foreign"])),
            (
                "decision",
                strings(super::kernel::GUARD_DECISIONS.map(|(name, _)| name)),
            ),
            (
                "lookup",
                strings(crate::host::lookup::Lookup::ALL.map(crate::host::lookup::Lookup::name)),
            ),
        ]
    }
}

fn all<L: Label>() -> Vec<String> {
    strings(L::ALL.iter().map(|l| l.label()))
}

fn strings(values: impl IntoIterator<Item = &'static str>) -> Vec<String> {
    values.into_iter().map(String::from).collect()
}

/// The client library's process metrics, sorted by name.
#[cfg(target_os = "linux")]
fn process_metrics() -> Vec<Described> {
    use prometheus::core::Collector as _;
    let mut families: Vec<Described> = prometheus::process_collector::ProcessCollector::for_self()
        .collect()
        .iter()
        .map(|f| Described {
            name: f.name().into(),
            kind: type_name(f.get_field_type()),
            help: f.help().into(),
            labels: Vec::new(),
        })
        .collect();
    families.sort_by(|a, b| a.name.cmp(&b.name));
    families
}

#[cfg(not(target_os = "linux"))]
fn process_metrics() -> Vec<Described> {
    Vec::new()
}

/// `docs/metrics.md`: the metric reference, generated from [`Metrics::describe`].
pub fn reference_markdown() -> String {
    let mut md = String::new();
    md.push_str(
        "# sockwatch metrics\n\n\
         <!-- Generated from `Metrics::describe()` by the `docs_metrics_md_is_current` test; \
         do not edit. Regenerate with `SOCKWATCH_BLESS=1 cargo test -p sockwatch --lib metrics`. -->\n\n\
         Served at `/metrics` (Prometheus text format 0.0.4) by `sockwatch run --listen ADDR` \
         (default port 9469). Every label takes values from a bounded set: no pid, inode or \
         path is ever a label value; use the JSON API (`/api/sockets`, `/api/verdicts`) or the \
         event stream for those.\n\n\
         | metric | type | labels | help |\n| --- | --- | --- | --- |\n",
    );
    for d in Metrics::describe() {
        let labels = if d.labels.is_empty() {
            "—".to_string()
        } else {
            let quoted: Vec<String> = d.labels.iter().map(|l| format!("`{l}`")).collect();
            quoted.join(", ")
        };
        let help = d.help.replace('|', "\\|");
        let _ = writeln!(md, "| `{}` | {} | {labels} | {help} |", d.name, d.kind);
    }
    md.push_str("\n## Label values\n\n| label | values |\n| --- | --- |\n");
    let _ = writeln!(
        md,
        "| watch | a configured watch name; `{NO_WATCH}` without watches, or for a watched \
         socket named by a path outside every watch (a client's bind-mounted view of its file, \
         a file moved out: nothing outside the watches is reported otherwise); `{OTHER_WATCH}` \
         past {WATCH_LABELS} names |"
    );
    let _ = writeln!(md, "| map | a kernel map name (at most {MAX_MAPS}) |");
    let _ = writeln!(
        md,
        "| version, revision | the build's crate version and git revision |"
    );
    for (label, values) in Metrics::label_values() {
        let values: Vec<String> = values.iter().map(|v| format!("`{v}`")).collect();
        let _ = writeln!(md, "| {label} | {} |", values.join(", "));
    }
    md
}
