//! Downloading a package into the cache: `apt-get download`, `dpkg-deb -x` in a scratch
//! directory, and only what the guest boots with kept.
use std::{
    ffi::OsString,
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};

use super::cache::{CACHE, GUEST_MODULES, find_vmlinuz};
use crate::cmd;

/// `apt-get download` + `dpkg-deb -x`, keeping only `boot/vmlinuz-*`, [`GUEST_MODULES`]
/// (decompressed) and the version in `dir`. `apt_args` select the apt configuration.
pub(super) fn download(package: &str, dir: &Path, apt_args: &[OsString]) -> anyhow::Result<()> {
    in_scratch(package, |work| {
        let unpacked = unpack(package, apt_args, work)?;
        keep_kernel(package, &unpacked, dir, work)
    })
}

/// Runs `f` in `CACHE/.download-<name>`, created empty for it (a run that was interrupted
/// leaves one behind) and removed after it.
pub(super) fn in_scratch<T>(
    name: &str,
    f: impl FnOnce(&Path) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let work = Path::new(CACHE).join(format!(".download-{name}"));
    let _ = fs::remove_dir_all(&work);
    let result = fs::create_dir_all(&work)
        .with_context(|| format!("creating {}", work.display()))
        .and_then(|()| f(&work));
    match result {
        Ok(kept) => {
            fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
            Ok(kept)
        }
        Err(e) => {
            let _ = fs::remove_dir_all(&work);
            Err(e)
        }
    }
}

/// A Debian package unpacked by [`unpack`].
pub(super) struct Unpacked {
    /// The package's version, e.g. `6.1.162-1`.
    pub(super) version: String,
    /// Its files, as `dpkg-deb -x` unpacked them.
    pub(super) tree: PathBuf,
}

/// `apt-get download`s `package` into `work` and unpacks it in `work/tree`. `apt_args` select
/// the apt configuration.
pub(super) fn unpack(
    package: &str,
    apt_args: &[OsString],
    work: &Path,
) -> anyhow::Result<Unpacked> {
    cmd::output(
        cmd::command("apt-get")
            .args(apt_args)
            .args(["download", "-qq", package])
            .current_dir(work),
    )
    .with_context(|| format!("downloading Debian package {package}"))?;
    let deb = fs::read_dir(work)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .with_context(|| format!("apt-get download left no .deb for {package}"))?;
    let version = cmd::output(cmd::command("dpkg-deb").arg("-f").arg(&deb).arg("Version"))?;
    let tree = work.join("tree");
    cmd::output(cmd::command("dpkg-deb").arg("-x").arg(&deb).arg(&tree))
        .with_context(|| format!("unpacking {}", deb.display()))?;
    Ok(Unpacked {
        version: version.trim().to_owned(),
        tree,
    })
}

/// Moves the kernel's vmlinuz, [`GUEST_MODULES`] (decompressed) and version from `unpacked`
/// to `dir`, through `work/kept` so that `dir` never holds half of them.
fn keep_kernel(package: &str, unpacked: &Unpacked, dir: &Path, work: &Path) -> anyhow::Result<()> {
    let tree = &unpacked.tree;
    let vmlinuz = find_vmlinuz(&tree.join("boot"))?
        .with_context(|| format!("{package} has no boot/vmlinuz-*"))?;
    let staged = work.join("kept");
    fs::create_dir_all(&staged)?;
    fs::rename(
        &vmlinuz,
        staged.join(vmlinuz.file_name().expect("has a name")),
    )?;
    fs::write(staged.join("version"), &unpacked.version)?;
    let modules = staged.join("modules");
    fs::create_dir_all(&modules)?;
    for m in GUEST_MODULES {
        let found = find_module(&tree.join("lib/modules"), m)?
            .with_context(|| format!("{package} has no module {m}"))?;
        let ko = decompress_module(&found)?;
        fs::write(modules.join(format!("{m}.ko")), ko)?;
    }
    let _ = fs::remove_dir_all(dir);
    fs::rename(&staged, dir).with_context(|| format!("moving the kernel to {}", dir.display()))
}

/// `<name>.ko`, `.ko.xz` or `.ko.zst` anywhere under `dir`.
fn find_module(dir: &Path, name: &str) -> anyhow::Result<Option<PathBuf>> {
    let wanted = [".ko", ".ko.xz", ".ko.zst"].map(|ext| format!("{name}{ext}"));
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            if let Some(found) = find_module(&path, name)? {
                return Ok(Some(found));
            }
        } else if wanted
            .iter()
            .any(|w| path.file_name().is_some_and(|n| n == w.as_str()))
        {
            return Ok(Some(path));
        }
    }
    Ok(None)
}

/// The module's ELF bytes (busybox's insmod takes no compressed modules).
fn decompress_module(path: &Path) -> anyhow::Result<Vec<u8>> {
    let tool = match path.extension().and_then(|e| e.to_str()) {
        Some("xz") => "xz",
        Some("zst") => "zstd",
        _ => return fs::read(path).with_context(|| format!("reading {}", path.display())),
    };
    let out = cmd::command(tool)
        .arg("-dc")
        .arg(path)
        .output()
        .with_context(|| format!("cannot run {tool} to decompress {}", path.display()))?;
    if !out.status.success() {
        bail!("{tool} -dc {} failed ({})", path.display(), out.status);
    }
    Ok(out.stdout)
}
