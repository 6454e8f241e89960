//! `cargo xtask setup`: checks what the build and the tests need and installs only what is
//! missing, from package registries (Debian, crates.io, rustup's components). One line per
//! thing installed; nothing printed for what is already there.
use std::{path::PathBuf, time::Instant};

use anyhow::{Context as _, bail};

use crate::{
    apt::Apt,
    arch::Arch,
    cmd::{self, LLVM_BIN},
    kernels::{self, Kernel, Series},
};

/// Debian packages the build needs: LLVM 22 for bpf-linker, clang-22 and bpftool for the C
/// CO-RE shim, libbpf's headers; g++ for libFuzzer, which the fuzz crate compiles.
const BUILD_PACKAGES: &[&str] = &[
    "g++",
    "llvm-22-dev",
    "libpolly-22-dev",
    "clang-22",
    "libzstd-dev",
    "zlib1g-dev",
    "libbpf-dev",
    "bpftool",
];
/// Debian packages the whole test suite needs beyond the build: QEMU and busybox for the VM
/// layers, Go for S1 with a real `net.Listen("unix", …)` listener, Prometheus (and promtool)
/// for the end-to-end alert test and the rule tests, and the daemons the production-pattern
/// tests drive on the host (HAProxy's reload, socat, Python and Node.js).
const VM_PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "busybox-static",
    "cpio",
    "golang-go",
    "prometheus",
    "haproxy",
    "socat",
    "python3",
    "nodejs",
];

const BPF_LINKER_VERSION: &str = "0.13.0";
/// bpf-linker is built against this LLVM; the nightly that emits the bitcode must not be newer.
const MAX_NIGHTLY_LLVM: u32 = 22;
/// The nightly sockwatch is tested with (rustc 1.97, LLVM 22.1).
const TESTED_NIGHTLY: &str = "nightly-2026-05-19";

/// What an arm64 cross-build needs beyond the build: Debian's cross linker and the arm64
/// glibc it links statically (only a Recommends of the linker's package, which apt here does
/// not install: without it the link finds no crt1.o and no -lc).
const AARCH64_BUILD_PACKAGES: &[&str] = &["gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"];
/// What the arm64 guests need beyond the x86-64 ones.
const AARCH64_VM_PACKAGES: &[&str] = &["qemu-system-arm"];

/// What `setup` leaves ready: the guests' kernels and each architecture's busybox.
pub struct Ready {
    pub kernels: Vec<Kernel>,
    pub busybox: Vec<(Arch, PathBuf)>,
}

/// What to set up besides the host build.
#[derive(Default)]
pub struct Wanted<'a> {
    /// The VM layers' packages and, per architecture, the kernel series to fetch.
    pub guests: Option<&'a [(Arch, Vec<Series>)]>,
    /// Cross-building for these architectures (their guests imply them).
    pub cross: Vec<Arch>,
}

