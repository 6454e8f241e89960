//! The real agent started (or restarted) while sockets live, then their files removed by a
//! path relative to the remover's working directory (S17); and binds through a directory
//! descriptor, conmon's `/proc/self/fd/N/attach` (S18). Each on every tier this kernel
//! loads (`--probe-mode`), the tracepoint tier included: it sees only paths, so a relative
//! one resolves only through the directory identities the startup scan taught the agent.
use crate::common;

use std::{
    ffi::CString,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
};

use common::{actor::Actor, agent::Agent, *};
use serde_json::Value;
use sockwatch::kernel::probes::ProbeMode;
use sockwatch_common::Tier;

fn s(p: &Path) -> String {
    p.to_str().expect("utf-8").to_string()
}

fn c(p: impl AsRef<[u8]>) -> CString {
    CString::new(p.as_ref()).expect("no NUL")
}

fn tgid(v: &Value, who: &str) -> u64 {
    v[who]["tgid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no {who}.tgid in {v}"))
}

/// The modes whose probes this kernel loads (others skip, saying why; a required tier that
/// does not load fails).
fn loadable(test: &str) -> Vec<(ProbeMode, Tier)> {
    agent_modes()
        .into_iter()
        .filter(|(mode, tier)| tier_loads(&format!("{test} ({})", mode.name()), *mode, *tier))
        .collect()
}

fn start(dir: &Path, watch: &Path, mode: ProbeMode) -> Agent {
    Agent::start(dir, watch, &["--probe-mode", mode.name()])
}

/// Forks a child that runs `act` (raw syscalls only: this process has threads) and exits
/// with its errno; returns the child's pid once it has exited successfully.
fn child(act: impl FnOnce() -> i32) -> u32 {
    // SAFETY: the child makes only async-signal-safe calls on memory prepared before the
    // fork, then _exits.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let rc = act();
        // SAFETY: _exit(2) takes no pointers and never returns.
        unsafe { libc::_exit(rc) };
    }
    let mut status = 0;
    // SAFETY: `status` is a valid out-pointer; the pid is our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(libc::WEXITSTATUS(status), 0, "child {pid}: errno");
    pid as u32
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
}

/// `cd dir && unlink name`, by a process of its own.
fn relative_unlink(dir: &Path, name: &str) -> u32 {
    let (dir, name) = (c(dir.as_os_str().as_bytes()), c(name));
    child(|| {
        // SAFETY: NUL-terminated strings that outlive the calls.
        unsafe {
            if libc::chdir(dir.as_ptr()) != 0 || libc::unlink(name.as_ptr()) != 0 {
                return errno();
            }
        }
        0
    })
}

/// `cd dir && touch from && mv from to`, by a process of its own.
fn relative_rename_over(dir: &Path, from: &str, to: &str) -> u32 {
    let (dir, from, to) = (c(dir.as_os_str().as_bytes()), c(from), c(to));
    child(|| {
        // SAFETY: NUL-terminated strings that outlive the calls.
        unsafe {
            if libc::chdir(dir.as_ptr()) != 0 {
                return errno();
            }
            let fd = libc::open(from.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o600);
            if fd < 0 {
                return errno();
            }
            libc::close(fd);
            if libc::rename(from.as_ptr(), to.as_ptr()) != 0 {
                return errno();
            }
        }
        0
    })
}

/// A listener in `tmp/multus`, bound before any agent runs: (actor, socket path, dev, ino).
fn listener(tmp: &Path) -> (Actor, PathBuf, u64, u64) {
    let dir = tmp.join("multus");
    std::fs::create_dir(&dir).expect("mkdir");
    let sock = dir.join("multus.sock");
    let mut a = Actor::spawn();
    a.must(&format!("listen-on {}", s(&sock)));
    let (dev, ino) = stat_id(&sock);
    (a, sock, dev, ino)
}

/// Is the verdict about a path below `dir` (the agent reconciles the whole node's sockets)?
fn under(v: &Value, dir: &Path) -> bool {
    v["path"].as_str().is_some_and(|p| p.starts_with(&s(dir)))
}

