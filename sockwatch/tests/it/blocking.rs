//! Nothing blocks the event path: a FUSE filesystem that never answers the agent (a server
//! that ignores its requests, as a hostile unprivileged user's could) must not freeze it. The
//! FUSE server here speaks the kernel protocol on `/dev/fuse` itself (no libfuse), exposes one
//! socket inode `s.sock` with no listener behind it, answers every process but `sockwatch`,
//! and never answers `sockwatch`'s threads: a lookup there would sleep for good.
use crate::common;

use std::{
    fs::File,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpStream},
    os::{
        fd::AsRawFd as _,
        unix::{ffi::OsStrExt as _, fs::FileTypeExt as _, fs::MetadataExt as _},
    },
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use common::{
    actor::Actor,
    agent::{Agent, sockwatch_bin},
    *,
};
use sockwatch_bench::prom::Exposition;

/// `nobody`: the unprivileged client.
const NOBODY: u32 = 65534;
const ECONNREFUSED: i32 = 111;

#[test]
fn a_fuse_mount_is_not_looked_into_and_nothing_waits_for_it() {
    let test = "a_fuse_mount_is_not_looked_into_and_nothing_waits_for_it";
    if !root(test) || !fuse_available(test) {
        return;
    }
    attack(&[], |m, agent, fuse| {
        let skipped = m.sum(
            "sockwatch_lookup_skips_total",
            &[("lookup", "connect_target")],
        );
        assert!(skipped >= 1.0, "skips: {skipped}");
        assert_eq!(
            fuse.agent_requests_unanswered(),
            0,
            "the agent never looked into FUSE"
        );
        assert_eq!(stuck_threads(agent.pid()), Vec::<String>::new());
    });
}

#[test]
fn a_lookup_stuck_in_fuse_times_out_and_its_thread_does_not_hold_the_exit() {
    let test = "a_lookup_stuck_in_fuse_times_out_and_its_thread_does_not_hold_the_exit";
    if !root(test) || !fuse_available(test) {
        return;
    }
    attack(&["--lookup-network-filesystems"], |m, agent, fuse| {
        let timeouts = m.sum(
            "sockwatch_lookup_timeouts_total",
            &[("lookup", "connect_target")],
        );
        assert!(timeouts >= 1.0, "timeouts: {timeouts}");
        assert!(fuse.agent_requests_unanswered() >= 1);
        let stuck = stuck_threads(agent.pid());
        assert!(
            !stuck.is_empty(),
            "no thread of the agent waits on the FUSE server"
        );
        assert!(
            stuck.iter().all(|name| name.starts_with("lookup-")),
            "{stuck:?}"
        );
    });
}

