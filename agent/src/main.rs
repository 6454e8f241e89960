use std::{process::ExitCode, time::Duration};

use anyhow::Context as _;
use clap::Parser as _;
use sockwatch::{
    cli::{CheckArgs, Cli, Command, ReplayArgs, RunArgs, ScanArgs},
    engine::{Engine, Limits},
    loader::{self, LoadOptions, Probes},
    output::JsonLines,
    pipeline::Pipeline,
    preflight,
    probes::PROBES,
    pump::Sweep,
    reconcile,
    scan::{self, ScanOptions},
    watch::{self, WatchedDir},
};
use tokio::signal::unix::{SignalKind, signal};

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::new().filter_or("SOCKWATCH_LOG", "info")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run(args),
        Command::Check(args) => check(args),
        Command::Replay(args) => replay(args),
        Command::Scan(args) => {
            return scan(args).unwrap_or_else(|e| {
                eprintln!("sockwatch: {e:#}");
                ExitCode::from(2)
            });
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sockwatch: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `sockwatch scan`: exit status 0 when clean, 1 when something is wrong; the caller makes
/// an error 2, as clap does for bad flags.
fn scan(args: ScanArgs) -> anyhow::Result<ExitCode> {
    use std::io::Write as _;

    use sockwatch::scan::{self, report};

    let r = scan::scan(&scan::ScanOptions {
        watch: args.watch,
        ..Default::default()
    })?;
    let mut out = std::io::stdout().lock();
    match args.format {
        report::Format::Table => report::write_table(&r, &mut out)?,
        report::Format::Json => report::write_json(&r, &mut out)?,
    }
    out.flush()?;
    for w in &r.warnings {
        eprintln!("sockwatch scan: could not see everything: {w}");
    }
    if args.format == report::Format::Table {
        eprintln!("sockwatch scan: {}", report::summary(&r));
    }
    Ok(if r.findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let mut watches = args
        .watch
        .iter()
        .map(|p| watch::resolve(p))
        .collect::<Result<Vec<_>, _>>()?;
    preflight::prepare()?;
    let out = JsonLines::open(&args.events)
        .with_context(|| format!("cannot open --events {}", args.events.display()))?;
    let mut probes = Probes::load(&LoadOptions {
        mode: args.probe_mode,
        ignore_tgid: std::process::id(),
        wakeup_bytes: 64 * agent_common::Event::SIZE as u64,
        watch: watches.clone(),
    })?;
    for r in &probes.report {
        log::info!("attached {}", r.summary());
    }
    let reader = probes.events()?;
    let engine = Engine::new(Limits::default())?;
    let mut pipeline = Pipeline::live(engine, out, probes.live_table()?);
    // After attaching, so a socket bound meanwhile is in the scan or in the events.
    let scan_opts = ScanOptions {
        watch: args.watch.clone(),
        ..Default::default()
    };
    let started = reconcile::boot_ns();
    match scan::scan(&scan_opts) {
        Ok(report) => {
            let seeded = pipeline.reconcile(started, &report)?;
            pipeline.flush()?;
            for w in &report.warnings {
                log::warn!("startup scan could not see everything: {w}");
            }
            log::info!(
                "startup scan: {} path sockets, {} findings, {seeded} added to the kernel's live table",
                report.sockets.len(),
                report.findings.len()
            );
        }
        Err(e) => log::warn!("startup scan failed, continuing on kernel events alone: {e}"),
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let stats = rt.block_on(async {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let shutdown = async {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        };
        log::info!("running; stop with SIGINT or SIGTERM");
        let drain_every = Duration::from_millis(args.drain_interval_ms);
        let (sweep_tx, sweeps) = tokio::sync::mpsc::channel(1);
        if args.scan_interval_secs > 0 {
            tokio::spawn(sweep_periodically(
                scan_opts,
                Duration::from_secs(args.scan_interval_secs),
                sweep_tx,
            ));
        }
        let pump = sockwatch::pump::pump(reader, &mut pipeline, drain_every, sweeps, shutdown);
        tokio::select! {
            r = pump => r,
            _ = refresh_watches(&mut probes, &mut watches) => unreachable!("refresh never ends"),
        }
    })?;
    log::info!(
        "stopping: {} events delivered, {} malformed; kernel counters: {}",
        stats.delivered,
        stats.decode_errors,
        probes.counters()?.summary()
    );
    drop(probes); // detaches every program
    Ok(())
}

fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    let input: Box<dyn std::io::BufRead> = if args.file == std::path::Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(&args.file)
            .with_context(|| format!("cannot open {}", args.file.display()))?;
        Box::new(std::io::BufReader::new(f))
    };
    let mut pipeline = Pipeline::replay(
        Engine::new(Limits::default())?,
        JsonLines::open(std::path::Path::new("-"))?,
    );
    let stats = sockwatch::replay::replay(input, &mut pipeline)
        .with_context(|| format!("replay {}", args.file.display()))?;
    log::info!(
        "replayed {} events ({} recorded verdict lines skipped)",
        stats.events,
        stats.recorded_verdicts
    );
    Ok(())
}

/// Reconciliation sweeps, off the event path (a scan reads /proc and sock_diag).
async fn sweep_periodically(
    opts: ScanOptions,
    every: Duration,
    tx: tokio::sync::mpsc::Sender<Sweep>,
) {
    let mut tick = tokio::time::interval(every);
    tick.tick().await; // the startup scan just ran
    loop {
        tick.tick().await;
        let opts = opts.clone();
        let started = reconcile::boot_ns();
        match tokio::task::spawn_blocking(move || scan::scan(&opts)).await {
            Ok(Ok(report)) => {
                if tx.send((started, report)).await.is_err() {
                    return;
                }
            }
            Ok(Err(e)) => log::warn!("sweep failed: {e}"),
            Err(e) => log::warn!("sweep task failed: {e}"),
        }
    }
}

/// A watched directory deleted and re-created has a new identity: the kernel adopts it on the
/// first bind below it; this catches up for the rest (and for a re-created parent).
async fn refresh_watches(probes: &mut Probes, watches: &mut [WatchedDir]) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        for w in watches.iter_mut() {
            let Ok(now) = watch::resolve(&w.path) else {
                continue;
            };
            if now != *w {
                match probes.watch(&now) {
                    Ok(()) => log::info!(
                        "watch {}: directory re-created, following it",
                        w.path.display()
                    ),
                    Err(e) => log::warn!("watch {}: {e}", w.path.display()),
                }
                *w = now;
            }
        }
    }
}

