//! Is a socket file under a watched directory? Decided by directory identity, in the kernel.
use sockwatch_common::{FileId, WATCH_DEPTH, WatchedName};

use crate::{
    maps::{
        UNWATCHED_DIRS, UNWATCHED_EPOCH, WATCH_ALL, WATCHED_DIRS, WATCHED_NAMES, WATCHED_PARENTS,
    },
    shim::{self, Dentry},
};

/// Whether `file` is under a watched directory (see [`watched_dir`]).
#[inline(always)]
pub fn is_watched(file: Dentry) -> bool {
    WATCH_ALL.load() != 0 || walked_dir(file).is_some()
}

/// The identity of `file`'s directory (zero at a filesystem root) when `file` is under a
/// watched one: the walk reads it, and the records that report `file` name it.
#[inline(always)]
pub fn watched_dir(file: Dentry) -> Option<FileId> {
    if WATCH_ALL.load() != 0 {
        return Some(shim::dentry_id(shim::dentry_parent(file)).unwrap_or_default());
    }
    walked_dir(file)
}

/// Walks up to [`WATCH_DEPTH`] directories above `file` looking for a watched one. A
/// directory that replaced a watched one (same parent, same name) is adopted on the spot,
/// so a watched directory deleted and re-created keeps being watched from its first bind.
/// A directory the walk found under no watch is remembered (`UNWATCHED_DIRS`): the next
/// call there is one lookup, until a rename anywhere advances the epoch.
#[inline(always)]
fn walked_dir(file: Dentry) -> Option<FileId> {
    // Read before the walk: a rename that ends during it leaves the answer unremembered.
    let epoch = UNWATCHED_EPOCH.get(0).copied().unwrap_or(0);
    let dir = shim::dentry_parent(file);
    // A filesystem that keeps no generation could give a later directory the same key. Not
    // read while the cache is off (the LSM and kprobe tiers): the walk is all they do.
    let key = shim::dentry_key(dir, epoch != 0)?;
    let cached = key.generation != 0;
    // SAFETY: the value is copied at once.
    if cached && unsafe { UNWATCHED_DIRS.get(key) }.copied() == Some(epoch) {
        return None;
    }
    let watched = walk(dir, key.dir);
    if cached && !watched {
        let _ = UNWATCHED_DIRS.insert(key, epoch, 0);
    }
    watched.then_some(key.dir)
}

/// A rename ended: a directory may have moved under a watch, so nothing remembered before
/// it counts.
#[inline(always)]
pub fn renamed() {
    if let Some(epoch) = UNWATCHED_EPOCH.get_ptr_mut(0)
        // SAFETY: the map's one element, valid for this run; read once.
        && unsafe { *epoch } != 0
    {
        // SAFETY: as above; the add is atomic, as other CPUs advance it too.
        unsafe { shim::atomic_add(epoch, 1) };
    }
}

/// The walk itself, from `dir` (identity `id`) up.
#[inline(always)]
fn walk(mut dir: Dentry, mut id: FileId) -> bool {
    // Each level's parent is the next level's directory: its identity is read once.
    for _ in 0..WATCH_DEPTH {
        // SAFETY: only presence is tested; the value is never read.
        if unsafe { WATCHED_DIRS.get(id) }.is_some() {
            return true;
        }
        let parent = shim::dentry_parent(dir);
        let Some(parent_id) = shim::dentry_id(parent) else {
            return false;
        };
        if let Some(slot) = watched_by_name(dir, parent_id) {
            let _ = WATCHED_DIRS.insert(id, slot, 0);
            return true;
        }
        (dir, id) = (parent, parent_id);
    }
    false
}

/// The slot of the watch `dir` re-creates (same parent, same name). Most parents are no
/// watched directory's: their one lookup spares the name's hash.
#[inline(always)]
fn watched_by_name(dir: Dentry, parent: FileId) -> Option<u32> {
    // SAFETY: only presence is tested; the value is never read.
    unsafe { WATCHED_PARENTS.get(parent) }?;
    let by_name = WatchedName {
        parent,
        name_hash: shim::dentry_name_hash(dir),
    };
    // SAFETY: the value is copied at once.
    unsafe { WATCHED_NAMES.get(by_name) }.copied()
}

/// The guard slot of the nearest watched directory above `file`: 0 for every socket when
/// every directory is watched, or when none above it is (the top-level policy). A live
/// socket's directories were adopted at its bind, so no lookup by name is needed here.
#[inline(always)]
pub fn slot_of(file: Dentry) -> u32 {
    if WATCH_ALL.load() != 0 {
        return 0;
    }
    let mut dir = shim::dentry_parent(file);
    for _ in 0..WATCH_DEPTH {
        let Some(id) = shim::dentry_id(dir) else {
            return 0;
        };
        // SAFETY: the value is copied at once.
        if let Some(slot) = unsafe { WATCHED_DIRS.get(id) }.copied() {
            return slot;
        }
        dir = shim::dentry_parent(dir);
    }
    0
}
