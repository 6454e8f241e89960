//! What goes into a guest besides busybox and the kernel's modules: the agent's integration
//! test executable, the `sockwatch` binary it runs, and the Go listener, built for the
//! guest's architecture.
use std::{
    path::{Path, PathBuf},
    process::Stdio,
};

use anyhow::Context as _;

use crate::{arch::Arch, cmd};

/// The Go daemon's listener the verdict tests drive (a real `net.Listen("unix", …)`). The guest
/// has no Go toolchain, so it is built here and handed over as `SOCKWATCH_GO_LISTENER`.
const GO_LISTENER_SRC: &str = "sockwatch/tests/go/golistener.go";
pub const GO_LISTENER_GUEST: &str = "/bin/golistener";

/// The agent's one integration-test target (`sockwatch/tests/it/`), a module per concern.
pub const INTEGRATION_TESTS: &str = "it";

/// The host binaries that go into the guest.
pub struct Payload {
    /// The [`INTEGRATION_TESTS`] executable.
    pub tests: PathBuf,
    pub sockwatch: PathBuf,
    /// Static build of [`GO_LISTENER_SRC`], when the tests have one.
    pub go_listener: Option<PathBuf>,
}

/// Builds the agent's integration-test executable for `arch` (cross-built for a guest that is
/// not this machine's architecture) and finds it in cargo's JSON messages, along with the
/// `sockwatch` binary built for it. One target, not the library's and the binary's unit-test
/// executables, which no guest runs.
///
/// Release profile: under TCG, unoptimized aya code is ~50x slower than optimized (a debug
/// `sockwatch check` took 2 minutes in the guest, a release one 2 s), and the release
/// dependencies are the ones `cargo xtask run` builds anyway.
pub fn build_payload(arch: Arch) -> anyhow::Result<Payload> {
    let mut build = cmd::cargo();
    build.args([
        "test",
        "-p",
        "sockwatch",
        "--release",
        "--no-run",
        "--test",
        INTEGRATION_TESTS,
        "--message-format=json-render-diagnostics",
    ]);
    if arch != Arch::host() {
        build.args(["--target", arch.rust_target()]);
    }
    let out = cmd::output(build.stderr(Stdio::inherit()))
        .with_context(|| format!("building the agent's test executable for {arch}"))?;
    let agent_manifest = cmd::workspace_root().join("sockwatch/Cargo.toml");
    let mut tests = None;
    let mut sockwatch = None;
    for line in out.lines() {
        let Some(a) = Artifact::parse(line) else {
            continue;
        };
        if Path::new(&a.manifest_path) != agent_manifest {
            continue;
        }
        if a.kind == "test" && a.name == INTEGRATION_TESTS {
            tests = Some(a.executable);
        } else if a.kind == "bin" && a.name == "sockwatch" && !a.test {
            sockwatch = Some(a.executable);
        }
    }
    let tests = tests.context("cargo built no sockwatch/tests/it executable")?;
    let sockwatch = sockwatch.context("cargo built no sockwatch binary for the agent's tests")?;
    let go_listener = build_go_listener(arch)?;
    Ok(Payload {
        tests,
        sockwatch,
        go_listener,
    })
}

/// `go build` of [`GO_LISTENER_SRC`] for `arch` with cgo off (a static binary needs no
/// libraries in the guest), caches under `target/vm/go/<arch>`.
fn build_go_listener(arch: Arch) -> anyhow::Result<Option<PathBuf>> {
    let src = cmd::workspace_root().join(GO_LISTENER_SRC);
    if !src.is_file() {
        return Ok(None);
    }
    let dir = cmd::target_dir().join("vm/go").join(arch.to_string());
    let out = dir.join("golistener");
    cmd::run(
        cmd::command("go")
            .args(["build", "-o"])
            .arg(&out)
            .arg(&src)
            .env("CGO_ENABLED", "0")
            .env("GOARCH", arch.go_arch())
            .env("GOCACHE", dir.join("cache"))
            .env("GOPATH", dir.join("path")),
    )
    .context("building the Go listener for the guest (apt-get install golang-go)")?;
    Ok(Some(out))
}

/// The fields of one cargo `compiler-artifact` message that matter here.
#[derive(Debug, PartialEq)]
struct Artifact {
    manifest_path: String,
    name: String,
    kind: String,
    test: bool,
    executable: PathBuf,
}

impl Artifact {
    fn parse(line: &str) -> Option<Artifact> {
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        if v["reason"] != "compiler-artifact" {
            return None;
        }
        let target = &v["target"];
        Some(Artifact {
            manifest_path: v["manifest_path"].as_str()?.to_owned(),
            name: target["name"].as_str()?.to_owned(),
            kind: target["kind"].as_array()?.first()?.as_str()?.to_owned(),
            test: v["profile"]["test"].as_bool()?,
            executable: PathBuf::from(v["executable"].as_str()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integration_test_artifact() {
        let line = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/agent#0.1.0","manifest_path":"/w/sockwatch/Cargo.toml","target":{"kind":["test"],"crate_types":["bin"],"name":"it","src_path":"/w/sockwatch/tests/it/main.rs","edition":"2024","doc":false,"doctest":false,"test":true},"profile":{"opt_level":"0","debuginfo":2,"debug_assertions":true,"overflow_checks":true,"test":true},"features":[],"filenames":["/w/target/debug/deps/it-0f1e"],"executable":"/w/target/debug/deps/it-0f1e","fresh":true}"#;
        assert_eq!(
            Artifact::parse(line),
            Some(Artifact {
                manifest_path: "/w/sockwatch/Cargo.toml".into(),
                name: "it".into(),
                kind: "test".into(),
                test: true,
                executable: "/w/target/debug/deps/it-0f1e".into(),
            })
        );
        // Libraries have no executable; other messages are not artifacts.
        let lib = r#"{"reason":"compiler-artifact","manifest_path":"/m","target":{"kind":["lib"],"name":"x"},"profile":{"test":false},"executable":null}"#;
        assert_eq!(Artifact::parse(lib), None);
        assert_eq!(
            Artifact::parse(r#"{"reason":"build-finished","success":true}"#),
            None
        );
        assert_eq!(Artifact::parse("   Compiling agent"), None);
    }
}
