//! `sockwatch scan`: the node's UNIX sockets as `/proc` and sock_diag show them, and what is
//! wrong with them.
use std::{io::Write as _, process::ExitCode};

use crate::{
    cli::ScanArgs,
    host::lookup,
    scan::{self, report},
};

/// Exit status of a scan that found nothing wrong in what it saw, but could not see
/// everything (processes it may not read, paths it did not look into): not "clean".
pub const INCOMPLETE: u8 = 3;

/// `sockwatch scan`: exit status 0 when clean, 1 when something is wrong, 3 when nothing
/// is wrong in what it saw but it could not see everything; the caller makes an error 2, as
/// clap does for bad flags.
pub fn scan(args: ScanArgs) -> anyhow::Result<ExitCode> {
    lookup::allow_network_filesystems(args.lookup_network_filesystems);
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
    Ok(if !r.findings.is_empty() {
        ExitCode::from(1)
    } else if !r.complete || !r.warnings.is_empty() {
        // Every warning names something not seen: a process not readable, or a path not
        // looked into (a FUSE or network filesystem, a lookup past its deadline).
        let remedy = if r.complete {
            "the warnings above name what it did not look into"
        } else {
            "run it as root, with the capabilities the warnings name"
        };
        eprintln!(
            "sockwatch scan: not clean, only nothing found in what it could see (exit status {INCOMPLETE}): \
             {remedy}"
        );
        ExitCode::from(INCOMPLETE)
    } else {
        ExitCode::SUCCESS
    })
}
