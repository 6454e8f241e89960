//! End to end against a real Prometheus (Debian's `prometheus`), as root: the agent runs with
//! the DaemonSet's command line and the ConfigMap's configuration, Prometheus scrapes it every
//! second with the PrometheusRule's rules loaded (as they ship: production `for:` durations),
//! and scenarios S22 and S1 happen for real. Then:
//! - S22 (a Go daemon with the seed's fix rolled over by a Go successor: a takeover) puts no
//!   alert of its watch in `ALERTS`, neither pending nor firing;
//! - after S1, SockwatchOrphanedListener and SockwatchForeignUnlink reach `firing`;
//! - `promtool check metrics` has nothing to say about the agent's scrape;
//! - every PromQL expression of every dashboard returns data from that Prometheus.
//!
//! What differs from the pod: the binary is the one cargo built, `--listen` is a free
//! loopback port instead of 0.0.0.0:9469, `--config` is a copy of the ConfigMap's
//! `sockwatch.toml` plus one watch per scenario (so each scenario's alerts carry its own
//! `watch` label, and activity elsewhere on the node is not mistaken for it); the DaemonSet's
//! hostPath mounts are checked to be the host paths
//! themselves (so the agent sees here what it sees in the pod).
//!
//! Takes about 100 s: the orphaned-listener alert holds for one minute before it fires.
mod common;

