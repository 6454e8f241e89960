//! `struct sockaddr_un` as a syscall (user memory) or a kernel hook (kernel copy) sees it.
use aya_ebpf::helpers::{bpf_probe_read_kernel, bpf_probe_read_user};

const AF_UNIX: u16 = 1;
/// `offsetof(struct sockaddr_un, sun_path)`.
pub const SUN_PATH_OFFSET: usize = 2;

/// A `sockaddr` in user memory of family AF_UNIX naming a path (not abstract, not unnamed):
/// a `sun_path` whose first byte is not NUL.
#[inline(always)]
pub fn is_user_unix_path(addr: *const u8, len: u64) -> bool {
    if addr.is_null() || len <= SUN_PATH_OFFSET as u64 {
        return false;
    }
    // SAFETY: the helper checks the user address: a bad one is an error, not a fault.
    let family = unsafe { bpf_probe_read_user(addr as *const u16) };
    // SAFETY: as above.
    let first = unsafe { bpf_probe_read_user(addr.wrapping_add(SUN_PATH_OFFSET)) };
    matches!((family, first), (Ok(AF_UNIX), Ok(b)) if b != 0u8)
}

/// The same for a kernel copy of the address.
#[inline(always)]
pub fn is_kernel_unix_path(addr: *const u8) -> bool {
    if addr.is_null() {
        return false;
    }
    // SAFETY: the helper checks the kernel address: a bad one is an error, not a fault.
    let family = unsafe { bpf_probe_read_kernel(addr as *const u16) };
    // SAFETY: as above.
    let first = unsafe { bpf_probe_read_kernel(addr.wrapping_add(SUN_PATH_OFFSET)) };
    matches!((family, first), (Ok(AF_UNIX), Ok(b)) if b != 0u8)
}
