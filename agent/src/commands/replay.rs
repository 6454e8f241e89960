//! `sockwatch replay`: a recorded event log through the engine again.
use anyhow::Context as _;

use crate::{
    cli::ReplayArgs,
    engine::{Engine, Limits},
    pipeline::{Pipeline, output::JsonLines, replay},
};

/// Writes the verdicts the engine derives from the log's events.
pub fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    let input: Box<dyn std::io::BufRead> = if args.file == std::path::Path::new("-") {
        Box::new(std::io::stdin().lock())
    } else {
        let f = std::fs::File::open(&args.file)
            .with_context(|| format!("cannot open {}", args.file.display()))?;
        Box::new(std::io::BufReader::new(f))
    };
    let mut pipeline = Pipeline::replay(
        Engine::new(Limits::default())?.with_takeover_window(
            u64::try_from(args.takeover_window.as_nanos()).unwrap_or(u64::MAX),
        ),
        JsonLines::new(Box::new(std::io::stdout())),
    );
    let stats = replay::replay(input, &mut pipeline)
        .with_context(|| format!("replay {}", args.file.display()))?;
    log::info!(
        "replayed {} events ({} recorded verdict and {} notice lines skipped)",
        stats.events,
        stats.recorded_verdicts,
        stats.recorded_notices
    );
    Ok(())
}
