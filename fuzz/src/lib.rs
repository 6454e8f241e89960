//! The bodies of the fuzz targets: each takes libFuzzer's bytes to one of the agent's parsers
//! of untrusted input (kernel records, config and flags, HTTP, /proc files, netlink replies,
//! replayed logs) or to a writer of what such input names (the text outputs). A panic is a
//! finding. `tests/corpus.rs` runs every committed input through
//! the same bodies on stable, so each crash found stays a regression test.
use std::{io::Cursor, path::Path};

use clap::Parser as _;

use sockwatch::{
    attribution, cli,
    config::{self, Overrides},
    engine::{Engine, Limits, Verdict},
    events,
    host::{diag, mounts, procfd, procfs},
    http::{self, Api, HttpLimits, Served},
    pipeline::{Pipeline, output::JsonLines, replay as replay_log},
    quote,
    text::{self, timeline::PathAnswer},
};

/// A target's body: libFuzzer's bytes in, a panic on a finding.
pub type Body = fn(&[u8]);

/// Every target by name, as `cargo xtask fuzz` and the corpus test list them.
pub const TARGETS: &[(&str, Body)] = &[
    ("record", record),
    ("config", config),
    ("http_head", http_head),
    ("mountinfo", mountinfo),
    ("procfs", procfs),
    ("sock_diag", sock_diag),
    ("replay", replay),
    ("text", text),
];

/// A ring-buffer record as the kernel would submit it.
pub fn record(data: &[u8]) {
    let _ = events::decode(data);
}

/// A config file, then NUL-separated `run` flags merged over it, as `sockwatch run` settles
/// them. What parses must also pass validation again unchanged.
pub fn config(data: &[u8]) {
    let mut parts = data.split(|&b| b == 0);
    let Some(Ok(text)) = parts.next().map(std::str::from_utf8) else {
        return;
    };
    let Ok(file) = config::parse(text, Path::new("fuzz.toml")) else {
        return;
    };
    file.validate("fuzz.toml")
        .expect("a parsed config validates again");
    let mut argv = vec!["sockwatch".to_owned(), "run".to_owned()];
    argv.extend(parts.map(|a| String::from_utf8_lossy(a).into_owned()));
    let Ok(cli::Cli {
        command: cli::Command::Run(args),
        ..
    }) = cli::Cli::try_parse_from(argv)
    else {
        return;
    };
    let _ = file.merge(Overrides::from(&args));
}

/// The bytes a client sent before it stopped: parsed, bounded and routed.
pub fn http_head(data: &[u8]) {
    let limits = HttpLimits::default();
    let as_client = |api_open| {
        http::respond(
            data,
            &limits,
            Served {
                api: &FixedApi,
                api_open,
            },
        )
    };
    let (local, remote) = (as_client(true), as_client(false));
    if let Some(reply) = &local {
        assert!(
            reply.starts_with(b"HTTP/1.1 "),
            "every answer is a status line"
        );
    }
    if local != remote {
        let refused = remote
            .as_deref()
            .is_some_and(|r| r.starts_with(b"HTTP/1.1 403 "));
        assert!(
            refused,
            "a client beyond loopback differs only by a 403 for /api"
        );
    }
}

/// `/proc/PID/mountinfo`.
pub fn mountinfo(data: &[u8]) {
    let _ = mounts::parse_mountinfo(data);
}

/// The small /proc readers: fd link targets, namespace links, cgroup files, pod log dirs.
pub fn procfs(data: &[u8]) {
    let _ = procfd::parse_socket_link(data);
    let _ = procfs::parse_bracket_link(data, b"mnt");
    let text = String::from_utf8_lossy(data);
    let _ = procfs::parse_cgroup(&text);
    let _ = attribution::parse_proc_cgroup(&text);
    let _ = attribution::parse_cgroup_path(&text);
    let _ = attribution::parse_pod_log_dir(&text);
}

/// A `sock_diag` reply: a batch of netlink messages (sequence number from the first 4 bytes),
/// and one `unix_diag_msg` payload.
pub fn sock_diag(data: &[u8]) {
    let (seq, batch) = match data.split_first_chunk::<4>() {
        Some((seq, rest)) => (u32::from_ne_bytes(*seq), rest),
        None => (0, data),
    };
    let mut sockets = Vec::new();
    let _ = diag::parse_batch(batch, seq, &mut sockets);
    let _ = diag::parse_unix_msg(data);
}

/// A recorded event log through the engine, as `sockwatch replay` runs it.
pub fn replay(data: &[u8]) {
    let engine = Engine::new(Limits::default()).expect("the default limits are valid");
    let mut pipeline = Pipeline::replay(engine, JsonLines::new(Box::new(std::io::sink())));
    let _ = replay_log::replay(Cursor::new(data), &mut pipeline);
}

/// A verdict as the agent writes it in JSON (or `explain`'s answer from `/api/sockets`), then,
/// after a NUL, a name: every name the JSON holds (paths, commands, pods, namespaces,
/// workloads, container ids, the node) is replaced by it. The verdict's sentence, after its
/// time and node, as `run --format text` writes it, and each line of the answer's timeline,
/// as `explain` prints it, must be one line with no control character.
pub fn text(data: &[u8]) {
    let mut parts = data.splitn(2, |&b| b == 0);
    let json = parts.next().unwrap_or_default();
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(json) else {
        return;
    };
    if let Some(name) = parts.next() {
        renamed(&mut value, &String::from_utf8_lossy(name));
    }
    if let Ok(v) = serde_json::from_value::<Verdict>(value.clone()) {
        let node = value["actor"]["comm"].as_str().unwrap_or("node-1");
        let line = text::line(v.ts_ns(), node, &text::verdict::sentence(&v));
        assert_one_inert_line(&line);
    }
    if let Ok(answer) = serde_json::from_value::<PathAnswer>(value) {
        for line in text::timeline::timeline(&answer) {
            assert_one_inert_line(&line);
        }
    }
}

/// The keys whose strings someone other than the agent chose.
const NAMES: &[&str] = &[
    "path",
    "victim_path",
    "bind_path",
    "paths",
    "from",
    "to",
    "comm",
    "container_id",
    "pod_uid",
    "pod_name",
    "namespace",
    "workload",
    "node",
];

/// Every string under a key of [`NAMES`] in `v`, at any depth, made `name`.
fn renamed(v: &mut serde_json::Value, name: &str) {
    use serde_json::Value;
    let named = |v: &mut Value| {
        if let Value::String(s) = v {
            name.clone_into(s);
        }
    };
    match v {
        Value::Object(fields) => {
            for (key, v) in fields.iter_mut() {
                match v {
                    Value::String(_) if NAMES.contains(&key.as_str()) => named(v),
                    Value::Array(items) if key == "paths" => items.iter_mut().for_each(named),
                    v => renamed(v, name),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| renamed(v, name)),
        _ => {}
    }
}

fn assert_one_inert_line(line: &str) {
    assert!(
        quote::inert(line) && line.lines().count() == 1,
        "not one inert line: {line:?}"
    );
}

/// An agent state that answers every route with something fixed.
struct FixedApi;

impl Api for FixedApi {
    fn metrics(&self) -> String {
        "sockwatch_up 1\n".to_owned()
    }

    fn ready(&self) -> bool {
        true
    }

    fn sockets(&self, path: Option<&str>) -> serde_json::Value {
        serde_json::json!({ "path": path })
    }

    fn verdicts(&self, limit: usize) -> serde_json::Value {
        serde_json::json!({ "limit": limit })
    }
}
