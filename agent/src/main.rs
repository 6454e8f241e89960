mod run;

use std::process::ExitCode;

use std::{
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

use anyhow::{Context as _, bail};
use clap::Parser as _;
use sockwatch::{
    cli::{CheckArgs, Cli, Command, ExplainArgs, ReplayArgs, ScanArgs},
    engine::{Engine, Limits},
    loader::{Coverage, LoadError},
    output::JsonLines,
    pipeline::Pipeline,
    scan::{self, ScanOptions},
};

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::new().filter_or("SOCKWATCH_LOG", "info")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Explain(args) => explain(args),
        Command::Check(args) => return check(args),
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
            // Too few hooks for the kernel to give: as final as bad flags.
            match e.downcast_ref::<LoadError>() {
                Some(LoadError::Coverage(_)) => ExitCode::from(2),
                _ => ExitCode::FAILURE,
            }
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

/// `sockwatch explain PATH`: the running agent's view of one path, else a scan's.
fn explain(args: ExplainArgs) -> anyhow::Result<()> {
    let path = args.path.to_str().context("the path is not UTF-8")?;
    match api_get(
        args.agent,
        &format!("/api/sockets?path={}", percent_encode(path)),
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

/// A plain HTTP/1.0 GET to the agent's API; the body on 200.
fn api_get(addr: SocketAddr, target: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {target} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .context("malformed HTTP response")?;
    if !head.starts_with("HTTP/1.1 200") && !head.starts_with("HTTP/1.0 200") {
        bail!("agent answered {}", head.lines().next().unwrap_or_default());
    }
    Ok(body.to_string())
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `sockwatch check`: 0 when `run` would attach every hook, 1 degraded, 2 refused or failed.
fn check(args: CheckArgs) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match sockwatch::check::check(&args, &mut out) {
        Ok(Coverage::Complete) => ExitCode::SUCCESS,
        Ok(Coverage::Degraded(_)) => ExitCode::from(1),
        Ok(Coverage::Insufficient(_)) => ExitCode::from(2),
        Err(e) => {
            eprintln!("sockwatch: {e:#}");
            ExitCode::from(2)
        }
    }
}
