//! Decoding ring-buffer records into typed kernel events: pure, length-checked, never panics.
//! Paths and command names are bytes in the record; they become `String`s here, lossily: a
//! byte sequence that is no UTF-8 is U+FFFD from then on (JSON wants text; the text outputs
//! quote what is left, `crate::quote`).
#![deny(clippy::string_slice, clippy::indexing_slicing)]
use serde::{Deserialize, Serialize};
use sockwatch_common::{
    Event, EventKind, Fidelity, FileId, GuardPolicy, Owner, RENAME_FROM_AT, Tier, flags,
};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record of {got} bytes, expected {expected}")]
    Size { got: usize, expected: usize },
    #[error("unknown event kind {0}")]
    Kind(u32),
    #[error("unknown tier {0}")]
    Tier(u8),
    #[error("unknown fidelity {0}")]
    Fidelity(u8),
}

/// One kernel observation, as the agent and its outputs see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelEvent {
    pub kind: EventKind,
    pub tier: Tier,
    pub fidelity: Fidelity,
    /// Boot-clock nanoseconds (`CLOCK_BOOTTIME`).
    pub ts_ns: u64,
    pub tgid: u32,
    pub pid: u32,
    pub comm: String,
    pub cgroup_id: u64,
    /// The socket file: device (as `st_dev`) and inode; 0 when the tier could not see it.
    pub dev: u64,
    pub ino: u64,
    /// The socket's own inode in sockfs (`socket:[N]`); 0 when unknown.
    pub sock_ino: u64,
    /// Link count of the file (unlink: before removal; connect: the target's).
    pub nlink: u32,
    pub path: String,
    /// 0 or a negative errno.
    pub ret: i32,
    /// Owner of the live socket concerned, as recorded at its bind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<Owner>,
    /// Listen: the backlog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backlog: Option<u32>,
    /// Fork: the new process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_tgid: Option<u32>,
    /// The directory holding the file, or the one a relative path starts from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<FileId>,
    /// Connect: the client's mount namespace id, through which the agent resolves the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mntns: Option<u32>,
    /// Rename (exact tiers): the file moved, when it is a live socket's file (`from_live`) or
    /// one end of an exchange.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<FileId>,
    /// Rename: the old name, for an exchange and on the tracepoint tier (completed to an
    /// absolute path where its directory is known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_path: Option<String>,
    /// The directory of `from_path`: holding the file (exact tiers) or where a relative name
    /// starts (tracepoint tier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_dir: Option<FileId>,
    /// Unlink/rename refused by the guard (`denied`), or let through in audit mode
    /// (`would_deny`): the policy that refused it, or would have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard_policy: Option<GuardPolicy>,
    #[serde(default, flatten)]
    pub flags: EventFlags,
}

#[cfg(test)]
impl KernelEvent {
    /// A successful `kind` at `path` by process 1 on the tracepoint tier, nothing optional
    /// set: tests change the fields they are about.
    pub fn sample(kind: EventKind, path: &str) -> Self {
        Self {
            kind,
            tier: Tier::Tracepoint,
            fidelity: Fidelity::PathOnly,
            ts_ns: 1,
            tgid: 1,
            pid: 1,
            comm: "t".into(),
            cgroup_id: 0,
            dev: 0,
            ino: 0,
            sock_ino: 0,
            nlink: 1,
            path: path.into(),
            ret: 0,
            owner: None,
            backlog: None,
            child_tgid: None,
            dir: None,
            mntns: None,
            from: None,
            from_path: None,
            from_dir: None,
            guard_policy: None,
            flags: EventFlags::default(),
        }
    }
}

