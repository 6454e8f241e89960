//! Debian's stock cloud kernels for the QEMU tests: 5.10 (Debian 11), 6.1 and 6.12 (Debian 12),
//! the newest of each series in the apt lists, downloaded once with `apt-get download` and kept
//! (vmlinuz and [`GUEST_MODULES`] only) under [`CACHE`]. A package the mirror does not serve
//! although its lists name it (HTTP 403/404/410) is noted in `CACHE/unavailable/` and passed
//! over for the next newest for a day.
//!
//! Debian 12's kernels come from this machine's apt sources. Debian 11's come from the same
//! mirror through a separate apt configuration under `CACHE/apt-bullseye/` (its own sources
//! list, lists and cache), so the machine's sources, lists and architectures stay as they are.
use std::{
    cmp::Ordering,
    ffi::OsString,
    fmt, fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::ValueEnum;

use crate::{
    apt::{self, Apt},
    cmd,
};

pub const CACHE: &str = "/var/cache/sockwatch-vm";

/// Debian's archive keyring (package debian-archive-keyring): Debian 12's still holds Debian
/// 11's archive and security keys, and this machine's own sources are verified with it.
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// Modules the guest loads at boot: Debian builds them as modules (`=m`) where a host usually
/// has them loaded. `unix_diag`: `sockwatch scan` lists UNIX sockets through sock_diag.
pub const GUEST_MODULES: &[&str] = &["unix_diag"];

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Series {
    #[value(name = "5.10")]
    V5_10,
    #[value(name = "6.1")]
    V6_1,
    #[value(name = "6.12")]
    V6_12,
}

impl Series {
    pub const ALL: [Series; 3] = [Series::V5_10, Series::V6_1, Series::V6_12];

    /// `apt-cache search --names-only` pattern for this series' unsigned cloud image.
    fn pattern(self) -> &'static str {
        match self {
            Series::V5_10 => r"^linux-image-5\.10\.0-[0-9]+-cloud-amd64-unsigned$",
            Series::V6_1 => r"^linux-image-6\.1\.0-[0-9]+-cloud-amd64-unsigned$",
            Series::V6_12 => r"^linux-image-6\.12\.[0-9]+\+deb12-cloud-amd64-unsigned$",
        }
    }

    /// The Debian release whose apt sources carry this series.
    fn origin(self) -> Origin {
        match self {
            Series::V5_10 => Origin::Release("bullseye"),
            Series::V6_1 | Series::V6_12 => Origin::Host,
        }
    }
}

