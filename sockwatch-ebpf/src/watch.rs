//! Is a socket file under a watched directory? Decided by directory identity, in the kernel.
use sockwatch_common::{FileId, WATCH_DEPTH, WatchedName};

use crate::{
    maps::{WATCH_ALL, WATCHED_DIRS, WATCHED_NAMES, WATCHED_PARENTS},
    shim::{self, Dentry},
};

/// Walks up to [`WATCH_DEPTH`] directories above `file` looking for a watched one. A
/// directory that replaced a watched one (same parent, same name) is adopted on the spot,
/// so a watched directory deleted and re-created keeps being watched from its first bind.
#[inline(always)]
pub fn is_watched(file: Dentry) -> bool {
    if WATCH_ALL.load() != 0 {
        return true;
    }
    let mut dir = shim::dentry_parent(file);
    // Each level's parent is the next level's directory: its identity is read once.
    let Some(mut id) = shim::dentry_id(dir) else {
        return false;
    };
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
