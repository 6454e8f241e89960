//! `cargo xtask image`: the agent's OCI image, built by podman from the static binary on an
//! empty base (deploy/Containerfile), nothing pulled from any registry.
pub mod check;
mod daemonset;

use std::path::Path;

use anyhow::{Context as _, bail};

use crate::{Linking, arch::Arch, cmd, setup};

/// Where the image goes in podman's local store.
pub const REPOSITORY: &str = "localhost/sockwatch";

/// Sets up, builds the static agent for `arch` and its image; the image's reference.
pub fn build(arch: Arch) -> anyhow::Result<String> {
    setup::setup(&setup::Wanted {
        cross: vec![arch],
        image: true,
        ..setup::Wanted::default()
    })?;
    let bin = crate::build(arch, Linking::Static)?;
    build_from(arch, &bin)
}

/// The image of `bin`, a static agent built for `arch`; its reference: `REPOSITORY:VERSION`
/// for this machine's architecture, `REPOSITORY:VERSION-<debian arch>` for another one (one
/// local store holds both).
pub fn build_from(arch: Arch, bin: &Path) -> anyhow::Result<String> {
    ensure_static(arch, bin)?;
    let context = cmd::target_dir().join("image").join(arch.to_string());
    if context.exists() {
        std::fs::remove_dir_all(&context)
            .with_context(|| format!("cannot empty {}", context.display()))?;
    }
    std::fs::create_dir_all(&context)
        .with_context(|| format!("cannot create {}", context.display()))?;
    std::fs::copy(bin, context.join("sockwatch"))
        .with_context(|| format!("cannot copy {} into the image", bin.display()))?;
    let version = env!("CARGO_PKG_VERSION");
    let reference = if arch == Arch::host() {
        format!("{REPOSITORY}:{version}")
    } else {
        format!("{REPOSITORY}:{version}-{}", arch.debian())
    };
    let previous = image_id(&reference);
    // --layers=false: no intermediate images left behind for each step.
    cmd::output(
        cmd::command("podman")
            .args(["build", "--quiet", "--layers=false", "--os", "linux"])
            .args(["--arch", arch.debian()])
            .arg("--file")
            .arg(cmd::workspace_root().join("deploy/Containerfile"))
            .args(["--tag", &reference])
            .arg("--label")
            .arg(format!("org.opencontainers.image.version={version}"))
            .arg(&context),
    )
    .context("podman build (apt-get install podman)")?;
    // The image this one replaced under the same tag, unless a container still uses it.
    if let Some(old) = previous.filter(|old| image_id(&reference).as_ref() != Some(old)) {
        let _ = cmd::output(cmd::command("podman").args(["rmi", &old]));
    }
    Ok(reference)
}

/// The id of the image `reference` names in podman's store, if any.
fn image_id(reference: &str) -> Option<String> {
    cmd::output(cmd::command("podman").args(["image", "inspect", "--format", "{{.Id}}", reference]))
        .ok()
        .map(|id| id.trim().to_owned())
}

/// Fails unless `bin` is a static executable (no ELF program interpreter) for `arch`: the
/// image holds nothing beside it.
fn ensure_static(arch: Arch, bin: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(bin).with_context(|| format!("cannot read {}", bin.display()))?;
    let elf = Elf::parse(&bytes).with_context(|| format!("{} is no ELF64 file", bin.display()))?;
    if elf.machine != arch.elf_machine() {
        bail!(
            "{} is built for ELF machine {}, not {arch}",
            bin.display(),
            elf.machine
        );
    }
    if elf.interpreter {
        bail!(
            "{} is linked dynamically; the image has no libraries (build it with `cargo xtask \
             build --static`)",
            bin.display()
        );
    }
    Ok(())
}

/// What the image needs to know of a little-endian ELF64 executable.
#[derive(Debug, PartialEq)]
struct Elf {
    /// `e_machine`: the architecture it runs on.
    machine: u16,
    /// Whether it has a `PT_INTERP` program header (a dynamic loader to run it).
    interpreter: bool,
}

impl Elf {
    /// `None` when `elf` is not a little-endian ELF64 file or its headers are cut short.
    fn parse(elf: &[u8]) -> Option<Elf> {
        const PT_INTERP: u32 = 3;
        if elf.get(..6)? != b"\x7fELF\x02\x01" {
            return None;
        }
        let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?));
        let phoff =
            usize::try_from(u64::from_le_bytes(elf.get(0x20..0x28)?.try_into().ok()?)).ok()?;
        let (entry_size, entries) = (usize::from(u16_at(0x36)?), usize::from(u16_at(0x38)?));
        let mut interpreter = false;
        for i in 0..entries {
            let at = phoff + i * entry_size;
            let kind = u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?);
            interpreter |= kind == PT_INTERP;
        }
        Some(Elf {
            machine: u16_at(0x12)?,
            interpreter,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The final stage's instructions, comments dropped and a COPY reduced to its destination.
    fn final_stage(file: &str) -> Vec<String> {
        let text = std::fs::read_to_string(cmd::workspace_root().join("deploy").join(file))
            .expect("readable");
        let joined = text.replace("\\\n", " ");
        let lines: Vec<&str> = joined
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        let from = lines
            .iter()
            .rposition(|l| l.starts_with("FROM "))
            .expect("a FROM");
        lines[from..]
            .iter()
            .map(|l| match l.strip_prefix("COPY ") {
                Some(args) => format!("COPY -> {}", args.rsplit(' ').next().unwrap_or_default()),
                None => (*l).to_owned(),
            })
            .collect()
    }

    /// The image podman builds here and the one deploy/Dockerfile builds elsewhere have the
    /// same layout: empty base, binary path, labels, user, port, entrypoint and command.
    #[test]
    fn containerfile_and_dockerfile_agree() {
        let ours = final_stage("Containerfile");
        assert_eq!(ours, final_stage("Dockerfile"));
        assert_eq!(ours.first().map(String::as_str), Some("FROM scratch"));
        assert!(
            ours.contains(&"COPY -> /usr/local/bin/sockwatch".to_owned()),
            "{ours:?}"
        );
        assert!(ours.contains(&r#"ENTRYPOINT ["/usr/local/bin/sockwatch"]"#.to_owned()));
    }

    /// An x86-64 ELF64 header whose program headers (at 64, 56 bytes each) have these types.
    fn elf(types: &[u32]) -> Vec<u8> {
        let mut e = vec![0u8; 64];
        e[..6].copy_from_slice(b"\x7fELF\x02\x01");
        e[0x12..0x14].copy_from_slice(&62u16.to_le_bytes());
        e[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        e[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        e[0x38..0x3a].copy_from_slice(&u16::try_from(types.len()).unwrap().to_le_bytes());
        for t in types {
            let mut ph = vec![0u8; 56];
            ph[..4].copy_from_slice(&t.to_le_bytes());
            e.extend(ph);
        }
        e
    }

    #[test]
    fn elf_headers() {
        let x86 = |interpreter| {
            Some(Elf {
                machine: 62,
                interpreter,
            })
        };
        assert_eq!(Elf::parse(&elf(&[6, 3, 1])), x86(true), "dynamic");
        assert_eq!(Elf::parse(&elf(&[1, 1, 2])), x86(false), "static");
        assert_eq!(Elf::parse(b"#!/bin/sh\n"), None, "no ELF");
        let mut cut = elf(&[1, 3]);
        cut.truncate(64 + 56 + 2);
        assert_eq!(Elf::parse(&cut), None, "headers cut short");
        assert_eq!(Arch::X86_64.elf_machine(), 62);
    }
}
