//! The workload `cargo xtask bench` drives, built in release so that loop overhead stays out of
//! the figures. xtask starts and stops the tracers; this program only makes syscalls and times
//! them. Every result is one JSON line on stdout.
//!
//! ```text
//! serve WATCHED UNWATCHED      reads `op KIND N` lines, answers {"ns": per-op nanoseconds};
//!                              each op runs in a thread of its own (see `serve`)
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
use std::{
    ffi::CString,
    fs,
    io::{self, BufRead as _, Read as _, Write as _},
    mem,
    net::SocketAddr,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use sockwatch_bench::http;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["serve", watched, unwatched] => serve(Path::new(watched), Path::new(unwatched)),
        ["rate", dir, per_s, secs, threads] => {
            let secs: f64 = secs.parse().context("SECS")?;
            let per_s: f64 = per_s.parse().context("PER_S")?;
            let threads: usize = threads.parse().context("THREADS")?;
            let (cycles, took) = in_threads(Path::new(dir), threads, move |mut lc| {
                pace(per_s / threads as f64, u64::MAX, secs, || lc.once())
            })?;
            println!(
                r#"{{"cycles":{cycles},"seconds":{:.6}}}"#,
                took.as_secs_f64()
            );
            Ok(())
        }
        ["burst", dir, cycles, threads] => {
            let cycles: u64 = cycles.parse().context("CYCLES")?;
            let threads: usize = threads.parse().context("THREADS")?;
            let (cycles, took) = in_threads(Path::new(dir), threads, move |mut lc| {
                let t = Instant::now();
                let mine = cycles / threads as u64;
                for _ in 0..mine {
                    lc.once();
                }
                (mine, t.elapsed())
            })?;
            println!(
                r#"{{"cycles":{cycles},"seconds":{:.6}}}"#,
                took.as_secs_f64()
            );
            Ok(())
        }
        ["hold", dir, n, per_s] => hold(
            Path::new(dir),
            n.parse().context("N")?,
            per_s.parse().context("PER_S")?,
        ),
        ["latency", dir, events, n] => {
            let s = event_latency(Path::new(dir), Path::new(events), n.parse().context("N")?)?;
            println!("{}", samples_json(&s));
            Ok(())
        }
        ["metrics-latency", dir, addr, n] => {
            let addr = addr.parse().context("ADDR")?;
            let s = metrics_latency(Path::new(dir), addr, n.parse().context("N")?)?;
            println!("{}", samples_json(&s));
            Ok(())
        }
        _ => bail!("usage: see the module documentation of bench/src/main.rs"),
    }
}

/// `{"ns":[...],"missed":N}`: latencies in nanoseconds, and samples that timed out.
fn samples_json(s: &Samples) -> String {
    let ns: Vec<String> = s.ns.iter().map(u64::to_string).collect();
    format!(r#"{{"ns":[{}],"missed":{}}}"#, ns.join(","), s.missed)
}

fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("paths hold no NUL")
}

/// A `sockaddr_un` for `path` and its length.
fn sockaddr(path: &Path) -> anyhow::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut sa: libc::sockaddr_un = unsafe { mem::zeroed() };
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= sa.sun_path.len() {
        bail!("{} is too long for sun_path", path.display());
    }
    for (d, s) in sa.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = mem::offset_of!(libc::sockaddr_un, sun_path) + bytes.len() + 1;
    Ok((sa, len as libc::socklen_t))
}

/// Panics with errno when a syscall in a timed loop fails: the figures would be meaningless.
#[inline]
fn ok(r: libc::c_int, what: &str) -> libc::c_int {
    if r < 0 {
        fail(what)
    }
    r
}

#[cold]
#[inline(never)]
fn fail(what: &str) -> ! {
    panic!("{what}: {}", io::Error::last_os_error())
}

fn stream_socket() -> libc::c_int {
    // SAFETY: plain syscall.
    ok(
        unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) },
        "socket",
    )
}

fn bind(fd: libc::c_int, sa: &(libc::sockaddr_un, libc::socklen_t)) {
    // SAFETY: sa is a valid sockaddr_un of the given length.
    let r = unsafe { libc::bind(fd, (&raw const sa.0).cast(), sa.1) };
    ok(r, "bind");
}

fn connect(fd: libc::c_int, sa: &(libc::sockaddr_un, libc::socklen_t)) {
    // SAFETY: sa is a valid sockaddr_un of the given length.
    let r = unsafe { libc::connect(fd, (&raw const sa.0).cast(), sa.1) };
    ok(r, "connect");
}

fn close(fd: libc::c_int) {
    // SAFETY: fd is ours and closed once.
    ok(unsafe { libc::close(fd) }, "close");
}

fn unlink(p: &CString) {
    // SAFETY: p is a valid C string.
    ok(unsafe { libc::unlink(p.as_ptr()) }, "unlink");
}

