//! `sockwatch run`: probes, pipeline, reconciliation sweeps, and the HTTP endpoint, wired.
use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use super::guard;
use crate::{
    cli::RunArgs,
    config::{self, Config, Overrides},
    engine::{Engine, Limits},
    host::{clock, lookup},
    http::{self, Api, ApiAccess, Dropped, HttpLimits},
    kernel::{
        counters::KernelCounters,
        loader::{EventReader, LoadOptions, Probes},
        probes::{Hook, Missed as _},
        watch::{self, WatchedDir},
    },
    metrics::{EngineSnapshot, EngineSource, GuardState, KernelSource, MapFill, Metrics, Scan},
    pipeline::{
        Pipeline,
        events_file::Trigger,
        lock,
        notice::{Notice, ScanHealth},
        observer::Counted,
        output::{self, JsonLines, Stamp},
        pump::{self, Sweep},
    },
    scan::{self, ScanOptions, ScanReport},
};
use anyhow::Context as _;
use tokio::signal::unix::{SignalKind, signal};

/// The configuration file merged with flags and environment (which win).
fn settle(args: &RunArgs) -> anyhow::Result<Config> {
    let base = match &args.config {
        Some(path) => config::load(path)?,
        None => Config::default(),
    };
    let merged = base.merge(Overrides::from(args))?;
    if let Some(format) = merged.log_format {
        crate::logging::set_from_config(format);
    }
    Ok(merged)
}

/// Runs the agent until SIGTERM or SIGINT; SIGHUP reopens the events file.
pub fn run(args: RunArgs) -> anyhow::Result<()> {
    // Until the handler that reopens the events file is installed: a logrotate's SIGHUP
    // during the start-up must not kill the agent (the default action).
    // SAFETY: signal(2) with SIG_IGN takes no pointers; the handler installed later replaces it.
    unsafe { libc::signal(libc::SIGHUP, libc::SIG_IGN) };
    lookup::allow_network_filesystems(args.lookup_network_filesystems);
    let config = Arc::new(settle(&args)?);
    let watches = resolve_watches(&config)?;
    // Before the probes load and the start-up scan runs: a taken port fails in a moment.
    let listener = config.listen.map(bind_listen).transpose()?;
    crate::kernel::preflight::prepare()?;
    let out = JsonLines::open(&args.events, config.events_file_mode)
        .with_context(|| format!("cannot open --events {}", args.events.display()))?
        .stamped(Stamp::new(output::node_name()))
        .formatted(args.events_format());
    let mut probes = attach(&args, &config, &watches)?;
    let metrics = Arc::new(Metrics::new());
    metrics.watches(config.watch_names());
    for (w, dir) in config.watches.iter().zip(&watches) {
        metrics.watch_missing(&w.name, dir.is_missing());
    }
    metrics.probes(&probes.report);
    let guard_state = guard::start(&mut probes, &config, &metrics)?;
    let reader = probes.events()?;
    let mut pipeline = live_pipeline(&mut probes, out, &metrics, &config)?;
    // After attaching, so a socket bound meanwhile is in the scan or in the events.
    let scan_opts = ScanOptions {
        watch: config.watches.iter().map(|w| w.path.clone()).collect(),
        ..Default::default()
    };
    let scan_health = startup_scan(&mut pipeline, &metrics, &config, &scan_opts)?;
    let shared = Arc::new(Shared {
        metrics,
        pipeline: Arc::new(Mutex::new(pipeline)),
        probes: Arc::new(Mutex::new(probes)),
    });
    shared.metrics.collect_kernel(&shared.probes);
    shared
        .metrics
        .collect_engine(&shared.pipeline, config.clone());
    let running = Running {
        shared: shared.clone(),
        config,
        watches,
        guard_state,
        scan_opts,
        scan_health,
    };
    let stats = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(running.until_stopped(reader, listener))?;
    let probes = lock(&shared.probes);
    log::info!(
        "stopping: {} events delivered, {} malformed; kernel counters: {}",
        stats.delivered,
        stats.decode_errors,
        probes.counters()?.summary()
    );
    Ok(()) // dropping the probes detaches every program
}

