//! The table of live sockets (bound to a file), kept on bind, listen and release, and read
//! at the moment of an unlink or rename to decide liveness and ownership in the kernel.
use aya_ebpf::helpers::generated::{bpf_get_current_cgroup_id, bpf_ktime_get_boot_ns};
use sockwatch_common::{
    Counter, FileId, Flavor, LiveSock, Owner, flags,
    maps::{name_filter_slot, tracked_filter_slot},
};

use crate::{
    counters::count,
    current, filter,
    maps::{LIVE, LIVE_NAMES, NAME_FILTER, NAMES_UNREAD, RELEASED_NAMES, TRACKED, TRACKED_FILTER},
    record::Pending,
    shim::{self, Dentry, File, Sock},
    watch,
};

/// The current process as the owner of a socket it binds now.
#[inline(always)]
pub fn binder() -> Owner {
    Owner {
        tgid: current::tgid(),
        _pad: 0,
        // SAFETY: a helper without arguments.
        cgroup_id: unsafe { bpf_get_current_cgroup_id() },
        // SAFETY: a helper without arguments.
        bind_ns: unsafe { bpf_ktime_get_boot_ns() },
    }
}

/// Records a freshly bound socket, owned by `owner`.
#[inline(always)]
pub fn bound(file: &File, dentry: Dentry, owner: Owner) {
    let names = names_read();
    let name_hash = if names {
        shim::dentry_name_hash(dentry)
    } else {
        0
    };
    let live = LiveSock {
        sock_ino: file.sock_ino,
        owner,
        name_hash,
        flags: 0,
        _pad: [0; 3],
    };
    if LIVE.insert(file.id(), live, 0).is_err() {
        count(Counter::MapFull);
        return;
    }
    if names {
        add_name(name_hash);
    }
    track(owner.tgid);
}

/// Whether the name index is kept (see [`sockwatch_common::maps::NAMES_UNREAD`]).
#[inline(always)]
fn names_read() -> bool {
    NAMES_UNREAD.get(0).is_none_or(|off| *off == 0)
}

/// A live socket's entry in `LIVE`, found in this run: it stays allocated until the program
/// ends.
pub struct LiveEntry(*mut LiveSock);

impl LiveEntry {
    /// Marks the socket as listening.
    #[inline(always)]
    pub fn mark_listening(&self) {
        // SAFETY: see the type; a racing flag update elsewhere only sets the same bit.
        unsafe { (*self.0).flags |= flags::LISTENING };
    }

    /// Forgets the released socket of `file`; returns what the entry held.
    #[inline(always)]
    pub fn release(self, file: &File) -> LiveSock {
        // SAFETY: see the type; copied before the entry is removed.
        let live = unsafe { *self.0 };
        let _ = LIVE.remove(file.id());
        if names_read() {
            drop_name(live.name_hash);
            // Its file usually stays (a close does not unlink): its owner's cleanup, or
            // anyone's removal of it, is still news to the engine.
            let _ = RELEASED_NAMES.insert(live.name_hash, 1, 0);
            mark_name(live.name_hash);
        }
        live
    }
}

/// The file `sk` is bound to and its entry in the table, when the table holds that file for
/// this very socket. The file is read whole only then: most sockets released or listened on
/// are unnamed or bound outside the watches (they cost the identity's reads and one lookup),
/// and an accepted socket shares its listener's file but not its sockfs inode (two reads
/// more). An entry for another socket means this one's bind was never seen.
#[inline(always)]
pub fn live_entry(sk: Sock) -> Option<(File, LiveEntry)> {
    let dentry = shim::sk_dentry(sk);
    let id = shim::dentry_id(dentry)?;
    let live = LIVE.get_ptr_mut(id)?;
    let sock_ino = shim::sk_sock_ino(sk);
    // SAFETY: as in `LiveEntry`; read once.
    if unsafe { (*live).sock_ino } != sock_ino {
        return None;
    }
    Some((shim::bound_file_of(dentry, id, sock_ino), LiveEntry(live)))
}

#[inline(always)]
pub fn lookup(id: &FileId) -> Option<LiveSock> {
    // SAFETY: the value is copied at once, before any update of the map could free it.
    unsafe { LIVE.get(id) }.copied()
}

