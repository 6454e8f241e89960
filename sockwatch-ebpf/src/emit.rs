//! Building and submitting events, and counting what is lost on the way.
//!
//! A [`Draft`] writes through a raw pointer into its own reserved ring-buffer record: nothing
//! else sees that memory before [`Draft::submit`], and `Event` is plain integers and arrays.
use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_probe_read_kernel_str_bytes,
        bpf_probe_read_user_str_bytes,
        generated::{bpf_get_current_cgroup_id, bpf_ktime_get_boot_ns},
    },
    maps::ring_buf::RingBufEntry,
};
use sockwatch_common::{
    COMM_LEN, Counter, Event, EventKind, Fidelity, FileId, Flavor, Owner, PATH_CAP, RENAME_FROM_AT,
    SUN_PATH_LEN, Tier, flags,
};

use crate::{
    counters::{count, count_emitted, count_lost},
    maps::{EVENTS, WAKEUP_BYTES},
    record::Pending,
    shim::{self, Dentry, File, Sock},
    sockaddr::SUN_PATH_OFFSET,
};

/// An event's room in the ring buffer: the record and the kernel's 8-byte header, 8-aligned.
const RECORD_BYTES: u64 = ((Event::SIZE + 8 + 7) & !7) as u64;

// `sun_path` is read into the front of the event's path.
const _: () = assert!(SUN_PATH_LEN <= PATH_CAP);

/// An event being built in ring-buffer memory.
pub struct Draft(RingBufEntry<Event>, EventKind);

/// Reserves one event and fills the fields every kind shares; counts a full ring buffer.
#[inline(always)]
pub fn reserve(kind: EventKind, tier: Tier, fidelity: Fidelity) -> Option<Draft> {
    // SAFETY: helpers without arguments.
    let (ts_ns, cgroup_id) = unsafe { (bpf_ktime_get_boot_ns(), bpf_get_current_cgroup_id()) };
    reserve_stamped(kind, tier, fidelity, ts_ns, cgroup_id)
}

/// [`reserve`] for an event of the process `binder` names, stamped with the time and cgroup
/// read for it (a bind: its live-table entry and its record read them once).
#[inline(always)]
pub fn reserve_as(
    kind: EventKind,
    tier: Tier,
    fidelity: Fidelity,
    binder: &Owner,
) -> Option<Draft> {
    reserve_stamped(kind, tier, fidelity, binder.bind_ns, binder.cgroup_id)
}