/// The attack, against an agent on the tracepoint tier run with `flags`: an unprivileged client's connect to a
/// socket inode on a FUSE filesystem that never answers the agent. The agent must report
/// the connect (its target unresolved), answer `/healthz` within a second throughout, report
/// a bind made afterwards, and exit within 5 s of SIGTERM; `check` looks at its metrics, and
/// its threads and the FUSE server, before it is stopped.
fn attack(flags: &[&str], check: impl FnOnce(&Exposition, &Agent, &FuseMount)) {
    let tmp = tempdir();
    let watched = open_dirs(&tmp);
    let fuse = FuseMount::mount(&watched.join("mnt"));
    let target = watched.join("mnt/s.sock");
    // The filesystem works, for everyone but the agent.
    let meta = std::fs::symlink_metadata(&target).expect("stat through the FUSE server");
    assert!(meta.file_type().is_socket(), "{meta:?}");
    assert_eq!(meta.ino(), SOCK_NODE);

    let addr = free_addr();
    let listen = addr.to_string();
    // The tracepoint tier: its agent resolves a refused connect's target itself. The exact
    // tiers name it in the kernel, from the client's own lookup (which FUSE answers), and
    // never look into the mount (6.12's fentry did just that in the guest).
    let tier = ["--probe-mode", "tracepoint", "--listen", &listen];
    let agent = Agent::start(tmp.path(), &watched, &[&tier[..], flags].concat());
    // Dropped first, the mount lets go of threads stuck in it: the agent can then be reaped.
    let run = Run { fuse, agent };
    let (agent, fuse) = (&run.agent, &run.fuse);
    let health = HealthSampler::start(addr);

    let mut client = Actor::spawn_as(NOBODY);
    let refused = client.must(&format!("connect {}", s(&target)));
    assert_eq!(refused, ECONNREFUSED.to_string(), "the connect as nobody");
    let connect = agent.expect_line("the refused connect to the FUSE socket", |l| {
        l["kind"] == "connect" && l["path"] == s(&target) && l["tgid"] == client.pid
    });
    assert_eq!(connect["ret"], -ECONNREFUSED);
    assert_eq!(connect["lookup_failed"], true, "{connect}");
    assert_eq!(connect["ino"], 0, "the target left unresolved: {connect}");

    let after = watched.join("after.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&after).expect("bind");
    let (dev, ino) = stat_id(&after);
    let bind = agent.expect_line("the bind made afterwards", |l| {
        l["kind"] == "bind" && l["path"] == s(&after)
    });
    assert_eq!(
        (bind["dev"].as_u64(), bind["ino"].as_u64()),
        (Some(dev), Some(ino))
    );

    let samples = health.finish(Duration::from_secs(5));
    assert_answered_within_a_second(&samples);
    check(&Exposition::parse(&Agent::metrics(addr)), agent, fuse);

    let stopped = stop_within(run, Duration::from_secs(5));
    assert!(stopped.success(), "{stopped}");
}

/// An agent and the FUSE mount it runs beside, dropped in that order.
struct Run {
    fuse: FuseMount,
    agent: Agent,
}

/// The names of the threads of `pid` waiting for a FUSE server's answer.
fn stuck_threads(pid: u32) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the agent's threads");
    let waiting = |t: &PathBuf| {
        std::fs::read_to_string(t.join("wchan")).is_ok_and(|w| w == "request_wait_answer")
    };
    tasks
        .filter_map(|t| t.ok().map(|t| t.path()))
        .filter(waiting)
        .filter_map(|t| std::fs::read_to_string(t.join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .collect()
}

/// Whether the main thread of `pid` has exited (the process is a zombie, or gone): a thread
/// stuck in a FUSE request the server has read cannot be killed, and holds the rest.
fn main_thread_exited(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'))
    })
}

