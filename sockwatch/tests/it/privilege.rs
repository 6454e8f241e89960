//! Least privilege, proven: the real `sockwatch run` restricted to the DaemonSet's capability
//! set (deploy/30-daemonset.yaml: BPF, PERFMON, SYS_ADMIN, SYS_PTRACE, DAC_READ_SEARCH)
//! attaches its probes, reads other processes' namespaces and descriptors in its start-up
//! scan, serves its endpoint only on `--listen` and reports verdicts; with each capability
//! removed in turn it either refuses in one line or runs degraded, naming what it lacks.
//!
//! The agent's child drops every other capability from its bounding set before exec (no
//! setpriv or capsh: the guests' initramfs is busybox): root's permitted and effective sets
//! after exec are then the bounding set. Two listeners exist before the agent starts, so only
//! the scan can name their holders: one held in new mount and network namespaces, one held
//! by another user (nobody). The DaemonSet's set runs once more with the agent in a network
//! namespace of its own, as a pod without hostNetwork: nothing it sees changes.
//!
//! `/api` names the node's processes and paths: by default a client beyond loopback gets a
//! 403 for it, and `--api-remote` opens it (a client in a namespace of the test's own, at an
//! address of the documentation range that never leaves it).
use crate::common;

use std::{
    fs,
    io::{self, Read as _, Write as _},
    net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream},
    os::unix::{fs::MetadataExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus},
    time::{Duration, Instant},
};

use common::{
    actor::Actor,
    agent::{Agent, sockwatch_bin},
    *,
};
use sockwatch::{
    host::caps::{
        self, CAP_BPF, CAP_DAC_READ_SEARCH, CAP_PERFMON, CAP_SYS_ADMIN, CAP_SYS_PTRACE, Cap,
    },
    http::client::{get, percent_encode},
    kernel::preflight,
};
use sockwatch_common::Tier;

const DAEMONSET: [Cap; 5] = [
    CAP_BPF,
    CAP_PERFMON,
    CAP_SYS_ADMIN,
    CAP_SYS_PTRACE,
    CAP_DAC_READ_SEARCH,
];
const NOBODY: u32 = 65534;
/// The socket hooks, attached on some tier whatever the kernel.
const SOCKET_HOOKS: [&str; 6] = ["bind", "listen", "unlink", "rename", "connect", "release"];

fn mask(caps: &[Cap]) -> u64 {
    caps.iter().fold(0, |m, c| m | (1 << c.bit))
}

fn daemonset_without(cap: Cap) -> Vec<Cap> {
    DAEMONSET.into_iter().filter(|&c| c != cap).collect()
}

fn check(rc: i32) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Root, with tracefs mounted by a fully privileged preflight: a node's tracefs is mounted
/// before the agent starts (the DaemonSet mounts it), and the case without CAP_SYS_ADMIN must
/// not fail on a guest where nobody mounted it yet.
fn prepared(test: &str) -> bool {
    if !root(test) {
        return false;
    }
    preflight::prepare().unwrap_or_else(|e| panic!("{test}: preflight: {e}"));
    true
}

// --- the listeners only the start-up scan can name ---

#[derive(Clone, Copy, PartialEq, Eq)]
enum Holding {
    /// In new mount and network namespaces: the scan must enter them.
    InNewNamespaces,
    /// As nobody: its `/proc/PID/fd` is closed to root's DAC bits.
    AsNobody,
}

/// A `sleep` holding a listener bound on `path`, killed on drop.
struct Holder(Child);

