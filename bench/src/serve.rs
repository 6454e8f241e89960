//! `serve`: the one workload process of the overhead phase, running the `op` lines xtask sends.
use std::{
    fs,
    io::{self, BufRead as _, Write as _},
    path::Path,
};

use anyhow::{Context as _, bail};

use crate::{
    ops::{
        Timing, op_connect, op_fork, op_getppid, op_open, op_pipe, op_sockcycle, op_sockcycle_go,
        op_socketpair, op_unlink,
    },
    sys::sockaddr,
};

/// Interleaved overhead: xtask switches a tracer on or off between `op` lines. Each op runs in
/// a thread started for it, because the kernel decides at thread creation whether a thread is
/// audited (auditd's per-task syscall context): a long-lived thread would keep the audit state
/// of the moment it was created.
pub fn serve(watched: &Path, unwatched: &Path) -> anyhow::Result<()> {
    let target = unwatched.join("target.sock");
    let _ = fs::remove_file(&target);
    let listener = std::os::unix::net::UnixListener::bind(&target)
        .with_context(|| format!("bind {}", target.display()))?;
    let lfd = std::os::fd::AsRawFd::as_raw_fd(&listener);
    let target = sockaddr(&target)?;
    let watched = watched.to_path_buf();
    let unwatched = unwatched.to_path_buf();
    let stdin = io::stdin();
    let mut out = io::stdout();
    for line in stdin.lock().lines() {
        let line = line?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let (kind, n) = match words.as_slice() {
            ["op", kind, n] => (kind.to_string(), n.parse::<u64>().context("N")?),
            ["quit"] | [] => break,
            _ => bail!("unknown command {line:?}"),
        };
        let (watched, unwatched) = (watched.clone(), unwatched.clone());
        let t = std::thread::spawn(move || -> anyhow::Result<Timing> {
            match kind.as_str() {
                "unlink" => op_unlink(&watched, n),
                "sockcycle" => op_sockcycle(&watched, n),
                "sockcycle-go" => op_sockcycle_go(&watched, n),
                "connect" => Ok(op_connect(lfd, &target, n)),
                "getppid" => Ok(op_getppid(n)),
                "open" => op_open(&unwatched, n),
                "pipe" => Ok(op_pipe(n)),
                "socketpair" => Ok(op_socketpair(n)),
                "sockcycle-unwatched" => op_sockcycle(&unwatched, n),
                "fork" => Ok(op_fork(n)),
                other => bail!("unknown op {other}"),
            }
        })
        .join()
        .map_err(|_| anyhow::anyhow!("op thread panicked"))??;
        let steps: Vec<String> = t.steps.iter().map(|s| format!("{s:.3}")).collect();
        writeln!(
            out,
            r#"{{"ns":{:.3},"cpu_ns":{:.3},"steps":[{}]}}"#,
            t.ns,
            t.cpu_ns,
            steps.join(",")
        )?;
        out.flush()?;
    }
    Ok(())
}
