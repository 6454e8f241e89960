//! Debian's stock cloud kernels for the QEMU tests: the newest of each series in the apt lists,
//! downloaded once with `apt-get download` and kept (vmlinuz only) under [`CACHE`].
use std::{
    cmp::Ordering,
    fmt, fs,
    path::{Path, PathBuf},
    time::Instant,
};

use anyhow::{Context as _, bail};
use clap::ValueEnum;

use crate::{cmd, setup::Apt};

pub const CACHE: &str = "/var/cache/sockwatch-vm";

/// Modules the guest loads at boot: Debian builds them as modules (`=m`) where a host usually
/// has them loaded. `unix_diag`: `sockwatch scan` lists UNIX sockets through sock_diag.
pub const GUEST_MODULES: &[&str] = &["unix_diag"];

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Series {
    #[value(name = "6.1")]
    V6_1,
    #[value(name = "6.12")]
    V6_12,
}

impl Series {
    pub const ALL: [Series; 2] = [Series::V6_1, Series::V6_12];

    /// `apt-cache search --names-only` pattern for this series' unsigned cloud image.
    fn pattern(self) -> &'static str {
        match self {
            Series::V6_1 => r"^linux-image-6\.1\.0-[0-9]+-cloud-amd64-unsigned$",
            Series::V6_12 => r"^linux-image-6\.12\.[0-9]+\+deb12-cloud-amd64-unsigned$",
        }
    }
}

impl fmt::Display for Series {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Series::V6_1 => "6.1",
            Series::V6_12 => "6.12",
        })
    }
}

#[derive(Clone, Debug)]
pub struct Kernel {
    /// Debian package name, e.g. `linux-image-6.1.0-57-cloud-amd64-unsigned`.
    pub package: String,
    /// Debian package version, e.g. `6.1.162-1`.
    pub version: String,
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

/// Resolves, downloads (when not cached) and returns one kernel per series.
pub fn ensure(series: &[Series], apt: &mut Apt) -> anyhow::Result<Vec<Kernel>> {
    series.iter().map(|s| ensure_one(*s, apt)).collect()
}

fn ensure_one(series: Series, apt: &mut Apt) -> anyhow::Result<Kernel> {
    let package = match newest(series)? {
        Some(p) => p,
        // Lists never fetched on this machine, or too old: refresh once and look again.
        None if apt.update_once()? => newest(series)?.with_context(|| no_package(series))?,
        None => bail!(no_package(series)),
    };
    let dir = Path::new(CACHE).join(&package);
    if let Some(kernel) = cached(&package, &dir)? {
        return Ok(kernel);
    }
    let started = Instant::now();
    match download(&package, &dir) {
        Ok(()) => {}
        // A mirror that dropped the version in stale lists: refresh once and try again.
        Err(e) if apt.update_once()? => {
            eprintln!("xtask: {e:#}; retrying after apt-get update");
            return ensure_one(series, apt);
        }
        Err(e) => return Err(e),
    }
    let kernel = cached(&package, &dir)?
        .with_context(|| format!("{} holds no vmlinuz after unpacking", dir.display()))?;
    apt.note_installed(&format!(
        "kernel {package} {} in {} ({:.0?})",
        kernel.version,
        dir.display(),
        started.elapsed()
    ));
    Ok(kernel)
}

fn no_package(series: Series) -> String {
    format!(
        "no Debian package matches {} (apt-cache search): kernel {series} for the VM tests is \
         missing from the apt sources",
        series.pattern()
    )
}

fn newest(series: Series) -> anyhow::Result<Option<String>> {
    let out =
        cmd::output(cmd::command("apt-cache").args(["search", "--names-only", series.pattern()]))?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .max_by(|a, b| version_cmp(a, b))
        .map(str::to_owned))
}

/// Compares runs of digits as numbers and everything else as text: `6.1.0-9` < `6.1.0-57`.
pub fn version_cmp(a: &str, b: &str) -> Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut rest = s;
        while let Some(first) = rest.chars().next() {
            let digit = first.is_ascii_digit();
            let end = rest
                .find(|c: char| c.is_ascii_digit() != digit)
                .unwrap_or(rest.len());
            out.push((digit, &rest[..end]));
            rest = &rest[end..];
        }
        out
    }
    let (ca, cb) = (chunks(a), chunks(b));
    for (x, y) in ca.iter().zip(&cb) {
        let ord = match (x, y) {
            ((true, x), (true, y)) => {
                let (x, y) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
                x.len().cmp(&y.len()).then_with(|| x.cmp(y))
            }
            ((_, x), (_, y)) => x.cmp(y),
        };
        if ord != Ordering::Equal {
            return ord;
        }
    }
    ca.len().cmp(&cb.len())
}