impl Holder {
    fn spawn(path: &Path, how: Holding) -> Holder {
        let addr = sockaddr(path);
        let mut cmd = Command::new("/bin/sleep");
        cmd.arg("3600");
        // SAFETY: the closure makes only async-signal-safe syscalls, on memory prepared before
        // the fork, and allocates nothing.
        unsafe { cmd.pre_exec(move || hold_listener(&addr, how)) };
        Holder(cmd.spawn().expect("spawn a holder"))
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sockaddr(path: &Path) -> libc::sockaddr_un {
    // SAFETY: sockaddr_un is plain old data; all-zero bytes are a valid value.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sa.sun_family = libc::AF_UNIX as u16;
    let bytes = s(path).as_bytes();
    assert!(bytes.len() < sa.sun_path.len(), "{}", path.display());
    for (d, &b) in sa.sun_path.iter_mut().zip(bytes) {
        *d = b as libc::c_char;
    }
    sa
}

/// In the holder's child before exec: the namespaces, a listener `sleep` inherits (no
/// close-on-exec), then the user.
fn hold_listener(addr: &libc::sockaddr_un, how: Holding) -> io::Result<()> {
    if how == Holding::InNewNamespaces {
        // SAFETY: unshare(2) takes no pointers.
        check(unsafe { libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWNET) })?;
    }
    // SAFETY: socket(2) takes no pointers.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let len = size_of::<libc::sockaddr_un>() as u32;
    // SAFETY: `addr` is a valid, NUL-terminated sockaddr_un of `len` bytes.
    check(unsafe { libc::bind(fd, (addr as *const libc::sockaddr_un).cast(), len) })?;
    // SAFETY: listen(2) takes no pointers; `fd` is the socket just bound.
    check(unsafe { libc::listen(fd, 8) })?;
    if how == Holding::AsNobody {
        // SAFETY: an empty group list (null with size 0), then ids; no other pointers.
        check(unsafe { libc::setgroups(0, std::ptr::null()) })?;
        // SAFETY: setgid(2) takes no pointers.
        check(unsafe { libc::setgid(NOBODY) })?;
        // SAFETY: setuid(2) takes no pointers.
        check(unsafe { libc::setuid(NOBODY) })?;
    }
    Ok(())
}

// --- the agent, restricted ---

/// Keeps only `keep` in the bounding set: root's sets after exec are then exactly `keep`.
fn drop_bounding_set(keep: u64, last_cap: u32) -> io::Result<()> {
    for cap in (0..=last_cap).filter(|c| keep & (1 << c) == 0) {
        // SAFETY: prctl(PR_CAPBSET_DROP) takes a capability number, no pointers.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) };
        check(rc)?;
    }
    Ok(())
}

fn last_cap() -> u32 {
    let text = fs::read_to_string("/proc/sys/kernel/cap_last_cap").expect("cap_last_cap");
    text.trim().parse().expect("a capability number")
}

/// `sockwatch run` in auto mode, restricted to `keep`, writing into `dir`.
struct Restricted {
    child: Child,
    log: PathBuf,
    events: PathBuf,
    listen: SocketAddr,
}

enum Started {
    Running(Restricted),
    Exited(ExitStatus, String),
}

impl Restricted {
    fn start(dir: &Path, watch: &Path, keep: &[Cap]) -> Started {
        let (log, events, listen) = (dir.join("agent.log"), dir.join("events.jsonl"), free_addr());
        let (keep, last) = (mask(keep), last_cap());
        let mut cmd = Command::new(sockwatch_bin());
        cmd.args(["run", "--probe-mode", "auto", "--scan-interval", "0s"])
            .args(["--takeover-window", "300ms", "--watch", s(watch)])
            .args(["--listen", &listen.to_string(), "--events", s(&events)])
            .stderr(fs::File::create(&log).expect("log file"));
        // SAFETY: the closure makes only prctl(2) calls and allocates nothing.
        unsafe { cmd.pre_exec(move || drop_bounding_set(keep, last)) };
        let child = cmd.spawn().expect("spawn sockwatch");
        let mut agent = Restricted {
            child,
            log,
            events,
            listen,
        };
        let deadline = Instant::now() + patience();
        loop {
            if let Some(status) = agent.child.try_wait().expect("wait") {
                return Started::Exited(status, agent.log_text());
            }
            if agent.log_text().contains("running;") {
                return Started::Running(agent);
            }
            assert!(
                Instant::now() < deadline,
                "sockwatch did not start: {}",
                agent.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The effective set the kernel gave the running agent.
    fn cap_eff(&self) -> u64 {
        let status = fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the agent's status");
        caps::parse_cap_eff(&status).expect("CapEff").0
    }

    /// What the start-up scan says it could not see.
    fn scan_warnings(&self) -> Vec<String> {
        let mark = "startup scan could not see everything: ";
        self.log_text()
            .lines()
            .filter_map(|l| l.split_once(mark).map(|(_, w)| w.to_string()))
            .collect()
    }

    fn http(&self, target: &str) -> String {
        get(self.listen, target).unwrap_or_else(|e| panic!("GET {target}: {e}"))
    }

    /// The tgids the agent knows as binders of sockets at `path` (the scan's holder for a
    /// socket bound before it started).
    fn binders(&self, path: &Path) -> Vec<u64> {
        let body = self.http(&format!("/api/sockets?path={}", percent_encode(s(path))));
        let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        v["sockets"]
            .as_array()
            .unwrap_or_else(|| panic!("no sockets in {v}"))
            .iter()
            .map(|s| s["binder"]["tgid"].as_u64().expect("binder tgid"))
            .collect()
    }

    fn verdicts(&self) -> Vec<serde_json::Value> {
        let text = fs::read_to_string(&self.events).unwrap_or_default();
        let whole = text.rfind('\n').map_or("", |end| &text[..end]);
        whole
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}")))
            .filter(|v: &serde_json::Value| v.get("verdict").is_some())
            .collect()
    }

    /// The foreign unlink of file `ino`, waiting up to [`patience`].
    fn expect_verdict(&self, ino: u64) -> serde_json::Value {
        let deadline = Instant::now() + patience();
        let foreign_unlink =
            |v: &serde_json::Value| v["verdict"] == "foreign_unlink" && v["file"]["ino"] == ino;
        loop {
            if let Some(v) = self.verdicts().into_iter().find(foreign_unlink) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "no verdict on inode {ino}; verdicts: {:#?}\nlog: {}",
                self.verdicts(),
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the agent with SIGINT; it must exit cleanly.
    fn stop(mut self) {
        // SAFETY: kill(2) takes no pointers; the pid is our own child's, not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGINT) };
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "exit {status}: {}", self.log_text());
    }
}

impl Drop for Restricted {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// --- the scenario ---

/// What a restricted agent that runs must show.
struct Expect {
    /// The start-up scan's warnings, each recognised by one of these (besides the baseline).
    warnings: &'static [&'static str],
    /// The listener held in new namespaces (the scan needs setns and ptrace access).
    namespaced: Known,
    /// The listener held by another user (the scan needs DAC_READ_SEARCH and ptrace access).
    nobody: Known,
}

/// What the agent knows of a listener bound before it started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Known {
    /// The socket and its holder, from the scan.
    WithHolder,
    /// The socket (sock_diag in its namespace), not who holds it.
    WithoutHolder,
    /// Nothing: its network namespace was not dumped.
    Nothing,
}

impl Known {
    /// The binder tgids `/api/sockets` answers for the listener of `holder`.
    fn binders(self, holder: &Holder) -> Vec<u64> {
        match self {
            Known::WithHolder => vec![u64::from(holder.pid())],
            Known::WithoutHolder => vec![0],
            Known::Nothing => vec![],
        }
    }
}

/// Where the agent runs: in the node's network namespace (`hostNetwork: true`), or in one of
/// its own, as a pod's (the DaemonSet's default).
#[derive(Clone, Copy, PartialEq, Eq)]
enum AgentNetns {
    Node,
    Own,
}

/// Starts the agent with `keep`, checks it runs with exactly that effective set and its hooks
/// attached, then what its scan saw and a foreign unlink of each listener. The listeners are
/// bound in the test's network namespace (the node's) and in one of their own, before the
/// agent starts in `netns`.
fn runs_with(test: &str, keep: &[Cap], expect: &Expect, netns: AgentNetns) {
    if !prepared(test) {
        return;
    }
    let tmp = tempdir();
    let watch = tmp.path().join("run");
    fs::create_dir(&watch).expect("mkdir");
    let (ns_sock, nobody_sock) = (watch.join("netns.sock"), watch.join("nobody.sock"));
    let namespaced = Holder::spawn(&ns_sock, Holding::InNewNamespaces);
    let nobody = Holder::spawn(&nobody_sock, Holding::AsNobody);
    while !(ns_sock.exists() && nobody_sock.exists()) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let scanned = [
        (ns_sock, expect.namespaced, &namespaced),
        (nobody_sock, expect.nobody, &nobody),
    ];
    std::thread::scope(|scope| {
        scope.spawn(|| {
            if netns == AgentNetns::Own {
                enter_netns_beyond_loopback().unwrap_or_else(|e| panic!("{test}: netns: {e}"));
            }
            let agent = match Restricted::start(tmp.path(), &watch, keep) {
                Started::Running(a) => a,
                Started::Exited(status, log) => panic!("{test}: sockwatch exited {status}: {log}"),
            };
            assert_eq!(
                netns_of(agent.child.id()) == netns_of(nobody.pid()),
                netns == AgentNetns::Node,
                "{test}: the agent's network namespace"
            );
            assert_eq!(agent.cap_eff(), mask(keep), "{test}: the agent's CapEff");
            assert_hooks_attached(&agent);
            assert_serves_only_on_listen(&agent);
            assert_scan_warnings(test, &agent, expect, keep.contains(&CAP_SYS_PTRACE));
            for (path, known, holder) in &scanned {
                assert_eq!(
                    agent.binders(path),
                    known.binders(holder),
                    "{test}: {path:?}"
                );
            }
            assert_foreign_unlinks(&agent, &watch, &scanned);
            agent.stop();
        });
    });
}

/// The network namespace `pid` is in (`net:[4026531840]`).
fn netns_of(pid: u32) -> PathBuf {
    fs::read_link(format!("/proc/{pid}/ns/net")).expect("a process's network namespace")
}

/// Processes whose namespaces even the test, root, cannot read (a sandbox's init): every
/// agent reports them.
fn unreadable_to_root() -> usize {
    let refused = |pid: &str, kind: &str| {
        fs::read_link(format!("/proc/{pid}/ns/{kind}"))
            .is_err_and(|e| e.kind() == io::ErrorKind::PermissionDenied)
    };
    fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        .filter(|pid| refused(pid, "mnt") || refused(pid, "net"))
        .count()
}

/// The scan's warnings are exactly the expected ones, each matched by one of them, plus, with
/// CAP_SYS_PTRACE, one about the processes root cannot read here.
fn assert_scan_warnings(test: &str, agent: &Restricted, expect: &Expect, ptrace: bool) {
    let warnings = agent.scan_warnings();
    eprintln!("{test}: scan warnings: {warnings:#?}");
    let mut wanted: Vec<String> = expect.warnings.iter().map(ToString::to_string).collect();
    let baseline = unreadable_to_root();
    if ptrace && baseline > 0 {
        wanted.push(format!(
            "could not read the namespaces of {baseline} processes: refused although the agent \
             holds CAP_SYS_PTRACE"
        ));
    }
    assert_eq!(
        warnings.len(),
        wanted.len(),
        "{test}: {warnings:#?}, want {wanted:#?}"
    );
    for want in &wanted {
        let n = warnings
            .iter()
            .filter(|w| w.contains(want.as_str()))
            .count();
        assert_eq!(n, 1, "{test}: {want:?} in {warnings:#?}");
    }
}

/// The agent's one listening TCP socket is `--listen`'s address, as /proc/net/tcp{,6} and its
/// descriptors say.
fn assert_serves_only_on_listen(agent: &Restricted) {
    let pid = agent.child.id();
    let SocketAddr::V4(listen) = agent.listen else {
        panic!("free_addr gives IPv4")
    };
    let want = format!(
        "{:08X}:{:04X}",
        u32::from(*listen.ip()).swap_bytes(),
        listen.port()
    );
    assert_eq!(tcp_listening(pid), [want], "{}", agent.log_text());
    let said = format!(
        "serving /metrics, /healthz and /readyz on {listen}, and /api to loopback clients only"
    );
    assert!(agent.log_text().contains(&said), "{}", agent.log_text());
}

/// The local addresses (kernel hex, `0100007F:1F95`) of the TCP sockets `pid` listens on.
fn tcp_listening(pid: u32) -> Vec<String> {
    let inodes: Vec<String> = fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the agent's fds")
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .filter_map(|t| {
            Some(
                t.to_str()?
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_owned(),
            )
        })
        .collect();
    let mut found = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for row in text.lines().skip(1) {
            let cols: Vec<&str> = row.split_whitespace().collect();
            // Columns: sl, local, remote, state (0A: LISTEN), …, inode (10th).
            if cols.len() > 9 && cols[3] == "0A" && inodes.iter().any(|i| i == cols[9]) {
                found.push(cols[1].to_string());
            }
        }
    }
    found
}

/// Every socket hook attached on some tier, as `/metrics` says.
fn assert_hooks_attached(agent: &Restricted) {
    let metrics = agent.http("/metrics");
    for hook in SOCKET_HOOKS {
        let series = format!("sockwatch_probe_attached{{hook=\"{hook}\",");
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with(&series) && l.ends_with(" 1")),
            "{hook} not attached: {metrics}"
        );
    }
}

