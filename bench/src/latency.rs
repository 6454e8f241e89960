//! Latency samples: bind's return until the agent reports the bind, in its events file or in
//! /metrics.
use std::{
    fs,
    io::{self, Read as _},
    net::SocketAddr,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use sockwatch_bench::http;

use crate::sys::{bind, close, cstr, sockaddr, stream_socket};

/// Latency samples in nanoseconds, and how many never arrived (2 s timeout).
pub struct Samples {
    ns: Vec<u64>,
    missed: u64,
}

const SAMPLE_TIMEOUT: Duration = Duration::from_secs(2);

/// A small xorshift generator: the random pause before each sample, so that samples do not
/// lock onto the agent's drain timer.
struct Rng(u64);

impl Rng {
    fn new() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Rng(seed | 1)
    }

    /// Uniform in [0, max).
    fn below(&mut self, max: Duration) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        Duration::from_nanos(self.0 % max.as_nanos().max(1) as u64)
    }
}

/// One sample: a random pause (0..25 ms), a socket bound at `<dir>/lat<i>.sock`, the time from
/// bind's return until `arrived` says the agent reported it; then the socket is closed and its
/// file removed.
fn sample_binds(
    dir: &Path,
    n: u64,
    mut arrived: impl FnMut(&str, Instant) -> anyhow::Result<bool>,
) -> anyhow::Result<Samples> {
    let mut rng = Rng::new();
    let mut s = Samples {
        ns: Vec::with_capacity(n as usize),
        missed: 0,
    };
    for i in 0..n {
        std::thread::sleep(rng.below(Duration::from_millis(25)));
        let path = dir.join(format!("lat{i}.sock"));
        let _ = fs::remove_file(&path);
        let sa = sockaddr(&path)?;
        let fd = stream_socket();
        bind(fd, &sa);
        let t0 = Instant::now();
        let needle = format!("{}\"", path.display());
        let deadline = t0 + SAMPLE_TIMEOUT;
        loop {
            if arrived(&needle, deadline)? {
                s.ns.push(t0.elapsed().as_nanos() as u64);
                break;
            }
            if Instant::now() >= deadline {
                s.missed += 1;
                break;
            }
        }
        close(fd);
        let _ = fs::remove_file(&path);
    }
    Ok(s)
}

/// bind's return → a `bind` line naming the path in the events file, which is followed with
/// inotify (IN_MODIFY) from its end at the start.
pub fn event_latency(dir: &Path, events: &Path, n: u64) -> anyhow::Result<Samples> {
    let mut file = fs::File::open(events).with_context(|| format!("open {}", events.display()))?;
    io::Seek::seek(&mut file, io::SeekFrom::End(0))?;
    // SAFETY: inotify_init1 takes no pointers; a failure is a negative return, checked below.
    let ino = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
    if ino < 0 {
        return Err(io::Error::last_os_error()).context("inotify_init1");
    }
    let c_events = cstr(events);
    // SAFETY: c_events is a NUL-terminated string that outlives the call.
    if unsafe { libc::inotify_add_watch(ino, c_events.as_ptr(), libc::IN_MODIFY) } < 0 {
        return Err(io::Error::last_os_error()).context("inotify_add_watch");
    }
    // Complete lines not yet matched, and a partial last line.
    let mut pending = String::new();
    let mut buf = vec![0u8; 1 << 16];
    let result = sample_binds(dir, n, |needle, deadline| {
        loop {
            let got = file.read(&mut buf)?;
            if got == 0 {
                break;
            }
            pending.push_str(&String::from_utf8_lossy(&buf[..got]));
        }
        let complete = pending.rfind('\n').map_or(0, |i| i + 1);
        let found = pending[..complete]
            .lines()
            .any(|l| l.contains(r#""kind":"bind""#) && l.contains(needle));
        pending.drain(..complete);
        if found {
            return Ok(true);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let mut pfd = libc::pollfd {
            fd: ino,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: pfd is one live pollfd, and the count passed is 1.
        unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(100) as libc::c_int) };
        let mut ev = [0u8; 4096];
        // SAFETY: reads at most ev.len() bytes into ev, which outlives the call (the records are
        // only drained, not read).
        while unsafe { libc::read(ino, ev.as_mut_ptr().cast(), ev.len()) } > 0 {}
        Ok(false)
    });
    // SAFETY: ino is this function's own descriptor, closed once, after its last use.
    unsafe { libc::close(ino) };
    result
}

/// bind's return → `sockwatch_events_total{kind="bind"}` grown in /metrics, polled every
/// millisecond (each poll is a whole scrape).
pub fn metrics_latency(dir: &Path, addr: SocketAddr, n: u64) -> anyhow::Result<Samples> {
    let mut before = binds_counted(addr)?;
    sample_binds(dir, n, |_, _| {
        let now = binds_counted(addr)?;
        if now > before {
            before = now;
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(1));
        Ok(false)
    })
}

/// The sum of `sockwatch_events_total` series with `kind="bind"`.
fn binds_counted(addr: SocketAddr) -> anyhow::Result<f64> {
    let body = http::get(addr, "/metrics", Duration::from_secs(5))?;
    Ok(body
        .lines()
        .filter(|l| l.starts_with("sockwatch_events_total{") && l.contains(r#"kind="bind""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// Prints `{"ns":[...],"missed":N}`: latencies in nanoseconds, and samples that timed out.
pub fn print(s: &Samples) -> anyhow::Result<()> {
    let ns: Vec<String> = s.ns.iter().map(u64::to_string).collect();
    println!(r#"{{"ns":[{}],"missed":{}}}"#, ns.join(","), s.missed);
    Ok(())
}
