//! Debian's stock cloud kernels for the QEMU tests: for the x86_64 guest 5.10 (Debian 11), 6.1
//! and 6.12 (Debian 12), for the aarch64 guest 6.1 and 6.12; the newest of each series in the
//! apt lists, downloaded once with `apt-get download` and kept (vmlinuz and
//! [`GUEST_MODULES`](cache::GUEST_MODULES) only) under [`CACHE`](cache::CACHE). A package the
//! mirror does not serve although its lists name it (HTTP 403/404/410) is noted in
//! `CACHE/unavailable/` and passed over for the next newest for a day. Also the aarch64 guest's
//! [`busybox`].
//!
//! Debian 12's amd64 kernels come from this machine's apt sources. Debian 11's, and Debian 12's
//! arm64 ones, come from the same mirror through separate apt configurations under
//! `CACHE/apt-bullseye/` and `CACHE/apt-bookworm-arm64/` (each its own sources list, lists and
//! cache), so the machine's sources, lists and architectures stay as they are.
mod apt_message;
mod busybox;
mod cache;
mod fetch;
mod series;
mod sources;
#[cfg(test)]
mod tests;
mod unavailable;
mod version;

use std::{ffi::OsString, fs, path::Path, time::Instant};

use anyhow::{Context as _, bail};

pub use busybox::busybox;
pub use cache::Kernel;
pub use series::Series;
pub(crate) use version::version_cmp;

use self::{
    apt_message::{apt_error, not_served},
    cache::{CACHE, cached},
    fetch::download,
    series::Origin,
    sources::{OtherRelease, Sources},
    unavailable::{UNAVAILABLE_RETRY, mark_unavailable, recently_unavailable, unavailable_marker},
};
use crate::{apt::Apt, arch::Arch, cmd};

/// Resolves, downloads (when not cached) and returns one kernel per series, built for `arch`.
pub fn ensure(series: &[Series], arch: Arch, apt: &mut Apt) -> anyhow::Result<Vec<Kernel>> {
    // Every series' origin first, so a series with no kernel for `arch` fails before any
    // download.
    let origins = series
        .iter()
        .map(|s| s.origin(arch))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut sources = Sources::new(apt);
    series
        .iter()
        .zip(origins)
        .map(|(s, origin)| ensure_one(*s, arch, origin, &mut sources))
        .collect()
}

fn ensure_one(
    series: Series,
    arch: Arch,
    origin: Origin,
    sources: &mut Sources,
) -> anyhow::Result<Kernel> {
    let pattern = series.pattern(arch);
    let args = sources.apt_args(origin)?;
    let mut candidates = matching(&pattern, &args)?;
    if candidates.is_empty() {
        // Lists never fetched on this machine, or too old: refresh once and look again.
        if !sources.update_once(origin)? {
            bail!(no_package(series, arch, origin));
        }
        candidates = matching(&pattern, &args)?;
        if candidates.is_empty() {
            bail!(no_package(series, arch, origin));
        }
    }
    // The newest package, unless the mirror recently did not serve it: then the next newest.
    let mut unavailable = Vec::new();
    for package in &candidates {
        let dir = Path::new(CACHE).join(package);
        if let Some(kernel) = cached(package, arch, &dir)? {
            return Ok(kernel);
        }
        if let Some(why) = recently_unavailable(package) {
            unavailable.push(format!("{package} ({why})"));
            continue;
        }
        let started = Instant::now();
        let why = match download(package, &dir, &args) {
            Ok(()) => {
                let kernel = cached(package, arch, &dir)?.with_context(|| {
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
            return ensure_one(series, arch, origin, sources);
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
        "kernel {series} for the VM tests' {arch} guest: no package matching {pattern} could be \
         downloaded ({}): {}; remove {} to try them again now",
        sources_name(origin),
        unavailable.join(", "),
        unavailable_marker("").display()
    )
}

fn sources_name(origin: Origin) -> String {
    match origin {
        Origin::Host => "this machine's apt sources".to_owned(),
        Origin::Release(codename, arch) => format!(
            "Debian {codename}'s {} apt sources, {}",
            arch.debian(),
            OtherRelease::dir(codename, arch)
                .join("sources.list")
                .display()
        ),
    }
}

fn no_package(series: Series, arch: Arch, origin: Origin) -> String {
    format!(
        "no Debian package matches {} (apt-cache search): kernel {series} for the VM tests' \
         {arch} guest is missing from {}",
        series.pattern(arch),
        sources_name(origin)
    )
}

/// The packages matching `pattern` in the lists that `apt_args` select, newest first.
fn matching(pattern: &str, apt_args: &[OsString]) -> anyhow::Result<Vec<String>> {
    let out = cmd::output(cmd::command("apt-cache").args(apt_args).args([
        "search",
        "--names-only",
        pattern,
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