#[test]
fn a_scan_across_a_fuse_mount_skips_it_and_says_so() {
    let test = "a_scan_across_a_fuse_mount_skips_it_and_says_so";
    if !root(test) || !fuse_available(test) {
        return;
    }
    let tmp = tempdir();
    let watched = open_dirs(&tmp);
    let mnt = watched.join("mnt");
    let _fuse = FuseMount::mount(&mnt);
    let started = Instant::now();
    let mut scan = Command::new(sockwatch_bin())
        .args(["scan", "--watch", s(&watched)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sockwatch scan");
    while scan.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(10) {
            let _ = scan.kill();
            panic!("sockwatch scan hangs on the FUSE mount");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = scan.wait_with_output().expect("scan output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said = format!(
        "could not see everything: {} is on a fuse filesystem",
        s(&mnt)
    );
    assert!(stderr.contains(&said), "{stderr}");
    // Nothing found, but not everything seen: the incomplete scan's own exit status.
    assert_eq!(out.status.code(), Some(3), "{stderr}");
}

/// `/dev/fuse`, loading the module if need be; else a printed SKIP.
fn fuse_available(test: &str) -> bool {
    if !Path::new("/dev/fuse").exists() {
        let _ = Command::new("modprobe").arg("fuse").status();
    }
    let there = Path::new("/dev/fuse").exists();
    if !there {
        skip(
            test,
            "no /dev/fuse (the kernel has no FUSE, modprobe fuse failed)",
        );
    }
    there
}

/// `tmp/w`, the watched directory, both reachable by an unprivileged client.
fn open_dirs(tmp: &tempfile::TempDir) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let watched = tmp.path().join("w");
    std::fs::create_dir_all(watched.join("mnt")).expect("mkdir");
    for dir in [tmp.path(), &watched] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    watched
}

/// Sends SIGTERM and waits at most `limit` for the agent's exit: its main thread's (threads
/// stuck in the FUSE mount are then let go by aborting its connection). Fails past that.
fn stop_within(mut run: Run, limit: Duration) -> std::process::ExitStatus {
    assert!(
        !main_thread_exited(run.agent.pid()),
        "{}",
        run.agent.log_text()
    );
    let started = Instant::now();
    run.agent.signal(libc::SIGTERM);
    while !main_thread_exited(run.agent.pid()) {
        assert!(
            started.elapsed() < limit,
            "no exit within {limit:?} of SIGTERM: {}",
            run.agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("main thread exited {:?} after SIGTERM", started.elapsed());
    run.fuse.abort();
    loop {
        if let Some(status) = run.agent.exit_status() {
            return status;
        }
        assert!(
            started.elapsed() < limit * 2,
            "not reaped once the FUSE connection was aborted"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn assert_answered_within_a_second(samples: &[Result<Duration, String>]) {
    assert!(samples.len() >= 20, "{} samples", samples.len());
    let slowest = samples.iter().flatten().max();
    eprintln!("/healthz: {} samples, slowest {slowest:?}", samples.len());
    for (i, s) in samples.iter().enumerate() {
        match s {
            Ok(took) => assert!(*took < Duration::from_secs(1), "sample {i}: {took:?}"),
            Err(e) => panic!("sample {i}: /healthz did not answer: {e}"),
        }
    }
}

/// `GET /healthz` every 200 ms from a thread of its own, each with a one-second limit.
struct HealthSampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Vec<Result<Duration, String>>>,
}

impl HealthSampler {
    fn start(addr: SocketAddr) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let done = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !done.load(Ordering::Relaxed) {
                let started = Instant::now();
                samples.push(healthz(addr).map(|()| started.elapsed()));
                std::thread::sleep(Duration::from_millis(200));
            }
            samples
        });
        Self { stop, thread }
    }

    /// The samples, taken for at least `least` since the start.
    fn finish(self, least: Duration) -> Vec<Result<Duration, String>> {
        std::thread::sleep(least.saturating_sub(Duration::from_millis(200)));
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("sampler")
    }
}

fn healthz(addr: SocketAddr) -> Result<(), String> {
    let limit = Duration::from_secs(1);
    let mut stream = TcpStream::connect_timeout(&addr, limit).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(limit))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).map_err(|e| e.to_string())?;
    match reply.starts_with(b"HTTP/1.1 200") {
        true => Ok(()),
        false => Err(String::from_utf8_lossy(&reply).into_owned()),
    }
}

// The FUSE protocol, as much of it as a lookup and a stat need (include/uapi/linux/fuse.h).
const FUSE_LOOKUP: u32 = 1;
const FUSE_FORGET: u32 = 2;
const FUSE_GETATTR: u32 = 3;
const FUSE_INIT: u32 = 26;
const FUSE_OPENDIR: u32 = 27;
const FUSE_READDIR: u32 = 28;
const FUSE_RELEASEDIR: u32 = 29;
const FUSE_INTERRUPT: u32 = 36;
const FUSE_DESTROY: u32 = 38;
const FUSE_BATCH_FORGET: u32 = 42;
const ROOT_NODE: u64 = 1;
const SOCK_NODE: u64 = 2;
const IN_HEADER: usize = 40;

/// A mounted test filesystem and the thread serving it; unmounted (and its connection
/// aborted, so nothing stays stuck in it) when dropped, a failed test included.
struct FuseMount {
    mnt: PathBuf,
    connection: Option<PathBuf>,
    unanswered: Arc<std::sync::atomic::AtomicU64>,
    /// Set once dropped: its connection number may be another mount's by then.
    gone: Arc<AtomicBool>,
    _device: Arc<File>,
}

impl FuseMount {
    fn mount(mnt: &Path) -> Self {
        let device = Arc::new(
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/fuse")
                .expect("open /dev/fuse"),
        );
        let options = format!(
            "fd={},rootmode=40000,user_id=0,group_id=0,allow_other",
            device.as_raw_fd()
        );
        let c = |s: &[u8]| std::ffi::CString::new(s).expect("no NUL");
        let (source, target, fstype, data) = (
            c(b"sockwatch-test"),
            c(mnt.as_os_str().as_bytes()),
            c(b"fuse"),
            c(options.as_bytes()),
        );
        // SAFETY: every pointer is a NUL-terminated string that outlives the call.
        let rc = unsafe {
            libc::mount(
                source.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                data.as_ptr().cast(),
            )
        };
        assert_eq!(rc, 0, "mount fuse: {}", std::io::Error::last_os_error());
        let unanswered = Arc::default();
        let server = Server {
            device: device.clone(),
            unanswered: Arc::clone(&unanswered),
            refused_exe: std::fs::canonicalize(sockwatch_bin()).expect("sockwatch binary"),
        };
        std::thread::spawn(move || server.serve());
        let fuse = Self {
            connection: connection_dir(mnt),
            mnt: mnt.to_owned(),
            unanswered,
            gone: Arc::default(),
            _device: device,
        };
        fuse.watchdog();
        fuse
    }

    /// Aborts the connection after a minute if the test has not dropped the mount by then: an
    /// agent stuck in it (the failure this file tests) cannot be killed, and the test's wait
    /// for its exit would hang instead of failing.
    fn watchdog(&self) {
        let (gone, abort) = (self.gone.clone(), self.connection.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(60));
            if let (false, Some(abort)) = (gone.load(Ordering::Relaxed), abort) {
                eprintln!("the FUSE mount outlived its test by a minute: aborting it");
                let _ = std::fs::write(abort.join("abort"), b"1");
            }
        });
    }

    /// Requests of the agent the server left unanswered.
    fn agent_requests_unanswered(&self) -> u64 {
        self.unanswered.load(Ordering::Relaxed)
    }
}

