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
mod netlink;
mod socket;
mod wire;

pub use netlink::{NetNs, NsDump, dump, dump_current, dump_namespaces, open};
pub use socket::{DiagError, DiagSocket, SOCK_DGRAM, STATE_LISTEN, SockName, VfsId};
pub use wire::{
    REQUEST_LEN, UDIAG_SHOW_NAME, UDIAG_SHOW_PEER, UDIAG_SHOW_RQLEN, UDIAG_SHOW_VFS, parse_batch,
    parse_unix_msg, request,
};

#[cfg(test)]
mod tests;
