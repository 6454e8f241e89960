//! Is a socket file under a watched directory? Decided by directory identity, in the kernel.
use agent_common::{WATCH_DEPTH, WatchedName};

use crate::{
    maps::{WATCH_ALL, WATCHED_DIRS, WATCHED_NAMES},
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
    for _ in 0..WATCH_DEPTH {
        if dir.is_null() {
            return false;
        }
        let Some(id) = shim::dentry_id(dir) else {
            return false;
        };
        // SAFETY: only presence is tested; the value is never read.
        if unsafe { WATCHED_DIRS.get(id) }.is_some() {
            return true;
        }
        let parent = shim::dentry_parent(dir);
        if let Some(parent_id) = shim::dentry_id(parent) {
            let by_name = WatchedName {
                parent: parent_id,
                name_hash: shim::dentry_name_hash(dir),
            };
            // SAFETY: only presence is tested; the value is never read.
            if unsafe { WATCHED_NAMES.get(by_name) }.is_some() {
                let _ = WATCHED_DIRS.insert(id, 1, 0);
                return true;
            }
        }
        dir = parent;
    }
    false
}
