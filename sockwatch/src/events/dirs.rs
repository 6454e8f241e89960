//! Directories by identity, to make the relative paths of unlinks and renames absolute (`rm
//! -r` unlinks relative to a directory descriptor, `cd dir; rm name` to the working
//! directory). Learned from absolute binds and from every scan (so an agent started after a
//! socket was bound knows its directory too); binds through a descriptor
//! (`/proc/self/fd/N/name`, conmon's) are made absolute here as well.
#![deny(clippy::string_slice, clippy::indexing_slicing)]
use std::{collections::HashMap, os::unix::fs::MetadataExt as _, path::Path};

use sockwatch_common::{EventKind, Fidelity, FileId};

use crate::{
    events::KernelEvent,
    host::procfs::{self, DEFAULT_PROC_ROOT},
};

/// Directories remembered for resolving relative paths.
const KNOWN_DIRS: usize = 4_096;

/// Directory identity -> absolute path.
#[derive(Debug, Default)]
pub struct KnownDirs {
    dirs: HashMap<FileId, String>,
}

impl KnownDirs {
    /// Learns the directory of a bind; returns the absolute form of a bind through a
    /// descriptor, or of a relative unlink or rename path whose starting directory is known
    /// (the flag `path_relative` stays: the caller gave it so).
    pub fn resolve(&mut self, ev: &KernelEvent) -> Option<String> {
        let dir = ev.dir?;
        if ev.kind == EventKind::Bind {
            let real = self.through_descriptor(ev, dir);
            let path = real.as_deref().unwrap_or(&ev.path);
            if path.starts_with('/') && procfs::fd_path(path.as_bytes()).is_none() {
                self.learn_file(dir, path);
            }
            return real;
        }
        if ev.path.starts_with('/') || !matches!(ev.kind, EventKind::Unlink | EventKind::Rename) {
            return None;
        }
        self.absolute(&ev.path, dir, ev.fidelity)
    }

    /// The absolute form of a rename's relative old name (`from_path`), where its directory
    /// is known.
    pub fn resolve_old_name(&self, ev: &KernelEvent) -> Option<String> {
        let path = ev.from_path.as_deref().filter(|p| !p.starts_with('/'))?;
        self.absolute(path, ev.from_dir?, ev.fidelity)
    }

    /// A relative `path` made absolute: an exact tier's `dir` holds the file itself; a
    /// path-only one's is where the relative path starts (the working directory or `dirfd`).
    fn absolute(&self, path: &str, dir: FileId, fidelity: Fidelity) -> Option<String> {
        let parent = self.dirs.get(&dir)?;
        let rest = match fidelity {
            Fidelity::Exact => path.rsplit('/').next().unwrap_or(path),
            _ => path,
        };
        Some(format!("{}/{rest}", parent.trim_end_matches('/')))
    }

    /// Learns that directory `dir` is at absolute path `path` (from a scan).
    pub fn learn_dir(&mut self, dir: FileId, path: &str) {
        if self.dirs.len() >= KNOWN_DIRS && !self.dirs.contains_key(&dir) {
            self.dirs.clear(); // crude but bounded; binds and scans refill it
        }
        self.dirs.insert(dir, path.into());
    }

