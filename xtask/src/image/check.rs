//! The image under a real container runtime, as the DaemonSet runs it (podman with the
//! manifest's capabilities, host pid namespace, read-only root, mounts, arguments and
//! environment, see [`super::daemonset`]): `sockwatch check` exits 0 naming a tier for every
//! hook, and `sockwatch run` reports a bind made on the host by a host process, with its
//! exact path and host pid.
use std::{
    io::{BufRead as _, BufReader, Read},
    os::unix::net::UnixListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use super::daemonset::{self, Pod};
use crate::cmd;

/// The node name the downward API gives the container.
const NODE: &str = "image-check";
/// The hooks `sockwatch check` reports the tier `run` would attach for.
const HOOKS: &[&str] = &[
    "bind", "listen", "unlink", "rename", "connect", "release", "receive", "fork", "exit",
];
/// Probes loaded and the start-up scan done, in a slow CI machine's time.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// The bind's event after the bind.
const EVENT_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs both checks on `image`; fails with a one-line reason.
pub fn run(image: &str) -> anyhow::Result<()> {
    let scratch = Scratch::new()?;
    let pod = daemonset::pod(&cmd::workspace_root().join("deploy"), NODE, &|volume| {
        scratch.dir.join(volume)
    })?;
    scratch.prepare(&pod)?;
    check(&pod, image)?;
    run_reports_host_bind(&pod, image, &scratch.dir)
}

/// `podman run` of `image` as the DaemonSet's container, with `args` instead of its own.
fn podman_run(pod: &Pod, image: &str, name: &str, args: &[String]) -> Command {
    let mut c = cmd::command("podman");
    c.args(["run", "--rm", "--name", name])
        .args(runtime_options())
        .args(&pod.options)
        .args(["--entrypoint", &pod.command, image])
        .args(args);
    c
}

/// What this kind of machine needs of podman beyond the DaemonSet's settings, and why:
/// - runc: crun 1.8 refuses to start any container where cgroup v1 and v2 are mounted side by
///   side ("cgroups in hybrid mode not supported").
/// - explicit rlimits: podman's defaults (nofile and nproc at 1048576 and 4194304) exceed the
///   hard limits of a machine that withholds CAP_SYS_RESOURCE, and the runtime's setrlimit
///   fails. 1024 open files is containerd's default for a pod; root is exempt from nproc.
fn runtime_options() -> [&'static str; 5] {
    [
        "--runtime=runc",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=4096:4096",
    ]
}

/// `sockwatch check` exits 0 and names the tier `run` would attach for every hook.
fn check(pod: &Pod, image: &str) -> anyhow::Result<()> {
    let name = format!("sockwatch-image-check-{}", std::process::id());
    let run = podman_run(pod, image, &name, &["check".into()])
        .stdin(Stdio::null())
        .output()
        .context("cannot start podman (apt-get install podman)")?;
    let last_error = String::from_utf8_lossy(&run.stderr)
        .lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or_default()
        .to_owned();
    match run.status.code() {
        Some(0) => {}
        // podman's own failures: it could not create or start the container.
        Some(code @ 125..=127) => {
            bail!("podman cannot run the image here (exit {code}): {last_error}")
        }
        _ => bail!(
            "`sockwatch check` in the image failed ({}): {last_error}",
            run.status
        ),
    }
    let out = String::from_utf8_lossy(&run.stdout);
    for hook in HOOKS {
        let prefix = format!("run would attach {hook}: ");
        let tier = out
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .with_context(|| format!("`sockwatch check` in the image names no tier for {hook}"))?;
        println!("xtask: image: check: {hook} would attach {tier}");
    }
    Ok(())
}

/// `sockwatch run` with the DaemonSet's arguments (every event printed) reports a socket a
/// host process binds under the host's /run, which the container sees through the
/// DaemonSet's /run mount: the exact path and the binder's host pid.
fn run_reports_host_bind(pod: &Pod, image: &str, scratch: &Path) -> anyhow::Result<()> {
    let name = format!("sockwatch-image-run-{}", std::process::id());
    let mut args = pod.args.clone();
    args.extend(["--events-filter".into(), "all".into()]);
    let mut podman = podman_run(pod, image, &name, &args);
    podman.stdout(Stdio::piped()).stderr(Stdio::piped());
    let started = Instant::now();
    let mut agent = Agent::spawn(podman, name)?;
    agent.wait_for(START_TIMEOUT, "the start-up scan", |stream, line| {
        stream == Stream::Err && line.contains("startup scan")
    })?;
    println!(
        "xtask: image: run: probes attached and start-up scan done in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let path = scratch.join("host.sock");
    let _listener = UnixListener::bind(&path)
        .with_context(|| format!("cannot bind {} on the host", path.display()))?;
    let pid = std::process::id();
    let want = path.to_str().context("the socket's path is not UTF-8")?;
    agent.wait_for(EVENT_TIMEOUT, "the host's bind event", |stream, line| {
        stream == Stream::Out && is_bind(line, want, pid)
    })?;
    println!("xtask: image: run: reported the host's bind of {want} by pid {pid}");
    explain_names_binder(pod, &agent.name, want, pid)?;
    agent.stop()
}

/// `sockwatch explain --format json PATH` in the running container (as `kubectl exec` runs it)
/// gets the agent's own answer over the pod's loopback: its node name from the downward API,
/// the path, and the host process among the socket's owners.
fn explain_names_binder(pod: &Pod, container: &str, path: &str, tgid: u32) -> anyhow::Result<()> {
    let out = cmd::output(cmd::command("podman").args([
        "exec",
        container,
        &pod.command,
        "explain",
        "--format",
        "json",
        path,
    ]))
    .context("`sockwatch explain` in the running container")?;
    let answer: serde_json::Value = serde_json::from_str(out.trim())
        .with_context(|| format!("`sockwatch explain` printed no JSON: {out}"))?;
    if answer["node"] != NODE || answer["path"] != path {
        bail!(
            "`sockwatch explain` did not answer from the agent (node {NODE}, path {path}): {out}"
        );
    }
    let owned = answer["sockets"].as_array().is_some_and(|sockets| {
        sockets.iter().any(|s| {
            s["owners"]
                .as_array()
                .is_some_and(|owners| owners.iter().any(|o| o["tgid"] == tgid))
        })
    });
    if !owned {
        bail!("`sockwatch explain` names no socket at {path} owned by pid {tgid}: {out}");
    }
    println!("xtask: image: explain (podman exec): {path} owned by pid {tgid}, node {NODE}");
    Ok(())
}

/// Whether `line` is the events output's bind of `path` by process `tgid`.
fn is_bind(line: &str, path: &str, tgid: u32) -> bool {
    let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
        return false;
    };
    event["kind"] == "bind" && event["path"] == path && event["tgid"] == tgid
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Stream {
    Out,
    Err,
}

/// The running container: its lines as they come, removed when dropped.
struct Agent {
    child: Child,
    name: String,
    lines: mpsc::Receiver<(Stream, String)>,
    /// Everything it printed, for the failure message.
    seen: Vec<String>,
}

impl Agent {
    fn spawn(mut podman: Command, name: String) -> anyhow::Result<Agent> {
        let what = cmd::describe(&podman);
        let mut child = podman
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start `{what}`"))?;
        let (tx, lines) = mpsc::channel();
        forward(child.stdout.take(), Stream::Out, tx.clone());
        forward(child.stderr.take(), Stream::Err, tx);
        Ok(Agent {
            child,
            name,
            lines,
            seen: Vec::new(),
        })
    }

    /// Reads lines until `found` holds for one; fails after `timeout` or when the agent exits.
    fn wait_for(
        &mut self,
        timeout: Duration,
        what: &str,
        found: impl Fn(Stream, &str) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok((stream, line)) => {
                    let hit = found(stream, &line);
                    self.seen.push(line);
                    if hit {
                        return Ok(());
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    bail!("no {what} within {timeout:?}; {}", self.tail())
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait()?;
                    bail!(
                        "the container exited ({status}) before {what}; {}",
                        self.tail()
                    )
                }
            }
        }
    }

    /// Stops the agent as the kubelet does (SIGTERM); fails unless it exits 0.
    fn stop(mut self) -> anyhow::Result<()> {
        cmd::output(cmd::command("podman").args(["stop", "--time", "15", &self.name]))?;
        let status = self.child.wait()?;
        if !status.success() {
            bail!("the agent exited {status} on SIGTERM; {}", self.tail());
        }
        Ok(())
    }

    fn tail(&self) -> String {
        let from = self.seen.len().saturating_sub(5);
        format!("its last lines: {}", self.seen[from..].join(" | "))
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = cmd::command("podman")
                .args(["rm", "--force", &self.name])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = self.child.wait();
        }
    }
}

