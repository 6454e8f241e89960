//! The parser against hand-built answers: every field, every error, every prefix.
use super::{
    wire::{
        AF_UNIX, NLMSG_DONE, NLMSG_ERROR, NLMSG_HDRLEN, NLMSG_OVERRUN, SOCK_DIAG_BY_FAMILY,
        UNIX_DIAG_NAME, UNIX_DIAG_PEER, UNIX_DIAG_RQLEN, UNIX_DIAG_VFS, u16_at, u32_at,
    },
    *,
};

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

/// The fuzzer's find: an errno of i32::MIN overflowed its negation.
#[test]
fn an_errno_without_a_negation_is_einval() {
    let mut out = Vec::new();
    for kind in [NLMSG_DONE, NLMSG_ERROR] {
        let msg = nlmsg(kind, SEQ, &i32::MIN.to_ne_bytes());
        assert!(matches!(
            parse_batch(&msg, SEQ, &mut out),
            Err(DiagError::Kernel(e)) if e.raw_os_error() == Some(libc::EINVAL)
        ));
    }
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
