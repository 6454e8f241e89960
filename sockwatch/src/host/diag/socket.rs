//! One UNIX socket as sock_diag describes it, and what can go wrong reading the dump.
use std::io;

/// `sk_state` of a listening socket (`TCP_LISTEN`).
pub const STATE_LISTEN: u8 = 10;
/// `SOCK_DGRAM`: a bound datagram socket receives without listening.
pub const SOCK_DGRAM: u8 = 2;

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