/// The configured watches, resolved (a missing directory is watched from its creation).
fn resolve_watches(config: &Config) -> anyhow::Result<Vec<WatchedDir>> {
    let watches: Vec<WatchedDir> = config
        .watches
        .iter()
        .enumerate()
        .map(|(i, w)| watch::resolve(&w.path).map(|d| d.in_slot(i)))
        .collect::<Result<_, _>>()?;
    for w in watches.iter().filter(|w| w.is_missing()) {
        log::warn!(
            "watch {}: directory does not exist yet; waiting for it (watched from its creation)",
            w.path.display()
        );
    }
    Ok(watches)
}

/// The pipeline over the attached probes: told which hooks have no tier (and says so in
/// notices), counted in `metrics`.
fn live_pipeline(
    probes: &mut Probes,
    out: JsonLines,
    metrics: &Arc<Metrics>,
    config: &Arc<Config>,
) -> anyhow::Result<Pipeline> {
    let engine = Engine::new(Limits::default())?
        .with_takeover_window(config.takeover_window_ns())
        .with_scope(config.scope());
    let mut pipeline = Pipeline::live(engine, out, probes.live_table()?);
    pipeline.filter_output(config.events_filter);
    if probes.coverage.missing().contains(&Hook::Release) {
        pipeline.without_release_hook();
    }
    // The tracepoint tier of the receive hook is the sweeps: no program sees a receipt.
    let receipts_seen = probes.report.iter().any(|r| {
        r.hook == Hook::Receive
            && r.attached
                .is_some_and(|t| t != sockwatch_common::Tier::Tracepoint)
    });
    if !receipts_seen {
        pipeline.without_receive_hook();
    }
    pipeline.observe(Counted {
        metrics: metrics.clone(),
        config: config.clone(),
    });
    let now = clock::boot_ns();
    let missing: Vec<Notice> = probes
        .report
        .iter()
        .filter_map(|r| Notice::hook_missing(r, now))
        .collect();
    pipeline.notices(&missing)?;
    Ok(pipeline)
}

/// What the running agent's tasks share once the start-up is done.
struct Running {
    shared: Arc<Shared>,
    config: Arc<Config>,
    watches: Vec<WatchedDir>,
    guard_state: GuardState,
    scan_opts: ScanOptions,
    scan_health: ScanHealth,
}

impl Running {
    /// Serves HTTP, sweeps, follows the watches, the guard's signals and SIGHUP, and pumps
    /// the ring buffer until SIGTERM or SIGINT.
    async fn until_stopped(
        self,
        reader: EventReader,
        listener: Option<std::net::TcpListener>,
    ) -> anyhow::Result<pump::PumpStats> {
        let Running {
            shared,
            config,
            watches,
            guard_state,
            scan_opts,
            scan_health,
        } = self;
        let shutdown = shutdown_signal()?;
        let hangup = signal(SignalKind::hangup())?;
        let guard_signals = guard::Signals::register()?;
        if let Some(listener) = listener {
            let access = match config.api_remote {
                true => ApiAccess::Everyone,
                false => ApiAccess::Loopback,
            };
            serve_http(listener, shared.clone(), access)?;
        }
        let (sweep_tx, sweeps) = tokio::sync::mpsc::channel(1);
        if !config.scan_interval.is_zero() {
            tokio::spawn(sweep_periodically(
                scan_opts,
                config.clone(),
                shared.clone(),
                scan_health,
                sweep_tx,
            ));
        }
        log::info!("running; stop with SIGINT or SIGTERM (SIGHUP reopens the events file)");
        let pump = pump::pump(
            reader,
            &shared.pipeline,
            config.drain_interval,
            sweeps,
            shutdown,
            || shared.probes.counters(),
        );
        tokio::select! {
            r = pump => r.map_err(anyhow::Error::from),
            _ = refresh_watches(&shared.probes, &shared.metrics, &config, watches) => {
                unreachable!("refresh never ends")
            }
            _ = guard_signals.follow(&shared.probes, &shared.metrics, guard_state) => {
                unreachable!("the guard's signals never end")
            }
            _ = follow_events_file(&shared.pipeline, hangup) => {
                unreachable!("following the events file never ends")
            }
        }
    }
}