#[inline(always)]
fn reserve_stamped(
    kind: EventKind,
    tier: Tier,
    fidelity: Fidelity,
    ts_ns: u64,
    cgroup_id: u64,
) -> Option<Draft> {
    let Some(mut entry) = EVENTS.reserve::<Event>(0) else {
        count_lost(kind);
        return None;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    let ev = entry.as_mut_ptr();
    // SAFETY: `ev` is the record just reserved (see the module doc); the helpers take no
    // arguments.
    unsafe {
        (*ev).kind = kind as u32;
        (*ev).tier = tier as u8;
        (*ev).fidelity = fidelity as u8;
        (*ev).flags = 0;
        (*ev).ts_ns = ts_ns;
        (*ev).tgid = (pid_tgid >> 32) as u32;
        (*ev).pid = pid_tgid as u32;
        (*ev).cgroup_id = cgroup_id;
        (*ev).comm = bpf_get_current_comm().unwrap_or([0; COMM_LEN]);
        (*ev).file = FileId::default();
        (*ev).sock_ino = 0;
        (*ev).ret = 0;
        (*ev).nlink = 0;
        (*ev).owner = Owner::default();
        (*ev).aux = 0;
        (*ev).path_len = 0;
        (*ev)._pad1 = 0;
        (*ev).dir = FileId::default();
        (*ev).from = FileId::default();
        (*ev).from_dir = FileId::default();
    }
    Some(Draft(entry, kind))
}

impl Draft {
    #[inline(always)]
    fn ev(&mut self) -> *mut Event {
        self.0.as_mut_ptr()
    }

    #[inline(always)]
    pub fn file(&mut self, f: &File) -> &mut Self {
        let ev = self.ev();
        // SAFETY: our reserved record (module doc).
        unsafe {
            (*ev).file = f.id();
            (*ev).sock_ino = f.sock_ino;
            (*ev).nlink = f.nlink;
        }
        self
    }

    /// The socket file, owner and flags an entry hook decided on.
    #[inline(always)]
    pub fn pending(&mut self, p: &Pending) -> &mut Self {
        let ev = self.ev();
        // SAFETY: our reserved record (module doc).
        unsafe {
            (*ev).file = p.file;
            (*ev).dir = p.dir;
            (*ev).sock_ino = p.sock_ino;
            (*ev).nlink = p.nlink;
            (*ev).owner = p.owner;
            (*ev).flags |= p.flags;
        }
        self
    }

    #[inline(always)]
    pub fn dir(&mut self, d: FileId) -> &mut Self {
        // SAFETY: our reserved record (module doc).
        unsafe { (*self.ev()).dir = d };
        self
    }

    #[inline(always)]
    pub fn from(&mut self, f: FileId) -> &mut Self {
        // SAFETY: our reserved record (module doc).
        unsafe { (*self.ev()).from = f };
        self
    }

    #[inline(always)]
    fn old_name_dir(&mut self, d: FileId) -> &mut Self {
        // SAFETY: our reserved record (module doc).
        unsafe { (*self.ev()).from_dir = d };
        self
    }

    #[inline(always)]
    pub fn owner(&mut self, o: &Owner) -> &mut Self {
        // SAFETY: our reserved record (module doc).
        unsafe { (*self.ev()).owner = *o };
        self
    }

    #[inline(always)]
    pub fn flags(&mut self, f: u16) -> &mut Self {
        // SAFETY: our reserved record (module doc).
        unsafe { (*self.ev()).flags |= f };
        self
    }

    #[inline(always)]
    pub fn ret(&mut self, ret: i64) -> &mut Self {
        // SAFETY: our reserved record (module doc).
        unsafe { (*self.ev()).ret = ret as i32 };
        self
    }

    #[inline(always)]
    pub fn aux(&mut self, aux: u32) -> &mut Self {
        // SAFETY: our reserved record (module doc).
        unsafe { (*self.ev()).aux = aux };
        self
    }

    #[inline(always)]
    fn path_buf(&mut self) -> &mut [u8; PATH_CAP] {
        // SAFETY: our reserved record (module doc); any bytes are a valid `[u8; N]`.
        unsafe { &mut (*self.ev()).path }
    }

    /// The front of the path, as long as a `sun_path`.
    #[inline(always)]
    fn sun_path_buf(&mut self) -> &mut [u8; SUN_PATH_LEN] {
        let path = self.path_buf().as_mut_ptr();
        // SAFETY: SUN_PATH_LEN <= PATH_CAP (asserted above), so this is a prefix of `path`.
        unsafe { &mut *(path as *mut [u8; SUN_PATH_LEN]) }
    }

    #[inline(always)]
    fn set_path_len(&mut self, n: usize) {
        let ev = self.ev();
        // SAFETY: our reserved record (module doc); `path[0]` is in bounds.
        unsafe {
            (*ev).path_len = n as u16;
            if n == 0 || (*ev).path[0] != b'/' {
                (*ev).flags |= flags::PATH_RELATIVE;
            }
            if n + 1 >= PATH_CAP {
                (*ev).flags |= flags::PATH_TRUNCATED;
            }
        }
    }

    /// The length of a path just copied in, or a failed copy counted.
    #[inline(always)]
    fn copied(&mut self, len: Option<usize>) -> &mut Self {
        match len {
            Some(n) => self.set_path_len(n),
            None => count(Counter::ReadFailed),
        }
        self
    }

    /// The path a UNIX socket is bound to.
    #[inline(always)]
    pub fn sun_path_of(&mut self, sk: Sock) -> &mut Self {
        let n = shim::sk_path(sk, self.sun_path_buf());
        self.copied(n.map(usize::from))
    }

    /// `sun_path` of a `sockaddr_un` in kernel memory.
    #[inline(always)]
    pub fn kernel_sun_path(&mut self, addr: *const u8) -> &mut Self {
        let (src, buf) = (addr.wrapping_add(SUN_PATH_OFFSET), self.sun_path_buf());
        // SAFETY: the helper checks `src`, and writes only within `buf`.
        let n = unsafe { bpf_probe_read_kernel_str_bytes(src, buf) }.map(<[u8]>::len);
        self.copied(n.ok())
    }

    /// A NUL-terminated path in user memory (`sun_path` or a syscall's path argument).
    #[inline(always)]
    pub fn user_path(&mut self, src: *const u8) -> &mut Self {
        let buf = self.path_buf();
        // SAFETY: the helper checks `src`, and writes only within `buf`.
        let n = unsafe { bpf_probe_read_user_str_bytes(src, buf) }.map(<[u8]>::len);
        self.copied(n.ok())
    }

    /// The path's back half, from [`RENAME_FROM_AT`]: a rename's old name.
    #[inline(always)]
    fn old_name_buf(&mut self) -> &mut [u8; PATH_CAP - RENAME_FROM_AT] {
        let path = self.path_buf().as_mut_ptr();
        // SAFETY: RENAME_FROM_AT < PATH_CAP, so this is the tail of `path`.
        unsafe { &mut *(path.add(RENAME_FROM_AT) as *mut [u8; PATH_CAP - RENAME_FROM_AT]) }
    }

    /// Marks the old name in place (`FROM_PATH`, its length in `aux`); a new name that ran
    /// into the back half is cut there.
    #[inline(always)]
    fn old_name_copied(&mut self, len: Option<usize>) -> &mut Self {
        let ev = self.ev();
        // SAFETY: our reserved record (module doc).
        unsafe {
            let new_len = (*ev).path_len as usize;
            if new_len >= RENAME_FROM_AT {
                (*ev).path_len = (RENAME_FROM_AT - 1) as u16;
                (*ev).flags |= flags::PATH_TRUNCATED;
            }
            if len.is_some_and(|n| n + 1 >= PATH_CAP - RENAME_FROM_AT) {
                (*ev).flags |= flags::PATH_TRUNCATED;
            }
            (*ev).aux = len.unwrap_or(0) as u32;
            (*ev).flags |= flags::FROM_PATH;
        }
        self
    }

    /// Tracepoint tier: a rename's new and old names from user memory; `old_dir` is where a
    /// relative old name starts.
    #[inline(always)]
    pub fn rename_paths(&mut self, new: *const u8, old: *const u8, old_dir: FileId) -> &mut Self {
        self.user_path(new);
        let buf = self.old_name_buf();
        // SAFETY: the helper checks `old`, and writes only within `buf`.
        let n = unsafe { bpf_probe_read_user_str_bytes(old, buf) }.map(<[u8]>::len);
        self.old_name_dir(old_dir).old_name_copied(n.ok())
    }

    /// Exact tiers: an exchange's old name, the name of `dentry` in directory `dir`.
    #[inline(always)]
    pub fn exchanged_name(&mut self, dentry: Dentry, dir: FileId) -> &mut Self {
        let n = shim::dentry_name_half(dentry, self.old_name_buf());
        self.old_name_dir(dir).old_name_copied(n.map(usize::from))
    }

    /// The path of the file an unlink or rename removes: the syscall's path argument, as the
    /// remover gave it (left empty when the operation came from no syscall: io_uring, nfsd,
    /// overlayfs). The `Bounded` flavor cannot read the syscall's registers (before 5.15):
    /// it gives the file's own name, relative to the event's `dir`, which the agent completes.
    /// A failed read is not counted: an empty path is expected here.
    #[inline(always)]
    pub fn removed_path(&mut self, flavor: Flavor, dentry: Dentry) -> &mut Self {
        let n = match flavor {
            Flavor::Helpers => shim::syscall_target_path(self.path_buf()),
            Flavor::Bounded => shim::dentry_name(dentry, self.path_buf()),
        };
        if let Some(n) = n {
            self.set_path_len(n as usize);
        }
        self
    }

    /// Submits without waking the reader unless this record takes the backlog across the
    /// threshold: the agent drains on a short timer, and a woken reader drains everything, so
    /// a wakeup per event past the threshold would only burn CPU (a crossing two CPUs' records
    /// straddle wakes nobody; the timer drains it).
    #[inline(always)]
    pub fn submit(self) {
        // The backlog includes this record, reserved with its ring-buffer header.
        let backlog = EVENTS.query(u64::from(BPF_RB_AVAIL_DATA));
        let threshold = WAKEUP_BYTES.load();
        let wake = if backlog >= threshold && backlog < threshold + RECORD_BYTES {
            BPF_RB_FORCE_WAKEUP
        } else {
            BPF_RB_NO_WAKEUP
        };
        count_emitted(self.1);
        self.0.submit(u64::from(wake));
    }
}
