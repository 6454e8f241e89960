//! `sockwatch replay` as the tests run it on an events file a test's agent wrote.
use std::{path::Path, process::Command};

use serde_json::Value;

use super::agent::sockwatch_bin;

/// The lines `sockwatch replay EVENTS ARGS` writes (the verdicts it decides, one JSON object
/// each); it must exit cleanly.
pub fn lines(events: &Path, args: &[&str]) -> Vec<String> {
    let out = Command::new(sockwatch_bin())
        .arg("replay")
        .arg(events)
        .args(args)
        .output()
        .expect("run sockwatch replay");
    assert!(
        out.status.success(),
        "replay: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// [`lines`], parsed: the verdicts.
pub fn verdicts(events: &Path, args: &[&str]) -> Vec<Value> {
    lines(events, args)
        .iter()
        .map(|l| serde_json::from_str(l).expect("a verdict line"))
        .collect()
}
