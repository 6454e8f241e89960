//! Socket files under the watched paths, found by a bounded walk in the agent's own mount
//! namespace. Symbolic links are not followed; nothing is opened but directories.
use std::{fs, path::PathBuf};

use super::stat::Stat;

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
}

/// Walk each root (a directory, or a socket file itself) depth-first.
pub fn walk_sockets(roots: &[PathBuf], limits: &WalkLimits) -> Walk {
    let mut w = Walk::default();
    let mut stack: Vec<(PathBuf, usize)> = Vec::new();
    'roots: for root in roots {
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
            let Ok(entries) = fs::read_dir(&dir) else {
                w.unreadable += 1;
                continue;
            };
            for e in entries {
                if w.entries >= limits.max_entries {
                    w.cut = true;
                    break 'roots;
                }
                w.entries += 1;
                let Ok(e) = e else { continue };
                let path = e.path();
                // lstat: a symlink is neither followed nor reported.
                let Ok(m) = fs::symlink_metadata(&path) else {
                    continue;
                };
                if m.is_dir() {
                    if depth < limits.max_depth {
                        stack.push((path, depth + 1));
                    } else {
                        w.cut = true;
                    }
                } else {
                    let st = Stat::from_metadata(&m);
                    if st.is_socket() {
                        w.sockets.push((path, st));
                    }
                }
            }
        }
    }
    w.sockets.sort_by(|a, b| a.0.cmp(&b.0));
    w
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

        let w = walk_sockets(std::slice::from_ref(&root), &WalkLimits::default());
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
        );
        assert_eq!(w.sockets.len(), 1);
        assert!(w.cut);

        let w = walk_sockets(
            std::slice::from_ref(&root),
            &WalkLimits {
                max_depth: 16,
                max_entries: 2,
            },
        );
        assert!(w.cut);
        assert_eq!(w.entries, 2);

        // A socket file as a root.
        let w = walk_sockets(&[root.join("top.sock")], &WalkLimits::default());
        assert_eq!(w.sockets.len(), 1);
    }
}
