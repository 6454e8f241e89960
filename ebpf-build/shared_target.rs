//! One target directory per architecture for the eBPF crates, shared by every build of the
//! workspace (included by `sockwatch/build.rs` and `floor/build.rs`).
//!
//! aya-build compiles an eBPF crate, and `core` with build-std, in a target directory under the
//! build script's OUT_DIR, so each profile, target and toolchain the agent is built for (clippy,
//! tests, release, fuzz, static, cross) compiled it again, about 50 s of CPU each. With
//! `SOCKWATCH_EBPF_TARGET_DIR` set (`.cargo/config.toml` sets it), that directory is a link to
//! `$SOCKWATCH_EBPF_TARGET_DIR/<arch>`: cargo's fingerprints there decide what to rebuild, and
//! its lock makes concurrent builds wait for each other.
use std::{env, fs, io, os::unix::fs::symlink, path::PathBuf};

use anyhow::Context as _;

const SHARED: &str = "SOCKWATCH_EBPF_TARGET_DIR";

/// Points aya-build's target directory for `package` at the shared one, if there is one.
pub fn share_target_dir(package: &str) -> anyhow::Result<()> {
    println!("cargo:rerun-if-env-changed={SHARED}");
    let Some(root) = env::var_os(SHARED) else {
        return Ok(());
    };
    let arch = env::var("CARGO_CFG_TARGET_ARCH").context("CARGO_CFG_TARGET_ARCH not set")?;
    let shared = PathBuf::from(root).join(arch);
    fs::create_dir_all(&shared).with_context(|| format!("creating {}", shared.display()))?;
    // Where aya-build 0.2 puts its cargo's `--target-dir`.
    let out = PathBuf::from(env::var_os("OUT_DIR").context("OUT_DIR not set")?);
    let link = out.join("aya-build").join("target").join(package);
    match fs::read_link(&link) {
        Ok(to) if to == shared => return Ok(()),
        Ok(_) => fs::remove_file(&link),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        // A directory an earlier build without the shared one left.
        Err(_) => fs::remove_dir_all(&link),
    }
    .with_context(|| format!("replacing {}", link.display()))?;
    let parent = link.parent().context("a link path without a parent")?;
    fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    symlink(&shared, &link).with_context(|| format!("linking {}", link.display()))
}