/// The kernel kept in `dir`, if a previous run left it complete (a cache from before a module
/// was added to [`GUEST_MODULES`] is not, and is fetched again).
fn cached(package: &str, dir: &Path) -> anyhow::Result<Option<Kernel>> {
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
        vmlinuz,
        modules,
    }))
}

fn find_vmlinuz(dir: &Path) -> anyhow::Result<Option<PathBuf>> {
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

/// `apt-get download` + `dpkg-deb -x`, keeping only `boot/vmlinuz-*`, [`GUEST_MODULES`]
/// (decompressed) and the version in `dir`.
fn download(package: &str, dir: &Path) -> anyhow::Result<()> {
    let work = Path::new(CACHE).join(format!(".download-{package}"));
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    cmd::output(
        cmd::command("apt-get")
            .args(["download", "-qq", package])
            .current_dir(&work),
    )
    .with_context(|| format!("downloading kernel package {package}"))?;
    let deb = fs::read_dir(&work)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .with_context(|| format!("apt-get download left no .deb for {package}"))?;
    let version = cmd::output(cmd::command("dpkg-deb").arg("-f").arg(&deb).arg("Version"))?;
    let tree = work.join("tree");
    cmd::output(cmd::command("dpkg-deb").arg("-x").arg(&deb).arg(&tree))
        .with_context(|| format!("unpacking {}", deb.display()))?;
    let vmlinuz = find_vmlinuz(&tree.join("boot"))?
        .with_context(|| format!("{package} has no boot/vmlinuz-*"))?;

    let staged = work.join("kept");
    fs::create_dir_all(&staged)?;
    fs::rename(
        &vmlinuz,
        staged.join(vmlinuz.file_name().expect("has a name")),
    )?;
    fs::write(staged.join("version"), version.trim())?;
    let modules = staged.join("modules");
    fs::create_dir_all(&modules)?;
    for m in GUEST_MODULES {
        let found = find_module(&tree.join("lib/modules"), m)?
            .with_context(|| format!("{package} has no module {m}"))?;
        let ko = decompress_module(&found)?;
        fs::write(modules.join(format!("{m}.ko")), ko)?;
    }
    let _ = fs::remove_dir_all(dir);
    fs::rename(&staged, dir).with_context(|| format!("moving the kernel to {}", dir.display()))?;
    fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_kernel_sorts_numerically() {
        let mut names = [
            "linux-image-6.1.0-9-cloud-amd64-unsigned",
            "linux-image-6.1.0-57-cloud-amd64-unsigned",
            "linux-image-6.1.0-55-cloud-amd64-unsigned",
        ];
        names.sort_by(|a, b| version_cmp(a, b));
        assert_eq!(names[2], "linux-image-6.1.0-57-cloud-amd64-unsigned");
        assert_eq!(names[0], "linux-image-6.1.0-9-cloud-amd64-unsigned");

        let a = "linux-image-6.12.9+deb12-cloud-amd64-unsigned";
        let b = "linux-image-6.12.117+deb12-cloud-amd64-unsigned";
        assert_eq!(version_cmp(a, b), Ordering::Less);
        assert_eq!(version_cmp(b, b), Ordering::Equal);
        assert_eq!(version_cmp("6.1", "6.1.0"), Ordering::Less);
        assert_eq!(version_cmp("6.01", "6.1"), Ordering::Equal);
    }

    #[test]
    fn upstream_version() {
        let k = Kernel {
            package: String::new(),
            version: "6.12.117-1~deb12u1".into(),
            vmlinuz: "/c/vmlinuz-6.12.117+deb12-cloud-amd64".into(),
            modules: Vec::new(),
        };
        assert_eq!(k.upstream(), "6.12.117");
        assert_eq!(k.release(), "6.12.117+deb12-cloud-amd64");
    }
}
