//! Builds the kernel programs (sockwatch-ebpf) for the BPF target and leaves the object in
//! OUT_DIR, where `src/loader.rs` embeds it.
use std::path::PathBuf;

use anyhow::Context as _;

#[path = "../ebpf-build/shared_target.rs"]
mod shared_target;

fn main() -> anyhow::Result<()> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let root = manifest.join("../sockwatch-ebpf");
    let root_dir = root.to_str().context("non-UTF-8 workspace path")?;
    shared_target::share_target_dir("sockwatch-ebpf")?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "sockwatch-ebpf",
            root_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::Nightly,
    )
    .context(
        "building the eBPF programs (needs nightly with rust-src, bpf-linker, clang-22, \
         bpftool: run `cargo xtask setup`)",
    )
}
