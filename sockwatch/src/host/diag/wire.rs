//! The bytes of a sock_diag exchange: the dump request, and the parser of the answer, a pure
//! function that checks every length before it reads.
use std::io;

use super::socket::{DiagError, DiagSocket, SockName, VfsId};

// `pub(super)`: the tests build answers with these.
pub(super) const NLMSG_HDRLEN: usize = 16;
const NLMSG_NOOP: u16 = 1;
pub(super) const NLMSG_ERROR: u16 = 2;
pub(super) const NLMSG_DONE: u16 = 3;
pub(super) const NLMSG_OVERRUN: u16 = 4;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
pub(super) const SOCK_DIAG_BY_FAMILY: u16 = 20;
pub(super) const AF_UNIX: u8 = 1;

/// `udiag_show` bits (linux/unix_diag.h).
pub const UDIAG_SHOW_NAME: u32 = 0x01;
pub const UDIAG_SHOW_VFS: u32 = 0x02;
pub const UDIAG_SHOW_PEER: u32 = 0x04;
pub const UDIAG_SHOW_RQLEN: u32 = 0x10;

/// Attribute types in a `unix_diag_msg` answer.
pub(super) const UNIX_DIAG_NAME: u16 = 0;
pub(super) const UNIX_DIAG_VFS: u16 = 1;
pub(super) const UNIX_DIAG_PEER: u16 = 2;
pub(super) const UNIX_DIAG_RQLEN: u16 = 4;

const UNIX_DIAG_MSG_LEN: usize = 16;
const UNIX_DIAG_REQ_LEN: usize = 24;
/// Length of the whole dump request: `nlmsghdr` + `unix_diag_req`.
pub const REQUEST_LEN: usize = NLMSG_HDRLEN + UNIX_DIAG_REQ_LEN;

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

pub(super) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

pub(super) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// `data` holds at least `need` bytes of `what`.
fn need(data: &[u8], need: usize, what: &'static str) -> Result<(), DiagError> {
    if data.len() < need {
        return Err(DiagError::Truncated {
            what,
            need,
            have: data.len(),
        });
    }
    Ok(())
}

/// A length-prefixed record, as netlink nests them: a netlink message, an attribute.
struct Record {
    /// Names in errors: the header, its length field, the whole record.
    header: &'static str,
    length: &'static str,
    body: &'static str,
    header_len: usize,
    /// Reads the record's length from its header.
    len_at: fn(&[u8]) -> usize,
}

const NLMSG: Record = Record {
    header: "nlmsghdr",
    length: "nlmsg_len",
    body: "netlink message",
    header_len: NLMSG_HDRLEN,
    len_at: |b| u32_at(b, 0) as usize,
};

const RTATTR: Record = Record {
    header: "rtattr",
    length: "rtattr",
    body: "rtattr payload",
    header_len: 4,
    len_at: |b| u16_at(b, 0) as usize,
};

impl Record {
    /// The length of the record at the start of `buf`, once its header is there, the length
    /// covers the header and the record lies within `buf`.
    fn len(&self, buf: &[u8]) -> Result<usize, DiagError> {
        need(buf, self.header_len, self.header)?;
        let len = (self.len_at)(buf);
        if len < self.header_len {
            return Err(DiagError::BadLength {
                what: self.length,
                len,
            });
        }
        need(buf, len, self.body)?;
        Ok(len)
    }
}

/// The records in `buf`, each with its length, until the first malformed one (whose error
/// ends the iteration).
fn records<'a>(
    mut buf: &'a [u8],
    record: &'a Record,
) -> impl Iterator<Item = Result<&'a [u8], DiagError>> + 'a {
    std::iter::from_fn(move || {
        if buf.is_empty() {
            return None;
        }
        let item = record.len(buf).map(|len| {
            let this = &buf[..len];
            buf = &buf[align4(len).min(buf.len())..];
            this
        });
        if item.is_err() {
            buf = &[];
        }
        Some(item)
    })
}