/// A live listener bound while the agent runs, and the two the scan may know, unlinked by
/// another process: a foreign unlink naming both parties for the first and for each whose
/// holder the scan named. A socket the scan saw without its holder: on an exact unlink tier
/// the engine knows the removed file is that socket's and reports it with an unknown victim;
/// on the tracepoint tier (a path, not the file) the kernel's live table, which needs a
/// holder, is the only witness, and nothing is reported. None for a socket the scan missed.
fn assert_foreign_unlinks(agent: &Restricted, watch: &Path, scanned: &[(PathBuf, Known, &Holder)]) {
    let exact_unlink = !agent
        .http("/metrics")
        .lines()
        .any(|l| l == r#"sockwatch_probe_attached{hook="unlink",tier="tracepoint"} 1"#);
    let live = watch.join("live.sock");
    let (mut a, mut c) = (Actor::spawn(), Actor::spawn());
    a.must(&format!("listen-on {}", s(&live)));
    let mut files = vec![(live, Known::WithHolder, a.pid)];
    files.extend(scanned.iter().map(|(p, k, h)| (p.clone(), *k, h.pid())));
    let inos: Vec<u64> = files
        .iter()
        .map(|(p, _, _)| fs::metadata(p).expect("stat").ino())
        .collect();
    for (p, _, _) in &files {
        c.must(&format!("unlink {}", s(p)));
    }
    for ((path, known, victim), ino) in files.iter().zip(&inos) {
        let victim = match known {
            Known::WithHolder => *victim,
            Known::WithoutHolder if exact_unlink => 0,
            _ => continue,
        };
        let v = agent.expect_verdict(*ino);
        assert_eq!(v["path"], s(path), "{v}");
        assert_eq!(v["victim"]["tgid"], victim, "{v}");
        assert_eq!(v["actor"]["tgid"], c.pid, "{v}");
    }
    // The verdicts above came at the end of their takeover windows, which began before the
    // others' ended: any other verdict has been written.
    std::thread::sleep(Duration::from_secs(1));
    for ((path, known, _), ino) in files.iter().zip(&inos) {
        let reported =
            *known == Known::WithHolder || (*known == Known::WithoutHolder && exact_unlink);
        if !reported {
            let about: Vec<_> = agent
                .verdicts()
                .into_iter()
                .filter(|v| v["file"]["ino"] == *ino)
                .collect();
            assert!(about.is_empty(), "{path:?} ({known:?}): {about:#?}");
        }
    }
}

// --- the cases ---

/// The DaemonSet's set: every hook attached, both listeners' holders named by the scan (it
/// entered the other namespaces and read the other user's descriptors), a foreign unlink of
/// each reported with its victim and remover.
#[test]
fn the_daemonset_set_attaches_scans_serves_and_reports() {
    runs_with(
        "privilege_daemonset",
        &DAEMONSET,
        &Expect {
            warnings: &[],
            namespaced: Known::WithHolder,
            nobody: Known::WithHolder,
        },
        AgentNetns::Node,
    );
}

/// The DaemonSet without hostNetwork: the agent in a network namespace of its own, as a pod
/// is, still dumps the node's sockets and every other namespace's (it enters each through a
/// process's /proc/PID/ns/net), names their holders and reports their foreign unlinks; its
/// endpoint is in its own namespace.
#[test]
fn without_host_network_the_scan_still_sees_every_namespace() {
    runs_with(
        "privilege_own_netns",
        &DAEMONSET,
        &Expect {
            warnings: &[],
            namespaced: Known::WithHolder,
            nobody: Known::WithHolder,
        },
        AgentNetns::Own,
    );
}

/// Whether this kernel gives the socket hooks only through perf_event_open (kprobes and
/// tracepoints: no BPF trampolines, as on arm64 before 6.4) while `perf_event_paranoid` above 2
/// (Debian's default, 3) reserves perf_event_open to CAP_SYS_ADMIN.
fn perf_events_need_sys_admin() -> bool {
    let paranoid = fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok());
    !is_required(Tier::Fentry) && paranoid.is_some_and(|p| p > 2)
}

