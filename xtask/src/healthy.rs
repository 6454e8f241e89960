//! The healthy-node run (sockwatch/tests/it/healthy_node.rs): ten minutes of reloads and restarts
//! under the agent and Prometheus, mostly waiting. The suite starts it before the static
//! checks and collects it after the soak (each keeps the cores busy), so it costs little wall
//! time.
use std::{
    fs::File,
    path::PathBuf,
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use serde_json::Value;

use crate::{cmd, testrun, vm};

const TEST: &str = "healthy_node::ten_minutes_of_healthy_reloads_and_restarts_page_nothing_and_seed_001_still_does";

/// The run, going on in the background; its output goes to `log`.
pub struct Running {
    child: Child,
    log: PathBuf,
    started: Instant,
}

/// How the run went.
pub struct Finished {
    pub counts: testrun::Counts,
    /// Why it failed, if it did.
    pub failure: Option<String>,
    pub took: Duration,
    pub output: String,
}

/// Builds the test binary, then starts the one test in it.
pub fn start() -> anyhow::Result<Running> {
    let binary = build()?;
    let log = cmd::workspace_root().join("target/healthy-node.log");
    let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let child = cmd::command(&binary)
        .args(["--ignored", "--exact", TEST, "--nocapture"])
        .env("SOCKWATCH_REQUIRE_TIERS", "tracepoint")
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    println!(
        "xtask: healthy node: started (pid {}), output in {}",
        child.id(),
        log.display()
    );
    Ok(Running {
        child,
        log,
        started: Instant::now(),
    })
}

impl Running {
    /// Waits for the end and prints its output.
    pub fn finish(mut self) -> Finished {
        let status = self.child.wait();
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        println!("{text}");
        let counts = testrun::sum_results(&text);
        let failure = match status {
            Ok(s) if s.success() && counts.passed == 1 => None,
            Ok(s) if s.success() => Some("the healthy-node test did not run".to_owned()),
            Ok(s) => Some(format!("the healthy-node test failed ({s})")),
            Err(e) => Some(format!("waiting for the healthy-node test: {e}")),
        };
        Finished {
            counts,
            failure,
            took: self.started.elapsed(),
            output: text,
        }
    }
}

/// `cargo test --no-run` for the integration-test binary; the path of its executable.
fn build() -> anyhow::Result<PathBuf> {
    let out = cmd::output(cmd::cargo().args([
        "test",
        "-p",
        "sockwatch",
        "--test",
        vm::INTEGRATION_TESTS,
        "--no-run",
        "--message-format=json",
    ]))?;
    out.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| {
            m["reason"] == "compiler-artifact" && m["target"]["name"] == vm::INTEGRATION_TESTS
        })
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .context("cargo built no sockwatch/tests/it/it executable")
}
