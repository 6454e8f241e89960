//! apt for each [`Origin`]: this machine's own sources, or another Debian release or
//! architecture read through an apt configuration of its own under `CACHE/apt-<codename>/`
//! (amd64) or `CACHE/apt-<codename>-<arch>/`.
use std::{
    ffi::OsString,
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, bail};

use super::{apt_message::apt_error, cache::CACHE, series::Origin};
use crate::{
    apt::{self, Apt},
    arch::Arch,
    cmd,
};

/// Debian's archive keyring (package debian-archive-keyring): Debian 12's still holds Debian
/// 11's archive and security keys, and this machine's own sources are verified with it.
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// apt for each [`Origin`], each one's `apt-get update` run at most once per xtask invocation.
pub(super) struct Sources<'a> {
    pub(super) apt: &'a mut Apt,
    /// The other releases configured so far in this invocation.
    others: Vec<OtherRelease>,
}

impl<'a> Sources<'a> {
    pub(super) fn new(apt: &'a mut Apt) -> Sources<'a> {
        Sources {
            apt,
            others: Vec::new(),
        }
    }

    /// What points apt-get and apt-cache at `origin`'s sources and lists (nothing for the host).
    pub(super) fn apt_args(&mut self, origin: Origin) -> anyhow::Result<Vec<OsString>> {
        Ok(match origin {
            Origin::Host => Vec::new(),
            Origin::Release(codename, arch) => self.other(codename, arch)?.apt_args(),
        })
    }

    /// Runs `apt-get update` for `origin` unless it already ran; whether it ran now.
    pub(super) fn update_once(&mut self, origin: Origin) -> anyhow::Result<bool> {
        match origin {
            Origin::Host => self.apt.update_once(),
            Origin::Release(codename, arch) => self.other(codename, arch)?.update_once(),
        }
    }

    fn other(&mut self, codename: &'static str, arch: Arch) -> anyhow::Result<&mut OtherRelease> {
        let i = match self
            .others
            .iter()
            .position(|o| o.codename == codename && o.arch == arch)
        {
            Some(i) => i,
            None => {
                self.others.push(OtherRelease::configure(codename, arch)?);
                self.others.len() - 1
            }
        };
        Ok(&mut self.others[i])
    }
}

/// A Debian release for one architecture, other than this machine's own sources, read through
/// its own apt configuration in [`OtherRelease::dir`]: `apt.conf` (for `apt-get -c`),
/// `sources.list` (this machine's mirror, [`KEYRING`]), `lists/` and `cache/`. Of the machine's
/// apt sources only the mirror is read; its lists, pins and architectures are neither used nor
/// changed; its other apt settings (proxies, ...) apply.
pub(super) struct OtherRelease {
    codename: &'static str,
    arch: Arch,
    updated: bool,
}

impl OtherRelease {
    /// `CACHE/apt-<codename>` for amd64 (the name from before other architectures, kept so
    /// existing lists stay in use), `CACHE/apt-<codename>-<arch>` for any other.
    pub(super) fn dir(codename: &str, arch: Arch) -> PathBuf {
        Path::new(CACHE).join(match arch {
            Arch::X86_64 => format!("apt-{codename}"),
            Arch::Aarch64 => format!("apt-{codename}-{}", arch.debian()),
        })
    }

    /// Writes the configuration files that do not already say what they should (no network).
    fn configure(codename: &'static str, arch: Arch) -> anyhow::Result<OtherRelease> {
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
        let dir = Self::dir(codename, arch);
        for d in ["lists/partial", "cache/archives/partial"] {
            let d = dir.join(d);
            fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        }
        write_if_changed(
            &dir.join("sources.list"),
            &sources_list(codename, arch, &mirrors),
        )?;
        write_if_changed(&dir.join("apt.conf"), &apt_conf(&dir, arch))?;
        Ok(OtherRelease {
            codename,
            arch,
            updated: false,
        })
    }

    fn apt_args(&self) -> Vec<OsString> {
        vec![
            "-c".into(),
            Self::dir(self.codename, self.arch).join("apt.conf").into(),
        ]
    }

    fn update_once(&mut self) -> anyhow::Result<bool> {
        if self.updated {
            return Ok(false);
        }
        let (codename, arch) = (self.codename, self.arch.debian());
        apt::require_root(&format!("apt-get update for Debian {codename} {arch}"))?;
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
                "apt-get update of Debian {codename}'s {arch} lists ({}) failed: {why}{hint}",
                Self::dir(codename, self.arch)
                    .join("sources.list")
                    .display(),
            )
        })?;
        self.updated = true;
        Ok(true)
    }
}

/// This machine's Debian mirror, as its apt sources name it.
#[derive(Debug, PartialEq)]
pub(super) struct Mirrors {
    /// The archive (`.../debian`), serving `<codename>` and `<codename>-updates`.
    pub(super) archive: String,
    /// The security archive (`.../debian-security`), if the machine has one.
    pub(super) security: Option<String>,
}

impl Mirrors {
    /// From `apt-get indextargets --format '$(TARGET_OF) $(IDENTIFIER) $(RELEASE) $(REPO_URI)'`,
    /// the repositories serving Packages for `host` (this machine's codename) and its security
    /// suite.
    pub(super) fn from_indextargets(listing: &str, host: &str) -> Option<Mirrors> {
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

pub(super) fn os_release_field(text: &str, key: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .map(|v| v.trim().trim_matches(|c| c == '"' || c == '\'').to_owned())
        .filter(|v| !v.is_empty())
}

/// `codename`, its updates and (where the machine has a security mirror) its security suite,
/// main component, Packages only, `arch` only.
pub(super) fn sources_list(codename: &str, arch: Arch, mirrors: &Mirrors) -> String {
    let arch = arch.debian();
    let opts = format!("[arch={arch} target=Packages signed-by={KEYRING}]");
    let mut s = format!(
        "# Written by `cargo xtask setup --vm`: Debian {codename} {arch} for the VM tests' \
         guests, from\n\
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
/// refresh the machine's own caches). `arch` is apt's native and only architecture, so an
/// unqualified name (`apt-get download busybox-static`) means `arch`'s package, not the
/// machine's.
pub(super) fn apt_conf(dir: &Path, arch: Arch) -> String {
    let d = dir.display();
    let arch = arch.debian();
    format!(
        "// Written by `cargo xtask setup --vm`; e.g. `apt-cache -c {d}/apt.conf policy <package>`.\n\
         Dir::Etc::sourcelist \"{d}/sources.list\";\n\
         Dir::Etc::sourceparts \"/dev/null\";\n\
         Dir::Etc::preferences \"/dev/null\";\n\
         Dir::Etc::preferencesparts \"/dev/null\";\n\
         Dir::State::Lists \"{d}/lists\";\n\
         Dir::Cache \"{d}/cache\";\n\
         APT::Architecture \"{arch}\";\n\
         #clear APT::Architectures;\n\
         APT::Architectures:: \"{arch}\";\n\
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