/// Where every tier needs perf_event_open and the kernel keeps it for CAP_SYS_ADMIN, the
/// capabilities `keep` attach nothing: a one-line error naming the refusal, exit status 2.
fn refused_perf_events(test: &str, keep: &[Cap]) {
    if !prepared(test) {
        return;
    }
    let tmp = tempdir();
    let Started::Exited(status, log) = Restricted::start(tmp.path(), tmp.path(), keep) else {
        panic!("{test}: sockwatch runs with {keep:?} although perf_event_open is refused");
    };
    assert_eq!(status.code(), Some(2), "{test}: {log}");
    assert_eq!(log.trim_end().lines().count(), 1, "{test}: one line: {log}");
    assert!(
        log.starts_with("sockwatch: cannot run under --probe-mode auto: bind and unlink or rename")
            && log.contains("bind_kprobe: perf_event_open failed: Permission denied"),
        "{test}: {log}"
    );
}

/// Refused in one line, naming what is missing, exit status 1.
fn refused_with(test: &str, keep: &[Cap], lacking: &str) {
    if !prepared(test) {
        return;
    }
    let tmp = tempdir();
    let Started::Exited(status, log) = Restricted::start(tmp.path(), tmp.path(), keep) else {
        panic!("{test}: sockwatch runs with {keep:?}");
    };
    let want = format!(
        "sockwatch: not privileged: loading eBPF needs CAP_SYS_ADMIN, or CAP_BPF with \
         CAP_PERFMON; {lacking} (effective capabilities: {:#x})",
        mask(keep)
    );
    assert_eq!(log.trim_end(), want, "{test}");
    assert_eq!(status.code(), Some(1), "{test}: {log}");
}

