//! The guest architectures the VM tests boot, and each one's name in the toolchains that build
//! and fetch for it (Debian, Rust, Go each spell it their own way).
use std::fmt;

use clap::ValueEnum;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Arch {
    #[value(name = "x86_64")]
    X86_64,
    #[value(name = "aarch64")]
    Aarch64,
}

impl Arch {
    /// This machine's architecture: its guests need no cross-build.
    pub fn host() -> Arch {
        if cfg!(target_arch = "aarch64") {
            Arch::Aarch64
        } else {
            Arch::X86_64
        }
    }

    /// Debian's architecture name: in package names (`-cloud-arm64-`), `[arch=...]` of a
    /// sources list and `APT::Architecture`.
    pub fn debian(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Aarch64 => "arm64",
        }
    }

    /// The target triple `cargo build --target` cross-compiles the guest's binaries for.
    pub fn rust_target(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-gnu",
            Arch::Aarch64 => "aarch64-unknown-linux-gnu",
        }
    }

    /// `e_machine` of its ELF executables (`EM_X86_64`, `EM_AARCH64`).
    pub fn elf_machine(self) -> u16 {
        match self {
            Arch::X86_64 => 62,
            Arch::Aarch64 => 183,
        }
    }

    /// `GOARCH` for the Go listener the guest runs.
    pub fn go_arch(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Aarch64 => "arm64",
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum as _;

    use super::Arch;

    #[test]
    fn names() {
        for (arch, debian) in [(Arch::X86_64, "amd64"), (Arch::Aarch64, "arm64")] {
            assert_eq!(Arch::from_str(&arch.to_string(), false), Ok(arch));
            assert_eq!(arch.debian(), debian);
        }
    }
}
