//! Watched directories: resolved to identities for the kernel's filter, and re-resolved
//! when a watched directory is deleted and re-created.
use std::{
    os::unix::{ffi::OsStrExt, fs::MetadataExt},
    path::{Path, PathBuf},
};

use agent_common::{FileId, WatchedName, name_hash};

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
    pub dir: FileId,
    /// The directory by parent and name, so its replacement is recognised in the kernel.
    pub by_name: Option<WatchedName>,
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

/// Resolves `path`, which must be an existing absolute directory.
pub fn resolve(path: &Path) -> Result<WatchedDir, WatchError> {
    if !path.is_absolute() {
        return Err(WatchError::Relative(path.to_path_buf()));
    }
    let (dir, is_dir) = id(path).map_err(|e| WatchError::Unreadable(path.to_path_buf(), e))?;
    if !is_dir {
        return Err(WatchError::NotADirectory(path.to_path_buf()));
    }
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_directories_and_rejects_the_rest() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let w = resolve(tmp.path()).expect("resolves");
        let (dir, _) = id(tmp.path()).expect("stat");
        assert_eq!(w.dir, dir);
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
        assert!(
            resolve(&missing)
                .unwrap_err()
                .to_string()
                .starts_with(&format!("--watch {}: No such file", missing.display()))
        );
        assert!(matches!(
            resolve(Path::new("rel")),
            Err(WatchError::Relative(_))
        ));
        assert_eq!(resolve(Path::new("/")).expect("root").by_name, None);
    }
}