#[test]
fn no_capability_is_refused_in_one_line() {
    refused_with(
        "privilege_none",
        &[],
        "CAP_SYS_ADMIN, CAP_BPF and CAP_PERFMON are not in the agent's effective set",
    );
}

#[test]
fn bpf_alone_is_refused_in_one_line() {
    refused_with(
        "privilege_bpf_only",
        &[CAP_BPF],
        "CAP_SYS_ADMIN and CAP_PERFMON are not in the agent's effective set",
    );
}

/// CAP_SYS_ADMIN stands in for CAP_BPF in bpf(2): nothing changes.
#[test]
fn without_bpf_sys_admin_stands_in() {
    runs_with(
        "privilege_without_bpf",
        &daemonset_without(CAP_BPF),
        &Expect {
            warnings: &[],
            namespaced: Known::WithHolder,
            nobody: Known::WithHolder,
        },
        AgentNetns::Node,
    );
}

/// CAP_SYS_ADMIN stands in for CAP_PERFMON (perf_event_open(2), the tracing helpers): nothing
/// changes.
#[test]
fn without_perfmon_sys_admin_stands_in() {
    runs_with(
        "privilege_without_perfmon",
        &daemonset_without(CAP_PERFMON),
        &Expect {
            warnings: &[],
            namespaced: Known::WithHolder,
            nobody: Known::WithHolder,
        },
        AgentNetns::Node,
    );
}

