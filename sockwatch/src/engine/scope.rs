//! Watch scope: which paths the operator asked about. The kernel already keeps binds, scans
//! and removals to the watched directories (by directory identity), so every socket the
//! engine tracks is in scope; what reaches the engine unfiltered is a refused connect to a
//! file it does not track (the tracepoint tier reports every refused connect by path). Such
//! a connect is in scope when its path, as the client named it, lies in a watched directory.
use std::path::{Path, PathBuf};

/// The watched directories; none: the whole node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    dirs: Vec<PathBuf>,
}

impl Scope {
    /// The scope of these watched directories (none: every path).
    pub fn watching(dirs: impl IntoIterator<Item = PathBuf>) -> Self {
        Self {
            dirs: dirs.into_iter().collect(),
        }
    }

    /// Is `path` at or below a watched directory (or is nothing watched)? Compared by
    /// components, as `Config::watch_of` does: `/run/a2/x` is not in `/run/a`.
    pub fn covers(&self, path: &str) -> bool {
        self.dirs.is_empty() || self.dirs.iter().any(|d| Path::new(path).starts_with(d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_watched_covers_every_path() {
        assert!(Scope::default().covers("/anywhere/x.sock"));
    }

    #[test]
    fn a_watch_covers_its_own_tree_only() {
        let s = Scope::watching([PathBuf::from("/run/a")]);
        assert!(s.covers("/run/a/x.sock"));
        assert!(s.covers("/run/a/deep/x.sock"));
        assert!(!s.covers("/run/a2/x.sock"));
        assert!(!s.covers("/run/b/x.sock"));
        assert!(!s.covers("relative/x.sock"));
    }
}
