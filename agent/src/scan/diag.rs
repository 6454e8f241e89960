//! Every UNIX socket as the kernel sees it, through `NETLINK_SOCK_DIAG` (what `ss -x` reads).
//!
//! The request and the answer are two fixed structs and a list of netlink attributes, so this
//! is done by hand over a raw netlink socket: the parser is a pure function over bytes.
//!
//! sock_diag answers for **one network namespace**: the one the netlink socket was created in.
//! [`dump_namespaces`] creates one netlink socket per namespace (a short-lived thread `setns`es
//! into each), so a hostNetwork agent also sees sockets bound inside pods with their own netns.
//!
//! Two kernel fields are 32 bits wide: `udiag_ino` (sockfs inodes come from `get_next_ino()`,
//! 32-bit anyway) and `UNIX_DIAG_VFS`'s `udiag_vfs_ino`, which is the bound file's `i_ino`
//! **cut to 32 bits**. On filesystems with 64-bit inode numbers (tmpfs `inode64`, XFS, btrfs)
//! the full number only comes from `stat` on a path; see [`VfsId::matches`].
use std::{
    fs::File,
    io,
    os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd},
    path::PathBuf,
};

const NLMSG_HDRLEN: usize = 16;
const NLMSG_NOOP: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_OVERRUN: u16 = 4;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const AF_UNIX: u8 = 1;

/// `udiag_show` bits (linux/unix_diag.h).
pub const UDIAG_SHOW_NAME: u32 = 0x01;
pub const UDIAG_SHOW_VFS: u32 = 0x02;
pub const UDIAG_SHOW_PEER: u32 = 0x04;
pub const UDIAG_SHOW_RQLEN: u32 = 0x10;

/// Attribute types in a `unix_diag_msg` answer.
const UNIX_DIAG_NAME: u16 = 0;
const UNIX_DIAG_VFS: u16 = 1;
const UNIX_DIAG_PEER: u16 = 2;
const UNIX_DIAG_RQLEN: u16 = 4;

/// `sk_state` of a listening socket (`TCP_LISTEN`).
pub const STATE_LISTEN: u8 = 10;
/// `SOCK_DGRAM`: a bound datagram socket receives without listening.
pub const SOCK_DGRAM: u8 = 2;

const UNIX_DIAG_MSG_LEN: usize = 16;
const UNIX_DIAG_REQ_LEN: usize = 24;
/// Length of the whole dump request: `nlmsghdr` + `unix_diag_req`.
pub const REQUEST_LEN: usize = NLMSG_HDRLEN + UNIX_DIAG_REQ_LEN;

#[derive(Debug, thiserror::Error)]
pub enum DiagError {
    #[error("sock_diag: {what} truncated: need {need} bytes, have {have}")]
    Truncated {
        what: &'static str,
        need: usize,
        have: usize,
    },
    #[error("sock_diag: bad {what} length {len}")]
    BadLength { what: &'static str, len: usize },
    #[error("sock_diag: answer for family {0}, asked for AF_UNIX")]
    WrongFamily(u8),
    #[error("sock_diag: answer to request {got}, expected {expected}")]
    WrongSeq { got: u32, expected: u32 },
    #[error("sock_diag: unexpected message type {0}")]
    UnexpectedType(u16),
    #[error("sock_diag: the kernel answered: {0}")]
    Kernel(io::Error),
    #[error("sock_diag: the kernel dropped part of the dump (receive buffer overrun)")]
    Overrun,
    #[error(
        "sock_diag: this kernel has no AF_UNIX handler: load the unix_diag module \
         (`modprobe unix_diag`, CONFIG_UNIX_DIAG)"
    )]
    NoUnixDiag,
    #[error("sock_diag: {0}")]
    Io(io::Error),
}

impl From<io::Error> for DiagError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// A socket's bound name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SockName {
    /// A filesystem path, as passed to `bind` (absolute, or relative to the binder's cwd).
    Path(Vec<u8>),
    /// An abstract name (without the leading NUL).
    Abstract(Vec<u8>),
}

impl SockName {
    /// Display form: the path, or `@name` for an abstract name (non-UTF-8 bytes replaced,
    /// NULs inside an abstract name shown as `@`, as `ss` does).
    pub fn display(&self) -> String {
        match self {
            SockName::Path(p) => String::from_utf8_lossy(p).into_owned(),
            SockName::Abstract(n) => {
                let shown: Vec<u8> = n.iter().map(|&b| if b == 0 { b'@' } else { b }).collect();
                format!("@{}", String::from_utf8_lossy(&shown))
            }
        }
    }
}