impl fmt::Display for Series {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Series::V5_10 => "5.10",
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

/// Where a series' package comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// This machine's apt sources.
    Host,
    /// Another Debian release, by codename, through its [`OtherRelease`] configuration.
    Release(&'static str),
}

/// Resolves, downloads (when not cached) and returns one kernel per series.
pub fn ensure(series: &[Series], apt: &mut Apt) -> anyhow::Result<Vec<Kernel>> {
    let mut sources = Sources {
        apt,
        others: Vec::new(),
    };
    series
        .iter()
        .map(|s| ensure_one(*s, &mut sources))
        .collect()
}

fn ensure_one(series: Series, sources: &mut Sources) -> anyhow::Result<Kernel> {
    let origin = series.origin();
    let args = sources.apt_args(origin)?;
    let mut candidates = matching(series, &args)?;
    if candidates.is_empty() {
        // Lists never fetched on this machine, or too old: refresh once and look again.
        if !sources.update_once(origin)? {
            bail!(no_package(series));
        }
        candidates = matching(series, &args)?;
        if candidates.is_empty() {
            bail!(no_package(series));
        }
    }
    // The newest package, unless the mirror recently did not serve it: then the next newest.
    let mut unavailable = Vec::new();
    for package in &candidates {
        let dir = Path::new(CACHE).join(package);
        if let Some(kernel) = cached(package, &dir)? {
            return Ok(kernel);
        }
        if let Some(why) = recently_unavailable(package) {
            unavailable.push(format!("{package} ({why})"));
            continue;
        }
        let started = Instant::now();
        let why = match download(package, &dir, &args) {
            Ok(()) => {
                let kernel = cached(package, &dir)?.with_context(|| {
                    format!("{} holds no vmlinuz after unpacking", dir.display())
                })?;
                let _ = fs::remove_file(unavailable_marker(package));
                sources.apt.note_installed(&format!(
                    "kernel {package} {} in {} ({:.0?})",
                    kernel.version,
                    dir.display(),
                    started.elapsed()
                ));
                return Ok(kernel);
            }
            Err(e) => apt_error(&format!("{e:#}")),
        };
        // A package marked before was announced then; its later retries are quiet.
        let known = unavailable_marker(package).exists();
        // Stale lists naming a version the mirror dropped: refresh once and start over.
        if sources.update_once(origin)? {
            if !known {
                eprintln!("xtask: {package}: {why}; retrying after apt-get update");
            }
            return ensure_one(series, sources);
        }
        // Anything but the mirror's "not here" (network, signature, disk): no fallback.
        if !not_served(&why) {
            bail!("downloading kernel package {package}: {why}");
        }
        mark_unavailable(package, &why)?;
        if !known {
            eprintln!(
                "xtask: {package} is in the apt lists but the mirror does not serve it ({why}); \
                 taking the next newest, and trying it again after {} h",
                UNAVAILABLE_RETRY.as_secs() / 3600
            );
        }
        unavailable.push(format!("{package} ({why})"));
    }
    bail!(
        "kernel {series} for the VM tests: no package matching {} could be downloaded ({}): \
         {}; remove {} to try them again now",
        series.pattern(),
        sources_name(series),
        unavailable.join(", "),
        unavailable_marker("").display()
    )
}

/// How long a package in the lists that the mirror did not serve (a registry that holds new
/// uploads back for a while, a mirror still syncing) is passed over for the next newest before
/// it is tried again.
const UNAVAILABLE_RETRY: Duration = Duration::from_secs(24 * 3600);

/// `CACHE/unavailable/<package>`: why the mirror did not serve `package`, written when it did
/// not.
fn unavailable_marker(package: &str) -> PathBuf {
    Path::new(CACHE).join("unavailable").join(package)
}

/// Why the mirror did not serve `package`, if that was less than [`UNAVAILABLE_RETRY`] ago.
fn recently_unavailable(package: &str) -> Option<String> {
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

fn mark_unavailable(package: &str, why: &str) -> anyhow::Result<()> {
    let path = unavailable_marker(package);
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    fs::write(&path, format!("{why}\n")).with_context(|| format!("writing {}", path.display()))
}

/// Whether apt's error says the mirror answered the download with HTTP 403, 404 or 410 (apt
/// prints `Failed to fetch <url>  404  Not Found [IP: ...]`).
fn not_served(why: &str) -> bool {
    why.contains("Failed to fetch")
        && why
            .split_whitespace()
            .any(|w| matches!(w, "403" | "404" | "410"))
}

/// The `E:` lines of a failed apt command's message, on one line (the whole message if it has
/// none).
fn apt_error(message: &str) -> String {
    let errors: Vec<_> = message
        .lines()
        .filter_map(|l| {
            l.find("E: ")
                .map(|i| l[i + 3..].trim().trim_end_matches('.'))
        })
        .filter(|l| !l.is_empty())
        .collect();
    if errors.is_empty() {
        one_line(message)
    } else {
        errors.join("; ")
    }
}

fn sources_name(series: Series) -> String {
    match series.origin() {
        Origin::Host => "this machine's apt sources".to_owned(),
        Origin::Release(codename) => format!(
            "Debian {codename}'s apt sources, {}",
            OtherRelease::dir(codename).join("sources.list").display()
        ),
    }
}

fn no_package(series: Series) -> String {
    format!(
        "no Debian package matches {} (apt-cache search): kernel {series} for the VM tests is \
         missing from {}",
        series.pattern(),
        sources_name(series)
    )
}

/// The packages matching `series`' pattern in the lists that `apt_args` select, newest first.
fn matching(series: Series, apt_args: &[OsString]) -> anyhow::Result<Vec<String>> {
    let out = cmd::output(cmd::command("apt-cache").args(apt_args).args([
        "search",
        "--names-only",
        series.pattern(),
    ]))?;
    let mut names: Vec<_> = out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    names.sort_by(|a, b| version_cmp(b, a));
    names.dedup();
    Ok(names)
}

/// apt for each [`Origin`], each one's `apt-get update` run at most once per xtask invocation.
struct Sources<'a> {
    apt: &'a mut Apt,
    /// The other releases configured so far in this invocation.
    others: Vec<OtherRelease>,
}

impl Sources<'_> {
    /// What points apt-get and apt-cache at `origin`'s sources and lists (nothing for the host).
    fn apt_args(&mut self, origin: Origin) -> anyhow::Result<Vec<OsString>> {
        Ok(match origin {
            Origin::Host => Vec::new(),
            Origin::Release(codename) => self.other(codename)?.apt_args(),
        })
    }