/// The one verdict of this kind the agent wrote, by `actor` against `victim`'s `ino`.
fn only_verdict(agent: Agent, kind: &str, actor: u32, victim: u32, file: (u64, u64)) -> Value {
    let file_json = serde_json::json!({"dev": file.0, "ino": file.1});
    let v = agent.expect_verdict(kind, |v| v["verdict"] == kind && v["file"] == file_json);
    assert_eq!(tgid(&v, "actor"), u64::from(actor), "{v}");
    assert_eq!(tgid(&v, "victim"), u64::from(victim), "{v}");
    assert_eq!(
        (&v["file"]["dev"], &v["file"]["ino"]),
        (&file.0.into(), &file.1.into()),
        "{v}"
    );
    let all = agent.stop();
    let n = all
        .iter()
        .filter(|v| v["verdict"] == kind && v["file"] == file_json)
        .count();
    assert_eq!(n, 1, "exactly one {kind}: {all:#?}");
    v
}

/// S17: A listens, then the agent starts, then B runs `cd multus && rm multus.sock`.
#[test]
fn relative_unlink_after_a_late_start_is_a_foreign_unlink() {
    for (mode, _) in loadable("late_start_unlink") {
        let tmp = tempdir();
        let (a, sock, dev, ino) = listener(tmp.path());
        let agent = start(tmp.path(), tmp.path(), mode);
        let b = relative_unlink(sock.parent().expect("dir"), "multus.sock");
        let v = only_verdict(agent, "foreign_unlink", b, a.pid, (dev, ino));
        assert_eq!(v["path"], s(&sock), "{}: made absolute: {v}", mode.name());
        assert_eq!(v["listening"], true, "{v}");
    }
}

/// S17, restart: an agent sees A's bind and stops; the next one starts from its scan alone.
#[test]
fn relative_unlink_after_a_restart_is_a_foreign_unlink() {
    for (mode, _) in loadable("late_start_restart") {
        let tmp = tempdir();
        let runs = [tmp.path().join("run1"), tmp.path().join("run2")];
        runs.iter()
            .for_each(|r| std::fs::create_dir(r).expect("mkdir"));
        let first = start(&runs[0], tmp.path(), mode);
        let (a, sock, dev, ino) = listener(tmp.path());
        first.expect_line("A's bind", |l| l["kind"] == "bind" && l["path"] == s(&sock));
        let lines: Vec<Value> = first
            .stop()
            .into_iter()
            .filter(|v| under(v, tmp.path()))
            .collect();
        assert!(
            lines.is_empty(),
            "no verdict before the restart: {lines:#?}"
        );
        let agent = start(&runs[1], tmp.path(), mode);
        let b = relative_unlink(sock.parent().expect("dir"), "multus.sock");
        only_verdict(agent, "foreign_unlink", b, a.pid, (dev, ino));
    }
}

/// S17 with a rename: B runs `cd multus && touch x && mv x multus.sock` after a late start.
#[test]
fn relative_rename_over_after_a_late_start_is_replaced() {
    for (mode, _) in loadable("late_start_rename") {
        let tmp = tempdir();
        let (a, sock, dev, ino) = listener(tmp.path());
        let agent = start(tmp.path(), tmp.path(), mode);
        let b = relative_rename_over(sock.parent().expect("dir"), "x", "multus.sock");
        let v = only_verdict(agent, "replaced", b, a.pid, (dev, ino));
        assert_eq!(v["path"], s(&sock), "{}: made absolute: {v}", mode.name());
        assert_eq!(v["foreign"], true, "{v}");
    }
}

/// A forked child that runs `setup` (raw syscalls only: this process has threads), reports
/// whether it succeeded, and then stays until killed (on drop).
struct Staying {
    pid: i32,
}

impl Staying {
    fn fork(what: &str, setup: impl FnOnce() -> bool) -> Self {
        let mut ready = [0; 2];
        // SAFETY: room for two descriptors.
        assert_eq!(unsafe { libc::pipe(ready.as_mut_ptr()) }, 0);
        // SAFETY: the child makes raw syscalls on memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork");
        if pid == 0 {
            let ok = setup();
            // SAFETY: a one-byte write to our pipe, then pause until killed.
            unsafe {
                libc::write(ready[1], [u8::from(ok)].as_ptr().cast(), 1);
                loop {
                    libc::pause();
                }
            }
        }
        let child = Staying { pid };
        let mut ok = [0u8];
        // SAFETY: our pipe's read end and a one-byte buffer.
        let n = unsafe { libc::read(ready[0], ok.as_mut_ptr().cast(), 1) };
        // SAFETY: descriptors of ours, not used again.
        unsafe {
            libc::close(ready[0]);
            libc::close(ready[1]);
        }
        assert_eq!((n, ok[0]), (1, 1), "{what} failed in the child");
        child
    }

