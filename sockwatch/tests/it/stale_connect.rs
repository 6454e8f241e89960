//! Stale connects by clients that exit at once (kubelet exec probes): the real agent, under
//! every probe mode this kernel loads, names the refused inode, its binder and its remover
//! even when the client is gone before the agent completes its event (S15, S4).
use crate::common;

use std::{
    collections::BTreeSet,
    ffi::CString,
    fs::File,
    os::fd::{AsRawFd, RawFd},
    path::Path,
    time::Instant,
};

use common::{actor::Actor, agent::Agent, *};
use serde_json::Value;

/// Short-lived clients per scenario.
const CLIENTS: usize = 50;

fn s(p: &Path) -> String {
    p.to_str().expect("utf-8").to_string()
}

fn tgid(v: &Value, who: &str) -> u64 {
    v[who]["tgid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no {who}.tgid in {v}"))
}

fn stale_connects(agent: &Agent) -> Vec<Value> {
    let mut v = agent.verdicts();
    v.retain(|v| v["verdict"] == "stale_connect");
    v
}

/// The probe modes to run the agent under: those whose probes load on this kernel.
fn loadable_modes(test: &str) -> Vec<&'static str> {
    agent_modes()
        .into_iter()
        .filter(|(mode, tier)| tier_loads(&format!("{test}_{}", tier.name()), *mode, *tier))
        .map(|(mode, _)| mode.name())
        .collect()
}

/// A `sockaddr_un` for `path`, built before a fork (the child only makes syscalls).
fn sockaddr(path: &Path) -> libc::sockaddr_un {
    // SAFETY: sockaddr_un is plain integers; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = CString::new(s(path)).expect("no NUL");
    let bytes = bytes.as_bytes_with_nul();
    assert!(bytes.len() <= addr.sun_path.len(), "path fits sun_path");
    for (d, b) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *b as libc::c_char;
    }
    addr
}

/// Forks a client that enters the mount namespace `ns` (if any), connects to `addr` and
/// exits at once with the connect's errno (0 on success); reaps it and returns its pid and
/// that errno.
fn short_lived_connect(ns: Option<RawFd>, addr: &libc::sockaddr_un) -> (u32, i32) {
    // SAFETY: the child makes only async-signal-safe syscalls on memory prepared before the
    // fork, then `_exit`s; the parent only waits for it.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: as above: setns, socket, connect and _exit take plain values and `addr`,
        // which lives in this (copied) address space.
        unsafe {
            if let Some(fd) = ns
                && libc::setns(fd, libc::CLONE_NEWNS) != 0
            {
                libc::_exit(200);
            }
            let sk = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
            let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
            let rc = libc::connect(sk, (addr as *const libc::sockaddr_un).cast(), len);
            libc::_exit(if rc == 0 {
                0
            } else {
                *libc::__errno_location()
            });
        }
    }
    let mut status = 0;
    // SAFETY: waits for our own child; `status` is a valid out pointer.
    let got = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(got, pid, "waitpid");
    assert!(libc::WIFEXITED(status), "client exited normally");
    (pid as u32, libc::WEXITSTATUS(status))
}

/// A process in a mount namespace of its own, as a container's main process: it bind-mounts
/// a file onto another there, then waits to be killed.
struct NamespaceHolder {
    pid: libc::pid_t,
}

impl NamespaceHolder {
    fn bind_mount(src: &Path, dst: &Path) -> Self {
        let (src, dst, root) = (
            CString::new(s(src)).expect("no NUL"),
            CString::new(s(dst)).expect("no NUL"),
            CString::new("/").expect("no NUL"),
        );
        let mut ready = [0 as RawFd; 2];
        // SAFETY: `ready` is a valid out array of two fds.
        assert_eq!(unsafe { libc::pipe(ready.as_mut_ptr()) }, 0, "pipe");
        // SAFETY: the child makes only async-signal-safe syscalls on memory prepared before
        // the fork; the parent only reads the pipe.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: plain values and NUL-terminated strings that live in this (copied)
            // address space; every failure `_exit`s.
            unsafe {
                let ok = libc::unshare(libc::CLONE_NEWNS) == 0
                    && libc::mount(
                        std::ptr::null(),
                        root.as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ) == 0
                    && libc::mount(
                        src.as_ptr(),
                        dst.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND,
                        std::ptr::null(),
                    ) == 0;
                let byte = [u8::from(ok)];
                libc::write(ready[1], byte.as_ptr().cast(), 1);
                loop {
                    libc::pause();
                }
            }
        }
        let mut byte = [0u8];
        // SAFETY: reads one byte into `byte` from the pipe we own.
        let n = unsafe { libc::read(ready[0], byte.as_mut_ptr().cast(), 1) };
        // SAFETY: closes the two pipe fds we own.
        unsafe {
            libc::close(ready[0]);
            libc::close(ready[1]);
        }
        let holder = Self { pid };
        assert!(
            n == 1 && byte[0] == 1,
            "namespace holder set up its bind mount"
        );
        holder
    }

    fn namespace(&self) -> File {
        File::open(format!("/proc/{}/ns/mnt", self.pid)).expect("the holder's mount namespace")
    }
}

