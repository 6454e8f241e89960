//! The operations the overhead phase times, each a batch of `n` in the calling thread.
use std::{ffi::CString, fs, path::Path, time::Instant};

use anyhow::Context as _;

use crate::sys::{
    UnixAddr, accept, bind, close, connect, cstr, listen, open_rdonly, socket_path, stream_socket,
    thread_cpu_ns, unlink as unlink_path,
};

/// Per-op cost of a batch: wall-clock ns, the thread's own CPU time (user and system, which
/// leaves out time spent preempted), and ns per syscall for the ops timed step by step.
pub struct Timing {
    pub ns: f64,
    pub cpu_ns: f64,
    pub steps: Vec<f64>,
}

/// Times `n` calls of `f`.
fn time_batch(n: u64, mut f: impl FnMut()) -> Timing {
    let (cpu, t) = (thread_cpu_ns(), Instant::now());
    (0..n).for_each(|_| f());
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    Timing {
        ns,
        cpu_ns: (thread_cpu_ns() - cpu) as f64 / n as f64,
        steps: Vec::new(),
    }
}

/// Per-op cost of `n` ops, after `n / 10` untimed ones.
pub fn timed(n: u64, mut f: impl FnMut()) -> Timing {
    (0..n / 10).for_each(|_| f());
    time_batch(n, f)
}

/// unlink(2) of regular files in the watched directory (`n / 10` untimed first); creating them
/// is not timed.
pub fn unlink(dir: &Path, n: u64) -> anyhow::Result<Timing> {
    let make = |tag: &str, n: u64| -> anyhow::Result<Vec<CString>> {
        let file = |i| {
            let p = dir.join(format!("{tag}{i}"));
            fs::File::create(&p).with_context(|| format!("create {}", p.display()))?;
            Ok(cstr(&p))
        };
        (0..n).map(file).collect()
    };
    make("w", n / 10)?.iter().for_each(unlink_path);
    let files = make("u", n)?;
    let mut next = files.iter();
    Ok(time_batch(n, || unlink_path(next.next().expect("n files"))))
}

/// A whole socket life cycle in `dir`, in a C daemon's order: socket, bind, listen, a client's
/// socket and connect, accept, three closes, unlink.
pub fn sockcycle(dir: &Path, n: u64) -> anyhow::Result<Timing> {
    let (sa, path) = socket_path(&dir.join("cycle.sock"))?;
    Ok(timed(n, || {
        let l = stream_socket();
        bind(l, &sa);
        listen(l);
        let c = stream_socket();
        connect(c, &sa);
        let a = accept(l);
        [a, c, l].into_iter().for_each(close);
        unlink_path(&path);
    }))
}

/// The same life cycle in the order of Go's listener, which removes the file before it closes
/// the socket (unlink while live: the owner check runs): socket, bind, listen, socket,
/// connect, accept, unlink, three closes. Each of the 10 syscalls is timed on its own too.
pub fn sockcycle_go(dir: &Path, n: u64) -> anyhow::Result<Timing> {
    let (sa, path) = socket_path(&dir.join("cycle-go.sock"))?;
    let once = |sums: &mut [u64; 10]| {
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
        listen(l);
        lap(2);
        let c = stream_socket();
        lap(3);
        connect(c, &sa);
        lap(4);
        let a = accept(l);
        lap(5);
        unlink_path(&path);
        lap(6);
        for (i, fd) in [a, c, l].into_iter().enumerate() {
            close(fd);
            lap(7 + i);
        }
    };
    let (mut warm, mut sums) = ([0; 10], [0; 10]);
    (0..n / 10).for_each(|_| once(&mut warm));
    let mut t = time_batch(n, || once(&mut sums));
    t.steps = sums.iter().map(|s| *s as f64 / n as f64).collect();
    Ok(t)
}

/// A connection to a socket outside every watch: socket, connect, accept, two closes.
pub fn connect_unwatched(listener: libc::c_int, target: &UnixAddr, n: u64) -> Timing {
    timed(n, || {
        let c = stream_socket();
        connect(c, target);
        close(accept(listener));
        close(c);
    })
}

/// getppid(2): a syscall no probe looks at.
pub fn getppid(n: u64) -> Timing {
    timed(n, || {
        // SAFETY: getppid takes no arguments and cannot fail.
        std::hint::black_box(unsafe { libc::getppid() });
    })
}

/// open(2) and close(2) of a regular file in `dir`.
pub fn open(dir: &Path, n: u64) -> anyhow::Result<Timing> {
    let p = dir.join("open.file");
    fs::File::create(&p).with_context(|| format!("create {}", p.display()))?;
    let c = cstr(&p);
    Ok(timed(n, || close(open_rdonly(&c))))
}