/// [`flags`] as named booleans; only the set ones are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct EventFlags {
    #[serde(skip_serializing_if = "is_false")]
    pub path_truncated: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub live: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub listening: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub holds_fd: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub target_bound: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub dgram: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub sendto: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub path_relative: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub result_unknown: bool,
    #[serde(skip_serializing_if = "is_false")]
    pub exchange: bool,
    /// Unlink/rename: the guard refused it with `EPERM`; nothing was removed.
    #[serde(skip_serializing_if = "is_false")]
    pub denied: bool,
    /// Unlink/rename: the guard, in audit mode, would have refused it; it went ahead.
    #[serde(skip_serializing_if = "is_false")]
    pub would_deny: bool,
    /// Unlink/rename: the owner check saw only part of the actor's descriptors.
    #[serde(skip_serializing_if = "is_false")]
    pub owners_partial: bool,
    /// Rename: the file moved was a live socket's file.
    #[serde(skip_serializing_if = "is_false")]
    pub from_live: bool,
    /// Connect: the kernel saw the target's lookup (`target_bound` is its answer).
    #[serde(skip_serializing_if = "is_false")]
    pub target_seen: bool,
    /// The connect target was found by the agent (`stat` in the client's view), not the kernel.
    #[serde(skip_serializing_if = "is_false")]
    pub resolved_in_userspace: bool,
    /// Connect, rename: the agent's lookup of the file (the connect's target, the file moved)
    /// timed out, found every lookup worker busy, or was skipped (a FUSE or network
    /// filesystem): the event carries only what the kernel gave.
    #[serde(skip_serializing_if = "is_false")]
    pub lookup_failed: bool,
}

impl EventFlags {
    pub fn from_bits(b: u16) -> Self {
        let on = |f: u16| b & f != 0;
        Self {
            path_truncated: on(flags::PATH_TRUNCATED),
            live: on(flags::LIVE),
            listening: on(flags::LISTENING),
            holds_fd: on(flags::HOLDS_FD),
            target_bound: on(flags::TARGET_BOUND),
            dgram: on(flags::DGRAM),
            sendto: on(flags::SENDTO),
            path_relative: on(flags::PATH_RELATIVE),
            result_unknown: on(flags::RESULT_UNKNOWN),
            exchange: on(flags::EXCHANGE),
            denied: on(flags::DENIED),
            would_deny: on(flags::WOULD_DENY),
            owners_partial: on(flags::OWNERS_PARTIAL),
            from_live: on(flags::FROM_LIVE),
            target_seen: on(flags::TARGET_SEEN),
            resolved_in_userspace: false,
            lookup_failed: false,
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Decodes one ring-buffer record. Records must be exactly one [`Event`].
pub fn decode(bytes: &[u8]) -> Result<KernelEvent, DecodeError> {
    if bytes.len() != Event::SIZE {
        return Err(DecodeError::Size {
            got: bytes.len(),
            expected: Event::SIZE,
        });
    }
    let copy: Event;
    let raw: &Event = if bytes.as_ptr().align_offset(align_of::<Event>()) == 0 {
        // SAFETY: the length and alignment are checked; Event is plain old data valid for
        // any bytes. Ring-buffer records are 8-byte aligned: read in place, not copied.
        unsafe { &*bytes.as_ptr().cast::<Event>() }
    } else {
        // SAFETY: the length is checked; read_unaligned does not rely on the alignment.
        copy = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
        &copy
    };
    let kind = EventKind::from_repr(raw.kind).ok_or(DecodeError::Kind(raw.kind))?;
    let tier = Tier::from_repr(raw.tier).ok_or(DecodeError::Tier(raw.tier))?;
    let fidelity = Fidelity::from_repr(raw.fidelity).ok_or(DecodeError::Fidelity(raw.fidelity))?;
    let from_path =
        (kind == EventKind::Rename && raw.flags & flags::FROM_PATH != 0).then(|| old_name(raw));
    Ok(KernelEvent {
        kind,
        tier,
        fidelity,
        ts_ns: raw.ts_ns,
        tgid: raw.tgid,
        pid: raw.pid,
        comm: c_string(&raw.comm),
        cgroup_id: raw.cgroup_id,
        dev: raw.file.dev,
        ino: raw.file.ino,
        sock_ino: raw.sock_ino,
        nlink: raw.nlink,
        path: c_string(raw.path_bytes()),
        ret: raw.ret,
        owner: (raw.owner.tgid != 0).then_some(raw.owner),
        backlog: (kind == EventKind::Listen).then_some(raw.aux),
        child_tgid: (kind == EventKind::Fork).then_some(raw.aux),
        dir: (raw.dir.ino != 0).then_some(raw.dir),
        mntns: (kind == EventKind::Connect && raw.aux != 0).then_some(raw.aux),
        from: (kind == EventKind::Rename && raw.from.ino != 0).then_some(raw.from),
        from_dir: (from_path.is_some() && raw.from_dir.ino != 0).then_some(raw.from_dir),
        from_path,
        guard_policy: (raw.flags & (flags::DENIED | flags::WOULD_DENY) != 0)
            .then(|| GuardPolicy::from_repr(raw.aux))
            .flatten(),
        flags: EventFlags::from_bits(raw.flags),
    })
}

/// A rename's old name, in the back half of the path (`FROM_PATH`), at most `aux` bytes.
fn old_name(raw: &Event) -> String {
    let back = raw.path.get(RENAME_FROM_AT..).unwrap_or_default();
    let len = (raw.aux as usize).min(back.len());
    c_string(back.get(..len).unwrap_or_default())
}

/// Bytes up to the first NUL, lossily as UTF-8 (paths are bytes; JSON wants text).
fn c_string(bytes: &[u8]) -> String {
    let text = bytes
        .get(..memchr::memchr(0, bytes).unwrap_or(bytes.len()))
        .unwrap_or_default();
    String::from_utf8_lossy(text).into_owned()
}

#[cfg(test)]
#[expect(
    clippy::indexing_slicing,
    reason = "the tests cut the records they built; a panic fails the test"
)]
mod tests {
    use sockwatch_common::PATH_CAP;

