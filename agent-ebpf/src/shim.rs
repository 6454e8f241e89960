//! Rust faces of the C CO-RE shim (`c/shim.c`): every kernel-struct read goes through here.
use core::ffi::c_void;

pub use agent_common::Flavor;
use agent_common::{Counter, FileId, PATH_CAP, SUN_PATH_LEN};

use crate::emit::count;

/// Mirrors `struct sw_file` in `c/shim.h`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
pub struct File {
    pub dev: u64,
    pub ino: u64,
    pub sock_ino: u64,
    pub nlink: u32,
    pub mode: u32,
}

impl File {
    pub fn id(&self) -> FileId {
        FileId {
            dev: self.dev,
            ino: self.ino,
        }
    }
}

pub type Sock = *const c_void;
pub type Dentry = *const c_void;

unsafe extern "C" {
    fn shim_socket_sk(sock: *const c_void) -> Sock;
    fn shim_sk_dentry(sk: Sock) -> Dentry;
    fn shim_sk_bound_file(sk: Sock, out: *mut File) -> i32;
    fn shim_sk_listening(sk: Sock) -> i32;
    fn shim_sk_type(sk: Sock) -> i32;
    fn shim_sk_path(sk: Sock, buf: *mut u8) -> i32;
    fn shim_dentry_file(d: Dentry, out: *mut File) -> i32;
    fn shim_is_sock_mode(mode: u32) -> i32;
    fn shim_dentry_parent(d: Dentry) -> Dentry;
    fn shim_dentry_name_hash(d: Dentry) -> u64;
    fn shim_dentry_name(d: Dentry, buf: *mut u8) -> i32;
    fn shim_basename_hash(buf: *const u8, len: i32) -> u64;
    fn shim_current_fd_socket(fd: i32) -> *const c_void;
    fn shim_current_holds_socket(sock_ino: u64) -> i32;
    fn shim_current_holds_socket_bounded(sock_ino: u64) -> i32;
    fn shim_syscall_target_path(buf: *mut u8) -> i32;
    fn shim_new_process_tgid(task: *const c_void) -> u32;
    fn shim_renamedata_target(rd: *const c_void) -> Dentry;
    fn shim_renamedata_flags(rd: *const c_void) -> u32;
    fn shim_msghdr_name(msg: *const c_void) -> *const u8;
    fn shim_current_group_dead() -> i32;
    fn shim_file_refs(file: *const c_void) -> i64;
    fn shim_current_fd_file(fd: i32) -> *const c_void;
    fn shim_file_socket(file: *const c_void) -> *const c_void;
    fn shim_atomic_add(counter: *mut u64, delta: i64) -> u64;
    fn shim_current_dirfd_file(dirfd: i32, out: *mut File) -> i32;
    fn shim_release_last_bound_sockets();
    fn shim_release_last_bound_sockets_bounded() -> i32;
    fn shim_ctx_arg(ctx: *const c_void, n: u32) -> u64;
    fn shim_renamedata_exists() -> i32;
    fn shim_verifier_insn_processed(env: *const c_void) -> u32;
}

/// Releases, through `sockwatch_release_at_exit`, every bound UNIX socket whose last reference
/// the exiting current task holds: its whole fd table with `bpf_loop`, the first descriptors
/// without. Counts a walk cut short.
#[inline(always)]
pub fn release_last_bound_sockets(flavor: Flavor) {
    let partial = match flavor {
        Flavor::Helpers => {
            unsafe { shim_release_last_bound_sockets() };
            false
        }
        Flavor::Bounded => (unsafe { shim_release_last_bound_sockets_bounded() }) != 0,
    };
    if partial {
        count(Counter::FdWalkPartial);
    }
}

/// Argument `n` of the traced function, from an fentry/fexit context.
#[inline(always)]
pub fn ctx_arg(ctx: *const c_void, n: u32) -> u64 {
    unsafe { shim_ctx_arg(ctx, n) }
}

/// `env->insn_processed` of a `struct bpf_verifier_env *`.
#[inline(always)]
pub fn verifier_insn_processed(env: *const c_void) -> u32 {
    unsafe { shim_verifier_insn_processed(env) }
}

/// Does this kernel have `struct renamedata` (5.12, and stable kernels that took it back)?
#[inline(always)]
pub fn renamedata_exists() -> bool {
    unsafe { shim_renamedata_exists() != 0 }
}

/// Identity of the directory a relative path starts from: `dirfd`, or the working directory
/// for `AT_FDCWD`; zero when unknown.
#[inline(always)]
pub fn current_dirfd_id(dirfd: i32) -> FileId {
    let mut out = File::default();
    if unsafe { shim_current_dirfd_file(dirfd, &mut out) } == 0 {
        out.id()
    } else {
        FileId::default()
    }
}

/// Atomically adds `delta` to a counter in map memory; returns the value after (approximate
/// when another CPU updates it at the same time).
#[inline(always)]
pub fn atomic_add(counter: *mut u64, delta: i64) -> u64 {
    unsafe { shim_atomic_add(counter, delta) }
}

/// `sock->sk`.
#[inline(always)]
pub fn socket_sk(sock: *const c_void) -> Sock {
    unsafe { shim_socket_sk(sock) }
}

/// The dentry a UNIX socket is bound to; null for other families, abstract and unnamed.
#[inline(always)]
pub fn sk_dentry(sk: Sock) -> Dentry {
    unsafe { shim_sk_dentry(sk) }
}

