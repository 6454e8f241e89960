//! The QEMU command line of a guest, per architecture: TCG on every one (KVM is not usable on
//! the machines this runs on), two vCPUs, 1 GiB, the serial console on stdout.
use std::{
    path::Path,
    process::{Command, Stdio},
};

use crate::{arch::Arch, cmd, kernels::Kernel};

/// The kernel's command line besides the console: quiet, no reboot on panic, and the BPF LSM
/// in the list (Debian's kernels leave it out by default).
const APPEND: &str = "quiet panic=-1 lsm=lockdown,capability,landlock,bpf";

/// `qemu-system-<arch>` booting `kernel` with `initrd`, `extra` added to the kernel's command
/// line.
pub fn command(kernel: &Kernel, initrd: &Path, extra: Option<String>) -> Command {
    let mut qemu = cmd::command(binary(kernel.arch));
    match kernel.arch {
        Arch::X86_64 => qemu.args(["-cpu", "max"]),
        // `virt` is QEMU's generic arm64 board, which Debian's cloud kernels boot (PL011
        // console, virtio-mmio). `pauth-impdef`: the architected pointer-authentication
        // algorithm is by far the slowest part of emulating `max` under TCG.
        Arch::Aarch64 => qemu.args(["-machine", "virt", "-cpu", "max,pauth-impdef=on"]),
    };
    qemu.args(["-accel", "tcg,thread=multi", "-m", "1024", "-smp", "2"])
        .args(["-nographic", "-no-reboot", "-kernel"])
        .arg(&kernel.vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        .arg("-append")
        .arg(format!(
            "console={} {APPEND}{}",
            console(kernel.arch),
            extra.map(|e| format!(" {e}")).unwrap_or_default()
        ))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    qemu
}

/// What to install when [`command`] cannot start.
pub fn missing(arch: Arch) -> String {
    let package = match arch {
        Arch::X86_64 => "qemu-system-x86",
        Arch::Aarch64 => "qemu-system-arm",
    };
    format!("cannot start {} (apt-get install {package})", binary(arch))
}

fn binary(arch: Arch) -> &'static str {
    match arch {
        Arch::X86_64 => "qemu-system-x86_64",
        Arch::Aarch64 => "qemu-system-aarch64",
    }
}

fn console(arch: Arch) -> &'static str {
    match arch {
        Arch::X86_64 => "ttyS0",
        Arch::Aarch64 => "ttyAMA0",
    }
}
