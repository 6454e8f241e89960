//! Safe-ish Rust faces of the C CO-RE shim (`c/shim.c`): every kernel-struct read goes here.
use core::ffi::c_void;

/// Mirrors `struct sw_bound_file` in `c/shim.h`.
#[repr(C)]
#[derive(Default)]
pub struct BoundFile {
    pub dev: u64,
    pub ino: u64,
    pub sock_ino: u64,
    pub nlink: u32,
    pub _pad: u32,
}

unsafe extern "C" {
    fn shim_sk_bound_file(sk: *const c_void, out: *mut BoundFile) -> i32;
    fn shim_sk_path(sk: *const c_void, buf: *mut u8) -> i32;
    fn shim_socket_sk(sock: *const c_void) -> *const c_void;
    fn shim_current_fd_socket(fd: i32) -> *const c_void;
}

/// The file a UNIX socket (`struct sock *`) is bound to; `None` for other families and for
/// abstract or unnamed sockets.
#[inline(always)]
pub fn sk_bound_file(sk: *const c_void) -> Option<BoundFile> {
    let mut out = BoundFile::default();
    (unsafe { shim_sk_bound_file(sk, &mut out) } == 0).then_some(out)
}

/// Copies the bound `sun_path` of a UNIX `struct sock *` into `buf` (at least 108 bytes);
/// returns the length including the NUL.
#[inline(always)]
pub fn sk_path(sk: *const c_void, buf: &mut [u8; agent_common::SUN_PATH_LEN]) -> Option<u16> {
    let n = unsafe { shim_sk_path(sk, buf.as_mut_ptr()) };
    (n > 0).then_some(n as u16)
}

/// `sock->sk`.
#[inline(always)]
pub fn socket_sk(sock: *const c_void) -> *const c_void {
    unsafe { shim_socket_sk(sock) }
}

/// The `struct socket *` behind descriptor `fd` of the current task, if it is a socket.
#[inline(always)]
pub fn current_fd_socket(fd: i32) -> *const c_void {
    unsafe { shim_current_fd_socket(fd) }
}