/// Without CAP_SYS_ADMIN (CAP_BPF and CAP_PERFMON load and attach the probes) the scan cannot
/// setns into another network namespace: sock_diag never shows the listener held there, and
/// its foreign unlink goes unreported.
#[test]
fn without_sys_admin_other_network_namespaces_are_not_scanned() {
    if perf_events_need_sys_admin() {
        refused_perf_events(
            "privilege_without_sys_admin",
            &daemonset_without(CAP_SYS_ADMIN),
        );
        return;
    }
    runs_with(
        "privilege_without_sys_admin",
        &daemonset_without(CAP_SYS_ADMIN),
        &Expect {
            warnings: &[
                "network namespaces (CAP_SYS_ADMIN is not in the agent's effective set) (first: ",
            ],
            namespaced: Known::Nothing,
            nobody: Known::WithHolder,
        },
        AgentNetns::Node,
    );
}

/// Without CAP_SYS_PTRACE the links in /proc/PID/ns and /proc/PID/fd of every process with
/// capabilities the agent lacks, or of another user, are refused: the namespaced listener's
/// network namespace is unknown (not dumped), and its foreign unlink unreported; the other
/// user's listener has no known holder (see [`assert_foreign_unlinks`] for its unlink).
#[test]
fn without_sys_ptrace_other_processes_are_not_read() {
    runs_with(
        "privilege_without_sys_ptrace",
        &daemonset_without(CAP_SYS_PTRACE),
        &Expect {
            warnings: &[
                "processes: CAP_SYS_PTRACE is not in the agent's effective set; network and \
                 mount namespaces only they are in are not scanned, and their sockets have no \
                 known holder",
            ],
            namespaced: Known::Nothing,
            nobody: Known::WithoutHolder,
        },
        AgentNetns::Node,
    );
}

