//! The parts of `stat(2)` the scan compares files by.
use std::{fs, io, os::unix::fs::MetadataExt as _};

use serde::{Deserialize, Serialize};
use sockwatch_common::FileId;

/// The parts of `stat(2)` the scan uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub dev: u64,
    pub ino: u64,
    pub mode: u32,
    pub nlink: u64,
}

impl Stat {
    pub fn from_metadata(m: &fs::Metadata) -> Self {
        Self {
            dev: m.dev(),
            ino: m.ino(),
            mode: m.mode(),
            nlink: m.nlink(),
        }
    }

    pub fn is_socket(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFSOCK
    }

    pub fn is_dir(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }

    pub fn id(&self) -> FileId {
        FileId {
            dev: self.dev,
            ino: self.ino,
        }
    }
}

/// What is at a path now, by `lstat` (a symbolic link is not followed): what `explain` says
/// holds, from the filesystem rather than from what the agent last saw.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OnDisk {
    /// Nothing (or a directory on the way is missing).
    Absent,
    Socket {
        file: FileId,
    },
    /// Another kind of file.
    Other {
        file_type: FileType,
    },
    /// `lstat` failed otherwise (permission, a name too long): its error.
    Unreadable {
        error: String,
    },
}

/// The kinds of file that are no socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileType {
    Regular,
    Directory,
    Symlink,
    Fifo,
    CharDevice,
    BlockDevice,
}

impl FileType {
    /// As a sentence names it.
    pub fn noun(self) -> &'static str {
        match self {
            FileType::Regular => "a regular file",
            FileType::Directory => "a directory",
            FileType::Symlink => "a symbolic link",
            FileType::Fifo => "a FIFO",
            FileType::CharDevice => "a character device",
            FileType::BlockDevice => "a block device",
        }
    }
}

impl OnDisk {
    /// `lstat(path)` now.
    pub fn read(path: &str) -> Self {
        match fs::symlink_metadata(path) {
            Ok(m) => Self::of(&Stat::from_metadata(&m)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => OnDisk::Absent,
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => OnDisk::Absent,
            Err(e) => OnDisk::Unreadable {
                error: e.to_string(),
            },
        }
    }

    fn of(st: &Stat) -> Self {
        let file_type = match st.mode & libc::S_IFMT {
            libc::S_IFSOCK => return OnDisk::Socket { file: st.id() },
            libc::S_IFDIR => FileType::Directory,
            libc::S_IFLNK => FileType::Symlink,
            libc::S_IFIFO => FileType::Fifo,
            libc::S_IFCHR => FileType::CharDevice,
            libc::S_IFBLK => FileType::BlockDevice,
            _ => FileType::Regular,
        };
        OnDisk::Other { file_type }
    }

    /// Whether the path leads to `file` (`None`: unknown, `lstat` failed).
    pub fn leads_to(&self, file: FileId) -> Option<bool> {
        match self {
            OnDisk::Unreadable { .. } => None,
            OnDisk::Socket { file: f } => Some(*f == file),
            OnDisk::Absent | OnDisk::Other { .. } => Some(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixListener;

    use super::*;

    #[test]
    fn lstat_tells_absent_socket_and_other_files_apart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let at = |name: &str| dir.path().join(name).to_str().expect("utf-8").to_owned();
        assert_eq!(OnDisk::read(&at("missing")), OnDisk::Absent);
        assert_eq!(OnDisk::read(&at("missing/below")), OnDisk::Absent);
        let _l = UnixListener::bind(at("s.sock")).expect("bind");
        let m = fs::symlink_metadata(at("s.sock")).expect("lstat");
        let file = FileId {
            dev: m.dev(),
            ino: m.ino(),
        };
        assert_eq!(OnDisk::read(&at("s.sock")), OnDisk::Socket { file });
        assert_eq!(OnDisk::read(&at("s.sock")).leads_to(file), Some(true));
        fs::write(at("f"), b"").expect("write");
        std::os::unix::fs::symlink(at("s.sock"), at("link")).expect("symlink");
        assert_eq!(
            OnDisk::read(&at("f")),
            OnDisk::Other {
                file_type: FileType::Regular
            }
        );
        assert_eq!(
            OnDisk::read(&at("link")),
            OnDisk::Other {
                file_type: FileType::Symlink
            }
        );
        assert_eq!(
            OnDisk::read(dir.path().to_str().expect("utf-8")),
            OnDisk::Other {
                file_type: FileType::Directory
            }
        );
        assert_eq!(OnDisk::read(&at("f/x")), OnDisk::Absent, "ENOTDIR");
    }
}
