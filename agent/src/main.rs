use std::{process::ExitCode, time::Duration};

use anyhow::Context as _;
use clap::Parser as _;
use sockwatch::{
    cli::{CheckArgs, Cli, Command, RunArgs},
    loader::{self, LoadOptions, Probes},
    output::JsonLines,
    preflight,
    probes::PROBES,
};
use tokio::signal::unix::{SignalKind, signal};

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::new().filter_or("SOCKWATCH_LOG", "info")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run(args),
        Command::Check(args) => check(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sockwatch: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    preflight::prepare()?;
    let mut out = JsonLines::open(&args.events)
        .with_context(|| format!("cannot open --events {}", args.events.display()))?;
    let mut probes = Probes::load(&LoadOptions {
        mode: args.probe_mode,
        ignore_tgid: std::process::id(),
        wakeup_bytes: 64 * agent_common::Event::SIZE as u64,
    })?;
    for r in &probes.report {
        log::info!("attached {}", r.summary());
    }
    let reader = probes.events()?;
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
        sockwatch::pump::pump(
            reader,
            &mut out,
            Duration::from_millis(args.drain_interval_ms),
            shutdown,
        )
        .await
    })?;
    let counters = probes.counters()?;
    let counters: Vec<String> = counters
        .iter()
        .map(|(c, n)| format!("{}={n}", c.name()))
        .collect();
    log::info!(
        "stopping: {} events delivered, {} malformed; kernel counters: {}",
        stats.delivered,
        stats.decode_errors,
        counters.join(" ")
    );
    drop(probes); // detaches every program
    Ok(())
}

fn check(args: CheckArgs) -> anyhow::Result<()> {
    preflight::prepare()?;
    let table = loader::probe_support()?;
    println!("{:<10} {:<12} {:<10} detail", "hook", "tier", "supported");
    for (hook, tiers) in &table {
        for (tier, result) in tiers {
            let (ok, detail) = match result {
                Ok(()) => ("yes", String::new()),
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