/// Without CAP_DAC_READ_SEARCH another user's /proc/PID/fd (mode 0500) cannot be listed: its
/// listener has no known holder (see [`assert_foreign_unlinks`] for its unlink).
#[test]
fn without_dac_read_search_other_users_fds_are_not_read() {
    runs_with(
        "privilege_without_dac_read_search",
        &daemonset_without(CAP_DAC_READ_SEARCH),
        &Expect {
            warnings: &[
                "processes: CAP_DAC_READ_SEARCH is not in the agent's effective set; \
                 their sockets have no known holder",
            ],
            namespaced: Known::WithHolder,
            nobody: Known::WithoutHolder,
        },
        AgentNetns::Node,
    );
}

// --- who may read /api ---

/// Not loopback: TEST-NET-1 (RFC 5737), on the loopback device of the test's own namespace.
const BEYOND_LOOPBACK: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

/// An interface request for `name` (`lo`, `lo:1`).
fn ifreq(name: &str) -> libc::ifreq {
    // SAFETY: ifreq is plain data; all zeroes is a valid (empty) request.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    ifr
}

/// Moves the calling thread into a new network namespace whose loopback is up and carries
/// [`BEYOND_LOOPBACK`] besides 127.0.0.1. Its children (the agent) start in it too.
fn enter_netns_beyond_loopback() -> io::Result<()> {
    use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
    // SAFETY: unshare takes no pointers; CLONE_NEWNET moves only this thread.
    check(unsafe { libc::unshare(libc::CLONE_NEWNET) })?;
    // SAFETY: a plain socket call; the descriptor is owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let raw = fd.as_raw_fd();
    let mut lo = ifreq("lo");
    // SAFETY: SIOC[GS]IFFLAGS read and write the ifreq they are given.
    unsafe {
        check(libc::ioctl(raw, libc::SIOCGIFFLAGS, &mut lo))?;
        lo.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        check(libc::ioctl(raw, libc::SIOCSIFFLAGS, &lo))?;
    }
    let mut alias = ifreq("lo:1");
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(BEYOND_LOOPBACK).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in fits the union's sockaddr (both 16 bytes); SIOCSIFADDR reads it.
    unsafe {
        std::ptr::write((&raw mut alias.ifr_ifru.ifru_addr).cast(), addr);
        check(libc::ioctl(raw, libc::SIOCSIFADDR, &alias))?;
    }
    Ok(())
}

