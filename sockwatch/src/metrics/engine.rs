//! The engine's sizes, totals and open orphans, and the fill of the kernel maps it works
//! with, read at scrape time.
use std::{
    collections::BTreeMap,
    sync::{Arc, Weak},
    time::{SystemTime, UNIX_EPOCH},
};

use prometheus::{
    core::{Collector, Desc},
    proto::MetricFamily,
};

use super::{
    collect::{family, single},
    labels::{Label as _, counts},
    specs::*,
    watch::WatchLabels,
};
use crate::{
    config::Config,
    engine::{OrphanCause, OrphanInfo, Stats},
};

/// Distinct `map` label values kept.
pub const MAX_MAPS: usize = 32;

/// Where the engine's state is read from, once per scrape.
pub trait EngineSource: Send + Sync {
    /// The state now, read under the lock that guards the engine.
    fn snapshot(&self) -> EngineSnapshot;
}

/// The engine's state at one moment.
#[derive(Clone, Debug, Default)]
pub struct EngineSnapshot {
    pub stats: Stats,
    pub orphans: Vec<OrphanInfo>,
    /// Kernel maps read alongside the engine (the live-socket table).
    pub maps: Vec<MapFill>,
}

/// How full one kernel map is.
#[derive(Clone, Debug)]
pub struct MapFill {
    pub map: &'static str,
    pub entries: u64,
    pub capacity: u64,
}

/// The metrics each scrape reads from an [`EngineSource`].
pub const ENGINE_SPECS: [&Spec; 9] = [
    &ORPHANED,
    &ORPHAN_OPENED,
    &ENGINE_SOCKETS,
    &ENGINE_LIVE,
    &ENGINE_PROCS,
    &ENGINE_EVICTIONS,
    &ENGINE_IGNORED,
    &MAP_ENTRIES,
    &MAP_CAPACITY,
];

/// Exports the engine's state as it is; orphans are labelled by `config`'s watches. A source
/// that is gone (the agent is stopping) yields nothing.
pub struct EngineCollector {
    source: Weak<dyn EngineSource>,
    watches: Arc<WatchLabels>,
    config: Arc<Config>,
    descs: Vec<Desc>,
}

impl EngineCollector {
    pub fn new(
        source: Weak<dyn EngineSource>,
        watches: Arc<WatchLabels>,
        config: Arc<Config>,
    ) -> Self {
        Self {
            source,
            watches,
            config,
            descs: ENGINE_SPECS.iter().map(|s| s.desc()).collect(),
        }
    }

    /// Open orphans per watch and cause: every admitted watch has a series of each cause, 0
    /// when it has none. `now_unix` is the wall-clock time at which their ages were taken.
    fn orphans(&self, orphans: &[OrphanInfo], now_unix: f64) -> [MetricFamily; 2] {
        let mut per_watch: BTreeMap<(String, &str), (usize, u64)> = self
            .watches
            .all()
            .into_iter()
            .flat_map(|watch| {
                OrphanCause::ALL
                    .iter()
                    .map(move |c| (watch.clone(), c.label()))
            })
            .map(|key| (key, (0, 0)))
            .collect();
        for o in orphans {
            let watch = self.config.watch_of(o.path.as_deref().unwrap_or_default());
            let key = (self.watches.admitted(watch), o.cause.label());
            let (count, oldest_ns) = per_watch.entry(key).or_default();
            *count += 1;
            *oldest_ns = (*oldest_ns).max(o.age_ns);
        }
        let counts = per_watch
            .iter()
            .map(|(key, &(count, _))| (orphan_labels(key), count as f64));
        let opened = per_watch.iter().map(|(key, &(count, oldest_ns))| {
            let when = if count == 0 {
                0.0
            } else {
                opened_unix(now_unix, oldest_ns)
            };
            (orphan_labels(key), when)
        });
        [family(&ORPHANED, counts), family(&ORPHAN_OPENED, opened)]
    }
}

/// The label values of an orphan series: its watch and cause.
fn orphan_labels<'a>((watch, cause): &'a (String, &'a str)) -> [&'a str; 2] {
    [watch.as_str(), cause]
}

/// Now on the wall clock, in Unix seconds.
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// When an orphan `age_ns` old at `now_unix` became one, in Unix seconds. The engine keeps
/// time on the boot clock, which has no epoch: the age (`now_boot - since_boot`) subtracted
/// from the wall clock's now gives the start on the wall clock.
fn opened_unix(now_unix: f64, age_ns: u64) -> f64 {
    now_unix - age_ns as f64 / 1e9
}

/// The engine's table sizes and its eviction and ignored-input totals.
fn engine_stats(stats: &Stats) -> [MetricFamily; 5] {
    let evictions = counts(&stats.evictions);
    let ignored = counts(&stats.ignored);
    [
        single(&ENGINE_SOCKETS, stats.sockets as f64),
        single(&ENGINE_LIVE, stats.live_sockets as f64),
        single(&ENGINE_PROCS, stats.procs as f64),
        family(&ENGINE_EVICTIONS, named(&evictions)),
        family(&ENGINE_IGNORED, named(&ignored)),
    ]
}

/// One series per named count, labelled with its name.
fn named(counts: &[(String, u64)]) -> impl Iterator<Item = ([&str; 1], f64)> {
    counts.iter().map(|(name, n)| ([name.as_str()], *n as f64))
}

/// Entries and capacity of the first [`MAX_MAPS`] maps.
fn map_fill(maps: &[MapFill]) -> [MetricFamily; 2] {
    let maps = &maps[..maps.len().min(MAX_MAPS)];
    [
        family(
            &MAP_ENTRIES,
            maps.iter().map(|m| ([m.map], m.entries as f64)),
        ),
        family(
            &MAP_CAPACITY,
            maps.iter().map(|m| ([m.map], m.capacity as f64)),
        ),
    ]
}

impl Collector for EngineCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Some(source) = self.source.upgrade() else {
            return Vec::new();
        };
        let snapshot = source.snapshot();
        // Read right after the snapshot, whose orphan ages were taken on the boot clock now.
        let now_unix = unix_now();
        let mut families = Vec::with_capacity(ENGINE_SPECS.len());
        families.extend(self.orphans(&snapshot.orphans, now_unix));
        families.extend(engine_stats(&snapshot.stats));
        families.extend(map_fill(&snapshot.maps));
        families
    }
}