/// The file a UNIX socket is bound to, with its sockfs inode.
#[inline(always)]
pub fn sk_bound_file(sk: Sock) -> Option<File> {
    let mut out = File::default();
    (unsafe { shim_sk_bound_file(sk, &mut out) } == 0).then_some(out)
}

#[inline(always)]
pub fn sk_listening(sk: Sock) -> bool {
    unsafe { shim_sk_listening(sk) != 0 }
}

/// `SOCK_STREAM` = 1, `SOCK_DGRAM` = 2, `SOCK_SEQPACKET` = 5.
#[inline(always)]
pub fn sk_type(sk: Sock) -> i32 {
    unsafe { shim_sk_type(sk) }
}

/// Copies the bound `sun_path` into `buf`; returns the length without the NUL.
#[inline(always)]
pub fn sk_path(sk: Sock, buf: &mut [u8; SUN_PATH_LEN]) -> Option<u16> {
    let n = unsafe { shim_sk_path(sk, buf.as_mut_ptr()) };
    (n > 0).then(|| (n - 1) as u16)
}

/// The inode behind a dentry (`None` for a negative dentry).
#[inline(always)]
pub fn dentry_file(d: Dentry) -> Option<File> {
    let mut out = File::default();
    (unsafe { shim_dentry_file(d, &mut out) } == 0).then_some(out)
}

#[inline(always)]
pub fn is_sock_mode(mode: u32) -> bool {
    unsafe { shim_is_sock_mode(mode) != 0 }
}

/// `d_parent`, or null at a filesystem root.
#[inline(always)]
pub fn dentry_parent(d: Dentry) -> Dentry {
    unsafe { shim_dentry_parent(d) }
}

/// Copies the dentry's own name into `buf`; returns its length without the NUL.
#[inline(always)]
pub fn dentry_name(d: Dentry, buf: &mut [u8; PATH_CAP]) -> Option<u16> {
    let n = unsafe { shim_dentry_name(d, buf.as_mut_ptr()) };
    (n > 0).then(|| (n - 1) as u16)
}

/// `agent_common::name_hash` of the dentry's name.
#[inline(always)]
pub fn dentry_name_hash(d: Dentry) -> u64 {
    unsafe { shim_dentry_name_hash(d) }
}

/// `agent_common::name_hash` of the last component of a path held in `buf`.
#[inline(always)]
pub fn basename_hash(buf: &[u8; PATH_CAP], len: usize) -> u64 {
    unsafe { shim_basename_hash(buf.as_ptr(), len as i32) }
}

/// The `struct socket *` behind descriptor `fd` of the current task, if it is a socket.
#[inline(always)]
pub fn current_fd_socket(fd: i32) -> *const c_void {
    unsafe { shim_current_fd_socket(fd) }
}

/// The `struct file *` behind descriptor `fd` of the current task, if it is a socket.
#[inline(always)]
pub fn current_fd_file(fd: i32) -> *const c_void {
    unsafe { shim_current_fd_file(fd) }
}

/// `file->private_data` of a socket file: its `struct socket *`.
#[inline(always)]
pub fn file_socket(file: *const c_void) -> *const c_void {
    unsafe { shim_file_socket(file) }
}

/// References to a `struct file` (1 means this close is the last).
#[inline(always)]
pub fn file_refs(file: *const c_void) -> i64 {
    unsafe { shim_file_refs(file) }
}

/// Does the current task hold a descriptor of the socket with this sockfs inode? Counts a
/// walk cut short (bounded flavor, a large fd table).
#[inline(always)]
pub fn current_holds_socket(sock_ino: u64, flavor: Flavor) -> bool {
    let found = match flavor {
        Flavor::Helpers => unsafe { shim_current_holds_socket(sock_ino) },
        Flavor::Bounded => unsafe { shim_current_holds_socket_bounded(sock_ino) },
    };
    if found < 0 {
        count(Counter::FdWalkPartial);
    }
    found > 0
}

/// The path argument of the current unlink/rename syscall (the file removed, or the rename
/// target), copied into `buf`; returns the length without the NUL.
#[inline(always)]
pub fn syscall_target_path(buf: &mut [u8; PATH_CAP]) -> Option<u16> {
    let n = unsafe { shim_syscall_target_path(buf.as_mut_ptr()) };
    (n > 0).then(|| (n - 1) as u16)
}

/// A forked task's tgid when it is a new process, 0 for a new thread.
#[inline(always)]
pub fn new_process_tgid(task: *const c_void) -> u32 {
    unsafe { shim_new_process_tgid(task) }
}

/// `rd->new_dentry` of a `struct renamedata *`.
#[inline(always)]
pub fn renamedata_target(rd: *const c_void) -> Dentry {
    unsafe { shim_renamedata_target(rd) }
}

/// `rd->flags` of a `struct renamedata *`.
#[inline(always)]
pub fn renamedata_flags(rd: *const c_void) -> u32 {
    unsafe { shim_renamedata_flags(rd) }
}

/// `msg->msg_name` (a kernel copy of the destination address) of a `struct msghdr *`.
#[inline(always)]
pub fn msghdr_name(msg: *const c_void) -> *const u8 {
    unsafe { shim_msghdr_name(msg) }
}

/// At `sched_process_exit`: was the current task the last of its thread group?
#[inline(always)]
pub fn current_group_dead() -> bool {
    unsafe { shim_current_group_dead() != 0 }
}
