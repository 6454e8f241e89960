//! The workload `cargo xtask bench` drives, built in release so that loop overhead stays out of
//! the figures. xtask starts and stops the tracers; this program only makes syscalls and times
//! them. Every result is one JSON line on stdout.
//!
//! ```text
//! serve WATCHED UNWATCHED      reads `op KIND N` lines, answers {"ns","cpu_ns","steps"}:
//!                              per-op wall-clock and thread CPU nanoseconds (and per
//!                              syscall for sockcycle-go); each op runs in a thread of its own
//! rate DIR PER_S SECS THREADS  socket life cycles at PER_S a second for SECS seconds, shared
//!                              by THREADS threads
//! burst DIR CYCLES THREADS     CYCLES life cycles back to back, shared by THREADS threads
//! hold DIR N PER_S             N listening sockets in DIR, made at PER_S a second, held until
//!                              stdin closes
//! latency DIR EVENTS N         bind → its line in the events file, N samples
//! metrics-latency DIR ADDR N   bind → counted in ADDR's /metrics, N samples
//! ```
//!
//! A life cycle is socket, bind, listen, unlink, close of one path-bound stream socket (Go's
//! order): four events for the agent (bind, listen, unlink, release), no verdict.
//!
//! Modules: `sys` wraps the syscalls; `ops` (timed operations) and `serve` make the overhead
//! phase; `cycles` the throughput and footprint loads; `latency` the latency samples. The
//! library's `http` is shared with xtask.
mod cycles;
mod latency;
mod ops;
mod serve;
mod sys;

use std::path::Path;

use anyhow::{Context as _, bail};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["serve", watched, unwatched] => serve::serve(Path::new(watched), Path::new(unwatched)),
        ["rate", dir, per_s, secs, threads] => cycles::rate(
            Path::new(dir),
            per_s.parse().context("PER_S")?,
            secs.parse().context("SECS")?,
            threads.parse().context("THREADS")?,
        ),
        ["burst", dir, cycles, threads] => cycles::burst(
            Path::new(dir),
            cycles.parse().context("CYCLES")?,
            threads.parse().context("THREADS")?,
        ),
        ["hold", dir, n, per_s] => cycles::hold(
            Path::new(dir),
            n.parse().context("N")?,
            per_s.parse().context("PER_S")?,
        ),
        ["latency", dir, events, n] => {
            let n = n.parse().context("N")?;
            latency::print(&latency::event_latency(
                Path::new(dir),
                Path::new(events),
                n,
            )?)
        }
        ["metrics-latency", dir, addr, n] => {
            let (addr, n) = (addr.parse().context("ADDR")?, n.parse().context("N")?);
            latency::print(&latency::metrics_latency(Path::new(dir), addr, n)?)
        }
        _ => bail!("usage: see the module documentation of bench/src/main.rs"),
    }
}