/// The bound file as `UNIX_DIAG_VFS` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VfsId {
    /// `st_dev` encoding (converted from the kernel's `dev_t`).
    pub dev: u64,
    /// The low 32 bits of the file's inode number: all the kernel puts in this attribute.
    pub ino32: u32,
}

impl VfsId {
    /// Is `(dev, ino)` from a `stat` this file? Only the low 32 inode bits can be compared.
    pub fn matches(&self, dev: u64, ino: u64) -> bool {
        self.dev == dev && self.ino32 == ino as u32
    }
}

/// One socket from the dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiagSocket {
    /// Inode of the socket in sockfs: `socket:[N]` in `/proc/PID/fd`.
    pub sock_ino: u32,
    /// `SOCK_STREAM` (1), `SOCK_DGRAM` (2), `SOCK_SEQPACKET` (5).
    pub sock_type: u8,
    /// `sk_state`: [`STATE_LISTEN`], 1 established, 7 close (unconnected), ...
    pub state: u8,
    pub name: Option<SockName>,
    /// Present when the socket itself was bound to a path, and on sockets accepted from such a
    /// listener (they share its address and path).
    pub vfs: Option<VfsId>,
    /// Inode of the peer socket, if connected.
    pub peer: Option<u32>,
    /// Listening: (pending connections, backlog); otherwise (receive queue, send queue).
    pub rqlen: Option<(u32, u32)>,
}

impl DiagSocket {
    pub fn listening(&self) -> bool {
        self.state == STATE_LISTEN
    }

    /// The bound path, if the name is a path.
    pub fn path(&self) -> Option<&[u8]> {
        match &self.name {
            Some(SockName::Path(p)) => Some(p),
            _ => None,
        }
    }

    /// Can a client reach this socket by connecting to (or sending to) its file? A listening
    /// stream/seqpacket socket, or a bound datagram socket.
    pub fn serves_file(&self) -> bool {
        self.vfs.is_some() && (self.listening() || self.sock_type == SOCK_DGRAM)
    }
}