    use super::*;

    fn fixture() -> Event {
        let mut path = [0u8; PATH_CAP];
        path[..12].copy_from_slice(b"/tmp/x.sock\0");
        let mut comm = [0u8; 16];
        comm[..7].copy_from_slice(b"python3");
        Event {
            kind: EventKind::Bind as u32,
            tier: Tier::Tracepoint as u8,
            fidelity: Fidelity::Exact as u8,
            flags: 0,
            ts_ns: 42,
            tgid: 100,
            pid: 101,
            cgroup_id: 7,
            comm,
            file: FileId {
                dev: 0x801,
                ino: 0x1_0000_0001,
            },
            sock_ino: 5555,
            ret: 0,
            nlink: 1,
            owner: Owner::default(),
            aux: 0,
            dir: FileId::default(),
            from: FileId::default(),
            from_dir: FileId::default(),
            path_len: 11,
            _pad1: 0,
            path,
        }
    }

    fn bytes(ev: &Event) -> Vec<u8> {
        // SAFETY: Event is repr(C) plain data with explicit padding.
        unsafe { std::slice::from_raw_parts((ev as *const Event).cast::<u8>(), Event::SIZE) }
            .to_vec()
    }

    #[test]
    fn decodes_a_bind_record() {
        let ev = decode(&bytes(&fixture())).expect("decodes");
        assert_eq!(ev.kind, EventKind::Bind);
        assert_eq!(ev.tier, Tier::Tracepoint);
        assert_eq!((ev.tgid, ev.pid, ev.cgroup_id, ev.ts_ns), (100, 101, 7, 42));
        assert_eq!(ev.comm, "python3");
        assert_eq!((ev.dev, ev.ino, ev.sock_ino), (0x801, 0x1_0000_0001, 5555));
        assert_eq!(ev.path, "/tmp/x.sock");
        assert_eq!(ev.flags, EventFlags::default());
        assert_eq!((ev.owner, ev.backlog, ev.child_tgid), (None, None, None));
    }