fn check(args: CheckArgs) -> anyhow::Result<()> {
    preflight::prepare()?;
    let table = loader::probe_support()?;
    println!("{:<10} {:<12} {:<10} detail", "hook", "tier", "supported");
    for (hook, tiers) in &table {
        for (tier, result) in tiers {
            let (ok, detail) = match result {
                Ok(degraded) if degraded.is_empty() => ("yes", String::new()),
                Ok(degraded) => ("partial", format!("degraded: {}", degraded.join("; "))),
                Err(why) => ("no", why.clone()),
            };
            println!(
                "{:<10} {:<12} {:<10} {detail}",
                hook.name(),
                tier.name(),
                ok
            );
        }
    }
    for spec in PROBES {
        let supported = &table
            .iter()
            .find(|(h, _)| *h == spec.hook)
            .expect("same table")
            .1;
        let chosen = args.probe_mode.candidates(spec).into_iter().find(|t| {
            supported
                .iter()
                .any(|(tier, r)| *tier == t.tier && r.is_ok())
        });
        match chosen {
            Some(t) => println!("run would attach {}: {}", spec.hook.name(), t.tier.name()),
            None => println!(
                "run would fail for {}: no supported tier in this mode",
                spec.hook.name()
            ),
        }
    }
    Ok(())
}
