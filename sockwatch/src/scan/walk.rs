//! Socket files under the watched paths, found by a bounded walk in the agent's own mount
//! namespace. Symbolic links are not followed; nothing is opened but directories. FUSE and
//! network filesystems mounted below are not entered (not even `lstat`ed: a FUSE server
//! may never answer), unless asked for (see [`crate::host::lookup`]).
use std::{
    fs,
    path::{Path, PathBuf},
};

use crate::host::{
    lookup::{self, Lookup, NetworkMounts},
    stat::Stat,
};

/// Bounds on the walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkLimits {
    /// Directory levels below each watched path.
    pub max_depth: usize,
    /// Directory entries looked at, over all watched paths.
    pub max_entries: usize,
}

impl Default for WalkLimits {
    fn default() -> Self {
        Self {
            max_depth: 16,
            max_entries: 1 << 20,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Walk {
    /// Socket files found: path as the agent sees it, and its `stat`.
    pub sockets: Vec<(PathBuf, Stat)>,
    pub entries: usize,
    /// A limit stopped the walk somewhere.
    pub cut: bool,
    /// Directories below the roots that could not be listed (vanished or not permitted).
    pub unreadable: usize,
    /// Mount points of FUSE or network filesystems not entered, with their type.
    pub skipped: Vec<(PathBuf, String)>,
}

/// Walk each root (a directory, or a socket file itself) depth-first. `network` names the
/// FUSE and network mounts not to enter; each directory is listed under the lookup deadline
/// (one that does not answer in time counts as unreadable).
pub fn walk_sockets(roots: &[PathBuf], limits: &WalkLimits, network: &NetworkMounts) -> Walk {
    let mut w = Walk::default();
    let mut stack: Vec<(PathBuf, usize)> = Vec::new();
    'roots: for root in roots {
        if let Some(fstype) = network.skip(Lookup::ScanWalk, root) {
            w.skipped.push((root.clone(), fstype));
            continue;
        }
        match fs::symlink_metadata(root) {
            Ok(m) if m.is_dir() => stack.push((root.clone(), 0)),
            Ok(m) => {
                let st = Stat::from_metadata(&m);
                if st.is_socket() {
                    w.sockets.push((root.clone(), st));
                }
            }
            Err(_) => w.unreadable += 1,
        }
        while let Some((dir, depth)) = stack.pop() {
            let budget = limits.max_entries - w.entries;
            let network = network.clone();
            let listed =
                lookup::with_deadline(Lookup::ScanWalk, move || list(&dir, budget, &network));
            let Ok(Some(listing)) = listed else {
                w.unreadable += 1;
                continue;
            };
            w.entries += listing.entries;
            for entry in listing.found {
                match entry {
                    Entry::Dir(path) if depth < limits.max_depth => stack.push((path, depth + 1)),
                    Entry::Dir(_) => w.cut = true,
                    Entry::Socket(path, st) => w.sockets.push((path, st)),
                    Entry::Skipped(path, fstype) => w.skipped.push((path, fstype)),
                }
            }
            if listing.cut {
                w.cut = true;
                break 'roots;
            }
        }
    }
    w.sockets.sort_by(|a, b| a.0.cmp(&b.0));
    w
}

/// What one directory holds that the walk wants.
enum Entry {
    Dir(PathBuf),
    Socket(PathBuf, Stat),
    /// A FUSE or network mount point, not entered, and its type.
    Skipped(PathBuf, String),
}

struct Listing {
    found: Vec<Entry>,
    /// Entries looked at.
    entries: usize,
    /// The budget ran out before the directory's end.
    cut: bool,
}

/// Lists `dir`, looking at `budget` entries at most; `None` when it cannot be listed.
fn list(dir: &Path, budget: usize, network: &NetworkMounts) -> Option<Listing> {
    let mut listing = Listing {
        found: Vec::new(),
        entries: 0,
        cut: false,
    };
    for e in fs::read_dir(dir).ok()? {
        if listing.entries >= budget {
            listing.cut = true;
            break;
        }
        listing.entries += 1;
        let Ok(e) = e else { continue };
        let path = e.path();
        if let Some(fstype) = network.skip(Lookup::ScanWalk, &path) {
            listing.found.push(Entry::Skipped(path, fstype));
            continue;
        }
        // lstat: a symlink is neither followed nor reported.
        let Ok(m) = fs::symlink_metadata(&path) else {
            continue;
        };
        let st = Stat::from_metadata(&m);
        if m.is_dir() {
            listing.found.push(Entry::Dir(path));
        } else if st.is_socket() {
            listing.found.push(Entry::Socket(path, st));
        }
    }
    Some(listing)
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixListener;

    use super::*;

    #[test]
    fn finds_sockets_within_bounds_without_following_links() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().to_path_buf();
        fs::create_dir_all(root.join("a/b/c")).unwrap();
        fs::write(root.join("a/plain"), b"x").unwrap();
        let _l1 = UnixListener::bind(root.join("top.sock")).unwrap();
        let _l2 = UnixListener::bind(root.join("a/b/c/deep.sock")).unwrap();
        std::os::unix::fs::symlink(root.join("top.sock"), root.join("link.sock")).unwrap();
        std::os::unix::fs::symlink(&root, root.join("a/loop")).unwrap();

        let w = walk_sockets(
            std::slice::from_ref(&root),
            &WalkLimits::default(),
            &NetworkMounts::default(),
        );
        let found: Vec<_> = w.sockets.iter().map(|(p, _)| p.clone()).collect();
        assert_eq!(
            found,
            vec![root.join("a/b/c/deep.sock"), root.join("top.sock")]
        );
        assert!(!w.cut);
        assert_eq!(
            w.entries, 8,
            "top.sock link.sock a plain loop b c deep.sock"
        );

        let w = walk_sockets(
            std::slice::from_ref(&root),
            &WalkLimits {
                max_depth: 1,
                max_entries: 100,
            },
            &NetworkMounts::default(),
        );
        assert_eq!(w.sockets.len(), 1);
        assert!(w.cut);

        let w = walk_sockets(
            std::slice::from_ref(&root),
            &WalkLimits {
                max_depth: 16,
                max_entries: 2,
            },
            &NetworkMounts::default(),
        );
        assert!(w.cut);
        assert_eq!(w.entries, 2);

        // A socket file as a root.
        let w = walk_sockets(
            &[root.join("top.sock")],
            &WalkLimits::default(),
            &NetworkMounts::default(),
        );
        assert_eq!(w.sockets.len(), 1);
    }

    #[test]
    fn a_network_mount_below_a_root_is_neither_entered_nor_stated() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().to_path_buf();
        fs::create_dir_all(root.join("nfs/deep")).unwrap();
        let _top = UnixListener::bind(root.join("top.sock")).unwrap();
        let _below = UnixListener::bind(root.join("nfs/deep/below.sock")).unwrap();
        let line = format!(
            "36 35 0:50 / {} rw - nfs4 server:/ rw\n",
            root.join("nfs").display()
        );
        let mounts = crate::host::mounts::parse_mountinfo(line.as_bytes()).unwrap();
        let network = NetworkMounts::new(&mounts);

        let w = walk_sockets(
            std::slice::from_ref(&root),
            &WalkLimits::default(),
            &network,
        );
        let found: Vec<_> = w.sockets.iter().map(|(p, _)| p.clone()).collect();
        assert_eq!(found, vec![root.join("top.sock")]);
        assert_eq!(w.skipped, vec![(root.join("nfs"), "nfs4".to_owned())]);
        assert_eq!(w.unreadable, 0);
    }
}
