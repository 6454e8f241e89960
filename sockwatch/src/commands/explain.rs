//! `sockwatch explain PATH`: the running agent's view of one path, else a scan's.
#![deny(clippy::string_slice, clippy::indexing_slicing)]
use std::io::Write as _;

use anyhow::Context as _;

use crate::{
    cli::ExplainArgs,
    http::client,
    scan::{self, OnDisk, ScanOptions, ScanReport},
    text::{
        Format,
        timeline::{self, PathAnswer},
    },
};

/// Prints the agent's answer for `args.path`, or one from a scan of the node.
pub fn explain(args: ExplainArgs) -> anyhow::Result<()> {
    let path = args.path.to_str().context("the path is not UTF-8")?;
    let route = format!("/api/sockets?path={}", client::percent_encode(path));
    let lines = match client::get(args.agent, &route) {
        Ok(body) => from_agent(&body, args.format)?,
        Err(e) => {
            log::info!(
                "no agent answered at {}: {e}; scanning the node instead",
                args.agent
            );
            from_scan(path, &scan::scan(&ScanOptions::default())?, args.format)
        }
    };
    let mut out = std::io::stdout().lock();
    for line in lines {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// The agent's answer: as it came (json), or its timeline (text).
fn from_agent(body: &str, format: Format) -> anyhow::Result<Vec<String>> {
    Ok(match format {
        Format::Json => vec![body.trim_end().to_owned()],
        Format::Text => {
            let answer: PathAnswer =
                serde_json::from_str(body).context("the agent's answer is not a path's")?;
            timeline::timeline(&answer)
        }
    })
}

/// What the scan shows at `path`, and what is there on the filesystem now: one JSON object,
/// or lines.
fn from_scan(path: &str, report: &ScanReport, format: Format) -> Vec<String> {
    let on_disk = OnDisk::read(path);
    match format {
        Format::Json => vec![scan_json(path, report, &on_disk).to_string()],
        Format::Text => timeline::scanned(path, report, &on_disk),
    }
}

fn scan_json(path: &str, report: &ScanReport, on_disk: &OnDisk) -> serde_json::Value {
    let sockets: Vec<serde_json::Value> = report
        .sockets
        .iter()
        .filter(|s| s.path == path)
        .map(|s| {
            serde_json::json!({
                "sock_ino": s.sock_ino,
                "file": s.file.map(|f| serde_json::json!({"dev": f.dev, "ino": f.ino})),
                "listening": s.listening,
                "file_linked": s.file_linked,
                "holders": s.holders.iter().map(|h| serde_json::json!({"tgid": h.tgid, "comm": h.comm})).collect::<Vec<_>>(),
            })
        })
        .collect();
    let findings = scan::report::to_json(report);
    serde_json::json!({
        "source": "scan",
        "path": path,
        "sockets": sockets,
        "on_disk": on_disk,
        "scan": findings,
    })
}
