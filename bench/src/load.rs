//! Life cycles for the throughput and footprint phases (paced, back to back, sockets held) and
//! the latency samples: bind's return until the agent reports it, in its events file or in
//! /metrics.
use std::{
    ffi::CString,
    fs,
    io::{self, Read as _, Write as _},
    net::SocketAddr,
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use sockwatch_bench::http;

use crate::sys::{UnixAddr, bind, close, cstr, listen, socket_path, stream_socket, unlink};

/// `rate`: life cycles at `per_s` a second for `secs` seconds, shared by `threads` threads.
pub fn rate(dir: &Path, per_s: f64, secs: f64, threads: usize) -> anyhow::Result<()> {
    in_threads(dir, threads, move |mut once| {
        pace(per_s / threads as f64, u64::MAX, secs, &mut once)
    })
}

/// `burst`: `cycles` life cycles back to back, shared by `threads` threads.
pub fn burst(dir: &Path, cycles: u64, threads: usize) -> anyhow::Result<()> {
    in_threads(dir, threads, move |mut once| {
        let (t, mine) = (Instant::now(), cycles / threads as u64);
        (0..mine).for_each(|_| once());
        (mine, t.elapsed())
    })
}

/// Runs `work` in `threads` threads at once, each with life cycles over a ring of 256 names of
/// its own in `dir`; prints `{"cycles":N,"seconds":S}`: the cycles they ran and the longest
/// time one took.
fn in_threads(
    dir: &Path,
    threads: usize,
    work: impl Fn(Box<dyn FnMut() + Send>) -> (u64, Duration) + Send + Sync + Copy + 'static,
) -> anyhow::Result<()> {
    let mut handles = Vec::new();
    for t in 0..threads.max(1) {
        let names = (0..256).map(|i| socket_path(&dir.join(format!("r{t}_{i}.sock"))));
        let addrs: Vec<(UnixAddr, CString)> = names.collect::<anyhow::Result<_>>()?;
        let mut next = 0;
        let once = move || {
            let (sa, path) = &addrs[next];
            next = (next + 1) % addrs.len();
            let l = stream_socket();
            bind(l, sa);
            listen(l);
            unlink(path);
            close(l);
        };
        handles.push(std::thread::spawn(move || work(Box::new(once))));
    }
    let (mut cycles, mut took) = (0, Duration::ZERO);
    for h in handles {
        let (n, t) = h
            .join()
            .map_err(|_| anyhow::anyhow!("a workload thread panicked"))?;
        (cycles, took) = (cycles + n, took.max(t));
    }
    println!(
        r#"{{"cycles":{cycles},"seconds":{:.6}}}"#,
        took.as_secs_f64()
    );
    Ok(())
}

/// Runs `f` about `per_s` times a second (catching up when behind) until it ran `count` times or
/// `secs` seconds passed; how many times it ran and how long that took.
fn pace(per_s: f64, count: u64, secs: f64, mut f: impl FnMut()) -> (u64, Duration) {
    let (start, mut done) = (Instant::now(), 0);
    while done < count && start.elapsed().as_secs_f64() < secs {
        let due = ((start.elapsed().as_secs_f64() * per_s) as u64).min(count);
        while done < due {
            f();
            done += 1;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    (done, start.elapsed())
}

/// `hold`: N listening sockets in `dir`, held until stdin closes, then closed and unlinked (the
/// open-file limit raised first). Prints `{"held":N,"seconds":S}` once all are listening.
pub fn hold(dir: &Path, n: u64, per_s: f64) -> anyhow::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: n + 1024,
        rlim_max: n + 1024,
    };
    // SAFETY: lim is a live, initialised rlimit that setrlimit only reads.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(io::Error::last_os_error()).context("setrlimit(RLIMIT_NOFILE)");
    }
    let paths: Vec<_> = (0..n).map(|i| dir.join(format!("h{i}.sock"))).collect();
    let (mut held, mut err) = (Vec::new(), None);
    let mut next = paths.iter();
    let (_, took) = pace(per_s, n, f64::INFINITY, || {
        let Some(p) = next.next().filter(|_| err.is_none()) else {
            return;
        };
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
    io::stdin().read_to_end(&mut Vec::new())?;
    drop(held);
    paths.iter().for_each(|p| drop(fs::remove_file(p)));
    Ok(())
}

/// `n` samples, each a random pause (0..25 ms, so that samples do not lock onto the agent's
/// drain timer), a socket bound at `<dir>/lat<i>.sock`, and the time from bind's return until
/// `arrived` says the agent reported it (2 s at most). Prints `{"ns":[...],"missed":N}`.
fn sample_binds(
    dir: &Path,
    n: u64,
    mut arrived: impl FnMut(&str, Instant) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    let mut rng = now.map_or(1, |d| d.as_nanos() as u64) | 1; // xorshift
    let (mut ns, mut missed) = (Vec::new(), 0);
    for i in 0..n {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_nanos(rng % 25_000_000));
        let path = dir.join(format!("lat{i}.sock"));
        let (sa, _) = socket_path(&path)?;
        let fd = stream_socket();
        bind(fd, &sa);
        let t0 = Instant::now();
        let (needle, deadline) = (format!("{}\"", path.display()), t0 + Duration::from_secs(2));
        loop {
            if arrived(&needle, deadline)? {
                ns.push(t0.elapsed().as_nanos().to_string());
                break;
            }
            if Instant::now() >= deadline {
                missed += 1;
                break;
            }
        }
        close(fd);
        let _ = fs::remove_file(&path);
    }
    println!(r#"{{"ns":[{}],"missed":{missed}}}"#, ns.join(","));
    Ok(())
}

/// `latency`: bind's return → a `bind` line naming the path in the events file, which is
/// followed with inotify (IN_MODIFY) from its end at the start.
pub fn event_latency(dir: &Path, events: &Path, n: u64) -> anyhow::Result<()> {
    let mut file = fs::File::open(events).with_context(|| format!("open {}", events.display()))?;
    io::Seek::seek(&mut file, io::SeekFrom::End(0))?;
    // SAFETY: inotify_init1 takes no pointers; a failure is a negative return, checked below.
    let ino = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
    let c_events = cstr(events);
    // SAFETY: c_events is a NUL-terminated string that outlives the call.
    if ino < 0 || unsafe { libc::inotify_add_watch(ino, c_events.as_ptr(), libc::IN_MODIFY) } < 0 {
        return Err(io::Error::last_os_error()).context("inotify");
    }
    // Complete lines not yet matched, and a partial last line.
    let (mut pending, mut buf) = (String::new(), vec![0u8; 1 << 16]);
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

/// `metrics-latency`: bind's return → `sockwatch_events_total{kind="bind"}` grown in /metrics,
/// polled every millisecond (each poll a whole scrape).
pub fn metrics_latency(dir: &Path, addr: SocketAddr, n: u64) -> anyhow::Result<()> {
    let binds = || -> anyhow::Result<f64> {
        let body = http::get(addr, "/metrics", Duration::from_secs(5))?;
        let bind =
            |l: &&str| l.starts_with("sockwatch_events_total{") && l.contains(r#"kind="bind""#);
        Ok(body
            .lines()
            .filter(bind)
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    };
    let mut before = binds()?;
    sample_binds(dir, n, |_, _| {
        let now = binds()?;
        if now > before {
            before = now;
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(1));
        Ok(false)
    })
}