/// Resolves on the first SIGTERM or SIGINT (both are registered at once).
fn shutdown_signal() -> std::io::Result<impl Future<Output = ()>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

/// Reopens the events file on SIGHUP, and checks once a second that its path still leads to
/// the open file (renamed or removed, it is reopened: see `pipeline::events_file`).
async fn follow_events_file(pipeline: &Mutex<Pipeline>, mut hangup: tokio::signal::unix::Signal) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await; // just opened
    loop {
        let trigger = tokio::select! {
            Some(()) = hangup.recv() => Trigger::Hangup,
            _ = tick.tick() => Trigger::Check,
        };
        lock(pipeline).follow_events_file(trigger);
    }
}

/// Loads and attaches the probes, saying what each hook got and what a missing one costs.
fn attach(args: &RunArgs, config: &Config, watches: &[WatchedDir]) -> anyhow::Result<Probes> {
    let probes = Probes::load(&LoadOptions {
        mode: args.probe_mode,
        ignore_tgid: std::process::id(),
        // A wakeup is an IPI (a VM exit on a virtual node) and a reader woken for a few dozen
        // records: the drain timer empties the ring long before a quarter of it fills at any
        // rate the probes reach (~10k records: 66 ms at 150k events/s), so a wakeup is only
        // the safety net of a burst or a long --drain-interval.
        wakeup_bytes: u64::from(sockwatch_common::maps::EVENTS_BYTES / 4),
        watch: watches.to_vec(),
        require_all_hooks: config.require_all_hooks,
        live_capacity: config.live_capacity,
        guard: crate::kernel::guard::wanted(&config.guard_slots()),
        stand_ins: args.stand_ins.clone(),
    })?;
    log::info!("kernel helpers: {}", probes.features.summary());
    log::info!("probes loaded in {}", probes.timings.summary());
    log::info!(
        "directories outside the watches remembered: {}",
        probes.unwatched_cache.summary()
    );
    for r in &probes.report {
        match r.attached {
            Some(_) => log::info!("attached {}", r.summary()),
            None => log::warn!(
                "{}: no probe tier attached, running without it: {} ({})",
                r.hook.name(),
                r.hook.missed_without(),
                r.summary()
            ),
        }
    }
    Ok(probes)
}

/// The scan after attaching (so a socket bound meanwhile is in the scan or in the events):
/// seeds the engine and the kernel's live table. A failed scan is logged, not fatal; the
/// sweeps carry its failure on.
fn startup_scan(
    pipeline: &mut Pipeline,
    metrics: &Metrics,
    config: &Config,
    opts: &ScanOptions,
) -> anyhow::Result<ScanHealth> {
    let started = clock::boot_ns();
    let clock = Instant::now();
    let report = match scan_present(opts) {
        Some(Ok(report)) => report,
        Some(Err(e)) => {
            log::warn!(
                "startup scan failed, continuing on kernel events alone (sockets bound before \
                 the start stay unknown until a sweep succeeds): {e}"
            );
            metrics.scan_failed(Scan::Startup);
            let (health, notice) = ScanHealth::startup_failed(e.to_string(), clock::boot_ns());
            pipeline.notices([&notice])?;
            return Ok(health);
        }
        None => {
            log::info!("startup scan skipped: no watched directory exists yet");
            return Ok(ScanHealth::default());
        }
    };
    let seeded = pipeline.reconcile(started, &report)?;
    pipeline.flush()?;
    record_scan(metrics, config, Scan::Startup, clock.elapsed(), &report);
    for w in &report.warnings {
        log::warn!("startup scan could not see everything: {w}");
    }
    for m in &report.findings.socket_file_mounts {
        log::info!(
            "risk: live socket file {} bind-mounted at {} in mount ns {} (pid {}): stale after \
             its daemon restarts; {}",
            m.source,
            m.mount_point,
            m.mntns,
            m.pid,
            m.fix
        );
    }
    log::info!(
        "startup scan: {} path sockets, {} findings, {seeded} added to the kernel's live table, \
         in {} ms",
        report.sockets.len(),
        report.findings.len(),
        clock.elapsed().as_millis()
    );
    Ok(ScanHealth::default())
}

