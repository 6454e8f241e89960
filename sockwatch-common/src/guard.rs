//! Guard mode's contract: the policies, the kernel's switch, its allow-list keys and the
//! record of a listener whose file was removed or replaced (the stale owner's proof).
use crate::ids::FileId;

named_enum! {
    serde;
    /// What the guard refuses, per watch (slot 0: sockets outside every watch).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub enum GuardPolicy: u32 {
        /// Nothing.
        #[default]
        Off = 0 => "off",
        /// A removal by a process outside the owner set that still holds a listener of its
        /// own, bound at the same path, whose file was removed or replaced since: the stale
        /// owner of the Multus incident.
        StaleOwner = 1 => "stale_owner",
        /// Any removal by a process outside the owner set, but for the allow-list.
        Foreign = 2 => "foreign",
    }
}

named_enum! {
    /// `GUARD_SWITCH[0]`: whether the kernel side decides at all.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub enum GuardSwitch: u32 {
        /// No watch has a policy: the removal hooks do no guard work.
        #[default]
        Unused = 0 => "unused",
        /// Refuses as the policies say.
        On = 1 => "on",
        /// Refuses nothing, but keeps the record of removed listeners for when it resumes.
        Paused = 2 => "paused",
        /// Decides as `On` and counts, but lets every removal through: each one it would
        /// have refused is reported as such (audit mode).
        Audit = 3 => "audit",
    }
}

/// Slots of `GUARD_POLICIES`: slot 0 and one per watch (its `WATCHED_DIRS` value).
pub const GUARD_SLOTS: u32 = 64;
/// Entries of `GUARD_ALLOW`.
pub const GUARD_ALLOW_CAPACITY: u32 = 1_024;
/// Entries of `ORPHANS` (least recently used go first: a lost record only fails open).
pub const ORPHANS_CAPACITY: u32 = 8_192;

/// [`GuardAllowKey::kind`] of a command name (`comm`, NUL-padded).
pub const ALLOW_COMM: u32 = 1;
/// [`GuardAllowKey::kind`] of a cgroup v2 id (little-endian in the first 8 bytes).
pub const ALLOW_CGROUP: u32 = 2;

/// Key of `GUARD_ALLOW`: who the `foreign` policy of one watch lets through.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GuardAllowKey {
    /// The watch's slot.
    pub slot: u32,
    /// [`ALLOW_COMM`] or [`ALLOW_CGROUP`].
    pub kind: u32,
    /// The comm, or the cgroup id's bytes.
    pub value: [u8; 16],
}

impl GuardAllowKey {
    /// A comm on the allow-list of `slot` (cut to 15 bytes, as the kernel keeps it).
    pub fn comm(slot: u32, comm: &[u8]) -> Self {
        let mut value = [0; 16];
        let n = comm.len().min(15);
        value[..n].copy_from_slice(&comm[..n]);
        Self {
            slot,
            kind: ALLOW_COMM,
            value,
        }
    }

    /// A cgroup v2 id on the allow-list of `slot`.
    pub fn cgroup(slot: u32, id: u64) -> Self {
        let mut value = [0; 16];
        value[..8].copy_from_slice(&id.to_le_bytes());
        Self {
            slot,
            kind: ALLOW_CGROUP,
            value,
        }
    }
}

/// Key of `ORPHANS`: a process and the place its listener was bound at.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OrphanKey {
    /// The listener's owner.
    pub tgid: u32,
    /// Explicit padding, always zero.
    pub _pad: u32,
    /// [`place_hash`] of its file's name and its directory's name.
    pub place: u64,
}

/// Value of `ORPHANS`: the listener whose file was removed or replaced. It still counts while
/// `LIVE` holds the same socket at that file.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Orphan {
    /// The socket file that was removed or replaced.
    pub file: FileId,
    /// The socket's own inode in sockfs.
    pub sock_ino: u64,
    /// Explicit padding, always zero.
    pub _pad: u64,
}

/// The place a socket file is bound at, by names only: a directory removed and re-created
/// (a successor's `RemoveAll`) keeps its place.
#[inline(always)]
pub fn place_hash(file_name_hash: u64, dir_name_hash: u64) -> u64 {
    file_name_hash.rotate_left(29) ^ dir_name_hash
}
