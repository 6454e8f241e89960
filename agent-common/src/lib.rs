//! The contract between sockwatch's kernel programs and its agent.
//!
//! Everything here is `#[repr(C)]` with explicit padding, so the byte layout is the same on
//! both sides; the compile-time asserts at the bottom pin it.
#![no_std]

/// Longest path an event carries. `sun_path` is 108 bytes; unlink and rename paths may be
/// longer and are then cut (see [`flags::PATH_TRUNCATED`]).
pub const PATH_CAP: usize = 256;
/// `sizeof(sockaddr_un.sun_path)`.
pub const SUN_PATH_LEN: usize = 108;
/// Length of `task_struct.comm`.
pub const COMM_LEN: usize = 16;

/// Map names and capacities, shared so the loader never guesses.
pub mod maps {
    pub const EVENTS: &str = "EVENTS";
    pub const EVENTS_BYTES: u32 = 1 << 22;
    pub const COUNTERS: &str = "COUNTERS";
    pub const PENDING_BIND: &str = "PENDING_BIND";
    pub const PENDING_CAPACITY: u32 = 16_384;
}

/// Load-time globals (set with `EbpfLoader::set_global`).
pub mod globals {
    /// The agent's own tgid: its activity is never reported.
    pub const AGENT_TGID: &str = "AGENT_TGID";
    /// Unconsumed ring-buffer bytes past which a submit wakes the reader.
    pub const WAKEUP_BYTES: &str = "WAKEUP_BYTES";
}

/// What happened. Ids are never reused: a retired kind keeps its number.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(
    feature = "user",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum EventKind {
    Bind = 1,
}

impl EventKind {
    pub fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(Self::Bind),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Bind => "bind",
        }
    }
}

/// How a hook is attached, best first. Ids are never reused.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    feature = "user",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum Tier {
    Lsm = 1,
    Fentry = 2,
    Kprobe = 3,
    Tracepoint = 4,
}

impl Tier {
    pub const ALL: [Tier; 4] = [Tier::Lsm, Tier::Fentry, Tier::Kprobe, Tier::Tracepoint];

    pub fn from_u8(v: u8) -> Option<Self> {
        Self::ALL.into_iter().find(|t| *t as u8 == v)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Lsm => "lsm",
            Self::Fentry => "fentry",
            Self::Kprobe => "kprobe",
            Self::Tracepoint => "tracepoint",
        }
    }
}

/// Bits of [`Event::flags`].
pub mod flags {
    /// The path did not fit in [`super::PATH_CAP`] bytes and was cut.
    pub const PATH_TRUNCATED: u16 = 1 << 0;
}

/// Indices into the per-CPU `COUNTERS` array: every loss and failure the kernel side sees.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// A ring-buffer reservation failed: the event is lost.
    RingbufFull = 0,
    /// A map update failed (map full): the event may be lost.
    MapFull = 1,
    /// A kernel or user memory read failed while building an event.
    ReadFailed = 2,
    /// Events submitted to the ring buffer.
    Emitted = 3,
}

impl Counter {
    pub const ALL: [Counter; 4] = [
        Counter::RingbufFull,
        Counter::MapFull,
        Counter::ReadFailed,
        Counter::Emitted,
    ];
    pub const COUNT: u32 = Self::ALL.len() as u32;

    pub fn name(self) -> &'static str {
        match self {
            Self::RingbufFull => "ringbuf_full",
            Self::MapFull => "map_full",
            Self::ReadFailed => "read_failed",
            Self::Emitted => "emitted",
        }
    }
}

/// Identity of a socket file: device (userspace `st_dev` encoding) and 64-bit inode.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
}

/// One record in the ring buffer. Fixed size, so the kernel side reserves it in one step.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Event {
    /// [`EventKind`] as u32.
    pub kind: u32,
    /// [`Tier`] as u8.
    pub tier: u8,
    pub _pad0: u8,
    /// [`flags`] bits.
    pub flags: u16,
    /// `bpf_ktime_get_boot_ns()`: boot clock, counts suspend.
    pub ts_ns: u64,
    pub tgid: u32,
    pub pid: u32,
    pub cgroup_id: u64,
    pub comm: [u8; COMM_LEN],
    /// The socket file.
    pub file: FileId,
    /// Inode of the socket itself in sockfs (`socket:[N]` in /proc/PID/fd): tells two sockets
    /// bound in turn to a reused file inode apart.
    pub sock_ino: u64,
    /// Syscall or hook result; negative errno on failure.
    pub ret: i32,
    pub path_len: u16,
    pub _pad1: u16,
    pub path: [u8; PATH_CAP],
}

impl Event {
    pub const SIZE: usize = core::mem::size_of::<Event>();

    /// The path bytes actually present.
    pub fn path_bytes(&self) -> &[u8] {
        let len = (self.path_len as usize).min(PATH_CAP);
        &self.path[..len]
    }
}

#[cfg(feature = "user")]
unsafe impl aya::Pod for Event {}
#[cfg(feature = "user")]
unsafe impl aya::Pod for FileId {}

/// The kernel's `dev_t` (major << 20 | minor) in the encoding `stat(2)` returns as `st_dev`
/// (glibc's `makedev`), so events compare equal to userspace `stat` results.
pub const fn kernel_dev_to_user(kdev: u32) -> u64 {
    let major = (kdev >> 20) as u64;
    let minor = (kdev & 0xfffff) as u64;
    ((major & 0xfffff000) << 32)
        | ((major & 0xfff) << 8)
        | ((minor & 0xffffff00) << 12)
        | (minor & 0xff)
}

// Layout pins: a change here is a contract change on both sides.
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<FileId>() == 16);
    assert!(offset_of!(Event, kind) == 0);
    assert!(offset_of!(Event, tier) == 4);
    assert!(offset_of!(Event, flags) == 6);
    assert!(offset_of!(Event, ts_ns) == 8);
    assert!(offset_of!(Event, tgid) == 16);
    assert!(offset_of!(Event, pid) == 20);
    assert!(offset_of!(Event, cgroup_id) == 24);
    assert!(offset_of!(Event, comm) == 32);
    assert!(offset_of!(Event, file) == 48);
    assert!(offset_of!(Event, sock_ino) == 64);
    assert!(offset_of!(Event, ret) == 72);
    assert!(offset_of!(Event, path_len) == 76);
    assert!(offset_of!(Event, path) == 80);
    assert!(size_of::<Event>() == 80 + PATH_CAP);
    assert!(size_of::<Event>() % 8 == 0);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_encoding_matches_glibc_makedev() {
        // 8:1 (sda1) and an anonymous tmpfs device 0:52, and a large minor.
        assert_eq!(kernel_dev_to_user((8 << 20) | 1), 0x801);
        assert_eq!(kernel_dev_to_user(52), 52);
        assert_eq!(kernel_dev_to_user((259 << 20) | 0x12345), 0x1231_0345);
    }

    #[test]
    fn ids_round_trip() {
        for t in Tier::ALL {
            assert_eq!(Tier::from_u8(t as u8), Some(t));
        }
        assert_eq!(Tier::from_u8(0), None);
        assert_eq!(EventKind::from_u32(1), Some(EventKind::Bind));
        assert_eq!(EventKind::from_u32(0), None);
    }
}