impl<'a> Wanted<'a> {
    pub fn guests(guests: &'a [(Arch, Vec<Series>)]) -> Wanted<'a> {
        Wanted {
            guests: Some(guests),
            cross: guests.iter().map(|(a, _)| *a).collect(),
        }
    }
}

pub fn setup(wanted: &Wanted) -> anyhow::Result<Ready> {
    let started = Instant::now();
    let mut apt = Apt::default();
    let cross: Vec<Arch> = wanted
        .cross
        .iter()
        .copied()
        .filter(|a| *a != Arch::host())
        .collect();
    let mut packages = BUILD_PACKAGES.to_vec();
    if wanted.guests.is_some() {
        packages.extend_from_slice(VM_PACKAGES);
    }
    if cross.contains(&Arch::Aarch64) {
        packages.extend_from_slice(AARCH64_BUILD_PACKAGES);
        if wanted.guests.is_some() {
            packages.extend_from_slice(AARCH64_VM_PACKAGES);
        }
    }
    apt.ensure_installed(&packages)?;
    check_nightly()?;
    ensure_components("nightly", &["rust-src", "clippy"])?;
    ensure_components("stable", &["clippy", "rustfmt"])?;
    for arch in &cross {
        ensure_target(arch.rust_target())?;
    }
    ensure_bpf_linker()?;
    let mut ready = Ready {
        kernels: Vec::new(),
        busybox: Vec::new(),
    };
    for (arch, series) in wanted.guests.unwrap_or_default() {
        ready
            .kernels
            .extend(kernels::ensure(series, *arch, &mut apt)?);
        ready
            .busybox
            .push((*arch, kernels::busybox(*arch, &mut apt)?));
    }
    if apt.installed_anything() {
        println!("xtask: setup done in {:.1?}", started.elapsed());
    }
    Ok(ready)
}

/// The standard library for `target` on the stable toolchain, which builds the agent.
fn ensure_target(target: &str) -> anyhow::Result<()> {
    let installed = cmd::output(cmd::command("rustup").args(["target", "list", "--installed"]))
        .context("listing rustup's installed targets")?;
    if installed.lines().any(|l| l.trim() == target) {
        return Ok(());
    }
    cmd::output(cmd::command("rustup").args(["target", "add", target]))
        .with_context(|| format!("rustup target add {target}"))?;
    println!("xtask: installed the Rust standard library for {target}");
    Ok(())
}

/// aya-build compiles the eBPF crate with `rustup run nightly`: that toolchain must exist and its
/// LLVM must not be newer than bpf-linker's.
fn check_nightly() -> anyhow::Result<()> {
    let install = format!("rustup toolchain install {TESTED_NIGHTLY} --component rust-src");
    let Ok(vv) = cmd::output(cmd::command("rustc").args(["+nightly", "-vV"])) else {
        bail!(
            "no `nightly` Rust toolchain (aya-build builds the eBPF programs with it): `{install}` \
             is the one sockwatch is tested with (LLVM {MAX_NIGHTLY_LLVM})"
        );
    };
    let (llvm, date) = parse_rustc_vv(&vv);
    let Some(llvm) = llvm else {
        bail!("`rustc +nightly -vV` reports no LLVM version: cannot match it to bpf-linker");
    };
    if llvm > MAX_NIGHTLY_LLVM {
        bail!(
            "the `nightly` toolchain ({}) uses LLVM {llvm}, newer than bpf-linker's LLVM \
             {MAX_NIGHTLY_LLVM}: `{install}` is the one sockwatch is tested with",
            date.unwrap_or("unknown date")
        );
    }
    Ok(())
}

/// (LLVM major, commit date) from `rustc -vV`.
fn parse_rustc_vv(vv: &str) -> (Option<u32>, Option<&str>) {
    let field = |key: &str| vv.lines().find_map(|l| l.strip_prefix(key)).map(str::trim);
    let llvm = field("LLVM version:")
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse().ok());
    (llvm, field("commit-date:"))
}

fn ensure_components(toolchain: &str, components: &[&str]) -> anyhow::Result<()> {
    let installed = cmd::output(cmd::command("rustup").args([
        "component",
        "list",
        "--installed",
        "--toolchain",
        toolchain,
    ]))
    .with_context(|| format!("listing rustup components of the `{toolchain}` toolchain"))?;
    for c in components {
        // Lines read `rust-src` or `clippy-x86_64-unknown-linux-gnu`.
        let present = installed
            .lines()
            .any(|l| l == *c || l.strip_prefix(c).is_some_and(|r| r.starts_with('-')));
        if !present {
            cmd::output(cmd::command("rustup").args([
                "component",
                "add",
                c,
                "--toolchain",
                toolchain,
            ]))
            .with_context(|| format!("rustup component add {c} --toolchain {toolchain}"))?;
            println!("xtask: installed {c} for the {toolchain} toolchain");
        }
    }
    Ok(())
}

fn ensure_bpf_linker() -> anyhow::Result<()> {
    let found = cmd::output(cmd::command("bpf-linker").arg("--version")).ok();
    if found
        .as_deref()
        .is_some_and(|v| v.split_whitespace().any(|w| w == BPF_LINKER_VERSION))
    {
        return Ok(());
    }
    println!(
        "xtask: building bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (cargo install, ~2 min)"
    );
    let started = Instant::now();
    cmd::run(cmd::command("cargo").args([
        "install",
        "bpf-linker",
        "--version",
        BPF_LINKER_VERSION,
        "--locked",
        "--no-default-features",
        "--features",
        "llvm-22",
    ]))
    .with_context(|| {
        format!("installing bpf-linker {BPF_LINKER_VERSION} (needs llvm-22-dev in {LLVM_BIN})")
    })?;
    println!(
        "xtask: installed bpf-linker {BPF_LINKER_VERSION} in {:.0?}",
        started.elapsed()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rustc_vv() {
        let vv = "rustc 1.97.0-nightly (e50aa6fba 2026-05-19)\nbinary: rustc\n\
                  commit-date: 2026-05-19\nhost: x86_64-unknown-linux-gnu\n\
                  release: 1.97.0-nightly\nLLVM version: 22.1.4\n";
        assert_eq!(parse_rustc_vv(vv), (Some(22), Some("2026-05-19")));
        assert_eq!(parse_rustc_vv("rustc 1.0\n"), (None, None));
    }
}