/// Sends each line of `from` to `to` from a thread of its own.
fn forward(
    from: Option<impl Read + Send + 'static>,
    stream: Stream,
    to: mpsc::Sender<(Stream, String)>,
) {
    let Some(from) = from else { return };
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            if to.send((stream, line)).is_err() {
                return;
            }
        }
    });
}

/// A directory under the host's /run (the DaemonSet mounts /run, so the container sees it at
/// the same path) for the ConfigMap's files and the host's socket; removed when dropped.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new() -> anyhow::Result<Scratch> {
        let dir = PathBuf::from(format!("/run/sockwatch-image-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Scratch { dir })
    }

    /// Writes the ConfigMap's files and creates the host directories kubelet would create.
    fn prepare(&self, pod: &Pod) -> anyhow::Result<()> {
        for (volume, file, contents) in &pod.config_files {
            let dir = self.dir.join(volume);
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join(file), contents)
                .with_context(|| format!("cannot write {file} of volume {volume}"))?;
        }
        for dir in &pod.create {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create the host's {}", dir.display()))?;
        }
        Ok(())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_line() {
        let line = r#"{"kind":"bind","tgid":41,"pid":42,"path":"/run/x/host.sock","ret":0}"#;
        assert!(is_bind(line, "/run/x/host.sock", 41));
        assert!(
            !is_bind(line, "/run/x/host.sock", 42),
            "the thread's id, not the process's"
        );
        assert!(!is_bind(line, "/run/x/host.soc", 41));
        let listen = line.replace("\"bind\"", "\"listen\"");
        assert!(!is_bind(&listen, "/run/x/host.sock", 41));
        assert!(!is_bind(
            "startup scan: 3 path sockets",
            "/run/x/host.sock",
            41
        ));
    }
}
