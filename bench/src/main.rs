//! The workload `cargo xtask bench` drives (release build, so loop overhead stays out of the
//! figures): it only makes syscalls and times them, and prints each result as one JSON line.
//!
//! ```text
//! serve WATCHED UNWATCHED      reads `op KIND N` lines, answers {"ns","cpu_ns","steps"}: wall
//!                              clock and thread CPU ns per op (and per syscall for sockcycle-go)
//! rate DIR PER_S SECS THREADS  socket life cycles at PER_S a second for SECS s, over THREADS
//! burst DIR CYCLES THREADS     CYCLES life cycles back to back, over THREADS threads
//! hold DIR N PER_S             N listening sockets in DIR, made at PER_S a second, held until
//!                              stdin closes
//! latency DIR EVENTS N         bind → its line in the events file, N samples
//! metrics-latency DIR ADDR N   bind → counted in ADDR's /metrics, N samples
//! ```
//!
//! A life cycle is socket, bind, listen, unlink, close of one path-bound stream socket (Go's
//! order): four events for the agent (bind, listen, unlink, release), no verdict.
mod load;
mod ops;
mod sys;

use std::{
    io::{self, BufRead as _, Write as _},
    os::{fd::AsRawFd as _, unix::net::UnixListener},
    path::Path,
};

use anyhow::{Context as _, bail};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let num = |s: &str, what: &str| s.parse::<u64>().context(what.to_owned());
    match a.as_slice() {
        ["serve", watched, unwatched] => serve(Path::new(watched), Path::new(unwatched)),
        ["rate", dir, per_s, secs, threads] => {
            let (per_s, secs) = (
                per_s.parse().context("PER_S")?,
                secs.parse().context("SECS")?,
            );
            load::rate(
                Path::new(dir),
                per_s,
                secs,
                num(threads, "THREADS")? as usize,
            )
        }
        ["burst", dir, cycles, threads] => load::burst(
            Path::new(dir),
            num(cycles, "CYCLES")?,
            num(threads, "THREADS")? as usize,
        ),
        ["hold", dir, n, per_s] => load::hold(
            Path::new(dir),
            num(n, "N")?,
            per_s.parse().context("PER_S")?,
        ),
        ["latency", dir, events, n] => {
            load::event_latency(Path::new(dir), Path::new(events), num(n, "N")?)
        }
        ["metrics-latency", dir, addr, n] => {
            load::metrics_latency(Path::new(dir), addr.parse().context("ADDR")?, num(n, "N")?)
        }
        _ => bail!("usage: see the module documentation of bench/src/main.rs"),
    }
}

/// The overhead phase's workload: xtask switches an observer on or off between `op` lines.
/// Each op runs in a thread started for it: the kernel decides when a thread is created
/// whether it is audited (auditd's per-task context), so a long-lived thread would keep the
/// audit state of that moment.
fn serve(watched: &Path, unwatched: &Path) -> anyhow::Result<()> {
    // The connect op's listener, bound at its first batch: a process that never runs it
    // never binds a path socket, and is not tracked where every directory is watched.
    let mut target = None;
    let mut out = io::stdout();
    for line in io::stdin().lock().lines() {
        let line = line?;
        let (kind, n) = match line.split_whitespace().collect::<Vec<_>>()[..] {
            ["op", kind, n] => (kind.to_string(), n.parse::<u64>().context("N")?),
            ["quit"] | [] => break,
            _ => bail!("unknown command {line:?}"),
        };
        if kind == "connect" && target.is_none() {
            target = Some(listen_at(&unwatched.join("target.sock"))?);
        }
        let to = target.as_ref().map(|(l, addr)| (l.as_raw_fd(), *addr));
        let (watched, unwatched) = (watched.to_path_buf(), unwatched.to_path_buf());
        let t = std::thread::spawn(move || -> anyhow::Result<ops::Timing> {
            match kind.as_str() {
                "unlink" => ops::unlink(&watched, n),
                "sockcycle" => ops::sockcycle(&watched, n),
                "sockcycle-go" => ops::sockcycle_go(&watched, n),
                "connect" => {
                    let (lfd, addr) = to.context("no listener")?;
                    Ok(ops::connect_unwatched(lfd, &addr, n))
                }
                "getppid" => Ok(ops::getppid(n)),
                "open" => ops::open(&unwatched, n),
                "pipe" => Ok(ops::timed(n, || {
                    sys::pipe().into_iter().for_each(sys::close);
                })),
                "socketpair" => Ok(ops::timed(n, || {
                    sys::socketpair().into_iter().for_each(sys::close);
                })),
                "sockcycle-unwatched" => ops::sockcycle(&unwatched, n),
                "fork" => Ok(ops::timed(n, sys::fork_exit_wait)),
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

/// A listener bound at `path` (a stale file there removed first), and its address.
fn listen_at(path: &Path) -> anyhow::Result<(UnixListener, sys::UnixAddr)> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path).with_context(|| format!("bind {}", path.display()))?;
    Ok((listener, sys::sockaddr(path)?))
}
