//! `sockwatch scan` on the running kernel: real processes, real sockets, exact values.
//!
//! Socket holders are forked children that only make raw syscalls (socket, bind, listen,
//! unshare, mount, pause) and name themselves with `prctl(PR_SET_NAME)`, so the test knows
//! each holder's pid and comm exactly. No python, no shell: runs in the busybox VM too.
//! Tests share the process table and the test binary's fds, so they run one at a time.
//! Each scan is limited to the test's own temporary directory (`--watch`), so findings about
//! the rest of the machine never leak into the assertions.
use crate::common;

use std::{
    ffi::{CStr, CString},
    fs,
    io::Read as _,
    os::{
        fd::{FromRawFd as _, OwnedFd},
        unix::{ffi::OsStrExt as _, fs::MetadataExt as _},
    },
    path::{Path, PathBuf},
    process::Command,
    sync::{Mutex, MutexGuard},
};

use common::skip;
use sockwatch::{
    host::{
        diag::{self, VfsId},
        mounts, procfd,
    },
    scan::{self, FileId, OrphanCause, ScanOptions, ScanReport, StaleCause, StaleSocketFile},
};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn is_root() -> bool {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A forked child holding kernel state; killed and reaped on drop.
struct Child {
    pid: i32,
    reaped: bool,
}

impl Child {
    /// Fork; the child names itself `comm`, runs `setup` (raw syscalls only: the parent has
    /// threads), reports its result, then waits for SIGKILL (`stay`) or exits.
    fn fork(
        comm: &CStr,
        stay: bool,
        setup: impl FnOnce() -> Result<(), (&'static str, i32)>,
    ) -> Self {
        Self::fork_inheriting(comm, stay, &[], setup)
    }

    /// [`Child::fork`], the child keeping the descriptors `inherit` too.
    fn fork_inheriting(
        comm: &CStr,
        stay: bool,
        inherit: &[i32],
        setup: impl FnOnce() -> Result<(), (&'static str, i32)>,
    ) -> Self {
        let mut fds = [0; 2];
        // SAFETY: fds has room for two descriptors.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // Sorted before the fork: the child allocates nothing.
        let mut keep: Vec<i32> = inherit.iter().copied().chain([fds[1]]).collect();
        keep.sort_unstable();
        // SAFETY: the child only makes async-signal-safe calls, then _exits or pauses.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: errno {}", errno());
        if pid == 0 {
            // SAFETY: raw syscalls on valid pointers; nothing allocates.
            unsafe {
                // The test binary's other descriptors (earlier modules' sockets among them)
                // are not this child's to hold: it keeps the status pipe and `inherit`.
                let mut from: libc::c_uint = 3;
                for &fd in &keep {
                    let fd = fd as libc::c_uint;
                    if fd > from {
                        libc::syscall(libc::SYS_close_range, from, fd - 1, 0);
                    }
                    from = from.max(fd + 1);
                }
                libc::syscall(libc::SYS_close_range, from, libc::c_uint::MAX, 0);
                libc::prctl(libc::PR_SET_NAME, comm.as_ptr());
                let status: [u8; 2] = match setup() {
                    Ok(()) => [0, 0],
                    Err((step, e)) => [step.as_ptr().read(), e as u8],
                };
                libc::write(fds[1], status.as_ptr().cast(), 2);
                if stay {
                    loop {
                        libc::pause();
                    }
                }
                libc::_exit(0);
            }
        }
        // SAFETY: the write end is ours and not used again.
        unsafe { libc::close(fds[1]) };
        let mut status = [0u8; 2];
        // SAFETY: the pipe's read end is ours and owned by nothing else.
        let mut r = fs::File::from(unsafe { OwnedFd::from_raw_fd(fds[0]) });
        r.read_exact(&mut status)
            .unwrap_or_else(|e| panic!("child {comm:?} died during setup: {e}"));
        let child = Child { pid, reaped: false };
        assert_eq!(
            status[0], 0,
            "child {comm:?}: step starting with {:?} failed: errno {}",
            status[0] as char, status[1]
        );
        child
    }

    fn tgid(&self) -> u32 {
        self.pid as u32
    }

    fn kill(&mut self) {
        if !self.reaped {
            // SAFETY: our own child; waitpid reaps it.
            unsafe {
                libc::kill(self.pid, libc::SIGKILL);
                libc::waitpid(self.pid, std::ptr::null_mut(), 0);
            }
            self.reaped = true;
        }
    }

    /// For a child that exits by itself.
    fn wait(&mut self) {
        let mut status = 0;
        // SAFETY: our own child.
        assert_eq!(unsafe { libc::waitpid(self.pid, &mut status, 0) }, self.pid);
        self.reaped = true;
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `sockaddr_un` for `path`, built before forking.
fn addr(path: &Path) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let b = path.as_os_str().as_bytes();
    assert!(
        b.len() < a.sun_path.len(),
        "path too long for sun_path: {path:?}"
    );
    for (d, s) in a.sun_path.iter_mut().zip(b) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + b.len() + 1;
    (a, len as libc::socklen_t)
}

/// In a child: socket + bind (+ listen).
fn bind_sock(
    a: &(libc::sockaddr_un, libc::socklen_t),
    listen: bool,
) -> Result<i32, (&'static str, i32)> {
    // SAFETY: raw syscalls on a valid address.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
        if fd < 0 {
            return Err(("socket", errno()));
        }
        if libc::bind(fd, (&a.0 as *const libc::sockaddr_un).cast(), a.1) != 0 {
            return Err(("bind", errno()));
        }
        if listen && libc::listen(fd, 16) != 0 {
            return Err(("listen", errno()));
        }
        Ok(fd)
    }
}

/// A listener child on `path`; returns it and its socket's inode.
fn listener(comm: &CStr, path: &Path) -> (Child, u64) {
    let a = addr(path);
    let child = Child::fork(comm, true, || bind_sock(&a, true).map(|_| ()));
    let sock = sockets_of(child.tgid());
    assert_eq!(sock.len(), 1, "one socket in {comm:?}");
    (child, sock[0])
}

fn sockets_of(tgid: u32) -> Vec<u64> {
    let mut v: Vec<u64> = fs::read_dir(format!("/proc/{tgid}/fd"))
        .expect("child fds")
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| procfd::parse_socket_link(l.as_os_str().as_bytes()))
        .map(u64::from)
        .collect();
    v.sort_unstable();
    v
}

fn file_id(path: &Path) -> FileId {
    let m = fs::metadata(path).unwrap_or_else(|e| panic!("stat {path:?}: {e}"));
    FileId {
        dev: m.dev(),
        ino: m.ino(),
    }
}

fn my_cgroup() -> String {
    procfd::parse_cgroup(&fs::read_to_string("/proc/self/cgroup").unwrap()).0
}

fn tmpdir() -> tempfile::TempDir {
    // Short paths: sun_path holds 108 bytes, and /proc/PID/root/... is added in front.
    tempfile::Builder::new()
        .prefix("swscan")
        .tempdir_in("/tmp")
        .expect("tempdir")
}

fn scan_watching(dir: &Path) -> ScanReport {
    scan::scan(&ScanOptions {
        watch: vec![dir.to_path_buf()],
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("scan: {e}"))
}

fn bin() -> PathBuf {
    std::env::var_os("SOCKWATCH_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_sockwatch")),
        PathBuf::from,
    )
}

/// Run `sockwatch scan ARGS`: (exit code, stdout, stderr).
fn run_bin(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin())
        .arg("scan")
        .args(args)
        .env_remove("SOCKWATCH_WATCH")
        .env_remove("SOCKWATCH_SCAN_FORMAT")
        .output()
        .expect("run sockwatch");
    (
        out.status.code().expect("exited"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_scan(dir: &Path) -> (i32, serde_json::Value) {
    let (code, out, err) = run_bin(&["--watch", dir.to_str().unwrap(), "--format", "json"]);
    let v = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out:?} {err}"));
    (code, v)
}

/// The exit status of a scan that found nothing wrong: 0 when it saw everything, 3 when some
/// process was unreadable (a sandbox's own init, to root too) or a warning names something
/// else it did not see.
fn clean_code(j: &serde_json::Value) -> i32 {
    let warned = j["warnings"].as_array().is_some_and(|w| !w.is_empty());
    if j["complete"] == true && !warned {
        0
    } else {
        3
    }
}

fn path_str(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// S10: a listener whose file was unlinked before the scan.
#[test]
fn orphaned_listener_unlinked() {
    let _s = serial();
    let d = tmpdir();
    let p = d.path().join("a.sock");
    let (child, sock_ino) = listener(c"sw-orphan", &p);
    let file = file_id(&p);
    fs::remove_file(&p).unwrap();

    let r = scan_watching(d.path());
    assert_eq!(r.findings.orphaned_listeners.len(), 1, "{:#?}", r.findings);
    assert!(
        r.findings.stale_socket_files.is_empty(),
        "{:#?}",
        r.findings
    );
    assert!(r.findings.stale_bind_mounts.is_empty(), "{:#?}", r.findings);
    let o = &r.findings.orphaned_listeners[0];
    assert_eq!(o.path, path_str(&p));
    assert_eq!(o.sock_ino, sock_ino);
    assert_eq!(o.cause, OrphanCause::Unlinked);
    // The file is gone: sock_diag's 32-bit inode is all there is, and it is exact here.
    assert_eq!(o.file, file);
    assert!(o.ino_low32);
    assert_eq!((o.pending, o.backlog), (Some(0), Some(16)));
    assert_eq!(o.holders.len(), 1);
    assert_eq!(o.holders[0].tgid, child.tgid());
    assert_eq!(o.holders[0].comm, "sw-orphan");
    assert_eq!(o.holders[0].cgroup, my_cgroup());
    let s = r
        .sockets
        .iter()
        .find(|s| s.sock_ino == sock_ino)
        .expect("in the snapshot");
    assert_eq!(s.file_linked, Some(false));
    assert!(s.listening);

    // The real binary: exit 1, the same facts in JSON, one table line.
    let (code, j) = json_scan(d.path());
    assert_eq!(code, 1, "{j}");
    let o = &j["findings"]["orphaned_listeners"][0];
    assert_eq!(o["path"], path_str(&p));
    assert_eq!(o["sock_ino"], sock_ino);
    assert_eq!(o["file"]["dev"], file.dev);
    assert_eq!(o["file"]["ino"], file.ino);
    assert_eq!(o["cause"]["how"], "unlinked");
    assert_eq!(o["holders"][0]["tgid"], child.tgid());
    assert_eq!(o["holders"][0]["comm"], "sw-orphan");
    assert_eq!(j["counts"]["orphaned_listeners"], 1);
    let (code, table, _) = run_bin(&["--watch", d.path().to_str().unwrap()]);
    assert_eq!(code, 1);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 1, "{table}");
    assert!(
        lines[0].starts_with(&format!(
            "orphaned-listener  {}  unlinked; socket:[{sock_ino}]",
            p.display()
        )),
        "{table}"
    );
    assert!(
        lines[0].contains(&format!("held by {} sw-orphan", child.tgid())),
        "{table}"
    );
}

/// S5: B binds P.new and renames it over P while A listens on P.
#[test]
fn orphaned_listener_replaced() {
    let _s = serial();
    let d = tmpdir();
    let p = d.path().join("a.sock");
    let p_new = d.path().join("a.sock.new");
    let (a, a_sock) = listener(c"sw-old", &p);
    let a_file = file_id(&p);
    let (b, b_sock) = listener(c"sw-new", &p_new);
    let b_file = file_id(&p_new);
    fs::rename(&p_new, &p).unwrap();

    let r = scan_watching(d.path());
    assert_eq!(r.findings.orphaned_listeners.len(), 1, "{:#?}", r.findings);
    assert!(
        r.findings.stale_socket_files.is_empty(),
        "{:#?}",
        r.findings
    );
    let o = &r.findings.orphaned_listeners[0];
    assert_eq!(o.path, path_str(&p));
    assert_eq!(o.sock_ino, a_sock);
    assert_eq!(o.file, a_file);
    assert_eq!(o.cause, OrphanCause::Replaced { now: b_file });
    assert_eq!(o.holders.len(), 1);
    assert_eq!(
        (o.holders[0].tgid, o.holders[0].comm.as_str()),
        (a.tgid(), "sw-old")
    );
    // B's bound name (a.sock.new) is gone, but its file lives on at a.sock: not an orphan.
    let bs = r
        .sockets
        .iter()
        .find(|s| s.sock_ino == b_sock)
        .expect("B scanned");
    assert_eq!(bs.path, path_str(&p_new));
    assert_eq!(bs.file, Some(b_file));
    assert!(!bs.ino_low32);
    assert_eq!(bs.file_linked, Some(true));
    assert_eq!(bs.holders[0].tgid, b.tgid());

    let (code, j) = json_scan(d.path());
    assert_eq!(code, 1, "{j}");
    let o = &j["findings"]["orphaned_listeners"][0];
    assert_eq!(o["cause"]["how"], "replaced");
    assert_eq!(o["cause"]["now"]["ino"], b_file.ino);
    assert_eq!(o["sock_ino"], a_sock);
}

/// S3: a client in its own mount namespace bind-mounts the socket file; the original is
/// unlinked; the client's mount pins the old inode and connects through it are refused.
#[test]
fn stale_bind_mount() {
    if !is_root() {
        skip(
            "stale_bind_mount",
            "needs root for a private mount namespace",
        );
        return;
    }
    let _s = serial();
    let d = tmpdir();
    let p = d.path().join("a.sock");
    let q = d.path().join("q");
    fs::write(&q, b"").unwrap();
    let (mut a, _) = listener(c"sw-daemon", &p);
    let p_file = file_id(&p);
    let (root, slash) = (c"none", c"/");
    let (pc, qc) = (
        CString::new(p.as_os_str().as_bytes()).unwrap(),
        CString::new(q.as_os_str().as_bytes()).unwrap(),
    );
    // SAFETY: the closure runs in the forked child and makes raw syscalls with valid C strings only.
    let c = Child::fork(c"sw-client", true, || unsafe {
        // SAFETY: raw syscalls with valid C strings.
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(("unshare", errno()));
        }
        if libc::mount(
            root.as_ptr(),
            slash.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return Err(("make-rprivate", errno()));
        }
        if libc::mount(
            pc.as_ptr(),
            qc.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        ) != 0
        {
            return Err(("bind mount", errno()));
        }
        Ok(())
    });
    // The successor's side: the old daemon is gone and its file unlinked.
    a.kill();
    fs::remove_file(&p).unwrap();

    // What the client sees: connecting at its mount point is refused (a pinned dead inode).
    let through = PathBuf::from(format!("/proc/{}/root{}", c.tgid(), q.display()));
    let e = std::os::unix::net::UnixStream::connect(&through).expect_err("refused");
    assert_eq!(e.raw_os_error(), Some(libc::ECONNREFUSED), "{e}");

    let r = scan_watching(d.path());
    assert!(
        r.findings.orphaned_listeners.is_empty(),
        "{:#?}",
        r.findings
    );
    assert!(
        r.findings.stale_socket_files.is_empty(),
        "{:#?}",
        r.findings
    );
    assert_eq!(r.findings.stale_bind_mounts.len(), 1, "{:#?}", r.findings);
    let m = &r.findings.stale_bind_mounts[0];
    let mntns = procfd::parse_bracket_link(
        fs::read_link(format!("/proc/{}/ns/mnt", c.tgid()))
            .unwrap()
            .as_os_str()
            .as_bytes(),
        b"mnt",
    )
    .unwrap();
    let own_mounts = mounts::parse_mountinfo(&fs::read("/proc/self/mountinfo").unwrap()).unwrap();
    let (maj, min, inside) =
        mounts::fs_location(&own_mounts, &fs::canonicalize(d.path()).unwrap()).unwrap();
    let dev = fs::metadata(d.path()).unwrap().dev();
    assert_eq!((maj, min), (libc::major(dev), libc::minor(dev)));
    assert_eq!(m.mount_point, path_str(&q));
    assert_eq!(
        m.source,
        format!("{}/a.sock", String::from_utf8_lossy(&inside))
    );
    assert_eq!(m.source_dev, format!("{maj}:{min}"));
    assert_eq!(m.file, p_file);
    assert_eq!(m.nlink, 0);
    assert_eq!(m.mntns, mntns);
    assert_eq!(m.served_by, None);
    assert_eq!(m.process_count, 1);
    assert_eq!(m.processes.len(), 1);
    assert_eq!(
        (m.processes[0].tgid, m.processes[0].comm.as_str()),
        (c.tgid(), "sw-client")
    );

    let (code, j) = json_scan(d.path());
    assert_eq!(code, 1, "{j}");
    let m = &j["findings"]["stale_bind_mounts"][0];
    assert_eq!(m["mount_point"], path_str(&q));
    assert_eq!(m["mntns"], mntns);
    assert_eq!(m["file"]["ino"], p_file.ino);
    assert_eq!(m["processes"][0]["tgid"], c.tgid());
}

/// S4: the binder exits without unlinking: the file stays, nothing serves it.
#[test]
fn stale_socket_file() {
    let _s = serial();
    let d = tmpdir();
    let p = d.path().join("s4.sock");
    let a = addr(&p);
    let mut child = Child::fork(c"sw-s4", false, || bind_sock(&a, true).map(|_| ()));
    child.wait();
    let file = file_id(&p);
    let e = std::os::unix::net::UnixStream::connect(&p).expect_err("refused");
    assert_eq!(e.raw_os_error(), Some(libc::ECONNREFUSED), "{e}");

    let r = scan_watching(d.path());
    assert!(
        r.findings.orphaned_listeners.is_empty(),
        "{:#?}",
        r.findings
    );
    assert!(r.findings.stale_bind_mounts.is_empty(), "{:#?}", r.findings);
    assert_eq!(
        r.findings.stale_socket_files,
        vec![StaleSocketFile {
            path: path_str(&p),
            file,
            cause: StaleCause::NoSocket,
            holders: vec![],
        }]
    );
    assert_eq!(r.counts.watch_socket_files, 1);

    let (code, table, err) = run_bin(&["--watch", d.path().to_str().unwrap()]);
    assert_eq!(code, 1, "{table} {err}");
    assert_eq!(
        table,
        format!(
            "stale-socket-file  {}  no socket is bound to it; dev {}:{} ino {}\n",
            p.display(),
            libc::major(file.dev),
            libc::minor(file.dev),
            file.ino
        )
    );
    assert!(
        err.contains("1 findings (0 orphaned listeners, 1 stale socket files"),
        "{err}"
    );
}

/// A healthy listener: nothing to report about the watched directory, exit 0.
#[test]
fn clean_directory() {
    let _s = serial();
    let d = tmpdir();
    let p = d.path().join("ok.sock");
    let (child, sock_ino) = listener(c"sw-healthy", &p);
    let file = file_id(&p);

    let r = scan_watching(d.path());
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
    let s = r
        .sockets
        .iter()
        .find(|s| s.sock_ino == sock_ino)
        .expect("scanned");
    assert_eq!(s.path, path_str(&p));
    assert_eq!(s.file, Some(file));
    assert!(!s.ino_low32);
    assert!(s.listening);
    assert_eq!(s.file_linked, Some(true));
    assert_eq!(s.holders.len(), 1);
    assert_eq!(
        (s.holders[0].tgid, s.holders[0].comm.as_str()),
        (child.tgid(), "sw-healthy")
    );
    assert_eq!(r.counts.watch_socket_files, 1);

    let (code, j) = json_scan(d.path());
    assert_eq!(code, clean_code(&j), "{j}");
    let (table_code, out, err) = run_bin(&["--watch", d.path().to_str().unwrap()]);
    assert_eq!((table_code, out.as_str()), (code, ""), "{err}");
    assert_eq!(j["counts"]["orphaned_listeners"], 0);
    assert_eq!(j["counts"]["stale_socket_files"], 0);
    assert_eq!(j["counts"]["stale_bind_mounts"], 0);
}

/// Errors exit 2 with one line naming the path; bad flags too.
#[test]
fn errors_exit_2() {
    let _s = serial();
    let d = tmpdir();
    let missing = d.path().join("nope");
    let (code, out, err) = run_bin(&["--watch", missing.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert_eq!(out, "");
    assert_eq!(
        err,
        format!(
            "sockwatch: cannot read --watch {}: No such file or directory (os error 2)\n",
            missing.display()
        )
    );
    let regular = d.path().join("file");
    fs::write(&regular, b"x").unwrap();
    let (code, _, err) = run_bin(&["--watch", regular.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("not a directory or a socket file"), "{err}");
    let (code, _, err) = run_bin(&["--format", "xml"]);
    assert_eq!(code, 2);
    assert!(err.contains("--format"), "{err}");
}

/// S14 and the dev_t trap: sock_diag's (dev, ino) equal `stat`'s, on the root filesystem
/// (a real block device: major != 0, so the kernel/user dev_t encodings differ) and on a
/// tmpfs mounted with `inode64` in a private mount namespace.
#[test]
fn diag_identity_equals_stat() {
    let _s = serial();
    let d = tmpdir();
    let p = d.path().join("d.sock");
    let (_child, sock_ino) = listener(c"sw-ident", &p);
    let st = fs::metadata(&p).unwrap();
    let all = diag::dump_current().expect("sock_diag dump");
    let s = all
        .iter()
        .find(|s| u64::from(s.sock_ino) == sock_ino)
        .expect("the child's socket in the dump");
    assert_eq!(
        s.vfs,
        Some(VfsId {
            dev: st.dev(),
            ino32: st.ino() as u32
        })
    );
    assert_eq!(s.path(), Some(p.as_os_str().as_bytes()));
    assert!(s.listening());
    assert_eq!(s.rqlen, Some((0, 16)));
    eprintln!(
        "root fs: dev {}:{} (st_dev {:#x}), ino {}",
        libc::major(st.dev()),
        libc::minor(st.dev()),
        st.dev(),
        st.ino()
    );

    if !is_root() {
        skip(
            "diag_identity_equals_stat (tmpfs inode64 part)",
            "needs root to mount",
        );
        return;
    }
    let t = d.path().join("t");
    fs::create_dir(&t).unwrap();
    let sp = t.join("s.sock");
    let a = addr(&sp);
    let (tmpfs, tc, opts) = (
        c"tmpfs",
        CString::new(t.as_os_str().as_bytes()).unwrap(),
        c"inode64,size=1m",
    );
    let slash = c"/";
    // SAFETY: the closure runs in the forked child and makes raw syscalls with valid C strings only.
    let child = Child::fork(c"sw-inode64", true, || unsafe {
        // SAFETY: raw syscalls with valid C strings.
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(("unshare", errno()));
        }
        if libc::mount(
            tmpfs.as_ptr(),
            slash.as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return Err(("make-rprivate", errno()));
        }
        if libc::mount(
            tmpfs.as_ptr(),
            tc.as_ptr(),
            tmpfs.as_ptr(),
            0,
            opts.as_ptr().cast(),
        ) != 0
        {
            return Err(("mount tmpfs", errno()));
        }
        bind_sock(&a, true).map(|_| ())
    });
    let through = PathBuf::from(format!("/proc/{}/root{}", child.tgid(), sp.display()));
    let st = fs::metadata(&through).unwrap();
    assert_ne!(
        st.dev(),
        fs::metadata(&t).unwrap().dev(),
        "the tmpfs, not the directory under it"
    );
    let sock_ino = sockets_of(child.tgid())[0];
    let all = diag::dump_current().expect("sock_diag dump");
    let s = all
        .iter()
        .find(|s| u64::from(s.sock_ino) == sock_ino)
        .expect("in the dump");
    assert_eq!(
        s.vfs,
        Some(VfsId {
            dev: st.dev(),
            ino32: st.ino() as u32
        })
    );
    // The scan resolves the path in the child's mount namespace and keeps stat's full
    // 64-bit inode (a fresh tmpfs starts its inode numbers low: the >2^32 case is covered
    // by the `linked_listener_on_inode64_is_clean_and_keeps_64_bits` unit test).
    let r = scan_watching(d.path());
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
    let ss = r
        .sockets
        .iter()
        .find(|s| s.sock_ino == sock_ino)
        .expect("scanned");
    assert_eq!(
        ss.file,
        Some(FileId {
            dev: st.dev(),
            ino: st.ino()
        })
    );
    assert!(!ss.ino_low32);
    assert_eq!(ss.file_linked, Some(true));
    assert_eq!(ss.holders[0].tgid, child.tgid());
    eprintln!(
        "tmpfs inode64: dev {}:{}, ino {}",
        libc::major(st.dev()),
        libc::minor(st.dev()),
        st.ino()
    );
}

/// sock_diag answers per network namespace: a listener in its own netns is still seen (the
/// scan enters each namespace), so its file is neither stale nor unknown.
#[test]
fn other_network_namespace() {
    if !is_root() {
        skip(
            "other_network_namespace",
            "needs root for a network namespace",
        );
        return;
    }
    let _s = serial();
    let d = tmpdir();
    let p = d.path().join("pod.sock");
    let a = addr(&p);
    let child = Child::fork(c"sw-netns", true, || {
        // SAFETY: raw syscall.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(("unshare", errno()));
        }
        bind_sock(&a, true).map(|_| ())
    });
    let sock_ino = sockets_of(child.tgid())[0];
    let mine = diag::dump_current().expect("own dump");
    assert!(
        !mine.iter().any(|s| u64::from(s.sock_ino) == sock_ino),
        "the agent's own namespace does not show it"
    );
    let r = scan_watching(d.path());
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
    assert!(r.counts.net_namespaces >= 2, "{:?}", r.counts);
    assert_eq!(r.counts.net_namespaces_unreadable, 0, "{:?}", r.warnings);
    let s = r
        .sockets
        .iter()
        .find(|s| s.sock_ino == sock_ino)
        .expect("scanned");
    assert_eq!(s.file, Some(file_id(&p)));
    assert_eq!(s.file_linked, Some(true));
    assert_eq!(s.holders[0].tgid, child.tgid());
}

/// Without privileges the scan still runs, and says what it could not read.
#[test]
fn unprivileged_says_what_it_could_not_read() {
    if !is_root() {
        skip(
            "unprivileged_says_what_it_could_not_read",
            "needs root to drop to nobody",
        );
        return;
    }
    let _s = serial();
    let d = tmpdir();
    fs::set_permissions(
        d.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let p = d.path().join("ok.sock");
    let (_child, _) = listener(c"sw-rootowned", &p);
    let out = {
        use std::os::unix::process::CommandExt as _;
        Command::new(bin())
            .args(["scan", "--watch", d.path().to_str().unwrap()])
            .env_remove("SOCKWATCH_WATCH")
            .uid(65534)
            .gid(65534)
            .output()
            .expect("run sockwatch as nobody")
    };
    let err = String::from_utf8_lossy(&out.stderr);
    // The listener's holder is not readable, but sock_diag shows it serves its file: nothing
    // found, but the scan could not see everything (exit status 3, not clean).
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("sockwatch scan: could not see everything: could not read the open files of"),
        "{err}"
    );
    assert!(
        err.contains("could not see everything: could not read the namespaces of"),
        "{err}"
    );
    assert!(err.contains("incomplete (see warnings)"), "{err}");
}

/// A listener child bound as conmon binds: through its descriptor `dfd` of `dir` (inherited:
/// opened before the fork, so the child allocates nothing), `/proc/self/fd/DFD/NAME`. It
/// closes the descriptor after listening when `close_dir`, as conmon does.
fn dirfd_listener(comm: &CStr, dir: &Path, name: &str, close_dir: bool) -> (Child, u64) {
    let dc = CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid C string; the result is checked.
    let dfd = unsafe { libc::open(dc.as_ptr(), libc::O_PATH | libc::O_DIRECTORY) };
    assert!(dfd >= 0, "open {dir:?}: errno {}", errno());
    let a = addr(Path::new(&format!("/proc/self/fd/{dfd}/{name}")));
    let child = Child::fork_inheriting(comm, true, &[dfd], || {
        bind_sock(&a, true)?;
        // SAFETY: the child's own copy of the inherited descriptor.
        if close_dir && unsafe { libc::close(dfd) } != 0 {
            return Err(("close", errno()));
        }
        Ok(())
    });
    // SAFETY: the parent's copy, not used again.
    unsafe { libc::close(dfd) };
    let sock = sockets_of(child.tgid());
    assert_eq!(sock.len(), 1, "one socket in {comm:?}");
    (child, sock[0])
}

/// S18: a bind through a directory descriptor (conmon's `/proc/self/fd/N/attach`) is a live,
/// reachable listener: no orphan from `sockwatch scan`, whether the descriptor is still
/// open (the file is found through it, at its real path) or closed (found by the walk of the
/// watched directory; without a watch its state is unknown, never an orphan).
#[test]
fn bind_through_a_directory_descriptor_is_no_orphan() {
    let _s = serial();
    for close_dir in [false, true] {
        let d = tmpdir();
        let dir = d.path().join("userdata");
        fs::create_dir(&dir).unwrap();
        let (_c, sock_ino) = dirfd_listener(c"sw-conmon", &dir, "attach", close_dir);
        let real = dir.join("attach");
        let file = file_id(&real);
        let dir_id = file_id(&dir);

        let (code, j) = json_scan(d.path());
        assert_eq!(code, clean_code(&j), "close_dir {close_dir}: {j}");
        assert_eq!(j["counts"]["orphaned_listeners"], 0, "{j}");
        let r = scan_watching(d.path());
        let s = r
            .sockets
            .iter()
            .find(|s| s.sock_ino == sock_ino)
            .expect("scanned");
        assert_eq!(s.path, path_str(&real), "close_dir {close_dir}");
        assert_eq!(
            (s.file, s.ino_low32, s.file_linked),
            (Some(file), false, Some(true))
        );
        assert_eq!(s.dir, Some((dir_id, path_str(&dir))));

        // The whole node, by the binary and the library: whatever else it finds, not this.
        let (_, out, err) = run_bin(&["--format", "json"]);
        let j: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {err}"));
        let orphans = j["findings"]["orphaned_listeners"]
            .as_array()
            .expect("list");
        assert!(
            !orphans.iter().any(|o| o["sock_ino"] == sock_ino),
            "close_dir {close_dir}: {orphans:#?}"
        );
        let whole_node = scan::scan(&ScanOptions::default()).expect("scan");
        assert!(
            !whole_node
                .findings
                .orphaned_listeners
                .iter()
                .any(|o| o.sock_ino == sock_ino),
            "close_dir {close_dir}: {:#?}",
            whole_node.findings.orphaned_listeners
        );
        let s = whole_node
            .sockets
            .iter()
            .find(|s| s.sock_ino == sock_ino)
            .expect("scanned");
        let want = if close_dir { None } else { Some(true) };
        assert_eq!(s.file_linked, want, "close_dir {close_dir}: {s:?}");
    }
}

/// A child in its own mount namespace (private propagation) that bind-mounts `src` onto
/// `dst` (both prepared by the caller: a file onto a file, a directory onto a directory).
fn mounter(comm: &CStr, src: &Path, dst: &Path) -> Child {
    let (root, slash) = (c"none", c"/");
    let (s, d) = (
        CString::new(src.as_os_str().as_bytes()).unwrap(),
        CString::new(dst.as_os_str().as_bytes()).unwrap(),
    );
    // SAFETY: the closure runs in the forked child and makes raw syscalls with valid C strings only.
    Child::fork(comm, true, || unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(("unshare", errno()));
        }
        let private = libc::MS_REC | libc::MS_PRIVATE;
        if libc::mount(
            root.as_ptr(),
            slash.as_ptr(),
            std::ptr::null(),
            private,
            std::ptr::null(),
        ) != 0
        {
            return Err(("make-rprivate", errno()));
        }
        let bind = libc::MS_BIND;
        if libc::mount(
            s.as_ptr(),
            d.as_ptr(),
            std::ptr::null(),
            bind,
            std::ptr::null(),
        ) != 0
        {
            return Err(("bind mount", errno()));
        }
        Ok(())
    })
}

