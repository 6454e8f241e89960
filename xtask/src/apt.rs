//! Debian packages through apt-get and dpkg: the low-level pieces `setup`, the kernels and the
//! bench install through.
use anyhow::{Context as _, bail};

use crate::cmd;

/// apt-get, with `apt-get update` run at most once per xtask invocation.
#[derive(Default)]
pub struct Apt {
    updated: bool,
    installed_anything: bool,
}

impl Apt {
    /// Runs `apt-get update` unless it already ran; whether it ran now.
    pub fn update_once(&mut self) -> anyhow::Result<bool> {
        if self.updated {
            return Ok(false);
        }
        require_root("apt-get update")?;
        cmd::output(cmd::command("apt-get").args(["update", "-qq"]))
            .context("apt-get update (are Debian's package registries reachable?)")?;
        self.updated = true;
        Ok(true)
    }

    /// Whether anything was installed through this `Apt`.
    pub fn installed_anything(&self) -> bool {
        self.installed_anything
    }

    pub fn note_installed(&mut self, what: &str) {
        self.installed_anything = true;
        println!("xtask: installed {what}");
    }

    /// Installs those of `packages` that dpkg does not report as installed.
    pub fn ensure_installed(&mut self, packages: &[&str]) -> anyhow::Result<()> {
        let missing = missing_packages(packages)?;
        if missing.is_empty() {
            return Ok(());
        }
        require_root(&format!("apt-get install {}", missing.join(" ")))?;
        self.update_once()?;
        cmd::output(
            cmd::command("apt-get")
                .env("DEBIAN_FRONTEND", "noninteractive")
                .args(["install", "-y", "-qq", "--no-install-recommends"])
                .args(&missing),
        )
        .with_context(|| format!("apt-get install {}", missing.join(" ")))?;
        let still = missing_packages(&missing)?;
        if !still.is_empty() {
            bail!(
                "Debian packages still missing after apt-get install: {}",
                still.join(" ")
            );
        }
        for p in &missing {
            self.note_installed(&format!("Debian package {p}"));
        }
        Ok(())
    }
}

/// Fails, naming `what`, unless xtask runs as root.
pub fn require_root(what: &str) -> anyhow::Result<()> {
    if !cmd::is_root() {
        bail!(
            "`{what}` needs root: run `cargo xtask setup` as root (or run that apt-get yourself)"
        );
    }
    Ok(())
}

/// The subset of `packages` that dpkg does not report as installed.
fn missing_packages<S: AsRef<str>>(packages: &[S]) -> anyhow::Result<Vec<String>> {
    // Exits 1 when a package is unknown to dpkg; that one is simply absent from the output.
    let out = cmd::command("dpkg-query")
        .arg("-W")
        .arg("-f=${Package}\t${db:Status-Abbrev}\n")
        .args(packages.iter().map(AsRef::as_ref))
        .output()
        .context("cannot run dpkg-query (is this Debian?)")?;
    let listing = String::from_utf8_lossy(&out.stdout);
    Ok(packages
        .iter()
        .map(AsRef::as_ref)
        .filter(|p| !is_installed(&listing, p))
        .map(str::to_owned)
        .collect())
}

/// Whether `dpkg-query -W -f='${Package}\t${db:Status-Abbrev}\n'` output lists `package` as
/// installed (`ii`).
fn is_installed(listing: &str, package: &str) -> bool {
    listing.lines().any(|line| {
        let mut fields = line.split('\t');
        let name = fields.next().unwrap_or_default();
        let name = name.split(':').next().unwrap_or_default();
        name == package && fields.next().is_some_and(|s| s.starts_with("ii"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpkg_listing() {
        let listing = "clang-22\tii \nzlib1g-dev:amd64\tii \nbpftool\trc \ncpio\tun \n";
        assert!(is_installed(listing, "clang-22"));
        assert!(is_installed(listing, "zlib1g-dev"));
        assert!(!is_installed(listing, "bpftool"), "config-files only");
        assert!(!is_installed(listing, "cpio"), "not installed");
        assert!(!is_installed(listing, "busybox-static"), "unknown to dpkg");
        assert!(!is_installed(listing, "clang"), "no prefix match");
    }
}