/// Fills `out` with the record an unlink or rename of `dentry` needs; false (and `out` left
/// as it was) when the file is not a socket, or neither live nor watched. Ownership is decided
/// now, from the acting task's fd table. An out-parameter the caller zeroed, not an `Option`:
/// a `None`'s undefined payload, copied, is a read of an uninitialised register the verifier
/// refuses.
#[inline(always)]
pub fn inspect_victim(dentry: Dentry, flavor: Flavor, out: &mut Pending) -> bool {
    let Some(file) = shim::dentry_file(dentry) else {
        return false;
    };
    if !shim::is_sock_mode(file.mode) {
        return false;
    }
    let mut p = Pending {
        // The dentry stays referenced until the operation's exit: its name names the file.
        ptr: dentry as u64,
        file: file.id(),
        nlink: file.nlink,
        ..Default::default()
    };
    match lookup(&p.file) {
        Some(live) => {
            p.sock_ino = live.sock_ino;
            p.owner = live.owner;
            p.flags = flags::LIVE | (live.flags & flags::LISTENING);
            match shim::current_holds_socket(live.sock_ino, flavor) {
                Some(true) => p.flags |= flags::HOLDS_FD,
                Some(false) => {}
                None => {
                    p.flags |= flags::OWNERS_PARTIAL;
                    count(Counter::FdWalkPartial);
                }
            }
            // Read once the file is known to be reported: most files removed are not.
            p.dir = parent_id(dentry);
        }
        // The watch's walk read the directory's identity.
        None => match watch::watched_dir(dentry) {
            Some(dir) => p.dir = dir,
            None => return false,
        },
    }
    *out = p;
    true
}

/// Identity of the directory holding `dentry` (zero at a filesystem root).
#[inline(always)]
pub fn parent_id(dentry: Dentry) -> FileId {
    shim::dentry_id(shim::dentry_parent(dentry)).unwrap_or_default()
}

/// Whether process `tgid` is tracked (holds or descends from a live socket's holder). The
/// filter first: an exiting process's key is a new one, whose bucket is a cache miss.
#[inline(always)]
pub fn is_tracked(tgid: u32) -> bool {
    // SAFETY: only presence is tested; the value is never read.
    filter::may_hold(&TRACKED_FILTER, tracked_filter_slot(tgid))
        && unsafe { TRACKED.get(tgid) }.is_some()
}

/// A lookup first: a process binds many sockets, and an update costs a bucket lock and an
/// element swap even when the entry is there.
#[inline(always)]
pub fn track(tgid: u32) {
    if is_tracked(tgid) {
        return;
    }
    if TRACKED.insert(tgid, 1, 0).is_err() {
        count(Counter::MapFull);
    } else {
        filter::mark(&TRACKED_FILTER, tracked_filter_slot(tgid));
    }
}

#[inline(always)]
pub fn untrack(tgid: u32) {
    let _ = TRACKED.remove(tgid);
}

#[inline(always)]
fn add_name(hash: u64) {
    if let Some(n) = LIVE_NAMES.get_ptr_mut(hash) {
        // SAFETY: a value of LIVE_NAMES found in this run.
        unsafe { shim::atomic_add(n, 1) };
    } else if LIVE_NAMES.insert(hash, 1, 0).is_err() {
        count(Counter::MapFull);
        return;
    }
    mark_name(hash);
}

/// Marks a name just added to `LIVE_NAMES` or `RELEASED_NAMES` in the filter before them.
#[inline(always)]
fn mark_name(hash: u64) {
    filter::mark(&NAME_FILTER, name_filter_slot(hash));
}

#[inline(always)]
fn drop_name(hash: u64) {
    if let Some(n) = LIVE_NAMES.get_ptr_mut(hash)
        // SAFETY: a value of LIVE_NAMES found in this run.
        && unsafe { shim::atomic_add(n, -1) } == 0
    {
        let _ = LIVE_NAMES.remove(hash);
    }
}

/// Is a live (or lately released) socket's file named like the last component of this
/// path? The tracepoint tier's filter for unlinks and renames, which cannot see inodes.
#[inline(always)]
pub fn name_is_live(hash: u64) -> bool {
    // SAFETY: only presence is tested; the values are never read.
    filter::may_hold(&NAME_FILTER, name_filter_slot(hash))
        && unsafe { LIVE_NAMES.get(hash).is_some() || RELEASED_NAMES.get(hash).is_some() }
}
