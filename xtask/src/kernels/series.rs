//! The kernel series the VM tests boot, and which Debian release's apt sources carry each.
use std::fmt;

use clap::ValueEnum;

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
    pub(super) fn pattern(self) -> &'static str {
        match self {
            Series::V5_10 => r"^linux-image-5\.10\.0-[0-9]+-cloud-amd64-unsigned$",
            Series::V6_1 => r"^linux-image-6\.1\.0-[0-9]+-cloud-amd64-unsigned$",
            Series::V6_12 => r"^linux-image-6\.12\.[0-9]+\+deb12-cloud-amd64-unsigned$",
        }
    }

    /// The Debian release whose apt sources carry this series.
    pub(super) fn origin(self) -> Origin {
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

/// Where a series' package comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Origin {
    /// This machine's apt sources.
    Host,
    /// Another Debian release, by codename, through its [`OtherRelease`] configuration.
    Release(&'static str),
}