/// Interleaved overhead: xtask switches a tracer on or off between `op` lines. Each op runs in
/// a thread started for it, because the kernel decides at thread creation whether a thread is
/// audited (auditd's per-task syscall context): a long-lived thread would keep the audit state
/// of the moment it was created.
fn serve(watched: &Path, unwatched: &Path) -> anyhow::Result<()> {
    let target = unwatched.join("target.sock");
    let _ = fs::remove_file(&target);
    let listener = std::os::unix::net::UnixListener::bind(&target)
        .with_context(|| format!("bind {}", target.display()))?;
    let lfd = std::os::fd::AsRawFd::as_raw_fd(&listener);
    let target = sockaddr(&target)?;
    let watched = watched.to_path_buf();
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
        let watched = watched.clone();
        let t = std::thread::spawn(move || -> anyhow::Result<Timing> {
            match kind.as_str() {
                "unlink" => op_unlink(&watched, n),
                "sockcycle" => op_sockcycle(&watched, n),
                "sockcycle-go" => op_sockcycle_go(&watched, n),
                "connect" => Ok(op_connect(lfd, &target, n)),
                "getppid" => Ok(op_getppid(n)),
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

/// Per-op cost of a batch: wall-clock nanoseconds, and the thread's own CPU time (user and
/// system), which leaves out time spent preempted by other work on the machine.
struct Timing {
    ns: f64,
    cpu_ns: f64,
    /// Per-syscall nanoseconds, for the ops timed step by step.
    steps: Vec<f64>,
}

fn thread_cpu_ns() -> u64 {
    // SAFETY: zeroed timespec is valid; clock_gettime writes it.
    let mut ts: libc::timespec = unsafe { mem::zeroed() };
    // SAFETY: valid clock id and pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Times `n` calls of `f`.
fn time_batch(n: u64, mut f: impl FnMut()) -> Timing {
    let cpu = thread_cpu_ns();
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    Timing {
        ns: t.elapsed().as_nanos() as f64 / n as f64,
        cpu_ns: (thread_cpu_ns() - cpu) as f64 / n as f64,
        steps: Vec::new(),
    }
}

/// Per-op cost of `n` ops, after `n / 10` untimed ones.
fn timed(n: u64, mut f: impl FnMut()) -> Timing {
    for _ in 0..n / 10 {
        f();
    }
    time_batch(n, f)
}

/// unlink(2) of regular files in the watched directory; creating them is not timed.
fn op_unlink(dir: &Path, n: u64) -> anyhow::Result<Timing> {
    let make = |tag: &str| -> anyhow::Result<Vec<CString>> {
        (0..n)
            .map(|i| {
                let p = dir.join(format!("{tag}{i}"));
                fs::File::create(&p).with_context(|| format!("create {}", p.display()))?;
                Ok(cstr(&p))
            })
            .collect()
    };
    let warm = make("w")?;
    for p in warm.iter().take((n / 10) as usize) {
        unlink(p);
    }
    for p in warm.iter().skip((n / 10) as usize) {
        let _ = fs::remove_file(std::ffi::OsStr::from_bytes(p.as_bytes()));
    }
    let files = make("u")?;
    let mut next = files.iter();
    Ok(time_batch(n, || unlink(next.next().expect("n files"))))
}

/// A whole socket life cycle in the watched directory, in the order of a C daemon: socket,
/// bind, listen, a client's socket and connect, accept, three closes, unlink.
fn op_sockcycle(dir: &Path, n: u64) -> anyhow::Result<Timing> {
    let path = dir.join("cycle.sock");
    let _ = fs::remove_file(&path);
    let sa = sockaddr(&path)?;
    let c_path = cstr(&path);
    Ok(timed(n, || {
        let l = stream_socket();
        bind(l, &sa);
        // SAFETY: plain syscalls on our own descriptors.
        ok(unsafe { libc::listen(l, 8) }, "listen");
        let c = stream_socket();
        connect(c, &sa);
        let a = ok(
            unsafe { libc::accept4(l, std::ptr::null_mut(), std::ptr::null_mut(), 0) },
            "accept",
        );
        close(a);
        close(c);
        close(l);
        unlink(&c_path);
    }))
}

/// The syscalls of [`op_sockcycle_go`], in order.
const GO_STEPS: [&str; 10] = [
    "socket", "bind", "listen", "socket", "connect", "accept", "unlink", "close", "close", "close",
];

/// The same life cycle in the order of Go's listener, which removes the file before it closes
/// the socket (unlink while live: the owner check runs): socket, bind, listen, socket,
/// connect, accept, unlink, three closes. Each syscall is timed on its own too.
fn op_sockcycle_go(dir: &Path, n: u64) -> anyhow::Result<Timing> {
    let path = dir.join("cycle-go.sock");
    let _ = fs::remove_file(&path);
    let sa = sockaddr(&path)?;
    let c_path = cstr(&path);
    let mut sums = [0u64; GO_STEPS.len()];
    let once = |sums: &mut [u64; GO_STEPS.len()]| {
        let mut t = Instant::now();
        let mut lap = |i: usize| {
            let now = Instant::now();
            sums[i] += (now - t).as_nanos() as u64;
            t = now;
        };
        let l = stream_socket();
        lap(0);
        bind(l, &sa);
        lap(1);
        // SAFETY: plain syscalls on our own descriptors.
        ok(unsafe { libc::listen(l, 8) }, "listen");
        lap(2);
        let c = stream_socket();
        lap(3);
        connect(c, &sa);
        lap(4);
        let a = ok(
            unsafe { libc::accept4(l, std::ptr::null_mut(), std::ptr::null_mut(), 0) },
            "accept",
        );
        lap(5);
        unlink(&c_path);
        lap(6);
        close(a);
        lap(7);
        close(c);
        lap(8);
        close(l);
        lap(9);
    };
    let mut warm = [0u64; GO_STEPS.len()];
    for _ in 0..n / 10 {
        once(&mut warm);
    }
    let mut t = time_batch(n, || once(&mut sums));
    t.steps = sums.iter().map(|s| *s as f64 / n as f64).collect();
    Ok(t)
}

/// A connection to a socket outside every watch: socket, connect, accept, two closes.
fn op_connect(
    listener: libc::c_int,
    target: &(libc::sockaddr_un, libc::socklen_t),
    n: u64,
) -> Timing {
    timed(n, || {
        let c = stream_socket();
        connect(c, target);
        // SAFETY: plain syscall on the listener the caller keeps open.
        let a = ok(
            unsafe { libc::accept4(listener, std::ptr::null_mut(), std::ptr::null_mut(), 0) },
            "accept",
        );
        close(a);
        close(c);
    })
}

/// getppid(2): a syscall no probe looks at.
fn op_getppid(n: u64) -> Timing {
    timed(n, || {
        // SAFETY: getppid cannot fail.
        std::hint::black_box(unsafe { libc::getppid() });
    })
}

/// Socket life cycles over a ring of 256 names in one directory, one thread's own.
struct LifeCycles {
    addrs: Vec<((libc::sockaddr_un, libc::socklen_t), CString)>,
    next: usize,
}

impl LifeCycles {
    /// Names `r<thread>_<i>.sock` in `dir`.
    fn new(dir: &Path, thread: usize) -> anyhow::Result<Self> {
        let addrs = (0..256)
            .map(|i| {
                let p = dir.join(format!("r{thread}_{i}.sock"));
                let _ = fs::remove_file(&p);
                Ok((sockaddr(&p)?, cstr(&p)))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Self { addrs, next: 0 })
    }

    fn once(&mut self) {
        let (sa, path) = &self.addrs[self.next];
        self.next = (self.next + 1) % self.addrs.len();
        let l = stream_socket();
        bind(l, sa);
        // SAFETY: plain syscall on our own descriptor.
        ok(unsafe { libc::listen(l, 8) }, "listen");
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
fn hold(dir: &Path, n: u64, per_s: f64) -> anyhow::Result<()> {
    let want = n + 1024;
    let lim = libc::rlimit {
        rlim_cur: want,
        rlim_max: want,
    };
    // SAFETY: lim is a valid rlimit.
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

/// Latency samples in nanoseconds, and how many never arrived (2 s timeout).
struct Samples {
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
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
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
fn event_latency(dir: &Path, events: &Path, n: u64) -> anyhow::Result<Samples> {
    let mut file = fs::File::open(events).with_context(|| format!("open {}", events.display()))?;
    io::Seek::seek(&mut file, io::SeekFrom::End(0))?;
    // SAFETY: plain syscalls; the descriptor is closed below.
    let ino = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
    if ino < 0 {
        return Err(io::Error::last_os_error()).context("inotify_init1");
    }
    let c_events = cstr(events);
    // SAFETY: valid descriptor and C string.
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
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(100) as libc::c_int) };
        let mut ev = [0u8; 4096];
        // SAFETY: reads inotify records into our buffer; their content is not needed.
        while unsafe { libc::read(ino, ev.as_mut_ptr().cast(), ev.len()) } > 0 {}
        Ok(false)
    });
    // SAFETY: our descriptor, closed once.
    unsafe { libc::close(ino) };
    result
}

/// bind's return → `sockwatch_events_total{kind="bind"}` grown in /metrics, polled every
/// millisecond (each poll is a whole scrape).
fn metrics_latency(dir: &Path, addr: SocketAddr, n: u64) -> anyhow::Result<Samples> {
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
