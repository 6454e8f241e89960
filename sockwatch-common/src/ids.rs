//! How both sides name a file and a socket's owner.

/// Identity of a file: device (userspace `st_dev` encoding) and 64-bit inode. Never a path.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
pub struct FileId {
    /// `st_dev` as `stat(2)` returns it (see [`kernel_dev_to_user`]).
    pub dev: u64,
    /// `st_ino`, all 64 bits.
    pub ino: u64,
}

/// The owner of a live socket as the kernel recorded it at bind time.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "user", derive(serde::Serialize, serde::Deserialize))]
pub struct Owner {
    /// Process that bound the socket.
    pub tgid: u32,
    /// Explicit padding, always zero.
    #[cfg_attr(feature = "user", serde(skip))]
    pub _pad: u32,
    /// Its cgroup (v2 id) at bind time.
    pub cgroup_id: u64,
    /// When it bound (boot clock, ns).
    pub bind_ns: u64,
}

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
}
