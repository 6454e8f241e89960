//! The syscalls the timed loops make, as thin wrappers that panic on failure (a failed syscall
//! would make the figures meaningless), and the thread's CPU clock.
use std::{ffi::CString, io, mem, os::unix::ffi::OsStrExt as _, path::Path};

use anyhow::bail;

/// A `sockaddr_un` and the length to pass with it.
pub type UnixAddr = (libc::sockaddr_un, libc::socklen_t);

pub fn cstr(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).expect("paths hold no NUL")
}

/// A `sockaddr_un` for `path` and its length.
pub fn sockaddr(path: &Path) -> anyhow::Result<UnixAddr> {
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

/// A socket path to bind, any file left there removed: its address and its C string.
pub fn socket_path(path: &Path) -> anyhow::Result<(UnixAddr, CString)> {
    let _ = std::fs::remove_file(path);
    Ok((sockaddr(path)?, cstr(path)))
}

/// `r`, or a panic with errno when a syscall in a timed loop failed.
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

pub fn stream_socket() -> libc::c_int {
    // SAFETY: socket takes no pointers; a failure is a negative return, checked by `ok`.
    ok(
        unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) },
        "socket",
    )
}

pub fn bind(fd: libc::c_int, sa: &UnixAddr) {
    // SAFETY: sa.0 is a valid sockaddr_un and sa.1 does not exceed its size.
    ok(
        unsafe { libc::bind(fd, (&raw const sa.0).cast(), sa.1) },
        "bind",
    );
}

pub fn listen(fd: libc::c_int) {
    // SAFETY: listen takes no pointers; a bad descriptor is an error return, checked by `ok`.
    ok(unsafe { libc::listen(fd, 8) }, "listen");
}

pub fn connect(fd: libc::c_int, sa: &UnixAddr) {
    // SAFETY: sa.0 is a valid sockaddr_un and sa.1 does not exceed its size.
    ok(
        unsafe { libc::connect(fd, (&raw const sa.0).cast(), sa.1) },
        "connect",
    );
}

/// The accepted descriptor.
pub fn accept(listener: libc::c_int) -> libc::c_int {
    // SAFETY: null address and length pointers are allowed: the peer's address is not wanted.
    ok(
        unsafe { libc::accept4(listener, std::ptr::null_mut(), std::ptr::null_mut(), 0) },
        "accept",
    )
}

pub fn close(fd: libc::c_int) {
    // SAFETY: the caller owns fd and closes it once; nothing else refers to it.
    ok(unsafe { libc::close(fd) }, "close");
}

pub fn unlink(p: &CString) {
    // SAFETY: p is a NUL-terminated string that outlives the call.
    ok(unsafe { libc::unlink(p.as_ptr()) }, "unlink");
}

/// A read-only descriptor of file `p`.
pub fn open_rdonly(p: &CString) -> libc::c_int {
    // SAFETY: p is a NUL-terminated string that outlives the call.
    ok(
        unsafe { libc::open(p.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) },
        "open",
    )
}

/// A pipe's two ends.
pub fn pipe() -> [libc::c_int; 2] {
    let mut fds = [0; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    ok(
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) },
        "pipe2",
    );
    fds
}

/// A connected pair of unnamed UNIX stream sockets.
pub fn socketpair() -> [libc::c_int; 2] {
    let mut fds = [0; 2];
    let kind = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
    // SAFETY: fds has room for the two descriptors socketpair writes.
    ok(
        unsafe { libc::socketpair(libc::AF_UNIX, kind, 0, fds.as_mut_ptr()) },
        "socketpair",
    );
    fds
}

/// A child that exits at once, reaped.
pub fn fork_exit_wait() {
    // SAFETY: the child only calls _exit, which is async-signal-safe after a fork of a
    // multi-threaded process.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: ends the child without running the parent's destructors or atexit handlers.
        unsafe { libc::_exit(0) };
    }
    ok(pid, "fork");
    // SAFETY: waits for our own child; a null status pointer is allowed.
    ok(
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) },
        "waitpid",
    );
}

/// The calling thread's CPU time (user and system), nanoseconds.
pub fn thread_cpu_ns() -> u64 {
    // SAFETY: timespec is plain data; all zeroes is a valid value.
    let mut ts: libc::timespec = unsafe { mem::zeroed() };
    // SAFETY: a valid clock id and a pointer to a live timespec; this clock cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
