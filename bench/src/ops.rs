//! The operations the overhead phase times, each a batch of `n` in the calling thread.
use std::{ffi::CString, fs, os::unix::ffi::OsStrExt as _, path::Path, time::Instant};

use anyhow::Context as _;

use crate::sys::{
    UnixAddr, accept, bind, close, connect, cstr, fork_exit_wait, listen, open_rdonly, pipe,
    socket_path, socketpair, stream_socket, thread_cpu_ns, unlink,
};

/// Per-op cost of a batch: wall-clock nanoseconds, and the thread's own CPU time (user and
/// system), which leaves out time spent preempted by other work on the machine.
pub struct Timing {
    pub ns: f64,
    pub cpu_ns: f64,
    /// Per-syscall nanoseconds, for the ops timed step by step.
    pub steps: Vec<f64>,
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
pub fn op_unlink(dir: &Path, n: u64) -> anyhow::Result<Timing> {
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

/// A whole socket life cycle in `dir`, in the order of a C daemon: socket, bind, listen, a
/// client's socket and connect, accept, three closes, unlink.
pub fn op_sockcycle(dir: &Path, n: u64) -> anyhow::Result<Timing> {
    let (sa, c_path) = socket_path(&dir.join("cycle.sock"))?;
    Ok(timed(n, || {
        let l = stream_socket();
        bind(l, &sa);
        listen(l);
        let c = stream_socket();
        connect(c, &sa);
        let a = accept(l);
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
pub fn op_sockcycle_go(dir: &Path, n: u64) -> anyhow::Result<Timing> {
    let (sa, c_path) = socket_path(&dir.join("cycle-go.sock"))?;
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
        listen(l);
        lap(2);
        let c = stream_socket();
        lap(3);
        connect(c, &sa);
        lap(4);
        let a = accept(l);
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
pub fn op_connect(listener: libc::c_int, target: &UnixAddr, n: u64) -> Timing {
    timed(n, || {
        let c = stream_socket();
        connect(c, target);
        let a = accept(listener);
        close(a);
        close(c);
    })
}

/// getppid(2): a syscall no probe looks at.
pub fn op_getppid(n: u64) -> Timing {
    timed(n, || {
        // SAFETY: getppid takes no arguments and cannot fail.
        let ppid = unsafe { libc::getppid() };
        std::hint::black_box(ppid);
    })
}

/// open(2) and close(2) of a regular file in `dir`.
pub fn op_open(dir: &Path, n: u64) -> anyhow::Result<Timing> {
    let p = dir.join("open.file");
    fs::File::create(&p).with_context(|| format!("create {}", p.display()))?;
    let c = cstr(&p);
    Ok(timed(n, || close(open_rdonly(&c))))
}

/// pipe(2) and the close of both ends.
pub fn op_pipe(n: u64) -> Timing {
    timed(n, || pipe().into_iter().for_each(close))
}

/// socketpair(2) of unnamed UNIX sockets and the close of both.
pub fn op_socketpair(n: u64) -> Timing {
    timed(n, || socketpair().into_iter().for_each(close))
}

/// fork(2) of a child that exits at once, and its reaping.
pub fn op_fork(n: u64) -> Timing {
    timed(n, fork_exit_wait)
}
