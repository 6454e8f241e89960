//! Directories learned from binds, to make the relative paths of unlinks and renames absolute
//! (`rm -r` unlinks relative to a directory descriptor).
use std::collections::HashMap;

use agent_common::{EventKind, FileId};

use crate::events::KernelEvent;

/// Directories remembered for resolving relative paths.
const KNOWN_DIRS: usize = 4_096;

/// Directory identity -> absolute path.
#[derive(Debug, Default)]
pub struct KnownDirs {
    dirs: HashMap<FileId, String>,
}

impl KnownDirs {
    /// Learns the directory of an absolute bind; returns the absolute form of a relative
    /// unlink or rename path whose starting directory is known (the flag `path_relative`
    /// stays: the caller gave it so).
    pub fn resolve(&mut self, ev: &KernelEvent) -> Option<String> {
        let dir = ev.dir?;
        if ev.kind == EventKind::Bind && ev.path.starts_with('/') {
            self.learn(dir, &ev.path);
            return None;
        }
        if ev.path.starts_with('/') || !matches!(ev.kind, EventKind::Unlink | EventKind::Rename) {
            return None;
        }
        let parent = self.dirs.get(&dir)?;
        Some(format!("{}/{}", parent.trim_end_matches('/'), ev.path))
    }

    fn learn(&mut self, dir: FileId, path: &str) {
        let Some((parent, _)) = path.rsplit_once('/') else {
            return;
        };
        if self.dirs.len() >= KNOWN_DIRS && !self.dirs.contains_key(&dir) {
            self.dirs.clear(); // crude but bounded; binds refill it
        }
        let parent = if parent.is_empty() { "/" } else { parent };
        self.dirs.insert(dir, parent.into());
    }
}