impl FuseMount {
    /// Aborts the connection: every request waiting on the server fails.
    fn abort(&self) {
        if let Some(abort) = self.connection.as_ref().map(|c| c.join("abort")) {
            let _ = std::fs::write(abort, b"1");
        }
    }
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        self.abort();
        self.gone.store(true, Ordering::Relaxed);
        let target = std::ffi::CString::new(self.mnt.as_os_str().as_bytes()).expect("no NUL");
        // SAFETY: a NUL-terminated path that outlives the call.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

/// `/sys/fs/fuse/connections/<dev>` of the mount at `mnt` (its device from mountinfo: no
/// call into the filesystem), with the control filesystem mounted if it is not.
fn connection_dir(mnt: &Path) -> Option<PathBuf> {
    let connections = Path::new("/sys/fs/fuse/connections");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    if !mountinfo.contains(" - fusectl ") {
        let _ = Command::new("mount")
            .args(["-t", "fusectl", "fusectl"])
            .arg(connections)
            .status();
    }
    let line = mountinfo
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(s(mnt)))?;
    let (major, minor) = line.split(' ').nth(2)?.split_once(':')?;
    let (major, minor): (u32, u32) = (major.parse().ok()?, minor.parse().ok()?);
    Some(connections.join(((major << 20) | minor).to_string()))
}

struct Server {
    device: Arc<File>,
    unanswered: Arc<std::sync::atomic::AtomicU64>,
    /// Requests of a thread running this program (the agent, the scan) are never answered.
    refused_exe: PathBuf,
}

