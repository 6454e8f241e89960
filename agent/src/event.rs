//! Decoding ring-buffer records into typed events: pure, length-checked, never panics.
use agent_common::{Event, EventKind, Tier, flags};
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record of {got} bytes, expected {expected}")]
    Size { got: usize, expected: usize },
    #[error("unknown event kind {0}")]
    Kind(u32),
    #[error("unknown tier {0}")]
    Tier(u8),
}

/// One kernel observation, as the agent and its outputs see it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SockEvent {
    pub kind: EventKind,
    pub tier: Tier,
    /// Boot-clock nanoseconds (`CLOCK_BOOTTIME`).
    pub ts_ns: u64,
    pub tgid: u32,
    pub pid: u32,
    pub comm: String,
    pub cgroup_id: u64,
    /// Socket file: device (as `st_dev`) and inode.
    pub dev: u64,
    pub ino: u64,
    /// The socket's own inode in sockfs (`socket:[N]`).
    pub sock_ino: u64,
    pub path: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub path_truncated: bool,
    pub ret: i32,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Decodes one ring-buffer record. Records must be exactly one [`Event`].
pub fn decode(bytes: &[u8]) -> Result<SockEvent, DecodeError> {
    if bytes.len() != Event::SIZE {
        return Err(DecodeError::Size {
            got: bytes.len(),
            expected: Event::SIZE,
        });
    }
    // SAFETY: the length is checked; Event is plain old data valid for any bytes, and
    // read_unaligned does not rely on the buffer's alignment.
    let raw: Event = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
    let kind = EventKind::from_u32(raw.kind).ok_or(DecodeError::Kind(raw.kind))?;
    let tier = Tier::from_u8(raw.tier).ok_or(DecodeError::Tier(raw.tier))?;
    Ok(SockEvent {
        kind,
        tier,
        ts_ns: raw.ts_ns,
        tgid: raw.tgid,
        pid: raw.pid,
        comm: c_string(&raw.comm),
        cgroup_id: raw.cgroup_id,
        dev: raw.file.dev,
        ino: raw.file.ino,
        sock_ino: raw.sock_ino,
        path: c_string(raw.path_bytes()),
        path_truncated: raw.flags & flags::PATH_TRUNCATED != 0,
        ret: raw.ret,
    })
}

/// Bytes up to the first NUL, lossily as UTF-8 (paths are bytes; JSON wants text).
fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use agent_common::{FileId, PATH_CAP};

    use super::*;

    fn fixture() -> Event {
        let mut path = [0u8; PATH_CAP];
        path[..12].copy_from_slice(b"/tmp/x.sock\0");
        let mut comm = [0u8; 16];
        comm[..7].copy_from_slice(b"python3");
        Event {
            kind: EventKind::Bind as u32,
            tier: Tier::Tracepoint as u8,
            _pad0: 0,
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
        assert!(!ev.path_truncated);
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
    }

    #[test]
    fn path_len_past_capacity_is_clamped_and_flags_read() {
        let mut ev = fixture();
        ev.path = [b'a'; PATH_CAP];
        ev.path_len = u16::MAX;
        ev.flags = flags::PATH_TRUNCATED;
        let d = decode(&bytes(&ev)).expect("decodes");
        assert_eq!(d.path.len(), PATH_CAP);
        assert!(d.path_truncated);
    }

    #[test]
    fn json_round_trips() {
        let ev = decode(&bytes(&fixture())).expect("decodes");
        let line = serde_json::to_string(&ev).expect("serializes");
        assert!(line.contains(r#""kind":"bind""#), "{line}");
        assert!(line.contains(r#""tier":"tracepoint""#), "{line}");
        assert_eq!(
            serde_json::from_str::<SockEvent>(&line).expect("parses"),
            ev
        );
    }
}