    /// Runs `apt-get update` for `origin` unless it already ran; whether it ran now.
    fn update_once(&mut self, origin: Origin) -> anyhow::Result<bool> {
        match origin {
            Origin::Host => self.apt.update_once(),
            Origin::Release(codename) => self.other(codename)?.update_once(),
        }
    }

    fn other(&mut self, codename: &'static str) -> anyhow::Result<&mut OtherRelease> {
        let i = match self.others.iter().position(|o| o.codename == codename) {
            Some(i) => i,
            None => {
                self.others.push(OtherRelease::configure(codename)?);
                self.others.len() - 1
            }
        };
        Ok(&mut self.others[i])
    }
}

/// A Debian release other than this machine's, read through its own apt configuration in
/// `CACHE/apt-<codename>/`: `apt.conf` (for `apt-get -c`), `sources.list` (this machine's
/// mirror, [`KEYRING`]), `lists/` and `cache/`. Of the machine's apt sources only the mirror is
/// read; its lists, pins and architectures are neither used nor changed; its other apt settings
/// (proxies, ...) apply.
struct OtherRelease {
    codename: &'static str,
    updated: bool,
}

impl OtherRelease {
    fn dir(codename: &str) -> PathBuf {
        Path::new(CACHE).join(format!("apt-{codename}"))
    }

    /// Writes the configuration files that do not already say what they should (no network).
    fn configure(codename: &'static str) -> anyhow::Result<OtherRelease> {
        if !Path::new(KEYRING).is_file() {
            bail!(
                "{KEYRING} is missing (apt-get install debian-archive-keyring): it verifies \
                 Debian {codename}'s archive"
            );
        }
        let host = host_codename()?;
        let targets = cmd::output(cmd::command("apt-get").args([
            "indextargets",
            "--no-release-info",
            "--format",
            "$(TARGET_OF) $(IDENTIFIER) $(RELEASE) $(REPO_URI)",
        ]))
        .context("listing this machine's apt sources (apt-get indextargets)")?;
        let mirrors = Mirrors::from_indextargets(&targets, &host).with_context(|| {
            format!(
                "this machine's apt sources have no `deb` entry for {host} (apt-get \
                 indextargets): no Debian mirror to fetch {codename} from"
            )
        })?;
        let dir = Self::dir(codename);
        for d in ["lists/partial", "cache/archives/partial"] {
            let d = dir.join(d);
            fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        }
        write_if_changed(&dir.join("sources.list"), &sources_list(codename, &mirrors))?;
        write_if_changed(&dir.join("apt.conf"), &apt_conf(&dir))?;
        Ok(OtherRelease {
            codename,
            updated: false,
        })
    }

    fn apt_args(&self) -> Vec<OsString> {
        vec![
            "-c".into(),
            Self::dir(self.codename).join("apt.conf").into(),
        ]
    }

    fn update_once(&mut self) -> anyhow::Result<bool> {
        if self.updated {
            return Ok(false);
        }
        let codename = self.codename;
        apt::require_root(&format!("apt-get update for Debian {codename}"))?;
        cmd::output(
            cmd::command("apt-get")
                .args(self.apt_args())
                .args(["update", "-qq"]),
        )
        .map_err(|e| {
            let why = apt_error(&format!("{e:#}"));
            // Debian moves the releases it no longer supports off its mirrors, to its archive.
            let hint = if why.contains("does not have a Release file") {
                format!(" (has Debian {codename} left this mirror for Debian's archive?)")
            } else {
                String::new()
            };
            anyhow::anyhow!(
                "apt-get update of Debian {codename}'s lists ({}) failed: {why}{hint}",
                Self::dir(codename).join("sources.list").display(),
            )
        })?;
        self.updated = true;
        Ok(true)
    }
}

