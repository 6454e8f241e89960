//! The record a hook's entry leaves for its exit in `PENDING` (its layout is shared: the
//! agent's sweep prunes what no exit took).
pub use sockwatch_common::maps::{Pending, PendingKey};

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

impl Slot {
    /// Whether a call of this pair can run inside another by the same thread: a stacking
    /// filesystem (overlayfs) unlinks or renames its upper layer's file with the same
    /// `vfs_unlink`/`vfs_rename`, inside the call on its own file.
    #[inline(always)]
    pub fn nests(self) -> bool {
        matches!(self, Slot::Unlink | Slot::Rename)
    }
}
