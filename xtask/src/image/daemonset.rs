//! The DaemonSet's container (deploy/30-daemonset.yaml, its ConfigMap beside it) as `podman run`
//! options: the same capabilities, host pid namespace, network namespace of its own,
//! read-only root, limits, mounts at the same paths, user, command, arguments and environment,
//! read from the manifests so the check follows them.
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use yaml_rust2::{Yaml, YamlLoader};

/// What `podman run` needs to start the DaemonSet's container.
#[derive(Debug, PartialEq)]
pub struct Pod {
    /// Options before the image: security, namespaces, mounts, environment.
    pub options: Vec<String>,
    /// The container's command (`--entrypoint`) and arguments (after the image).
    pub command: String,
    pub args: Vec<String>,
    /// Host directories the hostPath volumes of type `DirectoryOrCreate` need (kubelet creates
    /// them).
    pub create: Vec<PathBuf>,
    /// Files of the ConfigMap volumes: (volume name, file name, contents).
    pub config_files: Vec<(String, String, String)>,
}

/// Reads the DaemonSet and ConfigMap manifests in `deploy`; `config_dir(volume)` is the host
/// directory a ConfigMap volume's files are written to, `node` the node name the downward API
/// gives.
pub fn pod(deploy: &Path, node: &str, config_dir: &dyn Fn(&str) -> PathBuf) -> anyhow::Result<Pod> {
    let daemonset = load(&deploy.join("30-daemonset.yaml"))?;
    let configmap = load(&deploy.join("20-configmap.yaml"))?;
    let spec = &daemonset["spec"]["template"]["spec"];
    let container = &spec["containers"][0];
    let mut pod = Pod {
        options: Vec::new(),
        command: single_command(container)?,
        args: strings(&container["args"])?,
        create: Vec::new(),
        config_files: Vec::new(),
    };
    pod.security(spec, &container["securityContext"])?;
    pod.limits(&container["resources"]["limits"])?;
    pod.environment(&container["env"], node)?;
    for mount in list(&container["volumeMounts"])? {
        let name = text(&mount["name"])?;
        let volume = list(&spec["volumes"])?
            .iter()
            .find(|v| v["name"].as_str() == Some(name))
            .with_context(|| format!("volumeMount {name} has no volume"))?;
        pod.mount(mount, volume, &configmap, config_dir)?;
    }
    Ok(pod)
}

impl Pod {
    fn security(&mut self, spec: &Yaml, security: &Yaml) -> anyhow::Result<()> {
        let caps = &security["capabilities"];
        if strings(&caps["drop"])? != ["ALL"] {
            bail!("the DaemonSet drops capabilities other than ALL: update the image check");
        }
        self.options.push("--cap-drop=ALL".into());
        for cap in strings(&caps["add"])? {
            self.options.push(format!("--cap-add={cap}"));
        }
        if spec["hostPID"].as_bool() == Some(true) {
            self.options.push("--pid=host".into());
        }
        // Without hostNetwork a pod has a network namespace of its own: so does the
        // container, with loopback only (no pod network is needed here).
        self.options
            .push(if spec["hostNetwork"].as_bool() == Some(true) {
                "--network=host".into()
            } else {
                "--network=none".into()
            });
        if security["readOnlyRootFilesystem"].as_bool() == Some(true) {
            // Only the DaemonSet's own mounts are writable: no tmpfs of podman's on /run, /tmp.
            self.options
                .extend(["--read-only".into(), "--read-only-tmpfs=false".into()]);
        }
        if security["privileged"].as_bool() != Some(false) {
            bail!("the DaemonSet's container is privileged: the image check runs the minimal one");
        }
        let user = security["runAsUser"].as_i64().context("runAsUser")?;
        let group = security["runAsGroup"].as_i64().context("runAsGroup")?;
        self.options.push(format!("--user={user}:{group}"));
        if security["appArmorProfile"]["type"].as_str() == Some("Unconfined") {
            self.options
                .push("--security-opt=apparmor=unconfined".into());
        }
        // seccompProfile RuntimeDefault: podman's default profile, as the kubelet's runtime.
        if security["seccompProfile"]["type"].as_str() != Some("RuntimeDefault") {
            bail!("the DaemonSet's seccomp profile is not RuntimeDefault: update the image check");
        }
        Ok(())
    }

    /// The memory and CPU limits (the BPF maps are charged to the memory one).
    fn limits(&mut self, limits: &Yaml) -> anyhow::Result<()> {
        let memory = text(&limits["memory"])?;
        let mib = memory
            .strip_suffix("Mi")
            .with_context(|| format!("memory limit {memory} is not in Mi"))?;
        self.options.push(format!("--memory={mib}m"));
        let cpu = text(&limits["cpu"])?;
        let millicores: u32 = cpu
            .strip_suffix('m')
            .and_then(|m| m.parse().ok())
            .with_context(|| format!("CPU limit {cpu} is not in millicores"))?;
        self.options
            .push(format!("--cpus={}", f64::from(millicores) / 1000.0));
        Ok(())
    }

    fn environment(&mut self, env: &Yaml, node: &str) -> anyhow::Result<()> {
        for var in list(env)? {
            let name = text(&var["name"])?;
            let value = if let Some(v) = var["value"].as_str() {
                v
            } else if var["valueFrom"]["fieldRef"]["fieldPath"].as_str() == Some("spec.nodeName") {
                node
            } else {
                bail!("environment variable {name}: only values and spec.nodeName are known");
            };
            self.options.push(format!("--env={name}={value}"));
        }
        Ok(())
    }