impl Drop for NamespaceHolder {
    fn drop(&mut self) {
        // SAFETY: kill and waitpid on our own child; a null status pointer is allowed.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            libc::waitpid(self.pid, std::ptr::null_mut(), 0);
        }
    }
}

/// Waits until `n` stale connects are written (or the patience runs out), then stops the
/// agent and returns every stale connect it wrote.
fn stale_connects_after(agent: Agent, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + patience();
    while stale_connects(&agent).len() < n && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let mut all = agent.stop();
    all.retain(|v| v["verdict"] == "stale_connect");
    all
}

/// S15: S3 with exec-probe clients. A listens on P; H, in its own mount namespace, bind-mounts
/// P onto Q; B removes P and listens anew; A exits. 50 clients, each entering H's namespace,
/// connect to Q and exit at once: 50 stale connects, each `unlinked_pinned` on A's old inode,
/// naming A as binder and B as remover.
#[test]
fn s15_exec_probes_through_a_stale_bind_mount() {
    if !is_root() {
        skip("s15", "needs root");
        return;
    }
    for mode in loadable_modes("s15") {
        s15_under(mode);
    }
}

fn s15_under(mode: &str) {
    let tmp = tempdir();
    let sock = tmp.path().join("srv.sock");
    let view = tmp.path().join("probe-view.sock");
    let agent = Agent::start(tmp.path(), tmp.path(), &["--probe-mode", mode]);
    let (mut a, mut b) = (Actor::spawn(), Actor::spawn());
    a.must(&format!("listen-on {}", s(&sock)));
    let old = stat_id(&sock);
    std::fs::write(&view, b"").expect("mount point");
    let holder = NamespaceHolder::bind_mount(&sock, &view);
    b.must(&format!("unlink {}", s(&sock)));
    b.must(&format!("listen-on {}", s(&sock)));
    let (a_pid, b_pid) = (u64::from(a.pid), u64::from(b.pid));
    drop(a); // nothing is bound to the old inode any more

    let ns = holder.namespace();
    let addr = sockaddr(&view);
    let clients: BTreeSet<u64> = (0..CLIENTS)
        .map(|_| {
            let (pid, errno) = short_lived_connect(Some(ns.as_raw_fd()), &addr);
            assert_eq!(errno, libc::ECONNREFUSED, "{mode}: client {pid}");
            u64::from(pid)
        })
        .collect();

    let stale = stale_connects_after(agent, CLIENTS);
    assert_eq!(stale.len(), CLIENTS, "{mode}: one per client: {stale:#?}");
    for v in &stale {
        assert_eq!(v["kind"], "unlinked_pinned", "{mode}: {v}");
        assert_eq!(v["path"], s(&view), "{mode}: {v}");
        assert_eq!(
            (v["file"]["dev"].as_u64(), v["file"]["ino"].as_u64()),
            (Some(old.0), Some(old.1)),
            "{mode}: the old inode: {v}"
        );
        assert_eq!(tgid(v, "binder"), a_pid, "{mode}: {v}");
        assert_eq!(tgid(v, "removed_by"), b_pid, "{mode}: {v}");
    }
    let actors: BTreeSet<u64> = stale.iter().map(|v| tgid(v, "actor")).collect();
    assert_eq!(actors, clients, "{mode}: each client once");
}

/// S4: A listens on P and exits without unlinking; a client that exits at once is refused
/// there: a `dead_listener` stale connect naming P's inode and A.
#[test]
fn s4_dead_listener_with_a_short_lived_client() {
    if !is_root() {
        skip("s4_short", "needs root");
        return;
    }
    for mode in loadable_modes("s4_short") {
        let tmp = tempdir();
        let sock = tmp.path().join("dead.sock");
        let agent = Agent::start(tmp.path(), tmp.path(), &["--probe-mode", mode]);
        let mut a = Actor::spawn();
        a.must(&format!("listen-on {}", s(&sock)));
        let (file, a_pid) = (stat_id(&sock), u64::from(a.pid));
        drop(a);
        let (client, errno) = short_lived_connect(None, &sockaddr(&sock));
        assert_eq!(errno, libc::ECONNREFUSED, "{mode}");

        let stale = stale_connects_after(agent, 1);
        let [v] = stale.as_slice() else {
            panic!("{mode}: one stale connect: {stale:#?}");
        };
        assert_eq!(v["kind"], "dead_listener", "{mode}: {v}");
        assert_eq!(tgid(v, "actor"), u64::from(client), "{mode}: {v}");
        assert_eq!(
            (v["file"]["dev"].as_u64(), v["file"]["ino"].as_u64()),
            (Some(file.0), Some(file.1)),
            "{mode}: {v}"
        );
        assert_eq!(tgid(v, "binder"), a_pid, "{mode}: {v}");
    }
}