    /// A listener bound as conmon binds, `/proc/self/fd/N/NAME` through its descriptor N of
    /// `dir` (opened before the fork: the child allocates nothing); closed after the listen
    /// when `close`, as conmon does.
    fn dirfd_listener(dir: &Path, name: &str, close: bool) -> Self {
        let dc = c(dir.as_os_str().as_bytes());
        // SAFETY: a valid C string; the result is checked.
        let dfd = unsafe { libc::open(dc.as_ptr(), libc::O_PATH | libc::O_DIRECTORY) };
        assert!(dfd >= 0, "open {dir:?}: errno {}", errno());
        let path = format!("/proc/self/fd/{dfd}/{name}");
        // SAFETY: all-zero is a valid sockaddr_un.
        let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (d, b) in sa.sun_path.iter_mut().zip(path.bytes()) {
            *d = b as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        // SAFETY: raw syscalls on an address prepared before the fork.
        let child = Staying::fork(&format!("bind {path} + listen"), || unsafe {
            let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            fd >= 0
                && libc::bind(fd, (&raw const sa).cast(), len) == 0
                && libc::listen(fd, 8) == 0
                && (!close || libc::close(dfd) == 0)
        });
        // SAFETY: the parent's copy, not used again.
        unsafe { libc::close(dfd) };
        child
    }

    /// In a mount namespace of its own (the whole process's, private propagation), `src`
    /// bind-mounted onto `dst`.
    fn bind_mounter(src: &Path, dst: &Path) -> Self {
        let (root, s, d) = (
            c("/"),
            c(src.as_os_str().as_bytes()),
            c(dst.as_os_str().as_bytes()),
        );
        let null = std::ptr::null();
        // SAFETY: raw syscalls with C strings prepared before the fork.
        Staying::fork("unshare + bind mount", || unsafe {
            libc::unshare(libc::CLONE_NEWNS) == 0
                && libc::mount(
                    null,
                    root.as_ptr(),
                    null,
                    libc::MS_REC | libc::MS_PRIVATE,
                    null.cast(),
                ) == 0
                && libc::mount(s.as_ptr(), d.as_ptr(), null, libc::MS_BIND, null.cast()) == 0
        })
    }
}

impl Drop for Staying {
    fn drop(&mut self) {
        // SAFETY: our own child; waitpid reaps it.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// S18: a conmon-style bind, seen by the agent (bound while it runs) or only by its startup
/// scan (bound before): the real path, no orphan, and a foreign unlink by that path is
/// reported against the binder with the file's inode.
#[test]
fn bind_through_a_directory_descriptor_has_its_real_path() {
    for (nth, (mode, _)) in loadable("late_start_dirfd").into_iter().enumerate() {
        // Bound while the agent runs (resolved at the event, through the descriptor: each
        // tier's own), or before it starts (by its scan: through the descriptor, or, once
        // conmon-like the binder closed it, by the walk of the watched directory). The scan
        // reads /proc the same under every tier, so its cases run under the first only (a
        // scanned socket's foreign unlink is `relative_unlink_after_a_late_start`'s, per tier).
        let cases: &[(bool, bool)] = match nth {
            0 => &[(false, false), (true, false), (true, true)],
            _ => &[(false, false)],
        };
        for &(bound_first, close) in cases {
            let tmp = tempdir();
            let dir = tmp.path().join("userdata");
            std::fs::create_dir(&dir).expect("mkdir");
            let real = dir.join("attach");
            let early = bound_first.then(|| Staying::dirfd_listener(&dir, "attach", close));
            let agent = start(tmp.path(), tmp.path(), mode);
            let binder = early.unwrap_or_else(|| {
                let l = Staying::dirfd_listener(&dir, "attach", false);
                let bind = agent.expect_line("the bind", |l| l["kind"] == "bind");
                assert_eq!(bind["path"], s(&real), "{}: {bind}", mode.name());
                l
            });
            let file = stat_id(&real);
            std::thread::sleep(std::time::Duration::from_millis(300));
            let ours: Vec<Value> = agent
                .verdicts()
                .into_iter()
                .filter(|v| under(v, tmp.path()))
                .collect();
            assert_eq!(ours, Vec::<Value>::new(), "quiet while it listens");
            let real_c = c(real.as_os_str().as_bytes());
            // SAFETY: a NUL-terminated string that outlives the call.
            let remover = child(|| unsafe {
                if libc::unlink(real_c.as_ptr()) == 0 {
                    0
                } else {
                    errno()
                }
            });
            let v = only_verdict(agent, "foreign_unlink", remover, binder.pid as u32, file);
            assert_eq!(
                v["path"],
                s(&real),
                "{} bound_first {bound_first} close {close}: {v}",
                mode.name()
            );
        }
    }
}

/// Item 7 in the agent: its startup scan finds a live socket file bind-mounted into another
/// mount namespace, logs the risk and exports it by watch.
#[test]
fn the_agent_exports_a_socket_file_mount() {
    if !is_root() {
        skip("socket_file_mount in the agent", "needs root");
        return;
    }
    let tmp = tempdir();
    let (_a, sock, _, _) = listener(tmp.path());
    let target = tmp.path().join("mounted.sock");
    std::fs::write(&target, b"").expect("mount point");
    // A process of its own: the actor's `bind-mount` unshares one thread only.
    let client = Staying::bind_mounter(&sock, &target);
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let agent = Agent::start(tmp.path(), tmp.path(), &["--listen", &addr.to_string()]);
    let watch = tmp
        .path()
        .file_name()
        .expect("name")
        .to_str()
        .expect("utf-8");
    let metrics = Agent::metrics(addr);
    let want = format!("sockwatch_socket_file_mounts{{watch=\"{watch}\"}} 1");
    assert!(metrics.lines().any(|l| l == want), "{want} in:\n{metrics}");
    let log = agent.log_text();
    let mntns = std::fs::read_link(format!("/proc/{}/ns/mnt", client.pid)).expect("ns");
    let ns = mntns.to_string_lossy();
    let ns = ns.trim_start_matches("mnt:[").trim_end_matches(']');
    let said = format!("at {} in mount ns {ns} (pid {})", s(&target), client.pid);
    assert!(log.contains(&said), "{said} in:\n{log}");
    agent.stop();
}

/// The watch bounds what a scan adopts: A listens inside the watched directory and C outside
/// it, both before the agent starts; B unlinks both. Only A's removal is a foreign unlink; C's
/// socket was never adopted (counted as ignored), so the kernel does not pass its unlink and
/// the agent writes nothing about it.
#[test]
fn a_late_start_adopts_only_the_watched_sockets() {
    if !root("late_start_scope") {
        return;
    }
    let tmp = tempdir();
    let (a, sock, dev, ino) = listener(tmp.path());
    let watch = sock.parent().expect("dir").to_path_buf();
    let outside = tmp.path().join("elsewhere");
    std::fs::create_dir(&outside).expect("mkdir");
    let other = outside.join("other.sock");
    let mut c = Actor::spawn();
    c.must(&format!("listen-on {}", s(&other)));
    let run = tmp.path().join("run");
    std::fs::create_dir(&run).expect("mkdir");
    let addr = free_addr();
    let agent = Agent::start(&run, &watch, &["--listen", &addr.to_string()]);
    let ignored = r#"sockwatch_engine_ignored_total{reason="scan_outside_watch"} "#;
    let outside_count = Agent::metrics(addr)
        .lines()
        .find_map(|l| l.strip_prefix(ignored).and_then(|v| v.parse::<f64>().ok()));
    assert!(
        outside_count.is_some_and(|n| n >= 1.0),
        "C's socket at least: {outside_count:?}"
    );
    let mut b = Actor::spawn();
    b.must(&format!("unlink {}", s(&other)));
    b.must(&format!("unlink {}", s(&sock)));
    let events = agent.events.clone();
    // Written at the end of A's takeover window, well after C's unlink would have been.
    let v = only_verdict(agent, "foreign_unlink", b.pid, a.pid, (dev, ino));
    assert_eq!(v["path"], s(&sock), "{v}");
    let text = std::fs::read_to_string(&events).expect("events");
    let about_other: Vec<&str> = text.lines().filter(|l| l.contains(&s(&other))).collect();
    assert!(about_other.is_empty(), "{about_other:#?}");
    drop(c);
}
