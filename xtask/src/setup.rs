//! `cargo xtask setup`: checks what the build and the tests need and installs only what is
//! missing, from package registries (Debian, crates.io, rustup's components). One line per
//! thing installed; nothing printed for what is already there.
use std::time::Instant;

use anyhow::{Context as _, bail};

use crate::{
    apt::Apt,
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
/// for the end-to-end alert test and the rule tests.
const VM_PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "busybox-static",
    "cpio",
    "golang-go",
    "prometheus",
];

const BPF_LINKER_VERSION: &str = "0.13.0";
/// bpf-linker is built against this LLVM; the nightly that emits the bitcode must not be newer.
const MAX_NIGHTLY_LLVM: u32 = 22;
/// The nightly sockwatch is tested with (rustc 1.97, LLVM 22.1).
const TESTED_NIGHTLY: &str = "nightly-2026-05-19";

/// What `setup --vm` leaves ready for `vm-test`.
pub struct Ready {
    pub kernels: Vec<Kernel>,
}

pub fn setup(vm: bool, series: &[Series]) -> anyhow::Result<Ready> {
    let started = Instant::now();
    let mut apt = Apt::default();
    let mut packages = BUILD_PACKAGES.to_vec();
    if vm {
        packages.extend_from_slice(VM_PACKAGES);
    }
    apt.ensure_installed(&packages)?;
    check_nightly()?;
    ensure_components("nightly", &["rust-src", "clippy"])?;
    ensure_components("stable", &["clippy", "rustfmt"])?;
    ensure_bpf_linker()?;
    let kernels = if vm {
        kernels::ensure(series, &mut apt)?
    } else {
        Vec::new()
    };
    if apt.installed_anything() {
        println!("xtask: setup done in {:.1?}", started.elapsed());
    }
    Ok(Ready { kernels })
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