/// This machine's Debian mirror, as its apt sources name it.
#[derive(Debug, PartialEq)]
struct Mirrors {
    /// The archive (`.../debian`), serving `<codename>` and `<codename>-updates`.
    archive: String,
    /// The security archive (`.../debian-security`), if the machine has one.
    security: Option<String>,
}

impl Mirrors {
    /// From `apt-get indextargets --format '$(TARGET_OF) $(IDENTIFIER) $(RELEASE) $(REPO_URI)'`,
    /// the repositories serving Packages for `host` (this machine's codename) and its security
    /// suite.
    fn from_indextargets(listing: &str, host: &str) -> Option<Mirrors> {
        let repo = |suite: &str| {
            listing
                .lines()
                .find_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
                    ["deb", "Packages", release, uri] if release == suite => {
                        Some(uri.trim_end_matches('/').to_owned())
                    }
                    _ => None,
                })
        };
        let archive = repo(host).or_else(|| repo(&format!("{host}-updates")))?;
        Some(Mirrors {
            archive,
            security: repo(&format!("{host}-security")),
        })
    }
}

/// `VERSION_CODENAME` from /etc/os-release, e.g. `bookworm`.
fn host_codename() -> anyhow::Result<String> {
    let text = fs::read_to_string("/etc/os-release").context("reading /etc/os-release")?;
    os_release_field(&text, "VERSION_CODENAME").context(
        "/etc/os-release has no VERSION_CODENAME: cannot tell this machine's Debian release",
    )
}

fn os_release_field(text: &str, key: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(|v| v.trim().trim_matches(|c| c == '"' || c == '\'').to_owned())
        .filter(|v| !v.is_empty())
}

/// `codename`, its updates and (where the machine has a security mirror) its security suite,
/// main component, Packages only, amd64 only.
fn sources_list(codename: &str, mirrors: &Mirrors) -> String {
    let opts = format!("[arch=amd64 target=Packages signed-by={KEYRING}]");
    let mut s = format!(
        "# Written by `cargo xtask setup --vm`: Debian {codename} for the VM tests' kernel, from\n\
         # this machine's mirror, apart from this machine's own apt sources.\n\
         deb {opts} {archive} {codename} main\n\
         deb {opts} {archive} {codename}-updates main\n",
        archive = mirrors.archive
    );
    if let Some(security) = &mirrors.security {
        s.push_str(&format!("deb {opts} {security} {codename}-security main\n"));
    }
    s
}

/// The apt configuration for `apt-get -c`, on top of this machine's: its own sources, lists and
/// cache in `dir`, none of the machine's sources or pins, and none of its update hooks (they
/// refresh the machine's own caches).
fn apt_conf(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "// Written by `cargo xtask setup --vm`; e.g. `apt-cache -c {d}/apt.conf policy <package>`.\n\
         Dir::Etc::sourcelist \"{d}/sources.list\";\n\
         Dir::Etc::sourceparts \"/dev/null\";\n\
         Dir::Etc::preferences \"/dev/null\";\n\
         Dir::Etc::preferencesparts \"/dev/null\";\n\
         Dir::State::Lists \"{d}/lists\";\n\
         Dir::Cache \"{d}/cache\";\n\
         Acquire::Languages \"none\";\n\
         #clear APT::Update::Pre-Invoke;\n\
         #clear APT::Update::Post-Invoke;\n\
         #clear APT::Update::Post-Invoke-Success;\n"
    )
}