use std::{
    collections::BTreeSet,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use common::actor::Actor;
use serde_json::Value;
use yaml_rust2::{Yaml, YamlLoader};

#[test]
#[ignore = "helper process for the scenario, run by common::actor"]
fn actor() {
    common::actor::serve();
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn s(p: &Path) -> String {
    p.to_str().expect("utf-8 path").to_string()
}

/// Kills and reaps a child process when the test ends, however it ends.
struct Reaped(Child, &'static str);

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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// GET over HTTP/1.0 (no chunking, the server closes): (status, body).
fn http_get(addr: SocketAddr, target: &str) -> std::io::Result<(u16, String)> {
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
fn query(prom: SocketAddr, q: &str) -> Vec<Value> {
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
fn load_yaml(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    YamlLoader::load_from_str(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .iter()
        .map(to_json)
        .collect()
}

/// The DaemonSet's sockwatch container and its pod spec.
fn daemonset() -> (Value, Value) {
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
fn check_mounts(container: &Value, pod: &Value) {
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
fn configmap_toml() -> String {
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
fn rule_file() -> String {
    let rule = load_yaml(&repo().join("deploy/60-prometheusrule.yaml"))
        .into_iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .expect("a PrometheusRule");
    serde_json::json!({ "groups": rule["spec"]["groups"] }).to_string()
}

/// Every panel expression of every dashboard, Grafana variables replaced as
/// deploy/tests/promrules.py does ("All" selected, a 5-minute range).
fn dashboard_exprs() -> Vec<(String, String)> {
    fn walk(v: &Value, file: &str, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(e)) = m.get("expr")
                    && !e.trim().is_empty()
                {
                    let title = m.get("legendFormat").and_then(Value::as_str).unwrap_or("");
                    out.push((format!("{file} ({title})"), substitute(e)));
                }
                for (k, v) in m {
                    if k != "templating" {
                        walk(v, file, out);
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, file, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("dashboards"))
        .expect("dashboards/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    for f in files {
        let d: Value = serde_json::from_str(&std::fs::read_to_string(&f).expect("read"))
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let name = f.file_name().expect("name").to_string_lossy().into_owned();
        walk(&d["panels"], &name, &mut out);
    }
    assert!(!out.is_empty(), "no dashboard expressions found");
    out
}

fn substitute(expr: &str) -> String {
    const VARS: &[(&str, &str)] = &[
        ("__rate_interval", "1m"),
        ("__interval", "1m"),
        ("__range", "5m"),
        ("node", ".*"),
        ("watch", ".+"),
        ("hook", ".+"),
        ("job", ".+"),
    ];
    let mut e = expr.to_string();
    for (name, value) in VARS {
        e = e
            .replace(&format!("${{{name}}}"), value)
            .replace(&format!("${name}"), value);
    }
    assert!(!e.contains('$'), "unknown Grafana variable in {expr}");
    e
}

/// `promtool check metrics` on `scrape`: exit 0 and not one complaint (naming, units, help,
/// counter suffixes, family clashes).
fn assert_promtool_finds_nothing(scrape: &str) {
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "promtool is not installed: `apt-get install prometheus` (deploy/check.sh installs it)",
        );
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(scrape.as_bytes())
        .expect("write the scrape to promtool");
    let out = promtool.wait_with_output().expect("promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool check metrics ({}):\n{said}",
        out.status
    );
    eprintln!(
        "promtool check metrics: nothing to say about {} lines",
        scrape.lines().count()
    );
}

fn wait_until<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
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

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Every alert of the watch `s22` in `ALERTS`, pending or firing, as (name, state).
fn alerts(prom: SocketAddr) -> BTreeSet<(String, String)> {
    query(prom, r#"ALERTS{watch="s22"}"#)
        .iter()
        .filter_map(|a| {
            let m = &a["metric"];
            Some((
                m["alertname"].as_str()?.to_string(),
                m["alertstate"].as_str()?.to_string(),
            ))
        })
        .collect()
}

/// A Go listener (agent/tests/go/golistener.go) with `flags` on `sock`, once it listens; its
/// stdout stays open (a write to a closed pipe would kill it).
fn go_listen(go: &Path, flags: &[&str], sock: &Path) -> Reaped {
    let (mut child, out) = common::go::go_listen(go, flags, sock);
    child.stdout = Some(out.into_inner());
    Reaped(child, "golistener")
}

/// S22 under Prometheus, in the watch `s22`: the fixed Go daemon is rolled over by a Go
/// successor (os.RemoveAll of the socket's directory, then listen); the old one gets SIGTERM
/// and exits. Returns the successor, still listening. Fails if any alert of the watch appears,
/// pending or firing, while the takeover is counted and scraped.
fn s22_alerts_nothing(prom: SocketAddr, agent: SocketAddr, watched: &Path) -> Reaped {
    let go = common::agent::go_listener().expect(
        "the Go listener: install Go (deploy/check.sh does not) or set SOCKWATCH_GO_LISTENER",
    );
    let dir = watched.join("daemon");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let sock = dir.join("s22.sock");
    let old = go_listen(&go, &["-keep"], &sock);
    let new = go_listen(&go, &["-keep", "-rmdir"], &sock);
    drop(old); // SIGTERM: the fixed Close leaves the path alone, and the process exits
    assert!(
        sock.exists(),
        "the successor's socket survives the old daemon's exit"
    );
    wait_until(
        "Prometheus has scraped the takeover",
        Duration::from_secs(30),
        || {
            (!query(prom, r#"sum(sockwatch_takeovers_total{watch="s22"}) > 0"#).is_empty())
                .then_some(())
        },
    );
    // Several evaluations after the takeover was scraped: no alert, not even pending.
    for _ in 0..10 {
        let raised = alerts(prom);
        assert!(
            raised.is_empty(),
            "S22 (a takeover) raised {raised:?}\nagent metrics:\n{}",
            http_get(agent, "/metrics").unwrap_or_default().1
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let foreign = query(
        prom,
        r#"sum(sockwatch_foreign_unlinks_total{watch="s22"}) > 0"#,
    );
    assert!(
        foreign.is_empty(),
        "S22 counted a foreign unlink: {foreign:?}"
    );
    new
}

fn firing(prom: SocketAddr) -> BTreeSet<String> {
    query(prom, r#"ALERTS{alertstate="firing"}"#)
        .iter()
        .filter_map(|a| a["metric"]["alertname"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn s1_fires_the_alerts_and_every_dashboard_query_has_data() {
    if std::env::var_os("SOCKWATCH_IN_VM").is_some() {
        eprintln!("SKIP prometheus_e2e: the VM guest has no Prometheus; this runs on the host");
        return;
    }
    if !common::is_root() {
        assert!(
            std::env::var_os("SOCKWATCH_REQUIRE_TIERS").is_none(),
            "prometheus_e2e: tiers are required but not running as root"
        );
        eprintln!("SKIP prometheus_e2e: needs root to load eBPF programs");
        return;
    }
    let prometheus = ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("Debian's prometheus is not installed: `apt-get install prometheus` (deploy/check.sh installs it)");
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");

    // The agent, as the DaemonSet runs it.
    let (container, pod) = daemonset();
    check_mounts(&container, &pod);
    let config = tmp.path().join("sockwatch.toml");
    let (s22_watch, s1_watch) = (
        tmp.path().join("run").join("s22"),
        tmp.path().join("run").join("s1"),
    );
    for dir in [&s22_watch, &s1_watch] {
        std::fs::create_dir_all(dir).expect("mkdir");
    }
    let watches = format!(
        "\n[[watches]]\nname = \"s22\"\npath = \"{}\"\n\n[[watches]]\nname = \"multus\"\npath = \"{}\"\n",
        s(&s22_watch),
        s(&s1_watch)
    );
    std::fs::write(&config, configmap_toml() + &watches).expect("write config");
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
    let mut agent_cmd = Command::new(common::agent::sockwatch_bin());
    agent_cmd.args(&args);
    // Values from the downward API (NODE_NAME) have no literal to pass here.
    for e in container["env"].as_array().into_iter().flatten() {
        if let Some(value) = e["value"].as_str() {
            agent_cmd.env(e["name"].as_str().expect("env name"), value);
        }
    }
    let agent_log = tmp.path().join("agent.log");
    let events = tmp.path().join("events.jsonl");
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
    let rules = tmp.path().join("sockwatch.rules.json");
    std::fs::write(&rules, rule_file()).expect("write rules");
    let prom_addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let prom_config = tmp.path().join("prometheus.yml");
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
    let prom_log = tmp.path().join("prometheus.log");
    let prom = Command::new(prometheus)
        .arg(format!("--config.file={}", s(&prom_config)))
        .arg(format!(
            "--storage.tsdb.path={}",
            s(&tmp.path().join("tsdb"))
        ))
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

    let s22_successor = s22_alerts_nothing(prom_addr, agent_addr, &s22_watch);
    eprintln!("S22 alerted nothing, after {:?}", started.elapsed());

    // S1: A listens on P; its successor B removes P's directory, re-creates it and listens on
    // P (a takeover); A closes its listener and unlinks P, by then B's socket (the incident).
    let dir = s1_watch.join("multus");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let sock = dir.join("multus.sock");
    let (mut a, mut b) = (Actor::spawn(), Actor::spawn());
    let a_handle = a.must(&format!("listen-on {}", s(&sock)));
    b.must(&format!("rmtree {}", s(&dir)));
    b.must(&format!("mkdir {}", s(&dir)));
    b.must(&format!("listen-on {}", s(&sock)));
    a.must(&format!("close {a_handle}"));
    a.must(&format!("unlink {}", s(&sock)));
    let s1_done = Instant::now();
    eprintln!("S1 done after {:?}", started.elapsed());

    // The agent's own view first: clearer failures than an alert that never fires.
    wait_until(
        "sockwatch exports an orphaned listener and a foreign unlink",
        Duration::from_secs(30),
        || {
            let orphans = query(prom_addr, "sum(sockwatch_orphaned_listeners) > 0");
            let unlinks = query(prom_addr, "sum(sockwatch_foreign_unlinks_total) > 0");
            (!orphans.is_empty() && !unlinks.is_empty()).then_some(())
        },
    );
    let want: BTreeSet<String> = ["SockwatchOrphanedListener", "SockwatchForeignUnlink"]
        .map(String::from)
        .into();
    let mut last = BTreeSet::new();
    let reached = (|| {
        let deadline = Instant::now() + Duration::from_secs(150);
        while Instant::now() < deadline {
            last = firing(prom_addr);
            if want.is_subset(&last) {
                return true;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
        false
    })();
    if !reached {
        let (_, metrics) = http_get(agent_addr, "/metrics").unwrap_or_default();
        let interesting: Vec<&str> = metrics
            .lines()
            .filter(|l| {
                l.starts_with("sockwatch_orphaned")
                    || l.starts_with("sockwatch_foreign")
                    || l.starts_with("sockwatch_verdicts")
            })
            .collect();
        panic!(
            "alerts firing after S1: {last:?}, want {want:?}\nALERTS: {:#?}\nagent metrics:\n{}\nagent log:\n{}\nprometheus log:\n{}",
            query(prom_addr, "ALERTS"),
            interesting.join("\n"),
            tail(&agent_log),
            tail(&prom_log)
        );
    }
    eprintln!(
        "firing {last:?} {:?} after S1 ({:?} in all)",
        s1_done.elapsed(),
        started.elapsed()
    );

    // The agent's API tells who did it.
    let (status, verdicts) = http_get(agent_addr, "/api/verdicts?limit=50").expect("api");
    assert_eq!(status, 200, "{verdicts}");
    assert!(verdicts.contains("foreign_unlink"), "{verdicts}");

    // The exposition as Prometheus' linter reads it, with every family populated by S1.
    let (status, scrape) = http_get(agent_addr, "/metrics").expect("scrape");
    assert_eq!(status, 200, "{scrape}");
    assert_promtool_finds_nothing(&scrape);

    // Every dashboard expression returns data.
    let mut empty = Vec::new();
    let exprs = dashboard_exprs();
    for (panel, e) in &exprs {
        if query(prom_addr, e).is_empty() {
            empty.push(format!("{panel}: {e}"));
        }
    }
    assert!(
        empty.is_empty(),
        "{} of {} dashboard expressions returned no data:\n{}",
        empty.len(),
        exprs.len(),
        empty.join("\n")
    );
    eprintln!(
        "{} dashboard expressions have data; {:?} in all",
        exprs.len(),
        started.elapsed()
    );
    drop((a, b));
    drop(prom);
    drop(agent);
    drop(s22_successor);
}