fn mntns_of(pid: u32) -> u64 {
    let link = fs::read_link(format!("/proc/{pid}/ns/mnt")).unwrap();
    procfd::parse_bracket_link(link.as_os_str().as_bytes(), b"mnt").unwrap()
}

/// Item 7 (seed 000 before it happens): a live socket file bind-mounted into another mount
/// namespace is a `socket_file_mount` risk, naming the namespace, the pid holding it, source
/// and target; a bind mount of the socket's directory is not. A risk leaves the exit at 0.
#[test]
fn socket_file_mount_is_a_risk_and_a_directory_mount_is_not() {
    if !is_root() {
        skip(
            "socket_file_mount",
            "needs root for a private mount namespace",
        );
        return;
    }
    let _s = serial();
    let d = tmpdir();
    let dir = d.path().join("run");
    fs::create_dir(&dir).unwrap();
    let p = dir.join("x.sock");
    let (q, qdir) = (d.path().join("q.sock"), d.path().join("qdir"));
    fs::write(&q, b"").unwrap();
    fs::create_dir(&qdir).unwrap();
    let (_a, sock_ino) = listener(c"sw-daemon", &p);
    let file_mount = mounter(c"sw-filemnt", &p, &q);
    let dir_mount = mounter(c"sw-dirmnt", &dir, &qdir);
    let through = PathBuf::from(format!("/proc/{}/root{}", dir_mount.tgid(), qdir.display()));
    assert_eq!(
        file_id(&through.join("x.sock")),
        file_id(&p),
        "the directory mount works"
    );

    let r = scan_watching(d.path());
    assert!(r.findings.is_empty(), "{:#?}", r.findings);
    assert_eq!(r.findings.socket_file_mounts.len(), 1, "{:#?}", r.findings);
    let m = &r.findings.socket_file_mounts[0];
    let own_mounts = mounts::parse_mountinfo(&fs::read("/proc/self/mountinfo").unwrap()).unwrap();
    let (maj, min, inside) =
        mounts::fs_location(&own_mounts, &fs::canonicalize(&dir).unwrap()).unwrap();
    assert_eq!(m.mount_point, path_str(&q));
    assert_eq!(
        m.source,
        format!("{}/x.sock", String::from_utf8_lossy(&inside))
    );
    assert_eq!(m.source_dev, format!("{maj}:{min}"));
    assert_eq!(m.file, file_id(&p));
    assert_eq!(m.mntns, mntns_of(file_mount.tgid()));
    assert_eq!(m.pid, file_mount.tgid());
    assert_eq!(m.served_by, Some(sock_ino));
    assert_eq!(
        (m.process_count, m.processes[0].comm.as_str()),
        (1, "sw-filemnt")
    );
    assert_eq!(m.watch, Some(0));

    let (code, j) = json_scan(d.path());
    assert_eq!(code, clean_code(&j), "a risk is not a failure: {j}");
    let json_code = code;
    let m = &j["findings"]["socket_file_mounts"][0];
    assert_eq!(m["mntns"], mntns_of(file_mount.tgid()));
    assert_eq!(m["pid"], file_mount.tgid());
    assert_eq!(m["mount_point"], path_str(&q));
    assert!(m["fix"].as_str().unwrap().contains("directory"), "{m}");
    assert_eq!(j["counts"]["socket_file_mounts"], 1);
    let (code, out, _) = run_bin(&["--watch", d.path().to_str().unwrap()]);
    assert_eq!(code, json_code);
    assert!(
        out.starts_with(&format!(
            "socket-file-mount  {}  live socket file",
            path_str(&q)
        )),
        "{out}"
    );
}
