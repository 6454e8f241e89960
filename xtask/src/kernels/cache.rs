//! The kernels kept under [`CACHE`]: vmlinuz, [`GUEST_MODULES`] and the package version, one
//! directory per package.
use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::Context as _;

use crate::arch::Arch;

pub(super) const CACHE: &str = "/var/cache/sockwatch-vm";

/// Modules the guest loads at boot: Debian builds them as modules (`=m`) where a host usually
/// has them loaded. `unix_diag`: `sockwatch scan` lists UNIX sockets through sock_diag;
/// `overlay`: the overlayfs test (S19) mounts a container-style rootfs.
pub const GUEST_MODULES: &[&str] = &["unix_diag", "overlay"];

#[derive(Clone, Debug)]
pub struct Kernel {
    /// Debian package name, e.g. `linux-image-6.1.0-57-cloud-amd64-unsigned`.
    pub package: String,
    /// Debian package version, e.g. `6.1.162-1`.
    pub version: String,
    /// The architecture the package is built for, the guest's.
    pub arch: Arch,
    pub vmlinuz: PathBuf,
    /// [`GUEST_MODULES`], uncompressed.
    pub modules: Vec<PathBuf>,
}

impl Kernel {
    /// `uname -r` of this kernel, from `vmlinuz-<release>`.
    pub fn release(&self) -> &str {
        self.vmlinuz
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("vmlinuz-"))
            .unwrap_or_default()
    }

    /// The upstream version, e.g. `6.1.162` (Debian's version up to the first `-`).
    pub fn upstream(&self) -> &str {
        self.version.split('-').next().unwrap_or(&self.version)
    }
}

/// The kernel kept in `dir` (`package`, built for `arch`), if a previous run left it complete (a
/// cache from before a module was added to [`GUEST_MODULES`] is not, and is fetched again).
pub(super) fn cached(package: &str, arch: Arch, dir: &Path) -> anyhow::Result<Option<Kernel>> {
    let Ok(version) = fs::read_to_string(dir.join("version")) else {
        return Ok(None);
    };
    let Some(vmlinuz) = find_vmlinuz(dir)? else {
        return Ok(None);
    };
    let modules: Vec<_> = GUEST_MODULES
        .iter()
        .map(|m| dir.join("modules").join(format!("{m}.ko")))
        .collect();
    if !modules.iter().all(|m| m.is_file()) {
        return Ok(None);
    }
    Ok(Some(Kernel {
        package: package.to_owned(),
        version: version.trim().to_owned(),
        arch,
        vmlinuz,
        modules,
    }))
}

pub(super) fn find_vmlinuz(dir: &Path) -> anyhow::Result<Option<PathBuf>> {
    if !dir.is_dir() {
        return Ok(None);
    }
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("vmlinuz-"))
        {
            return Ok(Some(path));
        }
    }
    Ok(None)
}
