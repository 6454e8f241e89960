//! Life cycles for the throughput and footprint phases: paced (`rate`), back to back
//! (`burst`), and sockets held (`hold`).
use std::{
    ffi::CString,
    fs,
    io::{self, Read as _, Write as _},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::sys::{UnixAddr, bind, close, listen, socket_path, stream_socket, unlink};

/// `rate`: life cycles at `per_s` a second for `secs` seconds, shared by `threads` threads.
pub fn rate(dir: &Path, per_s: f64, secs: f64, threads: usize) -> anyhow::Result<()> {
    let (cycles, took) = in_threads(dir, threads, move |mut lc| {
        pace(per_s / threads as f64, u64::MAX, secs, || lc.once())
    })?;
    print_cycles(cycles, took)
}

/// `burst`: `cycles` life cycles back to back, shared by `threads` threads.
pub fn burst(dir: &Path, cycles: u64, threads: usize) -> anyhow::Result<()> {
    let (cycles, took) = in_threads(dir, threads, move |mut lc| {
        let t = Instant::now();
        let mine = cycles / threads as u64;
        for _ in 0..mine {
            lc.once();
        }
        (mine, t.elapsed())
    })?;
    print_cycles(cycles, took)
}

/// Prints `{"cycles":N,"seconds":S}`.
fn print_cycles(cycles: u64, took: Duration) -> anyhow::Result<()> {
    println!(
        r#"{{"cycles":{cycles},"seconds":{:.6}}}"#,
        took.as_secs_f64()
    );
    Ok(())
}

/// Socket life cycles over a ring of 256 names in one directory, one thread's own.
struct LifeCycles {
    addrs: Vec<(UnixAddr, CString)>,
    next: usize,
}

impl LifeCycles {
    /// Names `r<thread>_<i>.sock` in `dir`.
    fn new(dir: &Path, thread: usize) -> anyhow::Result<Self> {
        let addrs = (0..256)
            .map(|i| socket_path(&dir.join(format!("r{thread}_{i}.sock"))))
            .collect::<anyhow::Result<_>>()?;
        Ok(Self { addrs, next: 0 })
    }

    fn once(&mut self) {
        let (sa, path) = &self.addrs[self.next];
        self.next = (self.next + 1) % self.addrs.len();
        let l = stream_socket();
        bind(l, sa);
        listen(l);
        unlink(path);
        close(l);
    }
}

/// Runs `f` about `per_s` times a second (catching up when behind) until it ran `count` times or
/// `secs` seconds passed; returns how many times it ran and how long that took.
fn pace(per_s: f64, count: u64, secs: f64, mut f: impl FnMut()) -> (u64, Duration) {
    let start = Instant::now();
    let mut done = 0u64;
    while done < count {
        let now = start.elapsed().as_secs_f64();
        if now >= secs {
            break;
        }
        let due = ((now * per_s) as u64).min(count);
        while done < due {
            f();
            done += 1;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    (done, start.elapsed())
}

/// Runs `work` in `threads` threads at once, each with life cycles of its own names; the cycles
/// they ran in total and the longest time one took.
fn in_threads(
    dir: &Path,
    threads: usize,
    work: impl Fn(LifeCycles) -> (u64, Duration) + Send + Sync + Copy + 'static,
) -> anyhow::Result<(u64, Duration)> {
    let cycles = (0..threads.max(1))
        .map(|t| LifeCycles::new(dir, t))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let handles: Vec<_> = cycles
        .into_iter()
        .map(|lc| std::thread::spawn(move || work(lc)))
        .collect();
    let mut total = (0, Duration::ZERO);
    for h in handles {
        let (n, took) = h
            .join()
            .map_err(|_| anyhow::anyhow!("a workload thread panicked"))?;
        total = (total.0 + n, total.1.max(took));
    }
    Ok(total)
}

/// N listening sockets in `dir`, held until stdin closes, then closed and unlinked; the
/// open-file limit is raised first. Prints `{"held":N,"seconds":S}` once all are listening.
pub fn hold(dir: &Path, n: u64, per_s: f64) -> anyhow::Result<()> {
    let want = n + 1024;
    let lim = libc::rlimit {
        rlim_cur: want,
        rlim_max: want,
    };
    // SAFETY: lim is a live, initialised rlimit that setrlimit only reads.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(io::Error::last_os_error()).context("setrlimit(RLIMIT_NOFILE)");
    }
    let paths: Vec<PathBuf> = (0..n).map(|i| dir.join(format!("h{i}.sock"))).collect();
    let mut held = Vec::with_capacity(paths.len());
    let mut next = paths.iter();
    let mut err = None;
    let (_, took) = pace(per_s, n, f64::INFINITY, || {
        let Some(p) = next.next() else { return };
        if err.is_some() {
            return;
        }
        let _ = fs::remove_file(p);
        match std::os::unix::net::UnixListener::bind(p) {
            Ok(l) => held.push(l),
            Err(e) => err = Some(format!("bind {}: {e}", p.display())),
        }
    });
    if let Some(e) = err {
        bail!("{e}");
    }
    println!(
        r#"{{"held":{},"seconds":{:.3}}}"#,
        held.len(),
        took.as_secs_f64()
    );
    io::stdout().flush()?;
    let mut rest = Vec::new();
    io::stdin().read_to_end(&mut rest)?;
    drop(held);
    for p in &paths {
        let _ = fs::remove_file(p);
    }
    Ok(())
}