    fn learn_file(&mut self, dir: FileId, path: &str) {
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.learn_dir(dir, if parent.is_empty() { "/" } else { parent });
        }
    }

    /// The absolute path a bind through a descriptor stood for: the binder's descriptor if
    /// it still leads to the bound file's directory, else that directory by identity.
    fn through_descriptor(&self, ev: &KernelEvent, dir: FileId) -> Option<String> {
        let f = procfs::fd_path(ev.path.as_bytes())?;
        let rest = String::from_utf8_lossy(f.rest);
        let proc_root = Path::new(DEFAULT_PROC_ROOT);
        let fd = procfs::pid_path(proc_root, ev.tgid, &format!("fd/{}", f.fd));
        let parent_rest = rest.rsplit_once('/').map_or("", |(p, _)| p);
        let same_dir = std::fs::metadata(fd.join(parent_rest)).is_ok_and(|m| {
            (FileId {
                dev: m.dev(),
                ino: m.ino(),
            }) == dir
        });
        let via_fd = same_dir
            .then(|| procfs::read_link_bytes(&fd).ok())
            .flatten()
            .and_then(|target| procfs::fd_path_target(&target, f.rest))
            .map(|p| String::from_utf8_lossy(&p).into_owned());
        via_fd.or_else(|| {
            let name = rest.rsplit('/').next()?;
            let parent = self.dirs.get(&dir)?;
            Some(format!("{}/{name}", parent.trim_end_matches('/')))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn ev(kind: EventKind, path: &str, dir: u64) -> KernelEvent {
        KernelEvent {
            // No such process: a descriptor path can be resolved only by identity.
            tgid: u32::MAX,
            pid: u32::MAX,
            dir: Some(FileId { dev: 5, ino: dir }),
            ..KernelEvent::sample(kind, path)
        }
    }

    #[test]
    fn relative_removals_resolve_through_dirs_from_binds_and_scans() {
        let mut d = KnownDirs::default();
        assert_eq!(d.resolve(&ev(EventKind::Unlink, "a.sock", 7)), None);
        assert_eq!(d.resolve(&ev(EventKind::Bind, "/run/x/a.sock", 7)), None);
        assert_eq!(
            d.resolve(&ev(EventKind::Unlink, "a.sock", 7)).as_deref(),
            Some("/run/x/a.sock")
        );
        d.learn_dir(FileId { dev: 5, ino: 8 }, "/run/multus");
        assert_eq!(
            d.resolve(&ev(EventKind::Rename, "multus.sock", 8))
                .as_deref(),
            Some("/run/multus/multus.sock")
        );
        assert_eq!(d.resolve(&ev(EventKind::Unlink, "/abs", 8)), None);
        // `cd /run && rm multus/multus.sock`: path-only, from the working directory...
        d.learn_dir(FileId { dev: 5, ino: 1 }, "/run");
        assert_eq!(
            d.resolve(&ev(EventKind::Unlink, "multus/multus.sock", 1))
                .as_deref(),
            Some("/run/multus/multus.sock")
        );
        // ...exact, from the file's own directory.
        let mut exact = ev(EventKind::Unlink, "multus/multus.sock", 8);
        exact.fidelity = Fidelity::Exact;
        assert_eq!(
            d.resolve(&exact).as_deref(),
            Some("/run/multus/multus.sock")
        );
    }

    #[test]
    fn a_bind_through_a_descriptor_takes_its_directory_path() {
        let mut d = KnownDirs::default();
        let conmon = ev(EventKind::Bind, "/proc/self/fd/13/attach", 9);
        assert_eq!(d.resolve(&conmon), None, "directory not known yet");
        assert_eq!(
            d.resolve(&ev(EventKind::Unlink, "attach", 9)),
            None,
            "a descriptor path teaches nothing"
        );
        d.learn_dir(FileId { dev: 5, ino: 9 }, "/var/run/ctr/userdata/");
        assert_eq!(
            d.resolve(&conmon).as_deref(),
            Some("/var/run/ctr/userdata/attach")
        );
    }
}

#[cfg(test)]
mod through_fd {
    use std::os::{fd::AsRawFd as _, unix::fs::MetadataExt as _};

    use sockwatch_common::{EventKind, FileId};

    use super::{KnownDirs, tests::ev};

    #[test]
    fn the_binders_descriptor_gives_the_path_when_it_leads_to_the_bound_directory() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = std::fs::File::open(tmp.path()).expect("open");
        let m = dir.metadata().expect("stat");
        let mut bind = ev(
            EventKind::Bind,
            &format!("/proc/self/fd/{}/a.sock", dir.as_raw_fd()),
            0,
        );
        bind.tgid = std::process::id();
        bind.dir = Some(FileId {
            dev: m.dev(),
            ino: m.ino(),
        });
        let mut d = KnownDirs::default();
        let want = tmp.path().join("a.sock");
        assert_eq!(d.resolve(&bind).as_deref(), want.to_str());
        // Another directory's identity: the descriptor proves nothing.
        bind.dir = Some(FileId {
            dev: m.dev(),
            ino: m.ino() + 1,
        });
        assert_eq!(KnownDirs::default().resolve(&bind), None);
    }
}
