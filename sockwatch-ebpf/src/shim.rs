//! Rust faces of the C CO-RE shim (`c/shim.c`): every kernel-struct read goes through here.
//!
//! The shim reads kernel memory only through `bpf_probe_read_kernel` (CO-RE reads included),
//! which fails cleanly on a bad address: any pointer value is sound to pass it; or from the
//! typed pointers `bpf_get_current_task_btf` and `bpf_task_pt_regs` return, by loads the
//! verifier guards. What it writes goes only to the buffers, records and counters handed to it
//! (buffers sized by the constants the build generates for it from `sockwatch_common`).
use core::ffi::c_void;

use sockwatch_common::{FileId, Flavor, PATH_CAP, RENAME_FROM_AT, SUN_PATH_LEN};

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

/// Mirrors `struct sw_dir_key` in `c/shim.h`: the key of `UNWATCHED_DIRS`, a directory by
/// identity and inode generation.
#[repr(C)]
#[derive(Default, Clone, Copy)]
pub struct DirKey {
    pub dir: FileId,
    pub generation: u64,
}

/// Mirrors `struct sw_sock_call` in `c/shim.h`.
#[repr(C)]
#[derive(Default, Clone, Copy)]
pub struct SockCall {
    pub fd: u64,
    pub addr: u64,
    pub len: u64,
}

pub type Sock = *const c_void;
pub type Dentry = *const c_void;