/// Binds the HTTP endpoint before the probes load: a taken port stops the agent at once.
fn bind_listen(addr: std::net::SocketAddr) -> anyhow::Result<std::net::TcpListener> {
    http::bind(addr).with_context(|| format!("cannot listen on {addr}"))
}

/// Serves the endpoint on `listener`, bound at the start, on a thread of its own: the health
/// routes answer even while the event path waits (a lookup's deadline, a slow output), and
/// the agent's exit does not wait for it.
fn serve_http(
    listener: std::net::TcpListener,
    api: Arc<dyn Api>,
    access: ApiAccess,
) -> anyhow::Result<()> {
    let addr = listener.local_addr()?;
    let api_to = match access {
        ApiAccess::Loopback => "loopback clients only (api_remote = true exposes it)",
        ApiAccess::Everyone => "every client (api_remote)",
    };
    log::info!("serving /metrics, /healthz and /readyz on {addr}, and /api to {api_to}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("http".into())
        .spawn(move || {
            let served = rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener)?;
                http::serve(listener, api, HttpLimits::default(), access).await
            });
            if let Err(e) = served {
                log::error!("HTTP endpoint stopped: {e}");
            }
        })?;
    Ok(())
}

fn record_scan(
    metrics: &Metrics,
    config: &Config,
    kind: Scan,
    took: Duration,
    report: &ScanReport,
) {
    let f = &report.findings;
    metrics.scan(
        kind,
        took.as_secs_f64(),
        f.stale_bind_mounts.len(),
        f.stale_socket_files.len(),
    );
    // The scan's watches are the configured ones, in order.
    metrics.socket_file_mounts(f.socket_file_mounts.iter().map(|m| {
        m.watch
            .and_then(|i| config.watches.get(i))
            .map_or("", |w| w.name.as_str())
    }));
}

/// What the HTTP endpoint reads: everything behind locks held only briefly. The metrics
/// read the probes and the pipeline when scraped (see the two sources below).
struct Shared {
    metrics: Arc<Metrics>,
    pipeline: Arc<Mutex<Pipeline>>,
    probes: Arc<Mutex<Probes>>,
}

impl KernelSource for Mutex<Probes> {
    fn counters(&self) -> Option<KernelCounters> {
        lock(self).counters().ok()
    }
}

impl EngineSource for Mutex<Pipeline> {
    fn snapshot(&self) -> EngineSnapshot {
        let mut p = lock(self);
        let live = p.live_table().map(|live| MapFill {
            map: "LIVE",
            entries: live.entries() as u64,
            capacity: u64::from(live.capacity),
        });
        EngineSnapshot {
            stats: p.engine.stats(),
            orphans: p.engine.orphans(clock::boot_ns()),
            maps: live.into_iter().collect(),
        }
    }
}

impl Api for Shared {
    fn metrics(&self) -> String {
        self.metrics.render()
    }

    fn ready(&self) -> bool {
        // The endpoint is served only once probes are attached and the startup scan ran.
        true
    }

    fn dropped(&self, why: Dropped) {
        self.metrics.http_dropped(why);
    }

    fn sockets(&self, path: Option<&str>) -> serde_json::Value {
        let p = lock(&self.pipeline);
        match path {
            Some(path) => serde_json::to_value(p.path_answer(path)).expect("plain data serializes"),
            None => serde_json::json!({ "orphans": p.engine.orphans(clock::boot_ns()) }),
        }
    }

    fn verdicts(&self, limit: usize) -> serde_json::Value {
        let p = lock(&self.pipeline);
        let recent: Vec<_> = p.recent().collect();
        serde_json::json!(recent.into_iter().rev().take(limit).collect::<Vec<_>>())
    }
}