fn write_if_changed(path: &Path, text: &str) -> anyhow::Result<()> {
    if fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// A (possibly multi-line) message as one line.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
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
/// (decompressed) and the version in `dir`. `apt_args` select the apt configuration.
fn download(package: &str, dir: &Path, apt_args: &[OsString]) -> anyhow::Result<()> {
    let work = Path::new(CACHE).join(format!(".download-{package}"));
    let _ = fs::remove_dir_all(&work);
    let result = download_in(package, dir, apt_args, &work);
    if result.is_err() {
        let _ = fs::remove_dir_all(&work);
    }
    result
}

fn download_in(
    package: &str,
    dir: &Path,
    apt_args: &[OsString],
    work: &Path,
) -> anyhow::Result<()> {
    fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    cmd::output(
        cmd::command("apt-get")
            .args(apt_args)
            .args(["download", "-qq", package])
            .current_dir(work),
    )
    .with_context(|| format!("downloading kernel package {package}"))?;
    let deb = fs::read_dir(work)?
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
    fs::remove_dir_all(work).with_context(|| format!("removing {}", work.display()))?;
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
    fn newest_5_10_kernel_sorts_numerically() {
        let mut names = [
            "linux-image-5.10.0-35-cloud-amd64-unsigned",
            "linux-image-5.10.0-9-cloud-amd64-unsigned",
            "linux-image-5.10.0-46-cloud-amd64-unsigned",
            "linux-image-5.10.0-32-cloud-amd64-unsigned",
        ];
        assert_eq!(version_cmp(names[1], names[0]), Ordering::Less, "-9 < -35");
        names.sort_by(|a, b| version_cmp(a, b));
        assert_eq!(
            names,
            [
                "linux-image-5.10.0-9-cloud-amd64-unsigned",
                "linux-image-5.10.0-32-cloud-amd64-unsigned",
                "linux-image-5.10.0-35-cloud-amd64-unsigned",
                "linux-image-5.10.0-46-cloud-amd64-unsigned",
            ]
        );
    }

    #[test]
    fn series_patterns_and_origins() {
        assert_eq!(Series::ALL.map(|s| s.to_string()), ["5.10", "6.1", "6.12"]);
        assert_eq!(
            Series::V5_10.pattern(),
            r"^linux-image-5\.10\.0-[0-9]+-cloud-amd64-unsigned$"
        );
        assert_eq!(Series::V5_10.origin(), Origin::Release("bullseye"));
        assert_eq!(Series::V6_1.origin(), Origin::Host);
        assert_eq!(Series::V6_12.origin(), Origin::Host);
        for s in Series::ALL {
            let parsed = Series::from_str(&s.to_string(), false).expect("clap value");
            assert_eq!(parsed, s);
        }
    }

    #[test]
    fn mirrors_from_the_machines_sources() {
        let listing = "\
deb Packages bookworm http://deb.debian.org/debian/
deb DEP-11 bookworm http://deb.debian.org/debian/
deb Packages bookworm-updates http://deb.debian.org/debian/
deb Packages bookworm-security http://deb.debian.org/debian-security/
deb Packages nodistro https://deb.nodesource.com/node_20.x/
";
        assert_eq!(
            Mirrors::from_indextargets(listing, "bookworm"),
            Some(Mirrors {
                archive: "http://deb.debian.org/debian".into(),
                security: Some("http://deb.debian.org/debian-security".into()),
            })
        );
        // Only the updates suite, no security mirror.
        let listing = "deb Packages bookworm-updates http://mirror.example/debian/\n";
        assert_eq!(
            Mirrors::from_indextargets(listing, "bookworm"),
            Some(Mirrors {
                archive: "http://mirror.example/debian".into(),
                security: None,
            })
        );
        assert_eq!(
            Mirrors::from_indextargets("deb-src Sources bookworm http://m/debian/\n", "bookworm"),
            None
        );
        assert_eq!(Mirrors::from_indextargets("", "bookworm"), None);
    }

    #[test]
    fn bullseye_sources_list() {
        let mirrors = Mirrors {
            archive: "http://deb.debian.org/debian".into(),
            security: Some("http://deb.debian.org/debian-security".into()),
        };
        let opts = "[arch=amd64 target=Packages \
                    signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]";
        let entries: Vec<_> = sources_list("bullseye", &mirrors)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(str::to_owned)
            .collect();
        assert_eq!(
            entries,
            [
                format!("deb {opts} http://deb.debian.org/debian bullseye main"),
                format!("deb {opts} http://deb.debian.org/debian bullseye-updates main"),
                format!("deb {opts} http://deb.debian.org/debian-security bullseye-security main"),
            ]
        );
        let without_security = sources_list(
            "bullseye",
            &Mirrors {
                security: None,
                ..mirrors
            },
        );
        assert!(!without_security.contains("security"));
        assert!(without_security.ends_with("bullseye-updates main\n"));
    }

    #[test]
    fn bullseye_apt_conf() {
        let conf = apt_conf(Path::new("/var/cache/sockwatch-vm/apt-bullseye"));
        for line in [
            "Dir::Etc::sourcelist \"/var/cache/sockwatch-vm/apt-bullseye/sources.list\";",
            "Dir::Etc::sourceparts \"/dev/null\";",
            "Dir::State::Lists \"/var/cache/sockwatch-vm/apt-bullseye/lists\";",
            "Dir::Cache \"/var/cache/sockwatch-vm/apt-bullseye/cache\";",
            "#clear APT::Update::Post-Invoke-Success;",
        ] {
            assert!(conf.lines().any(|l| l == line), "{line} in\n{conf}");
        }
    }

    #[test]
    fn os_release_codename() {
        let text = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_ID=\"12\"\n\
                    VERSION_CODENAME=bookworm\nID=debian\n";
        assert_eq!(
            os_release_field(text, "VERSION_CODENAME").as_deref(),
            Some("bookworm")
        );
        assert_eq!(
            os_release_field("VERSION_CODENAME=\"trixie\"\n", "VERSION_CODENAME").as_deref(),
            Some("trixie")
        );
        assert_eq!(
            os_release_field("VERSION_CODENAME=\n", "VERSION_CODENAME"),
            None
        );
        assert_eq!(os_release_field("ID=debian\n", "VERSION_CODENAME"), None);
    }

    #[test]
    fn mirror_not_serving_a_package() {
        let message = "`apt-get -c /c/apt.conf download -qq linux-image-5.10.0-46-cloud-amd64-unsigned` \
            failed (exit status: 100): W: Download is performed unsandboxed as root as file \
            '/c/x.deb' couldn't be accessed by user '_apt'. - pkgAcquire::Run (13: Permission denied)\n\
            E: Failed to fetch http://mirror/debian-security/pool/updates/main/l/linux/\
            linux-image-5.10.0-46-cloud-amd64-unsigned_5.10.262-1_amd64.deb  404  Not Found \
            [IP: 192.0.2.1 80]";
        let why = apt_error(message);
        assert_eq!(
            why,
            "Failed to fetch http://mirror/debian-security/pool/updates/main/l/linux/\
             linux-image-5.10.0-46-cloud-amd64-unsigned_5.10.262-1_amd64.deb  404  Not Found \
             [IP: 192.0.2.1 80]"
        );
        assert!(not_served(&why));
        let offline = "Failed to fetch http://mirror/debian/pool/x.deb  Could not connect to \
                       mirror:80 (192.0.2.1), connection timed out";
        assert!(!not_served(offline));
        assert!(!not_served(
            "Unable to locate package linux-image-5.10.0-404-cloud"
        ));
    }

    #[test]
    fn apt_errors_on_one_line() {
        assert_eq!(
            one_line(
                "E: The repository does not have a Release file.\n\nE: Some index files failed\n"
            ),
            "E: The repository does not have a Release file.; E: Some index files failed"
        );
        assert_eq!(
            apt_error(
                "`apt-get update -qq` failed (exit status: 100): E: The repository 'http://m/debian \
                 bullseye Release' does not have a Release file.\nE: The repository \
                 'http://m/debian bullseye-updates Release' does not have a Release file.\n"
            ),
            "The repository 'http://m/debian bullseye Release' does not have a Release file; \
             The repository 'http://m/debian bullseye-updates Release' does not have a Release file"
        );
        assert_eq!(
            apt_error("cannot start `apt-get`\ncaused by: gone"),
            "cannot start `apt-get`; caused by: gone"
        );
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