/// `GET target` from the address the route to `to` picks (`to` itself, on loopback): the
/// status line and the body.
fn fetch(to: SocketAddr, target: &str) -> (String, String) {
    let mut s = TcpStream::connect(to).unwrap_or_else(|e| panic!("connect {to}: {e}"));
    let from = s.local_addr().expect("local address").ip();
    assert_eq!(from, to.ip(), "the client is at the address it connects to");
    write!(s, "GET {target} HTTP/1.0\r\n\r\n").expect("request");
    let mut raw = String::new();
    s.read_to_string(&mut raw).expect("response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP response");
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

/// `((dev, ino), binder tgid)` of each socket an `/api/sockets?path=` answer lists.
fn listed(body: &str) -> Vec<((u64, u64), u64)> {
    let v: serde_json::Value = serde_json::from_str(body).expect("JSON");
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"));
    v["sockets"]
        .as_array()
        .unwrap_or_else(|| panic!("no sockets in {v}"))
        .iter()
        .map(|s| {
            (
                (n(&s["file"]["dev"]), n(&s["file"]["ino"])),
                n(&s["binder"]["tgid"]),
            )
        })
        .collect()
}

/// Both clients' view of one agent listening on every interface: the loopback client always
/// reads /api; the other reads it only when `exposed`; both get /metrics.
fn assert_api_access(test: &str, exposed: bool) {
    let dir = tempdir();
    let watch = dir.path().join("watch");
    fs::create_dir(&watch).expect("watch dir");
    let extra: &[&str] = if exposed { &["--api-remote"] } else { &[] };
    let agent = Agent::start(
        dir.path(),
        &watch,
        &[&["--listen", "0.0.0.0:9469"], extra].concat(),
    );
    let sock = watch.join("api.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).expect("bind");
    let route = format!("/api/sockets?path={}", percent_encode(s(&sock)));
    let local = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9469));
    let remote = SocketAddr::V4(SocketAddrV4::new(BEYOND_LOOPBACK, 9469));
    let want = vec![(stat_id(&sock), u64::from(std::process::id()))];
    let deadline = Instant::now() + patience();
    loop {
        let (status, body) = fetch(local, &route);
        assert_eq!(status, "HTTP/1.1 200 OK", "{test}: loopback: {body}");
        if listed(&body) == want {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{test}: {sock:?} never listed: {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, body) = fetch(remote, &route);
    if exposed {
        assert_eq!(status, "HTTP/1.1 200 OK", "{test}: {body}");
        assert_eq!(listed(&body), want, "{test}: {body}");
    } else {
        assert_eq!(status, "HTTP/1.1 403 Forbidden", "{test}: {body}");
        assert_eq!(
            body,
            "forbidden: /api answers loopback clients only (api_remote = true exposes it)\n"
        );
    }
    for from in [local, remote] {
        let (status, body) = fetch(from, "/metrics");
        assert_eq!(status, "HTTP/1.1 200 OK", "{test}: /metrics from {from}");
        assert!(body.contains("sockwatch_build_info"), "{test}: {body}");
    }
    let to = if exposed {
        "every client (api_remote)"
    } else {
        "loopback clients only"
    };
    let said = format!("serving /metrics, /healthz and /readyz on 0.0.0.0:9469, and /api to {to}");
    assert!(agent.log_text().contains(&said), "{}", agent.log_text());
    drop(listener);
    agent.stop();
}

#[test]
fn the_api_answers_loopback_clients_only_unless_exposed() {
    let test = "the_api_answers_loopback_clients_only_unless_exposed";
    if !root(test) {
        return;
    }
    std::thread::spawn(move || {
        enter_netns_beyond_loopback().unwrap_or_else(|e| panic!("{test}: netns: {e}"));
        assert_api_access(test, false);
        assert_api_access(test, true);
    })
    .join()
    .unwrap_or_else(|e| std::panic::resume_unwind(e));
}
