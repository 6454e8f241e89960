//! `sockwatch explain PATH`: the running agent's view of one path, else a scan's.
use std::io::Write as _;

use anyhow::Context as _;

use crate::{
    cli::ExplainArgs,
    http::client,
    scan::{self, ScanOptions},
};

/// Prints the agent's answer for `args.path`, or one from a scan of the node.
pub fn explain(args: ExplainArgs) -> anyhow::Result<()> {
    let path = args.path.to_str().context("the path is not UTF-8")?;
    match client::get(
        args.agent,
        &format!("/api/sockets?path={}", client::percent_encode(path)),
    ) {
        Ok(body) => {
            writeln!(std::io::stdout(), "{body}")?;
            return Ok(());
        }
        Err(e) => log::info!(
            "no agent answered at {}: {e}; scanning the node instead",
            args.agent
        ),
    }
    let report = scan::scan(&ScanOptions::default())?;
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
    let findings = scan::report::to_json(&report);
    let answer =
        serde_json::json!({ "source": "scan", "path": path, "sockets": sockets, "scan": findings });
    writeln!(std::io::stdout(), "{answer}")?;
    Ok(())
}
