//! Builds the empty programs (floor-ebpf) for the BPF target and leaves the object in
//! OUT_DIR, where `src/main.rs` embeds it.
use std::path::PathBuf;

use anyhow::Context as _;

#[path = "../ebpf-build/shared_target.rs"]
mod shared_target;

fn main() -> anyhow::Result<()> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let root = manifest.join("../floor-ebpf");
    let root_dir = root.to_str().context("non-UTF-8 workspace path")?;
    shared_target::share_target_dir("floor-ebpf")?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "floor-ebpf",
            root_dir,
            ..Default::default()
        }],
        aya_build::Toolchain::Nightly,
    )
    .context(
        "building the empty eBPF programs (needs nightly with rust-src and bpf-linker: run \
         `cargo xtask setup`)",
    )
}