impl Server {
    fn serve(self) {
        let mut buf = vec![0u8; 1 << 20 | 4096];
        loop {
            let n = match (&*self.device).read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => continue,
                Err(_) => return, // aborted or unmounted
            };
            let Some(request) = buf.get(..n) else { return };
            if !self.handle(request) {
                return;
            }
        }
    }

    /// Answers one request (or not); false once the filesystem is going away.
    fn handle(&self, request: &[u8]) -> bool {
        let u32_at = |at: usize| u32::from_ne_bytes(request[at..at + 4].try_into().expect("4"));
        let u64_at = |at: usize| u64::from_ne_bytes(request[at..at + 8].try_into().expect("8"));
        let (opcode, unique, node, pid) = (u32_at(4), u64_at(8), u64_at(16), u32_at(32));
        if matches!(opcode, FUSE_FORGET | FUSE_BATCH_FORGET | FUSE_INTERRUPT) {
            return true;
        }
        if self.refused(pid) {
            self.unanswered.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        let body = &request[IN_HEADER..];
        let reply = match opcode {
            FUSE_INIT => Ok(init_out()),
            FUSE_LOOKUP if node == ROOT_NODE && body.starts_with(b"s.sock\0") => {
                Ok(entry_out(SOCK_NODE))
            }
            FUSE_LOOKUP => Err(libc::ENOENT),
            FUSE_GETATTR => Ok(attr_out(node)),
            FUSE_OPENDIR => Ok(vec![0; 16]),
            FUSE_READDIR | FUSE_RELEASEDIR => Ok(Vec::new()),
            FUSE_DESTROY => return false,
            _ => Err(libc::ENOSYS),
        };
        self.reply(unique, reply);
        true
    }

    /// Whether `pid` is a thread of the program whose requests go unanswered.
    fn refused(&self, pid: u32) -> bool {
        pid != 0
            && std::fs::read_link(format!("/proc/{pid}/exe"))
                .is_ok_and(|exe| exe == self.refused_exe)
    }

    fn reply(&self, unique: u64, reply: Result<Vec<u8>, i32>) {
        let (error, body) = match reply {
            Ok(body) => (0, body),
            Err(errno) => (-errno, Vec::new()),
        };
        let mut out = Vec::with_capacity(16 + body.len());
        out.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        out.extend_from_slice(&error.to_ne_bytes());
        out.extend_from_slice(&unique.to_ne_bytes());
        out.extend_from_slice(&body);
        let _ = (&*self.device).write_all(&out);
    }
}

/// `fuse_init_out`: protocol 7.31, nothing optional.
fn init_out() -> Vec<u8> {
    let mut out = vec![0u8; 64];
    out[0..4].copy_from_slice(&7u32.to_ne_bytes());
    out[4..8].copy_from_slice(&31u32.to_ne_bytes());
    out[20..24].copy_from_slice(&4096u32.to_ne_bytes()); // max_write
    out
}

/// `fuse_attr` of a node: the root directory, or the socket inode. Nothing is cached.
fn attr(node: u64) -> Vec<u8> {
    let mode = match node {
        ROOT_NODE => libc::S_IFDIR | 0o755,
        _ => libc::S_IFSOCK | 0o777,
    };
    let mut a = vec![0u8; 88];
    a[0..8].copy_from_slice(&node.to_ne_bytes());
    a[60..64].copy_from_slice(&mode.to_ne_bytes());
    a[64..68].copy_from_slice(&1u32.to_ne_bytes()); // nlink
    a
}

/// `fuse_entry_out` for `node`, valid for 0 s: every lookup reaches the server.
fn entry_out(node: u64) -> Vec<u8> {
    let mut out = vec![0u8; 40];
    out[0..8].copy_from_slice(&node.to_ne_bytes());
    out.extend(attr(node));
    out
}

/// `fuse_attr_out` for `node`, valid for 0 s.
fn attr_out(node: u64) -> Vec<u8> {
    let mut out = vec![0u8; 16];
    out.extend(attr(node));
    out
}
