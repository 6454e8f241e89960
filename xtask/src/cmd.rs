//! Child processes and workspace paths. Every child gets LLVM 22's tools first on `PATH`, so
//! bpf-linker, clang and llvm-config agree on one LLVM wherever xtask starts them from.
use std::{
    ffi::{OsStr, OsString},
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context as _, bail};

/// The LLVM that bpf-linker 0.13 is built against (`--features llvm-22`).
pub const LLVM_BIN: &str = "/usr/lib/llvm-22/bin";

/// `PATH` for children: [`LLVM_BIN`] first, then the caller's `PATH`.
pub fn path_env() -> OsString {
    let mut dirs = vec![PathBuf::from(LLVM_BIN)];
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path).filter(|d| d != Path::new(LLVM_BIN)));
    }
    std::env::join_paths(dirs).expect("PATH entries contain no ':'")
}

/// A [`Command`] for `program` with [`path_env`] as its `PATH` (also used to find `program`).
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("PATH", path_env());
    cmd
}

/// `program arg arg ...`, for messages.
pub fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `cmd` with inherited stdio; fails unless it exits 0.
pub fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let what = describe(cmd);
    let status = cmd
        .status()
        .with_context(|| format!("cannot start `{what}`"))?;
    if !status.success() {
        bail!("`{what}` failed ({status})");
    }
    Ok(())
}

/// Runs `cmd` and returns its stdout; fails with its stderr unless it exits 0.
pub fn output(cmd: &mut Command) -> anyhow::Result<String> {
    let what = describe(cmd);
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot start `{what}`"))?;
    if !out.status.success() {
        bail!(
            "`{what}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8(out.stdout).with_context(|| format!("`{what}` printed non-UTF-8"))
}

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits inside the workspace")
        .to_path_buf()
}

/// Cargo's target directory: `CARGO_TARGET_DIR` or `<root>/target`.
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => workspace_root().join(dir),
        None => workspace_root().join("target"),
    }
}

/// `cargo` (rustup's proxy, so `+nightly` works) run from the workspace root.
pub fn cargo() -> Command {
    let mut cmd = command("cargo");
    cmd.current_dir(workspace_root());
    cmd
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llvm_comes_first_once() {
        let path = path_env();
        let dirs: Vec<_> = std::env::split_paths(&path).collect();
        assert_eq!(dirs[0], Path::new(LLVM_BIN));
        assert_eq!(dirs.iter().filter(|d| *d == Path::new(LLVM_BIN)).count(), 1);
    }

    #[test]
    fn describe_joins_program_and_args() {
        let mut cmd = Command::new("apt-get");
        cmd.args(["install", "-y", "cpio"]);
        assert_eq!(describe(&cmd), "apt-get install -y cpio");
    }
}
