//! `sockwatch replay`: a recorded event log through the engine again.
use anyhow::Context as _;

use crate::{
    cli::ReplayArgs,
    config::{self, Config, Overrides},
    engine::{Engine, Limits},
    pipeline::{Pipeline, output::JsonLines, replay},
};

/// The recording agent's settings: its config file, the flags over it.
fn settle(args: &ReplayArgs) -> anyhow::Result<Config> {
    let base = match &args.config {
        Some(path) => config::load(path)?,
        None => Config::default(),
    };
    let flags = Overrides {
        watches: args.watch.clone(),
        takeover_window: args.takeover_window,
        ..Overrides::default()
    };
    Ok(base.merge(flags)?)
}

/// Writes the verdicts the engine derives from the log's events, kept to the recording
/// agent's watches as `run` keeps them.
pub fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    let input: Box<dyn std::io::BufRead> = if args.file == std::path::Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(&args.file)
            .with_context(|| format!("cannot open {}", args.file.display()))?;
        Box::new(std::io::BufReader::new(f))
    };
    let config = settle(&args)?;
    let engine = Engine::new(Limits::default())?
        .with_takeover_window(config.takeover_window_ns())
        .with_scope(config.scope());
    let mut pipeline = Pipeline::replay(engine, JsonLines::new(Box::new(std::io::stdout())));
    let stats = replay::replay(input, &mut pipeline)
        .with_context(|| format!("replay {}", args.file.display()))?;
    log::info!(
        "replayed {} events and {} checked facts ({} recorded verdict and {} notice lines \
         skipped)",
        stats.events,
        stats.facts,
        stats.recorded_verdicts,
        stats.recorded_notices
    );
    Ok(())
}
