//! `struct sockaddr_un` as a syscall (user memory) or a kernel hook (kernel copy) sees it.
use aya_ebpf::helpers::{bpf_probe_read_kernel, bpf_probe_read_user};

const AF_UNIX: u16 = 1;
/// `offsetof(struct sockaddr_un, sun_path)`.
pub const SUN_PATH_OFFSET: usize = 2;

/// The family and the first byte of `sun_path`, read in one helper call.
type Head = [u8; SUN_PATH_OFFSET + 1];

#[inline(always)]
fn names_a_path(head: Head) -> bool {
    u16::from_ne_bytes([head[0], head[1]]) == AF_UNIX && head[SUN_PATH_OFFSET] != 0
}

/// A `sockaddr` in user memory of family AF_UNIX naming a path (not abstract, not unnamed):
/// a `sun_path` whose first byte is not NUL.
#[inline(always)]
pub fn is_user_unix_path(addr: *const u8, len: u64) -> bool {
    if addr.is_null() || len <= SUN_PATH_OFFSET as u64 {
        return false;
    }
    // SAFETY: the helper checks the user address: a bad one is an error, not a fault.
    unsafe { bpf_probe_read_user(addr as *const Head) }.is_ok_and(names_a_path)
}

/// The same for a kernel copy of the address.
#[inline(always)]
pub fn is_kernel_unix_path(addr: *const u8) -> bool {
    if addr.is_null() {
        return false;
    }
    // SAFETY: the helper checks the kernel address: a bad one is an error, not a fault.
    unsafe { bpf_probe_read_kernel(addr as *const Head) }.is_ok_and(names_a_path)
}