    #[test]
    fn decodes_an_unlink_of_a_live_socket() {
        let mut raw = fixture();
        raw.kind = EventKind::Unlink as u32;
        raw.flags = flags::LIVE | flags::LISTENING | flags::HOLDS_FD;
        raw.owner = Owner {
            tgid: 977,
            _pad: 0,
            cgroup_id: 9,
            bind_ns: 5,
        };
        let ev = decode(&bytes(&raw)).expect("decodes");
        assert_eq!(ev.kind, EventKind::Unlink);
        assert!(ev.flags.live && ev.flags.listening && ev.flags.holds_fd && !ev.flags.dgram);
        assert_eq!(
            ev.owner,
            Some(Owner {
                tgid: 977,
                _pad: 0,
                cgroup_id: 9,
                bind_ns: 5
            })
        );
        let line = serde_json::to_string(&ev).expect("serializes");
        assert!(
            line.contains(r#""live":true"#) && !line.contains("dgram"),
            "{line}"
        );
    }

    #[test]
    fn listen_and_fork_carry_their_aux_field() {
        let mut raw = fixture();
        raw.kind = EventKind::Listen as u32;
        raw.aux = 128;
        assert_eq!(decode(&bytes(&raw)).expect("decodes").backlog, Some(128));
        raw.kind = EventKind::Fork as u32;
        let ev = decode(&bytes(&raw)).expect("decodes");
        assert_eq!((ev.child_tgid, ev.backlog), (Some(128), None));
    }

    #[test]
    fn a_connect_carries_its_mount_namespace_and_whether_the_lookup_was_seen() {
        let mut raw = fixture();
        raw.kind = EventKind::Connect as u32;
        raw.aux = 4_026_532_001;
        raw.flags = flags::TARGET_SEEN;
        let ev = decode(&bytes(&raw)).expect("decodes");
        assert_eq!(ev.mntns, Some(4_026_532_001));
        assert!(ev.flags.target_seen && !ev.flags.target_bound);
        raw.aux = 0;
        assert_eq!(decode(&bytes(&raw)).expect("decodes").mntns, None);
        raw.kind = EventKind::Bind as u32;
        raw.aux = 7;
        assert_eq!(decode(&bytes(&raw)).expect("decodes").mntns, None);
    }

    #[test]
    fn decodes_from_an_unaligned_buffer() {
        let mut buf = vec![0u8; 1];
        buf.extend(bytes(&fixture()));
        assert_eq!(decode(&buf[1..]).expect("decodes").path, "/tmp/x.sock");
    }

    #[test]
    fn rejects_truncated_and_oversized_records() {
        let b = bytes(&fixture());
        assert_eq!(
            decode(&b[..Event::SIZE - 1]),
            Err(DecodeError::Size {
                got: Event::SIZE - 1,
                expected: Event::SIZE
            })
        );
        let mut long = b.clone();
        long.push(0);
        assert!(
            matches!(decode(&long), Err(DecodeError::Size { got, .. }) if got == Event::SIZE + 1)
        );
        assert!(matches!(decode(&[]), Err(DecodeError::Size { got: 0, .. })));
    }

    #[test]
    fn rejects_unknown_kind_and_tier() {
        let mut ev = fixture();
        ev.kind = 999;
        assert_eq!(decode(&bytes(&ev)), Err(DecodeError::Kind(999)));
        let mut ev = fixture();
        ev.tier = 0;
        assert_eq!(decode(&bytes(&ev)), Err(DecodeError::Tier(0)));
        let mut ev = fixture();
        ev.fidelity = 9;
        assert_eq!(decode(&bytes(&ev)), Err(DecodeError::Fidelity(9)));
    }

    #[test]
    fn path_len_past_capacity_is_clamped_and_flags_read() {
        let mut ev = fixture();
        ev.path = [b'a'; PATH_CAP];
        ev.path_len = u16::MAX;
        ev.flags = flags::PATH_TRUNCATED;
        let d = decode(&bytes(&ev)).expect("decodes");
        assert_eq!(d.path.len(), PATH_CAP);
        assert!(d.flags.path_truncated);
    }

    #[test]
    fn json_round_trips() {
        let ev = decode(&bytes(&fixture())).expect("decodes");
        let line = serde_json::to_string(&ev).expect("serializes");
        assert!(line.contains(r#""kind":"bind""#), "{line}");
        assert!(line.contains(r#""tier":"tracepoint""#), "{line}");
        assert_eq!(
            serde_json::from_str::<KernelEvent>(&line).expect("parses"),
            ev
        );
    }
}
