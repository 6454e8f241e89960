//! Watched directories: resolved to identities for the kernel's filter, and re-resolved
//! when a watched directory is deleted and re-created.
use std::{
    os::unix::{ffi::OsStrExt, fs::MetadataExt},
    path::{Path, PathBuf},
};

use sockwatch_common::{FileId, Tier, WatchedName, name_hash};

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("--watch {0}: {1}")]
    Unreadable(PathBuf, #[source] std::io::Error),
    #[error("--watch {0}: not a directory")]
    NotADirectory(PathBuf),
    #[error("--watch {0}: must be an absolute path")]
    Relative(PathBuf),
}

/// A watched directory as the kernel filter knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchedDir {
    pub path: PathBuf,
    /// Its identity; `None` while it does not exist.
    pub dir: Option<FileId>,
    /// The directory by parent and name, so the kernel recognises it at the first bind below
    /// it once it is created (or re-created), when its parent exists.
    pub by_name: Option<WatchedName>,
    /// Its guard slot (1 + its index among the watches), the kernel maps' value.
    pub slot: u32,
}

impl WatchedDir {
    /// The same directory as watch number `index` (from 0) of the config.
    pub fn in_slot(self, index: usize) -> Self {
        Self {
            slot: u32::try_from(index + 1).unwrap_or(u32::MAX),
            ..self
        }
    }

    /// The directory does not exist (yet): the agent waits for it.
    pub fn is_missing(&self) -> bool {
        self.dir.is_none()
    }
}

fn id(path: &Path) -> std::io::Result<(FileId, bool)> {
    let m = std::fs::metadata(path)?;
    Ok((
        FileId {
            dev: m.dev(),
            ino: m.ino(),
        },
        m.is_dir(),
    ))
}

/// Resolves `path`, which must be absolute and a directory or missing (a DaemonSet may start
/// before the daemon that creates its directory).
pub fn resolve(path: &Path) -> Result<WatchedDir, WatchError> {
    if !path.is_absolute() {
        return Err(WatchError::Relative(path.to_path_buf()));
    }
    let dir = match id(path) {
        Ok((_, false)) => return Err(WatchError::NotADirectory(path.to_path_buf())),
        Ok((dir, true)) => Some(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(WatchError::Unreadable(path.to_path_buf(), e)),
    };
    let by_name = match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => id(parent).ok().map(|(p, _)| WatchedName {
            parent: p,
            name_hash: name_hash(name.as_bytes()),
        }),
        _ => None, // "/" has no parent
    };
    Ok(WatchedDir {
        path: path.to_path_buf(),
        dir,
        by_name,
        slot: 1,
    })
}

/// Whether a bind or connect in a directory under no watch remembers it
/// (`UNWATCHED_DIRS`), so that the next one there skips the walk up the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnwatchedCache {
    On,
    /// Every directory is watched: there is no walk to spare.
    WatchAll,
    /// The rename hook does not run after each rename (LSM runs before it, a kretprobe can
    /// be missed, or no tier attached): a directory moved under a watch would go unseen.
    RenamesUnseen,
}

impl UnwatchedCache {
    /// From the tier the rename hook attached on, if any.
    pub fn of(rename_tier: Option<Tier>, watch_all: bool) -> Self {
        let renames_after = matches!(rename_tier, Some(Tier::Tracepoint | Tier::Fentry));
        match (watch_all, renames_after) {
            (true, _) => Self::WatchAll,
            (false, true) => Self::On,
            (false, false) => Self::RenamesUnseen,
        }
    }

    /// For the start-up log.
    pub fn summary(self) -> &'static str {
        match self {
            Self::On => "on",
            Self::WatchAll => "off (every directory is watched)",
            Self::RenamesUnseen => {
                "off (the rename hook does not run after each rename on its tier): every bind \
                 or connect outside the watches walks up the tree"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_directories_and_rejects_the_rest() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let w = resolve(tmp.path()).expect("resolves");
        let (dir, _) = id(tmp.path()).expect("stat");
        assert_eq!(w.dir, Some(dir));
        let (parent, _) = id(tmp.path().parent().expect("parent")).expect("stat");
        let name = tmp.path().file_name().expect("name").as_bytes();
        assert_eq!(
            w.by_name,
            Some(WatchedName {
                parent,
                name_hash: name_hash(name)
            })
        );

        let file = tmp.path().join("f");
        std::fs::write(&file, b"").expect("write");
        assert_eq!(
            resolve(&file).unwrap_err().to_string(),
            format!("--watch {}: not a directory", file.display())
        );
        let missing = tmp.path().join("missing");
        let (parent, _) = id(tmp.path()).expect("stat");
        assert_eq!(
            resolve(&missing).expect("a missing directory is waited for"),
            WatchedDir {
                path: missing.clone(),
                dir: None,
                by_name: Some(WatchedName {
                    parent,
                    name_hash: name_hash(b"missing")
                }),
                slot: 1,
            }
        );
        let deeper = missing.join("deeper");
        let w = resolve(&deeper).expect("waited for");
        assert!(w.is_missing() && w.by_name.is_none(), "{w:?}");
        assert!(matches!(
            resolve(&file.join("x")),
            Err(WatchError::Unreadable(_, _))
        ));
        assert!(matches!(
            resolve(Path::new("rel")),
            Err(WatchError::Relative(_))
        ));
        assert_eq!(resolve(Path::new("/")).expect("root").by_name, None);
    }

    #[test]
    fn the_unwatched_cache_is_on_only_where_renames_are_seen_after_they_happen() {
        use UnwatchedCache::*;
        let cases = [
            (Some(Tier::Tracepoint), false, On),
            (Some(Tier::Fentry), false, On),
            (Some(Tier::Lsm), false, RenamesUnseen),
            (Some(Tier::Kprobe), false, RenamesUnseen),
            (None, false, RenamesUnseen),
            (Some(Tier::Tracepoint), true, WatchAll),
        ];
        for (tier, watch_all, want) in cases {
            assert_eq!(
                UnwatchedCache::of(tier, watch_all),
                want,
                "{tier:?} {watch_all}"
            );
        }
    }
}
