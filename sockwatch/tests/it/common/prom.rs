//! A real Prometheus scraping the agent as the DaemonSet runs it, with the shipped rules: the
//! harness of the end-to-end tests. Debian's `prometheus` (`promtool` too) is on the host
//! only.
use std::{
    collections::BTreeSet,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use super::skip;
use yaml_rust2::{Yaml, YamlLoader};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn s(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_string()
}

/// Debian's Prometheus server, where installed.
pub fn prometheus_bin() -> Option<&'static str> {
    ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

/// Whether an end-to-end test can run here (the host, as root); prints why not.
pub fn runs_here(test: &str) -> bool {
    if std::env::var_os("SOCKWATCH_IN_VM").is_some() {
        skip(
            test,
            "the VM guest has no Prometheus; this runs on the host",
        );
        return false;
    }
    if !super::is_root() {
        assert!(
            std::env::var_os("SOCKWATCH_REQUIRE_TIERS").is_none(),
            "{test}: tiers are required but not running as root"
        );
        skip(test, "needs root to load eBPF programs");
        return false;
    }
    true
}

/// Kills and reaps a child process when the test ends, however it ends.
pub struct Reaped(pub Child, pub &'static str);

impl Drop for Reaped {
    fn drop(&mut self) {
        // SAFETY: kill(2) takes no pointers; the pid is our own child's, not yet reaped.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
        eprintln!("{} did not stop on SIGTERM: killed", self.1);
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// GET over HTTP/1.0 (no chunking, the server closes): (status, body).
pub fn http_get(addr: SocketAddr, target: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    write!(s, "GET {target} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_string()))
}

fn urlencode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus instant query's result vector (panics on an API error).
pub fn query(prom: SocketAddr, q: &str) -> Vec<Value> {
    let (status, body) = http_get(prom, &format!("/api/v1/query?query={}", urlencode(q)))
        .unwrap_or_else(|e| panic!("querying Prometheus for {q}: {e}"));
    let v: Value = serde_json::from_str(&body)
        .unwrap_or_else(|e| panic!("Prometheus answered {status} to {q} with {body:?}: {e}"));
    assert_eq!(v["status"], "success", "query {q}: {v}");
    match &v["data"]["result"] {
        Value::Array(a) => a.clone(),
        // Scalars and strings are one value.
        other if !other.is_null() => vec![other.clone()],
        _ => Vec::new(),
    }
}

fn to_json(y: &Yaml) -> Value {
    match y {
        Yaml::Hash(h) => Value::Object(
            h.iter()
                .map(|(k, v)| {
                    let key = match k {
                        Yaml::String(s) => s.clone(),
                        other => format!("{other:?}"),
                    };
                    (key, to_json(v))
                })
                .collect(),
        ),
        Yaml::Array(a) => Value::Array(a.iter().map(to_json).collect()),
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::Real(r) => r
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or(Value::String(r.clone()), Value::Number),
        Yaml::Boolean(b) => Value::Bool(*b),
        _ => Value::Null,
    }
}

/// The documents of a YAML file, as JSON.
pub fn load_yaml(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    YamlLoader::load_from_str(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .iter()
        .map(to_json)
        .collect()
}

/// The DaemonSet's sockwatch container and its pod spec.
pub fn daemonset() -> (Value, Value) {
    let ds = load_yaml(&repo().join("deploy/30-daemonset.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("a DaemonSet in deploy/30-daemonset.yaml");
    let pod = ds["spec"]["template"]["spec"].clone();
    let c = pod["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == "sockwatch"))
        .cloned()
        .expect("the sockwatch container");
    (c, pod)
}

/// The container's hostPath mounts are the host paths themselves, and those the DaemonSet
/// requires to exist (type Directory) exist here.
pub fn check_mounts(container: &Value, pod: &Value) {
    let volumes = pod["volumes"].as_array().expect("volumes");
    for m in container["volumeMounts"].as_array().expect("volumeMounts") {
        let v = volumes
            .iter()
            .find(|v| v["name"] == m["name"])
            .unwrap_or_else(|| panic!("volume {} for mount {m}", m["name"]));
        let Some(host) = v["hostPath"]["path"].as_str() else {
            continue; // ConfigMap, emptyDir
        };
        assert_eq!(
            m["mountPath"].as_str(),
            Some(host),
            "hostPath {host} must be mounted at the same path: sockwatch reports host paths"
        );
        if v["hostPath"]["type"] == "Directory" {
            assert!(
                Path::new(host).is_dir(),
                "the DaemonSet requires {host} on the node; this host has none"
            );
        }
    }
}

/// `sockwatch.toml` from the ConfigMap.
pub fn configmap_toml() -> String {
    let cm = load_yaml(&repo().join("deploy/20-configmap.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "ConfigMap")
        .expect("a ConfigMap");
    cm["data"]["sockwatch.toml"]
        .as_str()
        .expect("data.sockwatch.toml")
        .to_string()
}

/// The PrometheusRule's groups as a Prometheus rule file (JSON is YAML).
pub fn rule_file() -> String {
    let rule = load_yaml(&repo().join("deploy/60-prometheusrule.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .expect("a PrometheusRule");
    serde_json::json!({ "groups": rule["spec"]["groups"] }).to_string()
}

/// The agent as the DaemonSet runs it (its args, env and the ConfigMap's configuration, plus
/// `watches`), and Prometheus scraping it every second with the PrometheusRule's rules.
/// Both are stopped when it drops.
pub struct Stack {
    pub agent: Reaped,
    pub agent_addr: SocketAddr,
    pub agent_log: PathBuf,
    pub events: PathBuf,
    pub prom: Reaped,
    pub prom_addr: SocketAddr,
    pub prom_log: PathBuf,
}

impl Stack {
    /// Starts both in `tmp`, once each answers; `watches` are (name, directory), created.
    pub fn start(tmp: &Path, watches: &[(&str, &Path)]) -> Stack {
        let prometheus = prometheus_bin().expect(
            "Debian's prometheus is not installed: `apt-get install prometheus` (deploy/check.sh installs it)",
        );
        let started = Instant::now();
        // The agent, as the DaemonSet runs it.
        let (container, pod) = daemonset();
        check_mounts(&container, &pod);
        let config = tmp.join("sockwatch.toml");
        let mut watch_toml = String::new();
        for (name, dir) in watches {
            std::fs::create_dir_all(dir).expect("mkdir");
            watch_toml += &format!("\n[[watches]]\nname = \"{name}\"\npath = \"{}\"\n", s(dir));
        }
        std::fs::write(&config, configmap_toml() + &watch_toml).expect("write config");
        let agent_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let mut args: Vec<String> = container["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("string arg").to_string())
            .collect();
        for (flag, value) in [
            ("--config", s(&config)),
            ("--listen", agent_addr.to_string()),
        ] {
            let at = args
                .iter()
                .position(|a| a == flag)
                .unwrap_or_else(|| panic!("the DaemonSet passes {flag}"));
            args[at + 1] = value;
        }
        let mut agent_cmd = Command::new(super::agent::sockwatch_bin());
        agent_cmd.args(&args);
        // Values from the downward API (NODE_NAME) have no literal to pass here.
        for e in container["env"].as_array().into_iter().flatten() {
            if let Some(value) = e["value"].as_str() {
                agent_cmd.env(e["name"].as_str().expect("env name"), value);
            }
        }
        let agent_log = tmp.join("agent.log");
        let events = tmp.join("events.jsonl");
        let agent = agent_cmd
            .stdout(std::fs::File::create(&events).expect("events file"))
            .stderr(std::fs::File::create(&agent_log).expect("log file"))
            .spawn()
            .expect("spawn sockwatch");
        let mut agent = Reaped(agent, "sockwatch");
        eprintln!("sockwatch {}", args.join(" "));
        wait_until(
            "sockwatch /readyz answers 200",
            Duration::from_secs(60),
            || {
                if let Ok(Some(status)) = agent.0.try_wait() {
                    panic!(
                        "sockwatch exited ({status}) before it was ready:\n{}",
                        tail(&agent_log)
                    );
                }
                matches!(http_get(agent_addr, "/readyz"), Ok((200, _))).then_some(())
            },
        );
        eprintln!("agent ready after {:?}", started.elapsed());

        // Prometheus, scraping it every second with the shipped rules.
        let rules = tmp.join("sockwatch.rules.json");
        std::fs::write(&rules, rule_file()).expect("write rules");
        let prom_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let prom_config = tmp.join("prometheus.yml");
        std::fs::write(
            &prom_config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {}\n\
                 scrape_configs:\n  - job_name: sockwatch\n    static_configs:\n      - targets: ['{agent_addr}']\n        labels:\n          node: e2e-node\n",
                s(&rules)
            ),
        )
        .expect("write prometheus.yml");
        let prom_log = tmp.join("prometheus.log");
        let prom = Command::new(prometheus)
            .arg(format!("--config.file={}", s(&prom_config)))
            .arg(format!("--storage.tsdb.path={}", s(&tmp.join("tsdb"))))
            .arg(format!("--web.listen-address={prom_addr}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&prom_log).expect("prometheus log"))
            .spawn()
            .expect("spawn prometheus");
        let mut prom = Reaped(prom, "prometheus");
        wait_until(
            "Prometheus is ready and scrapes sockwatch",
            Duration::from_secs(60),
            || {
                if let Ok(Some(status)) = prom.0.try_wait() {
                    panic!("prometheus exited ({status}):\n{}", tail(&prom_log));
                }
                let up = matches!(http_get(prom_addr, "/-/ready"), Ok((200, _)))
                    && query(prom_addr, r#"up{job="sockwatch"} == 1"#).len() == 1;
                up.then_some(())
            },
        );
        eprintln!("prometheus scraping after {:?}", started.elapsed());

        Stack {
            agent,
            agent_addr,
            agent_log,
            events,
            prom,
            prom_addr,
            prom_log,
        }
    }
}

pub fn wait_until<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

pub fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

pub fn firing(prom: SocketAddr) -> BTreeSet<String> {
    query(prom, r#"ALERTS{alertstate="firing"}"#)
        .iter()
        .filter_map(|a| a["metric"]["alertname"].as_str().map(str::to_string))
        .collect()
}
