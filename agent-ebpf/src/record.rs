//! The record a hook's entry leaves for its exit in `PENDING` (kernel-private: the agent
//! never reads it).
use agent_common::{FileId, Owner};

/// Which entry/exit pair a pending record belongs to.
#[repr(u64)]
#[derive(Clone, Copy)]
pub enum Slot {
    Bind = 1,
    Listen = 2,
    Unlink = 3,
    Rename = 4,
    Connect = 5,
    /// `unix_find_other`'s verdict on a connect's target, read by the connect's exit.
    ConnectTarget = 6,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PendingKey {
    pub pid_tgid: u64,
    pub slot: u64,
}

/// A socket file as seen at an entry hook (for [`Slot::ConnectTarget`], at the target lookup's
/// exit), or raw arguments for the exit hook.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct Pending {
    /// The first raw argument kept: a kernel or user pointer (socket, sockaddr, path), or
    /// the tracepoint tier's listen backlog.
    pub ptr: u64,
    /// The second: a descriptor or a backlog; for [`Slot::ConnectTarget`],
    /// [`Pending::NOT_OURS`] or 0.
    pub arg: u64,
    pub file: FileId,
    /// The directory holding `file`, or the start of a relative path.
    pub dir: FileId,
    pub sock_ino: u64,
    pub owner: Owner,
    pub nlink: u32,
    /// `agent_common::flags` bits decided at entry.
    pub flags: u16,
    pub _pad: u16,
}

impl Pending {
    /// `arg` of a connect target that is neither live nor watched: its failures are not
    /// reported.
    pub const NOT_OURS: u64 = 1;

    /// A record of raw arguments only, for the exit to act on.
    #[inline(always)]
    pub fn args(ptr: u64, arg: u64) -> Self {
        Pending {
            ptr,
            arg,
            ..Default::default()
        }
    }
}
