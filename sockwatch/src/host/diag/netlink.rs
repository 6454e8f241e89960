//! The sock_diag exchange over a raw netlink socket, in the agent's own network namespace or,
//! from a worker thread, in other ones.
use std::{
    fs::File,
    io,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    path::PathBuf,
};

use super::{
    socket::{DiagError, DiagSocket},
    wire::{parse_batch, request},
};

/// Open a sock_diag socket in the calling thread's network namespace.
pub fn open() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the fd is owned by the returned OwnedFd.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // A dump never takes seconds; never hang the scan on a silent kernel.
    let tv = libc::timeval {
        tv_sec: 5,
        tv_usec: 0,
    };
    // SAFETY: tv outlives the call; the size is its own.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Dump every UNIX socket of the namespace `fd` was opened in.
pub fn dump(fd: &OwnedFd) -> Result<Vec<DiagSocket>, DiagError> {
    const SEQ: u32 = 0x736f_636b; // "sock"
    let req = request(SEQ);
    // SAFETY: zeroed sockaddr_nl is valid; nl_pid 0 addresses the kernel.
    let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: buffers and address live across the call, sizes are theirs.
    let sent = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            req.as_ptr().cast(),
            req.len(),
            0,
            (&kernel as *const libc::sockaddr_nl).cast(),
            size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error().into());
    }
    // The kernel sizes dump datagrams to the reader's buffer, up to 32 KiB; 64 KiB is ample,
    // and MSG_TRUNC makes a cut datagram visible rather than silently short.
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Vec::new();
    loop {
        // SAFETY: buf is valid for buf.len() bytes.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_TRUNC,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e.into());
        }
        let n = n as usize;
        if n > buf.len() {
            return Err(DiagError::Truncated {
                what: "netlink datagram",
                need: n,
                have: buf.len(),
            });
        }
        match parse_batch(&buf[..n], SEQ, &mut out) {
            Ok(true) => return Ok(out),
            Ok(false) => {}
            // No handler registered for the family: unix_diag is a module that is not loaded
            // and the kernel could not load it (no modprobe, e.g. in an initramfs).
            Err(DiagError::Kernel(e)) if e.raw_os_error() == Some(libc::ENOENT) => {
                return Err(DiagError::NoUnixDiag);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Dump the agent's own network namespace.
pub fn dump_current() -> Result<Vec<DiagSocket>, DiagError> {
    dump(&open()?)
}

/// A network namespace to dump, reachable through a process's `/proc/PID/ns/net`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetNs {
    /// Namespace id (inode of the nsfs file).
    pub id: u64,
    /// `/proc/PID/ns/net` of one process in it.
    pub file: PathBuf,
}

/// One namespace's dump: its id and its sockets, or why it could not be read.
pub type NsDump = (u64, Result<Vec<DiagSocket>, DiagError>);

/// Dump each namespace. The agent's own (`own`) is dumped in the calling thread; the others in
/// one short-lived thread that `setns`es into each in turn (a netlink socket belongs to the
/// namespace it was created in), so the caller's own namespace never changes. Needs
/// CAP_SYS_ADMIN for the other namespaces; each failure is returned for that namespace.
pub fn dump_namespaces(own: Option<u64>, others: &[NetNs]) -> Vec<NsDump> {
    let mut results = Vec::with_capacity(others.len() + 1);
    if let Some(own) = own {
        results.push((own, dump_current()));
    }
    let others: Vec<NetNs> = others
        .iter()
        .filter(|n| Some(n.id) != own)
        .cloned()
        .collect();
    if others.is_empty() {
        return results;
    }
    let ids: Vec<u64> = others.iter().map(|n| n.id).collect();
    let worker = std::thread::Builder::new()
        .name("sockwatch-netns".into())
        .spawn(move || {
            others
                .into_iter()
                .map(|ns| (ns.id, dump_in(&ns)))
                .collect::<Vec<_>>()
        });
    let failed = |why: String| {
        ids.iter()
            .map(|&id| (id, Err(DiagError::Io(io::Error::other(why.clone())))))
            .collect::<Vec<_>>()
    };
    match worker {
        Ok(h) => match h.join() {
            Ok(r) => results.extend(r),
            Err(_) => results.extend(failed("the namespace worker thread panicked".into())),
        },
        Err(e) => results.extend(failed(format!("cannot start the namespace worker: {e}"))),
    }
    results
}

/// In the current (worker) thread: enter `ns`, open a sock_diag socket there, dump.
fn dump_in(ns: &NetNs) -> Result<Vec<DiagSocket>, DiagError> {
    let f = File::open(&ns.file)?;
    // SAFETY: plain syscall on an fd we own; only this thread's namespace changes.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
        return Err(io::Error::last_os_error().into());
    }
    dump(&open()?)
}