/// Parse one datagram of the dump answer, appending the sockets to `out`. Returns true when
/// the dump is complete (`NLMSG_DONE`). Never panics: every length is checked.
pub fn parse_batch(buf: &[u8], seq: u32, out: &mut Vec<DiagSocket>) -> Result<bool, DiagError> {
    for msg in records(buf, &NLMSG) {
        let msg = msg?;
        let kind = u16_at(msg, 4);
        let got_seq = u32_at(msg, 8);
        if got_seq != seq {
            return Err(DiagError::WrongSeq {
                got: got_seq,
                expected: seq,
            });
        }
        let payload = &msg[NLMSG_HDRLEN..];
        match kind {
            NLMSG_DONE => return done(payload).map(|()| true),
            NLMSG_ERROR => error(payload)?,
            NLMSG_OVERRUN => return Err(DiagError::Overrun),
            NLMSG_NOOP => {}
            SOCK_DIAG_BY_FAMILY => out.push(parse_unix_msg(payload)?),
            other => return Err(DiagError::UnexpectedType(other)),
        }
    }
    Ok(false)
}

/// `NLMSG_DONE`'s payload: an int, 0 or a negative errno when the dump failed midway.
fn done(payload: &[u8]) -> Result<(), DiagError> {
    if payload.len() >= 4 {
        let err = u32_at(payload, 0) as i32;
        if err < 0 {
            // i32::MIN has no negation (a fuzzer's find; no kernel sends it).
            return Err(DiagError::Kernel(io::Error::from_raw_os_error(
                err.checked_neg().unwrap_or(libc::EINVAL),
            )));
        }
    }
    Ok(())
}

/// `NLMSG_ERROR`'s payload: `nlmsgerr`, a negative errno first.
fn error(payload: &[u8]) -> Result<(), DiagError> {
    need(payload, 4, "nlmsgerr")?;
    let err = u32_at(payload, 0) as i32;
    // An error 0 is an ack; a dump request is not acked, but tolerate it.
    if err != 0 {
        return Err(DiagError::Kernel(io::Error::from_raw_os_error(
            err.checked_neg().unwrap_or(libc::EINVAL),
        )));
    }
    Ok(())
}

/// Parse one `unix_diag_msg` and its attributes.
pub fn parse_unix_msg(payload: &[u8]) -> Result<DiagSocket, DiagError> {
    need(payload, UNIX_DIAG_MSG_LEN, "unix_diag_msg")?;
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
    for attr in records(&payload[UNIX_DIAG_MSG_LEN..], &RTATTR) {
        let attr = attr?;
        // NLA_F_NESTED / NLA_F_NET_BYTEORDER are not used by unix_diag; mask them anyway.
        let kind = u16_at(attr, 2) & 0x3fff;
        apply_attr(&mut s, kind, &attr[4..])?;
    }
    Ok(s)
}

/// Sets what attribute `kind` says about `s`.
fn apply_attr(s: &mut DiagSocket, kind: u16, data: &[u8]) -> Result<(), DiagError> {
    match kind {
        UNIX_DIAG_NAME => s.name = Some(parse_name(data)),
        UNIX_DIAG_VFS => {
            need(data, 8, "unix_diag_vfs")?;
            s.vfs = Some(VfsId {
                ino32: u32_at(data, 0),
                dev: sockwatch_common::kernel_dev_to_user(u32_at(data, 4)),
            });
        }
        UNIX_DIAG_PEER => {
            need(data, 4, "unix_diag peer")?;
            s.peer = Some(u32_at(data, 0));
        }
        UNIX_DIAG_RQLEN => {
            need(data, 8, "unix_diag_rqlen")?;
            s.rqlen = Some((u32_at(data, 0), u32_at(data, 4)));
        }
        _ => {} // attributes not asked for, or newer kernels': ignore
    }
    Ok(())
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
