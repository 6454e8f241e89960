//! Compiles the C CO-RE shim to LLVM bitcode and hands it to bpf-linker.
//!
//! rustc emits no CO-RE relocations, so every kernel-struct read lives in `c/shim.c`, compiled
//! by clang against a `vmlinux.h` dumped from the running kernel's BTF. The dump only supplies
//! type names: the relocations in the object are resolved against each target kernel at load.
use std::{env, path::PathBuf, process::Command};

use anyhow::{Context as _, bail};

const CLANG: &str = "clang-22";
const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

fn main() -> anyhow::Result<()> {
    // Only the BPF build needs the shim; a host `cargo check` of this crate does not.
    if env::var("CARGO_CFG_TARGET_ARCH").as_deref() != Ok("bpf") {
        return Ok(());
    }
    println!("cargo:rerun-if-changed=c");
    println!("cargo:rerun-if-env-changed=SOCKWATCH_VMLINUX_H");
    let out = PathBuf::from(env::var("OUT_DIR")?);

    let vmlinux_h = match env::var_os("SOCKWATCH_VMLINUX_H") {
        Some(p) => PathBuf::from(p),
        None => dump_vmlinux_h(&out)?,
    };
    let include = vmlinux_h
        .parent()
        .context("vmlinux.h has no parent directory")?;

    let bc = out.join("shim.bc");
    let status = Command::new(CLANG)
        .args([
            "-target",
            "bpf",
            "-g",
            "-O2",
            "-emit-llvm",
            "-c",
            "-Wall",
            "-Werror",
        ])
        .arg("-I")
        .arg(include)
        .arg("c/shim.c")
        .arg("-o")
        .arg(&bc)
        .status()
        .with_context(|| format!("running {CLANG} (apt-get install clang-22)"))?;
    if !status.success() {
        bail!("{CLANG} failed to compile c/shim.c");
    }
    println!("cargo:rustc-link-arg={}", bc.display());
    Ok(())
}

fn dump_vmlinux_h(out: &std::path::Path) -> anyhow::Result<PathBuf> {
    let path = out.join("vmlinux.h");
    let dump = Command::new("bpftool")
        .args(["btf", "dump", "file", KERNEL_BTF, "format", "c"])
        .output()
        .context("running bpftool (apt-get install bpftool)")?;
    if !dump.status.success() {
        bail!(
            "bpftool could not dump {KERNEL_BTF}: {}",
            String::from_utf8_lossy(&dump.stderr).trim()
        );
    }
    std::fs::write(&path, dump.stdout).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}
