//! Packages the mirror did not serve although its lists name them: a marker per package under
//! `CACHE/unavailable/`, so the next newest is taken for a while.
use std::{
    fs,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context as _;

use super::cache::CACHE;

/// How long a package in the lists that the mirror did not serve (a registry that holds new
/// uploads back for a while, a mirror still syncing) is passed over for the next newest before
/// it is tried again.
pub(super) const UNAVAILABLE_RETRY: Duration = Duration::from_secs(24 * 3600);

/// `CACHE/unavailable/<package>`: why the mirror did not serve `package`, written when it did
/// not.
pub(super) fn unavailable_marker(package: &str) -> PathBuf {
    Path::new(CACHE).join("unavailable").join(package)
}

/// Why the mirror did not serve `package`, if that was less than [`UNAVAILABLE_RETRY`] ago.
pub(super) fn recently_unavailable(package: &str) -> Option<String> {
    let path = unavailable_marker(package);
    let modified = fs::metadata(&path).ok()?.modified().ok()?;
    // A marker from the future (clock changes) counts as fresh.
    let age = modified.elapsed().unwrap_or_default();
    if age >= UNAVAILABLE_RETRY {
        return None;
    }
    Some(
        fs::read_to_string(&path)
            .unwrap_or_default()
            .trim()
            .to_owned(),
    )
}

pub(super) fn mark_unavailable(package: &str, why: &str) -> anyhow::Result<()> {
    let path = unavailable_marker(package);
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    fs::write(&path, format!("{why}\n")).with_context(|| format!("writing {}", path.display()))
}