/// Reconciliation sweeps, off the event path (a scan reads /proc and sock_diag). A failure
/// for a new reason, and the recovery, are notices as well as log lines.
async fn sweep_periodically(
    opts: ScanOptions,
    config: Arc<Config>,
    shared: Arc<Shared>,
    mut health: ScanHealth,
    tx: tokio::sync::mpsc::Sender<Sweep>,
) {
    let mut tick = tokio::time::interval(config.scan_interval);
    tick.tick().await; // the startup scan just ran
    loop {
        tick.tick().await;
        let opts = opts.clone();
        let started = clock::boot_ns();
        let clock = Instant::now();
        match tokio::task::spawn_blocking(move || scan_present(&opts)).await {
            Ok(None) => log::debug!("sweep skipped: no watched directory exists yet"),
            Ok(Some(Ok(report))) => {
                notify(&shared.pipeline, health.succeeded(clock::boot_ns()));
                let took = clock.elapsed();
                record_scan(&shared.metrics, &config, Scan::Periodic, took, &report);
                if tx.send((started, report)).await.is_err() {
                    return;
                }
            }
            Ok(Some(Err(e))) => {
                notify(
                    &shared.pipeline,
                    health.failed(e.to_string(), clock::boot_ns()),
                );
                shared.metrics.scan_failed(Scan::Periodic);
            }
            Err(e) => {
                let why = format!("sweep task: {e}");
                notify(&shared.pipeline, health.failed(why, clock::boot_ns()));
                shared.metrics.scan_failed(Scan::Periodic);
            }
        }
    }
}

/// Writes a sweep's notice, if it has one.
fn notify(pipeline: &Mutex<Pipeline>, notice: Option<Notice>) {
    let Some(n) = notice else {
        return;
    };
    if let Err(e) = lock(pipeline).notices([&n]) {
        log::warn!("writing a notice: {e}");
    }
}

/// A scan of the watched paths that exist now: a missing one is waited for, not an error.
/// `None` when paths are watched and none exists (a scan without them would cover the whole
/// node). The findings' watch indices are the configured ones.
fn scan_present(opts: &ScanOptions) -> Option<Result<ScanReport, scan::ScanError>> {
    let present: Vec<usize> = (0..opts.watch.len())
        .filter(|&i| opts.watch[i].exists())
        .collect();
    if present.is_empty() && !opts.watch.is_empty() {
        return None;
    }
    let only = ScanOptions {
        watch: present.iter().map(|&i| opts.watch[i].clone()).collect(),
        ..opts.clone()
    };
    Some(scan::scan(&only).map(|mut report| {
        for m in &mut report.findings.socket_file_mounts {
            m.watch = m.watch.and_then(|i| present.get(i).copied());
        }
        report
    }))
}

/// A watched directory created after the start, or deleted and re-created, has a new
/// identity: the kernel adopts it on the first bind below it where its parent is known; this
/// catches up for the rest (a deeper missing path, a re-created parent) within a second.
async fn refresh_watches(
    probes: &Mutex<Probes>,
    metrics: &Metrics,
    config: &Config,
    mut watches: Vec<WatchedDir>,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        for (i, (w, c)) in watches.iter_mut().zip(&config.watches).enumerate() {
            let Ok(now) = watch::resolve(&w.path).map(|d| d.in_slot(i)) else {
                continue;
            };
            if now == *w {
                continue;
            }
            match lock(probes).watch(&now) {
                Ok(()) => log::info!(
                    "watch {}: {}",
                    w.path.display(),
                    match (w.is_missing(), now.is_missing()) {
                        (true, false) => "directory created, watching it",
                        (false, true) => "directory removed, waiting for it",
                        _ => "directory re-created, following it",
                    }
                ),
                Err(e) => log::warn!("watch {}: {e}", w.path.display()),
            }
            metrics.watch_missing(&c.name, now.is_missing());
            *w = now;
        }
    }
}