/// The dump request for all AF_UNIX sockets in every state.
pub fn request(seq: u32) -> [u8; REQUEST_LEN] {
    let mut b = [0u8; REQUEST_LEN];
    b[0..4].copy_from_slice(&(REQUEST_LEN as u32).to_ne_bytes());
    b[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    b[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    b[8..12].copy_from_slice(&seq.to_ne_bytes());
    // nlmsg_pid 0: the kernel fills in the port.
    let r = &mut b[NLMSG_HDRLEN..];
    r[0] = AF_UNIX; // sdiag_family
    // sdiag_protocol 0, pad 0
    r[4..8].copy_from_slice(&u32::MAX.to_ne_bytes()); // udiag_states: all
    // udiag_ino 0: every socket
    let show = UDIAG_SHOW_NAME | UDIAG_SHOW_VFS | UDIAG_SHOW_PEER | UDIAG_SHOW_RQLEN;
    r[12..16].copy_from_slice(&show.to_ne_bytes());
    // udiag_cookie: no cookie
    r[16..24].copy_from_slice(&[0xff; 8]);
    b
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Parse one datagram of the dump answer, appending the sockets to `out`. Returns true when
/// the dump is complete (`NLMSG_DONE`). Never panics: every length is checked.
pub fn parse_batch(buf: &[u8], seq: u32, out: &mut Vec<DiagSocket>) -> Result<bool, DiagError> {
    let mut rest = buf;
    while !rest.is_empty() {
        if rest.len() < NLMSG_HDRLEN {
            return Err(DiagError::Truncated {
                what: "nlmsghdr",
                need: NLMSG_HDRLEN,
                have: rest.len(),
            });
        }
        let len = u32_at(rest, 0) as usize;
        let kind = u16_at(rest, 4);
        let got_seq = u32_at(rest, 8);
        if len < NLMSG_HDRLEN {
            return Err(DiagError::BadLength {
                what: "nlmsg_len",
                len,
            });
        }
        if len > rest.len() {
            return Err(DiagError::Truncated {
                what: "netlink message",
                need: len,
                have: rest.len(),
            });
        }
        if got_seq != seq {
            return Err(DiagError::WrongSeq {
                got: got_seq,
                expected: seq,
            });
        }
        let payload = &rest[NLMSG_HDRLEN..len];
        match kind {
            NLMSG_DONE => {
                // Payload: an int, 0 or a negative errno when the dump failed midway.
                if payload.len() >= 4 {
                    let err = u32_at(payload, 0) as i32;
                    if err < 0 {
                        return Err(DiagError::Kernel(io::Error::from_raw_os_error(-err)));
                    }
                }
                return Ok(true);
            }
            NLMSG_ERROR => {
                if payload.len() < 4 {
                    return Err(DiagError::Truncated {
                        what: "nlmsgerr",
                        need: 4,
                        have: payload.len(),
                    });
                }
                let err = u32_at(payload, 0) as i32;
                // An error 0 is an ack; a dump request is not acked, but tolerate it.
                if err != 0 {
                    return Err(DiagError::Kernel(io::Error::from_raw_os_error(
                        err.checked_neg().unwrap_or(libc::EINVAL),
                    )));
                }
            }
            NLMSG_OVERRUN => return Err(DiagError::Overrun),
            NLMSG_NOOP => {}
            SOCK_DIAG_BY_FAMILY => out.push(parse_unix_msg(payload)?),
            other => return Err(DiagError::UnexpectedType(other)),
        }
        rest = &rest[align4(len).min(rest.len())..];
    }
    Ok(false)
}

/// Parse one `unix_diag_msg` and its attributes.
pub fn parse_unix_msg(payload: &[u8]) -> Result<DiagSocket, DiagError> {
    if payload.len() < UNIX_DIAG_MSG_LEN {
        return Err(DiagError::Truncated {
            what: "unix_diag_msg",
            need: UNIX_DIAG_MSG_LEN,
            have: payload.len(),
        });
    }
    if payload[0] != AF_UNIX {
        return Err(DiagError::WrongFamily(payload[0]));
    }
    let mut s = DiagSocket {
        sock_ino: u32_at(payload, 4),
        sock_type: payload[1],
        state: payload[2],
        name: None,
        vfs: None,
        peer: None,
        rqlen: None,
    };
    let mut attrs = &payload[UNIX_DIAG_MSG_LEN..];
    while !attrs.is_empty() {
        if attrs.len() < 4 {
            return Err(DiagError::Truncated {
                what: "rtattr",
                need: 4,
                have: attrs.len(),
            });
        }
        let len = u16_at(attrs, 0) as usize;
        // NLA_F_NESTED / NLA_F_NET_BYTEORDER are not used by unix_diag; mask them anyway.
        let kind = u16_at(attrs, 2) & 0x3fff;
        if len < 4 {
            return Err(DiagError::BadLength {
                what: "rtattr",
                len,
            });
        }
        if len > attrs.len() {
            return Err(DiagError::Truncated {
                what: "rtattr payload",
                need: len,
                have: attrs.len(),
            });
        }
        let data = &attrs[4..len];
        match kind {
            UNIX_DIAG_NAME => s.name = Some(parse_name(data)),
            UNIX_DIAG_VFS => {
                if data.len() < 8 {
                    return Err(DiagError::Truncated {
                        what: "unix_diag_vfs",
                        need: 8,
                        have: data.len(),
                    });
                }
                s.vfs = Some(VfsId {
                    ino32: u32_at(data, 0),
                    dev: agent_common::kernel_dev_to_user(u32_at(data, 4)),
                });
            }
            UNIX_DIAG_PEER => {
                if data.len() < 4 {
                    return Err(DiagError::Truncated {
                        what: "unix_diag peer",
                        need: 4,
                        have: data.len(),
                    });
                }
                s.peer = Some(u32_at(data, 0));
            }
            UNIX_DIAG_RQLEN => {
                if data.len() < 8 {
                    return Err(DiagError::Truncated {
                        what: "unix_diag_rqlen",
                        need: 8,
                        have: data.len(),
                    });
                }
                s.rqlen = Some((u32_at(data, 0), u32_at(data, 4)));
            }
            _ => {} // attributes not asked for, or newer kernels': ignore
        }
        attrs = &attrs[align4(len).min(attrs.len())..];
    }
    Ok(s)
}

/// `UNIX_DIAG_NAME` carries `sun_path` as bound: a leading NUL means abstract; a path may carry
/// its terminating NUL (the binder chose the address length).
fn parse_name(data: &[u8]) -> SockName {
    match data.split_first() {
        Some((0, abs)) => SockName::Abstract(abs.to_vec()),
        _ => {
            let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
            SockName::Path(data[..end].to_vec())
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    const SEQ: u32 = 7;

    fn nlmsg(kind: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let len = NLMSG_HDRLEN + payload.len();
        let mut m = Vec::new();
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&0x2u16.to_ne_bytes()); // NLM_F_MULTI
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(payload);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    fn attr(kind: u16, data: &[u8]) -> Vec<u8> {
        let mut a = Vec::new();
        a.extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(data);
        while a.len() % 4 != 0 {
            a.push(0);
        }
        a
    }

    fn unix_msg(ty: u8, state: u8, ino: u32, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut p = vec![AF_UNIX, ty, state, 0];
        p.extend_from_slice(&ino.to_ne_bytes());
        p.extend_from_slice(&[0xff; 8]);
        for a in attrs {
            p.extend_from_slice(a);
        }
        p
    }

    fn vfs(ino: u32, kdev: u32) -> Vec<u8> {
        let mut d = ino.to_ne_bytes().to_vec();
        d.extend_from_slice(&kdev.to_ne_bytes());
        attr(UNIX_DIAG_VFS, &d)
    }

    fn pair(a: u32, b: u32) -> Vec<u8> {
        let mut d = a.to_ne_bytes().to_vec();
        d.extend_from_slice(&b.to_ne_bytes());
        d
    }

    #[test]
    fn request_layout() {
        let r = request(0x0102_0304);
        assert_eq!(u32_at(&r, 0), 40);
        assert_eq!(u16_at(&r, 4), 20);
        assert_eq!(u16_at(&r, 6), 0x301);
        assert_eq!(u32_at(&r, 8), 0x0102_0304);
        assert_eq!(r[16], 1, "AF_UNIX");
        assert_eq!(u32_at(&r, 20), u32::MAX, "all states");
        assert_eq!(u32_at(&r, 24), 0, "all inodes");
        assert_eq!(u32_at(&r, 28), 0x17, "NAME|VFS|PEER|RQLEN");
    }

    #[test]
    fn listener_with_path_vfs_and_backlog() {
        // /dev/vda is 254:0: kernel dev_t 254 << 20, userspace st_dev 0xfe00.
        let msg = unix_msg(
            1,
            10,
            4242,
            &[
                attr(UNIX_DIAG_NAME, b"/run/multus/multus.sock\0"),
                vfs(0x8000_0001, 254 << 20),
                attr(UNIX_DIAG_RQLEN, &pair(3, 4096)),
            ],
        );
        let mut batch = nlmsg(SOCK_DIAG_BY_FAMILY, SEQ, &msg);
        batch.extend(nlmsg(
            SOCK_DIAG_BY_FAMILY,
            SEQ,
            &unix_msg(1, 1, 4243, &[attr(UNIX_DIAG_PEER, &4244u32.to_ne_bytes())]),
        ));
        let mut out = Vec::new();
        assert!(!parse_batch(&batch, SEQ, &mut out).unwrap());
        assert_eq!(
            out,
            vec![
                DiagSocket {
                    sock_ino: 4242,
                    sock_type: 1,
                    state: 10,
                    name: Some(SockName::Path(b"/run/multus/multus.sock".to_vec())),
                    vfs: Some(VfsId {
                        dev: 0xfe00,
                        ino32: 0x8000_0001
                    }),
                    peer: None,
                    rqlen: Some((3, 4096)),
                },
                DiagSocket {
                    sock_ino: 4243,
                    sock_type: 1,
                    state: 1,
                    name: None,
                    vfs: None,
                    peer: Some(4244),
                    rqlen: None,
                },
            ]
        );
        assert!(out[0].listening() && out[0].serves_file());
        assert!(!out[1].serves_file());
    }

    #[test]
    fn abstract_and_dgram_names() {
        let msg = unix_msg(2, 7, 9, &[attr(UNIX_DIAG_NAME, b"\0ns\0x")]);
        let s = parse_unix_msg(&msg).unwrap();
        assert_eq!(s.name, Some(SockName::Abstract(b"ns\0x".to_vec())));
        assert_eq!(s.name.unwrap().display(), "@ns@x");
        // A path bound without its NUL, and a bound dgram socket serves its file.
        let msg = unix_msg(
            2,
            7,
            10,
            &[attr(UNIX_DIAG_NAME, b"rel.sock"), vfs(5, (8 << 20) | 1)],
        );
        let s = parse_unix_msg(&msg).unwrap();
        assert_eq!(s.path(), Some(&b"rel.sock"[..]));
        assert_eq!(s.vfs.unwrap().dev, 0x801);
        assert!(s.serves_file() && !s.listening());
    }

    #[test]
    fn vfs_inode_is_the_low_32_bits() {
        // tmpfs inode64: the file's inode is 0x1_0000_0005, the kernel reports 5.
        let v = VfsId { dev: 42, ino32: 5 };
        assert!(v.matches(42, 0x1_0000_0005));
        assert!(v.matches(42, 5));
        assert!(!v.matches(42, 6));
        assert!(!v.matches(43, 5));
        let v = VfsId {
            dev: 42,
            ino32: 0xffff_ffff,
        };
        assert!(v.matches(42, 0x7_ffff_ffff));
    }

    #[test]
    fn done_error_and_ack() {
        let mut out = Vec::new();
        let done = nlmsg(NLMSG_DONE, SEQ, &0i32.to_ne_bytes());
        assert!(parse_batch(&done, SEQ, &mut out).unwrap());
        let failed = nlmsg(NLMSG_DONE, SEQ, &(-libc::EINTR).to_ne_bytes());
        assert!(matches!(
            parse_batch(&failed, SEQ, &mut out),
            Err(DiagError::Kernel(e)) if e.raw_os_error() == Some(libc::EINTR)
        ));
        let mut err = (-libc::EPERM).to_ne_bytes().to_vec();
        err.extend_from_slice(&request(SEQ)[..16]);
        let e = parse_batch(&nlmsg(NLMSG_ERROR, SEQ, &err), SEQ, &mut out).unwrap_err();
        assert!(
            matches!(&e, DiagError::Kernel(io) if io.raw_os_error() == Some(libc::EPERM)),
            "{e}"
        );
        let ack = nlmsg(NLMSG_ERROR, SEQ, &0i32.to_ne_bytes());
        assert!(!parse_batch(&ack, SEQ, &mut out).unwrap());
        assert!(out.is_empty());
        let overrun = nlmsg(NLMSG_OVERRUN, SEQ, &[]);
        assert!(matches!(
            parse_batch(&overrun, SEQ, &mut out),
            Err(DiagError::Overrun)
        ));
    }

    #[test]
    fn wrong_seq_type_and_family_are_errors() {
        let mut out = Vec::new();
        let msg = nlmsg(SOCK_DIAG_BY_FAMILY, SEQ + 1, &unix_msg(1, 10, 1, &[]));
        assert!(matches!(
            parse_batch(&msg, SEQ, &mut out),
            Err(DiagError::WrongSeq {
                got: 8,
                expected: 7
            })
        ));
        let msg = nlmsg(99, SEQ, &[]);
        assert!(matches!(
            parse_batch(&msg, SEQ, &mut out),
            Err(DiagError::UnexpectedType(99))
        ));
        let mut inet = unix_msg(1, 10, 1, &[]);
        inet[0] = 2;
        assert!(matches!(
            parse_unix_msg(&inet),
            Err(DiagError::WrongFamily(2))
        ));
    }

    #[test]
    fn truncated_and_garbage_never_panic() {
        let good = nlmsg(
            SOCK_DIAG_BY_FAMILY,
            SEQ,
            &unix_msg(
                1,
                10,
                4242,
                &[
                    attr(UNIX_DIAG_NAME, b"/a.sock"),
                    vfs(7, 1),
                    attr(UNIX_DIAG_RQLEN, &pair(0, 1)),
                    attr(UNIX_DIAG_PEER, &1u32.to_ne_bytes()),
                ],
            ),
        );
        let mut out = Vec::new();
        // Every prefix: either a clean error or (for the whole) success.
        for cut in 0..good.len() {
            out.clear();
            let r = parse_batch(&good[..cut], SEQ, &mut out);
            if cut == 0 {
                assert!(!r.unwrap());
            } else {
                assert!(r.is_err(), "prefix {cut} accepted");
            }
        }
        // Attributes with lengths that lie.
        for bad in [
            attr(UNIX_DIAG_VFS, &[1, 2, 3, 4]),
            attr(UNIX_DIAG_RQLEN, &[1]),
            attr(UNIX_DIAG_PEER, &[1, 2]),
            vec![2, 0, 0, 0],   // rtattr length 2 < 4
            vec![200, 0, 1, 0], // rtattr length past the end
            vec![1, 0],         // half a header
        ] {
            let r = parse_unix_msg(&unix_msg(1, 10, 1, std::slice::from_ref(&bad)));
            assert!(r.is_err(), "{bad:?} accepted");
        }
        // nlmsg_len shorter than its own header.
        let mut m = nlmsg(SOCK_DIAG_BY_FAMILY, SEQ, &[]);
        m[0..4].copy_from_slice(&8u32.to_ne_bytes());
        assert!(matches!(
            parse_batch(&m, SEQ, &mut out),
            Err(DiagError::BadLength { .. })
        ));
        // Pseudo-random garbage.
        let mut x: u32 = 0x1234_5678;
        for _ in 0..2000 {
            let n = (x % 200) as usize;
            let bytes: Vec<u8> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            let _ = parse_batch(&bytes, SEQ, &mut out);
            let _ = parse_unix_msg(&bytes);
        }
    }
}