/// Declares shim functions that take and return plain values, each with a safe face of the
/// same signature; `-> bool` faces test the C `int` for non-zero.
macro_rules! shim_values {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ident = $c:ident;
    )*) => {
        $(shim_values!(@one $(#[$doc])* fn $name($($arg: $ty),*) -> $ret = $c);)*
    };
    (@one $(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) -> bool = $c:ident) => {
        unsafe extern "C" {
            fn $c($($arg: $ty),*) -> i32;
        }
        $(#[$doc])*
        #[inline(always)]
        pub fn $name($($arg: $ty),*) -> bool {
            // SAFETY: plain values in, an int out; the shim's reads cannot fault (module doc).
            unsafe { $c($($arg),*) != 0 }
        }
    };
    (@one $(#[$doc:meta])* fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ident = $c:ident) => {
        unsafe extern "C" {
            fn $c($($arg: $ty),*) -> $ret;
        }
        $(#[$doc])*
        #[inline(always)]
        pub fn $name($($arg: $ty),*) -> $ret {
            // SAFETY: plain values in and out; the shim's reads cannot fault (module doc).
            unsafe { $c($($arg),*) }
        }
    };
}

type Ptr = *const c_void;

shim_values! {
    /// Argument `n` of the traced function, from an fentry/fexit context.
    fn ctx_arg(ctx: Ptr, n: u32) -> u64 = shim_ctx_arg;
    /// `env->insn_processed` of a `struct bpf_verifier_env *`.
    fn verifier_insn_processed(env: Ptr) -> u32 = shim_verifier_insn_processed;
    /// Does this kernel have `struct renamedata` (5.12, and stable kernels that took it back)?
    fn renamedata_exists() -> bool = shim_renamedata_exists;
    /// `sock->sk`.
    fn socket_sk(sock: Ptr) -> Sock = shim_socket_sk;
    /// The socket behind a `struct file *`; null when the file is not a socket.
    fn file_sock(file: Ptr) -> Sock = shim_file_sock;
    /// The dentry a UNIX socket is bound to; null for other families, abstract and unnamed.
    fn sk_dentry(sk: Sock) -> Dentry = shim_sk_dentry;
    fn sk_listening(sk: Sock) -> bool = shim_sk_listening;
    /// The socket's own sockfs inode (0 without a `struct socket`).
    fn sk_sock_ino(sk: Sock) -> u64 = shim_sk_sock_ino;
    /// The links to the inode behind a dentry (0 for a negative dentry).
    fn dentry_nlink(d: Dentry) -> u32 = shim_dentry_nlink;
    /// `SOCK_STREAM` = 1, `SOCK_DGRAM` = 2, `SOCK_SEQPACKET` = 5.
    fn sk_type(sk: Sock) -> i32 = shim_sk_type;
    fn is_sock_mode(mode: u32) -> bool = shim_is_sock_mode;
    /// `d_parent`, or null at a filesystem root.
    fn dentry_parent(d: Dentry) -> Dentry = shim_dentry_parent;
    /// `sockwatch_common::name_hash` of the dentry's name.
    fn dentry_name_hash(d: Dentry) -> u64 = shim_dentry_name_hash;
    /// The `struct socket *` behind descriptor `fd` of the current task, if it is a socket.
    fn current_fd_socket(fd: i32) -> Ptr = shim_current_fd_socket;
    /// The `struct file *` behind descriptor `fd` of the current task, if it is a socket.
    fn current_fd_file(fd: i32) -> Ptr = shim_current_fd_file;
    /// The same, its descriptor table loaded through the typed current task (5.11+).
    fn current_fd_file_btf(fd: i32) -> Ptr = shim_current_fd_file_btf;
    /// The same whatever file it is: null only for a free slot (5.11+).
    fn current_fd_any_file_btf(fd: i32) -> Ptr = shim_current_fd_any_file_btf;
    /// Is this `struct file *` a socket's?
    fn is_socket_file(file: Ptr) -> bool = shim_is_socket_file;
    /// `file->private_data` of a socket file: its `struct socket *`.
    fn file_socket(file: Ptr) -> Ptr = shim_file_socket;
    /// References to a `struct file` (1 means this close is the last).
    fn file_refs(file: Ptr) -> i64 = shim_file_refs;
    /// A forked task's tgid when it is a new process, 0 for a new thread.
    fn new_process_tgid(task: Ptr) -> u32 = shim_new_process_tgid;
    /// `rd->new_dentry` of a `struct renamedata *`.
    fn renamedata_target(rd: Ptr) -> Dentry = shim_renamedata_target;
    /// `rd->old_dentry` of a `struct renamedata *`: the file moved.
    fn renamedata_source(rd: Ptr) -> Dentry = shim_renamedata_source;
    /// `rd->flags` of a `struct renamedata *`.
    fn renamedata_flags(rd: Ptr) -> u32 = shim_renamedata_flags;
    /// `msg->msg_name` (a kernel copy of the destination address) of a `struct msghdr *`.
    fn msghdr_name(msg: Ptr) -> Ptr = shim_msghdr_name;
    /// At `sched_process_exit`: was the current task the last of its thread group?
    fn current_group_dead() -> bool = shim_current_group_dead;
    /// The current task's mount namespace id (`/proc/PID/ns/mnt`), 0 when it has none.
    fn current_mntns() -> u32 = shim_current_mntns;
    /// The current `renameat2` syscall's flags, through `bpf_task_pt_regs` (0 for others).
    fn syscall_rename_flags() -> u32 = shim_syscall_rename_flags;
    /// The same, through the register frame at the top of the task's kernel stack.
    fn syscall_rename_flags_bounded() -> u32 = shim_syscall_rename_flags_bounded;
}

unsafe extern "C" {
    fn shim_sk_bound_file(sk: Sock, d: Dentry, out: *mut File) -> i32;
    fn shim_dentry_file(d: Dentry, out: *mut File) -> i32;
    fn shim_dentry_id(d: Dentry, out: *mut File) -> i32;
    fn shim_dentry_key(d: Dentry, out: *mut DirKey, generation: i32) -> i32;
    fn shim_path_file(path: Ptr, out: *mut File) -> i32;
    fn shim_current_dirfd_file(dirfd: i32, out: *mut File) -> i32;
    fn shim_sk_path(sk: Sock, buf: *mut u8) -> i32;
    fn shim_dentry_name(d: Dentry, buf: *mut u8) -> i32;
    fn shim_dentry_name_half(d: Dentry, buf: *mut u8) -> i32;
    fn shim_syscall_target_path(buf: *mut u8) -> i32;
    fn shim_basename_hash(buf: *const u8, len: i32) -> u64;
    fn shim_current_holds_socket(sock_ino: u64) -> i32;
    fn shim_current_holds_socket_bounded(sock_ino: u64) -> i32;
    fn shim_release_last_bound_sockets();
    fn shim_release_last_bound_sockets_bounded() -> i32;
    fn shim_atomic_add(counter: *mut u64, delta: i64) -> u64;
    fn shim_syscall_sock_call(sendto: i32, out: *mut SockCall);
}

/// A `File` filled by a shim function that returns 0 when it found one.
#[inline(always)]
fn filled(fill: impl FnOnce(*mut File) -> i32) -> Option<File> {
    let mut out = File::default();
    (fill(&mut out) == 0).then_some(out)
}

/// A copied string's length without its NUL, from a length with it (or a negative error).
#[inline(always)]
fn copied_len(n: i32) -> Option<u16> {
    (n > 0).then(|| (n - 1) as u16)
}

/// The file a UNIX socket is bound to (`dentry`, its [`sk_dentry`]), with its sockfs inode.
#[inline(always)]
pub fn sk_bound_file(sk: Sock, dentry: Dentry) -> Option<File> {
    // SAFETY: `out` is a live `File`, the layout of the `struct sw_file` the shim fills.
    filled(|out| unsafe { shim_sk_bound_file(sk, dentry, out) })
}

/// The same once the file's identity `id` and the socket's sockfs inode are known: only the
/// links are read.
#[inline(always)]
pub fn bound_file_of(dentry: Dentry, id: FileId, sock_ino: u64) -> File {
    File {
        dev: id.dev,
        ino: id.ino,
        sock_ino,
        nlink: dentry_nlink(dentry),
        // Not read: a bound socket's file is a socket (S_IFSOCK).
        mode: 0o140_000,
    }
}

/// The inode behind a dentry (`None` for a negative dentry).
#[inline(always)]
pub fn dentry_file(d: Dentry) -> Option<File> {
    // SAFETY: as in `sk_bound_file`.
    filled(|out| unsafe { shim_dentry_file(d, out) })
}

/// The identity of the file behind `d`, read alone (cheaper than [`dentry_file`]).
#[inline(always)]
pub fn dentry_id(d: Dentry) -> Option<FileId> {
    // SAFETY: as in `sk_bound_file`.
    filled(|out| unsafe { shim_dentry_id(d, out) }).map(|f| f.id())
}

/// The unwatched cache's key for the directory behind `d`, its inode read once, and its
/// generation only `with_generation` (`None` for a negative dentry).
#[inline(always)]
pub fn dentry_key(d: Dentry, with_generation: bool) -> Option<DirKey> {
    let mut key = DirKey::default();
    // SAFETY: `key` is a live `DirKey`, the layout of the `struct sw_dir_key` the shim fills.
    (unsafe { shim_dentry_key(d, &mut key, i32::from(with_generation)) } == 0).then_some(key)
}

/// The inode a resolved `struct path` names.
#[inline(always)]
pub fn path_file(path: Ptr) -> Option<File> {
    // SAFETY: as in `sk_bound_file`.
    filled(|out| unsafe { shim_path_file(path, out) })
}

/// Identity of the directory a relative path starts from: `dirfd`, or the working directory
/// for `AT_FDCWD`; zero when unknown.
#[inline(always)]
pub fn current_dirfd_id(dirfd: i32) -> FileId {
    // SAFETY: as in `sk_bound_file`.
    filled(|out| unsafe { shim_current_dirfd_file(dirfd, out) })
        .map(|f| f.id())
        .unwrap_or_default()
}

/// Copies the bound `sun_path` into `buf`; returns the length without the NUL.
#[inline(always)]
pub fn sk_path(sk: Sock, buf: &mut [u8; SUN_PATH_LEN]) -> Option<u16> {
    // SAFETY: the shim writes at most SW_SUN_PATH_LEN (= SUN_PATH_LEN) bytes to `buf`.
    copied_len(unsafe { shim_sk_path(sk, buf.as_mut_ptr()) })
}

/// Copies the dentry's own name into `buf`; returns its length without the NUL.
#[inline(always)]
pub fn dentry_name(d: Dentry, buf: &mut [u8; PATH_CAP]) -> Option<u16> {
    // SAFETY: the shim writes at most SW_PATH_CAP (= PATH_CAP) bytes to `buf`.
    copied_len(unsafe { shim_dentry_name(d, buf.as_mut_ptr()) })
}

/// The name of a dentry into half a path buffer (a rename's old name).
#[inline(always)]
pub fn dentry_name_half(d: Dentry, buf: &mut [u8; PATH_CAP - RENAME_FROM_AT]) -> Option<u16> {
    // SAFETY: the shim writes at most SW_PATH_CAP / 2 (= PATH_CAP - RENAME_FROM_AT) bytes.
    copied_len(unsafe { shim_dentry_name_half(d, buf.as_mut_ptr()) })
}

/// The path argument of the current unlink/rename syscall (the file removed, or the rename
/// target), copied into `buf`; returns the length without the NUL.
#[inline(always)]
pub fn syscall_target_path(buf: &mut [u8; PATH_CAP]) -> Option<u16> {
    // SAFETY: the shim writes at most SW_PATH_CAP (= PATH_CAP) bytes to `buf`.
    copied_len(unsafe { shim_syscall_target_path(buf.as_mut_ptr()) })
}

/// `sockwatch_common::name_hash` of the last component of a path held in `buf`.
#[inline(always)]
pub fn basename_hash(buf: &[u8; PATH_CAP], len: usize) -> u64 {
    // SAFETY: the shim reads `buf` only below SW_PATH_CAP (= PATH_CAP), index masked.
    unsafe { shim_basename_hash(buf.as_ptr(), len as i32) }
}

/// The current bind's, connect's or (with `sendto`) sendto's descriptor, address and address
/// length, from the registers the syscall saved (`bpf_task_pt_regs`): read at the exit.
/// listen(fd, backlog) saves its backlog where they save the address.
#[inline(always)]
pub fn syscall_sock_call(sendto: bool) -> SockCall {
    let mut out = SockCall::default();
    // SAFETY: `out` is a live `SockCall`, the layout of the `struct sw_sock_call` the shim fills.
    unsafe { shim_syscall_sock_call(i32::from(sendto), &mut out) };
    out
}

/// Does the current task hold a descriptor of the socket with this sockfs inode? `None` when
/// the walk was cut short (bounded flavor, a large fd table) before finding it.
#[inline(always)]
pub fn current_holds_socket(sock_ino: u64, flavor: Flavor) -> Option<bool> {
    let found = match flavor {
        // SAFETY: a plain value in, an int out (module doc).
        Flavor::Helpers => unsafe { shim_current_holds_socket(sock_ino) },
        // SAFETY: as above.
        Flavor::Bounded => unsafe { shim_current_holds_socket_bounded(sock_ino) },
    };
    (found >= 0).then_some(found > 0)
}

/// Releases, through `sockwatch_release_at_exit`, every bound UNIX socket whose last reference
/// the exiting current task holds: up to `FD_SCAN_MAX` descriptors with `bpf_loop`, the first
/// `FD_SCAN_BOUNDED` without. False when the walk was cut short of a larger table.
#[inline(always)]
pub fn release_last_bound_sockets(flavor: Flavor) -> bool {
    match flavor {
        Flavor::Helpers => {
            // SAFETY: no arguments; the shim's reads cannot fault (module doc).
            unsafe { shim_release_last_bound_sockets() };
            true
        }
        // SAFETY: as above.
        Flavor::Bounded => (unsafe { shim_release_last_bound_sockets_bounded() }) == 0,
    }
}

/// Atomically adds `delta` to a counter in map memory; returns the value after (approximate
/// when another CPU updates it at the same time).
///
/// # Safety
/// `counter` must point to a `u64` map value that stays allocated while the program runs
/// (a pointer from a map lookup in this run).
#[inline(always)]
pub unsafe fn atomic_add(counter: *mut u64, delta: i64) -> u64 {
    // SAFETY: `counter` is valid for the add (the caller's contract).
    unsafe { shim_atomic_add(counter, delta) }
}
