//! The kernel series the VM tests boot, and which Debian release's apt sources carry each for
//! each guest architecture.
use std::fmt;

use anyhow::bail;
use clap::ValueEnum;

use crate::arch::Arch;

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

    /// `apt-cache search --names-only` pattern for this series' unsigned cloud image for `arch`.
    pub(super) fn pattern(self, arch: Arch) -> String {
        let arch = arch.debian();
        match self {
            Series::V5_10 => format!(r"^linux-image-5\.10\.0-[0-9]+-cloud-{arch}-unsigned$"),
            Series::V6_1 => format!(r"^linux-image-6\.1\.0-[0-9]+-cloud-{arch}-unsigned$"),
            Series::V6_12 => format!(r"^linux-image-6\.12\.[0-9]+\+deb12-cloud-{arch}-unsigned$"),
        }
    }

    /// Whether the `arch` guest boots this series.
    pub fn offered(self, arch: Arch) -> bool {
        self.origin(arch).is_ok()
    }

    /// The Debian release whose apt sources carry this series for `arch`. The aarch64 guest
    /// boots Debian 12's kernels only.
    pub(super) fn origin(self, arch: Arch) -> anyhow::Result<Origin> {
        Ok(match (self, arch) {
            (Series::V5_10, Arch::X86_64) => Origin::Release("bullseye", arch),
            (Series::V6_1 | Series::V6_12, _) => Origin::debian12(arch),
            (Series::V5_10, Arch::Aarch64) => bail!(
                "kernel {self} is not offered for the {arch} guest: it boots Debian 12's 6.1 \
                 and 6.12 only"
            ),
        })
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

/// Where a series' package (or the aarch64 guest's busybox) comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Origin {
    /// This machine's apt sources.
    Host,
    /// A Debian release (by codename) for an architecture, one of them not this machine's,
    /// through its own [`OtherRelease`](super::sources::OtherRelease) configuration.
    Release(&'static str, Arch),
}

impl Origin {
    /// Debian 12 (bookworm) for `arch`: this machine's own sources (a Debian 12 amd64 machine)
    /// for x86_64, its own configuration for any other architecture.
    pub(super) fn debian12(arch: Arch) -> Origin {
        match arch {
            Arch::X86_64 => Origin::Host,
            Arch::Aarch64 => Origin::Release("bookworm", arch),
        }
    }
}