    fn mount(
        &mut self,
        mount: &Yaml,
        volume: &Yaml,
        configmap: &Yaml,
        config_dir: &dyn Fn(&str) -> PathBuf,
    ) -> anyhow::Result<()> {
        let at = text(&mount["mountPath"])?;
        let name = text(&volume["name"])?;
        let mut flags = vec![if mount["readOnly"].as_bool() == Some(true) {
            "ro"
        } else {
            "rw"
        }];
        if mount["mountPropagation"].as_str() == Some("HostToContainer") {
            flags.push("rslave");
        }
        if let Some(host) = volume["hostPath"]["path"].as_str() {
            if volume["hostPath"]["type"].as_str() == Some("DirectoryOrCreate") {
                self.create.push(host.into());
            }
            self.options
                .push(format!("--volume={host}:{at}:{}", flags.join(",")));
        } else if let Some(from) = volume["configMap"]["name"].as_str() {
            if configmap["metadata"]["name"].as_str() != Some(from) {
                bail!("volume {name}: ConfigMap {from} is not in 20-configmap.yaml");
            }
            let Yaml::Hash(data) = &configmap["data"] else {
                bail!("ConfigMap {from} has no data");
            };
            for (file, contents) in data {
                self.config_files
                    .push((name.into(), text(file)?.into(), text(contents)?.into()));
            }
            let dir = config_dir(name);
            self.options.push(format!(
                "--volume={}:{at}:{}",
                dir.display(),
                flags.join(",")
            ));
        } else if volume["emptyDir"]["medium"].as_str() == Some("Memory") {
            let size = text(&volume["emptyDir"]["sizeLimit"])?;
            let mib = size
                .strip_suffix("Mi")
                .with_context(|| format!("volume {name}: sizeLimit {size} is not in Mi"))?;
            self.options.push(format!("--tmpfs={at}:rw,size={mib}m"));
        } else {
            bail!("volume {name}: only hostPath, configMap and memory emptyDir are known");
        }
        Ok(())
    }
}

fn load(path: &Path) -> anyhow::Result<Yaml> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    YamlLoader::load_from_str(&text)
        .with_context(|| format!("{} is not YAML", path.display()))?
        .into_iter()
        .next()
        .with_context(|| format!("{} is empty", path.display()))
}

/// The container's `command`, which must be one program (the image's entrypoint).
fn single_command(container: &Yaml) -> anyhow::Result<String> {
    match strings(&container["command"])?.as_slice() {
        [program] => Ok(program.clone()),
        other => bail!("the container's command is {other:?}, not one program"),
    }
}

fn list(y: &Yaml) -> anyhow::Result<&[Yaml]> {
    y.as_vec()
        .map(Vec::as_slice)
        .with_context(|| format!("expected a list, found {y:?}"))
}

fn text(y: &Yaml) -> anyhow::Result<&str> {
    y.as_str()
        .with_context(|| format!("expected a string, found {y:?}"))
}

fn strings(y: &Yaml) -> anyhow::Result<Vec<String>> {
    list(y)?
        .iter()
        .map(|s| text(s).map(str::to_owned))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed manifests give the DaemonSet's exact options.
    #[test]
    fn committed_daemonset() {
        let deploy = crate::cmd::workspace_root().join("deploy");
        let pod = pod(&deploy, "node-1", &|v| PathBuf::from(format!("/cfg/{v}"))).unwrap();
        assert_eq!(pod.command, "/usr/local/bin/sockwatch");
        assert_eq!(
            pod.args,
            [
                "run",
                "--probe-mode",
                "auto",
                "--config",
                "/etc/sockwatch/sockwatch.toml",
                "--listen",
                "0.0.0.0:9469"
            ]
        );
        assert_eq!(
            pod.options,
            [
                "--cap-drop=ALL",
                "--cap-add=BPF",
                "--cap-add=PERFMON",
                "--cap-add=SYS_ADMIN",
                "--cap-add=SYS_PTRACE",
                "--cap-add=DAC_READ_SEARCH",
                "--pid=host",
                "--network=none",
                "--read-only",
                "--read-only-tmpfs=false",
                "--user=0:0",
                "--security-opt=apparmor=unconfined",
                "--memory=256m",
                "--cpus=0.5",
                "--env=SOCKWATCH_LOG=info",
                "--env=SOCKWATCH_LOG_FORMAT=text",
                "--env=NODE_NAME=node-1",
                "--volume=/sys/kernel/btf:/sys/kernel/btf:ro",
                "--volume=/sys/kernel/tracing:/sys/kernel/tracing:rw",
                "--volume=/run:/run:ro,rslave",
                "--volume=/var/lib/kubelet/device-plugins:/var/lib/kubelet/device-plugins:ro,rslave",
                "--volume=/var/log/pods:/var/log/pods:ro",
                "--volume=/cfg/config:/etc/sockwatch:ro",
                "--tmpfs=/tmp:rw,size=16m",
            ]
        );
        assert_eq!(
            pod.create,
            [
                PathBuf::from("/var/lib/kubelet/device-plugins"),
                PathBuf::from("/var/log/pods")
            ]
        );
        let [(volume, file, contents)] = pod.config_files.as_slice() else {
            panic!("one config file, got {:?}", pod.config_files);
        };
        assert_eq!(
            (volume.as_str(), file.as_str()),
            ("config", "sockwatch.toml")
        );
        assert!(
            contents.contains("\nevents_filter = \"verdicts\"\n"),
            "{contents}"
        );
    }
}
