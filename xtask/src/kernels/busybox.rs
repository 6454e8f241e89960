//! busybox, the guest's shell and tools: this machine's own for the x86_64 guest; for any other
//! architecture Debian 12's `busybox-static` for it, downloaded once and kept (the binary and
//! its version) under `CACHE/busybox-<arch>/`.
use std::{
    ffi::OsString,
    fs,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context as _, bail};

use super::{
    apt_message::apt_error,
    cache::CACHE,
    fetch::{in_scratch, unpack},
    series::Origin,
    sources::Sources,
};
use crate::{apt::Apt, arch::Arch};

/// Debian's statically linked busybox: the guest's initramfs has no C library.
const PACKAGE: &str = "busybox-static";

/// Where busybox-static installs it, on this machine and in the package.
const HOST_BUSYBOX: &str = "/bin/busybox";

/// The busybox binary for an `arch` guest.
pub fn busybox(arch: Arch, apt: &mut Apt) -> anyhow::Result<PathBuf> {
    match arch {
        Arch::X86_64 => host_busybox(),
        Arch::Aarch64 => foreign_busybox(arch, apt),
    }
}

fn host_busybox() -> anyhow::Result<PathBuf> {
    let path = PathBuf::from(HOST_BUSYBOX);
    if !path.is_file() {
        bail!("{HOST_BUSYBOX} is missing (apt-get install {PACKAGE}): the x86_64 guest runs it");
    }
    Ok(path)
}

fn dir(arch: Arch) -> PathBuf {
    Path::new(CACHE).join(format!("busybox-{}", arch.debian()))
}

/// The kept busybox for `arch`, downloaded first unless a previous run kept it.
fn foreign_busybox(arch: Arch, apt: &mut Apt) -> anyhow::Result<PathBuf> {
    let dir = dir(arch);
    let bin = dir.join("busybox");
    if bin.is_file() && dir.join("version").is_file() {
        return Ok(bin);
    }
    let origin = Origin::debian12(arch);
    let mut sources = Sources::new(apt);
    let args = sources.apt_args(origin)?;
    let started = Instant::now();
    let version = match download(arch, &dir, &args) {
        Ok(version) => version,
        // Lists never fetched, or naming a version the mirror dropped: refresh once, try again.
        Err(_) if sources.update_once(origin)? => download(arch, &dir, &args)?,
        Err(e) => return Err(e),
    };
    sources.apt.note_installed(&format!(
        "{PACKAGE} {version} ({}) in {} ({:.0?})",
        arch.debian(),
        dir.display(),
        started.elapsed()
    ));
    Ok(bin)
}

/// `apt-get download`s `arch`'s busybox-static and keeps its busybox and version in `dir`.
/// Returns the version.
fn download(arch: Arch, dir: &Path, apt_args: &[OsString]) -> anyhow::Result<String> {
    in_scratch(&format!("{PACKAGE}-{}", arch.debian()), |work| {
        let unpacked = unpack(PACKAGE, apt_args, work).map_err(|e| {
            anyhow::anyhow!(
                "downloading {PACKAGE} for {arch}: {}",
                apt_error(&format!("{e:#}"))
            )
        })?;
        let found = unpacked.tree.join(HOST_BUSYBOX.trim_start_matches('/'));
        if !found.is_file() {
            bail!("{PACKAGE} ({}) has no {HOST_BUSYBOX}", arch.debian());
        }
        let staged = work.join("kept");
        fs::create_dir_all(&staged)?;
        fs::rename(&found, staged.join("busybox"))?;
        fs::write(staged.join("version"), &unpacked.version)?;
        let _ = fs::remove_dir_all(dir);
        fs::rename(&staged, dir).with_context(|| format!("moving busybox to {}", dir.display()))?;
        Ok(unpacked.version)
    })
}
