//! The binary as a new user meets it: each error is one line naming what failed, said once;
//! a taken --listen port fails before the probes load; a scan that could not see everything
//! says so and exits 3; the agent's own log lines are JSON when asked (flag or config key).
//! None of these loads a probe: they run anywhere, as any user.
use crate::common;

use std::{
    os::unix::process::CommandExt as _,
    path::Path,
    process::{Command, Output},
    time::{Duration, Instant},
};

use common::agent::sockwatch_bin;

fn sockwatch(args: &[&str]) -> Command {
    let mut cmd = Command::new(sockwatch_bin());
    cmd.args(args)
        .env_remove("SOCKWATCH_LOG_FORMAT")
        .env_remove("SOCKWATCH_FORMAT")
        .env("SOCKWATCH_LOG", "info");
    cmd
}

fn stderr_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(String::from)
        .collect()
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 temporary path")
}

#[test]
fn a_missing_config_file_is_one_line_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("sockwatch.toml");
    let out = sockwatch(&["run", "--config", path_str(&config)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        stderr_lines(&out),
        [format!(
            "sockwatch: config {}: No such file or directory",
            config.display()
        )]
    );
}

#[test]
fn replay_of_a_bad_file_says_its_parse_error_once() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("events.jsonl");
    std::fs::write(&log, "not json\n").unwrap();
    let out = sockwatch(&["replay", path_str(&log)]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        stderr_lines(&out),
        [format!(
            "sockwatch: replay {}: line 1: expected ident at line 1 column 2",
            log.display()
        )]
    );
}

/// `run --listen` on `port`, watching a directory that does not exist (its warning is the
/// one log line before the listener is bound), with `extra` flags.
fn run_on_taken_port(tmp: &Path, port: u16, extra: &[&str]) -> (Output, Duration) {
    let watch = tmp.join("missing");
    let listen = format!("127.0.0.1:{port}");
    let mut args = vec!["run", "--watch", path_str(&watch), "--listen", &listen];
    args.extend_from_slice(extra);
    let start = Instant::now();
    let out = sockwatch(&args).output().unwrap();
    (out, start.elapsed())
}

fn watch_warning(tmp: &Path) -> String {
    format!(
        "watch {}: directory does not exist yet; waiting for it (watched from its creation)",
        tmp.join("missing").display()
    )
}

#[test]
fn a_taken_listen_port_fails_before_the_probes_load() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let tmp = tempfile::tempdir().unwrap();
    let (out, took) = run_on_taken_port(tmp.path(), port, &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let lines = stderr_lines(&out);
    // Nothing between the watch's warning and the error: no probe loaded, no scan ran (as
    // root they log; without root the preflight would have failed first).
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(lines[0].ends_with(&watch_warning(tmp.path())), "{lines:#?}");
    assert_eq!(
        lines[1],
        format!(
            "sockwatch: cannot listen on 127.0.0.1:{port}: Address already in use (os error 98)"
        )
    );
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

fn json_log_line(line: &str) -> serde_json::Value {
    let v: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?} is not JSON: {e}"));
    let time = v["time"].as_str().unwrap_or_default();
    // RFC 3339, UTC, milliseconds: 2026-12-05T09:41:13.123Z.
    assert!(
        time.len() == 24 && time.as_bytes()[10] == b'T' && time.ends_with('Z'),
        "time {time:?}"
    );
    v
}

#[test]
fn log_format_json_writes_level_time_target_and_message() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let tmp = tempfile::tempdir().unwrap();
    let (out, _) = run_on_taken_port(tmp.path(), port, &["--log-format", "json"]);
    let lines = stderr_lines(&out);
    assert_eq!(lines.len(), 2, "{lines:#?}");
    let v = json_log_line(&lines[0]);
    assert_eq!(v["level"], "WARN");
    assert_eq!(v["target"], "sockwatch::commands::run");
    assert_eq!(v["message"], watch_warning(tmp.path()));
    assert_eq!(v.as_object().unwrap().len(), 4, "{v}");
    // The error itself is the one line a person reads, not a log record.
    assert!(
        lines[1].starts_with("sockwatch: cannot listen on "),
        "{lines:#?}"
    );
}

#[test]
fn the_config_files_log_format_applies_unless_the_flag_says_otherwise() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("sockwatch.toml");
    std::fs::write(&config, "log_format = \"json\"\n").unwrap();
    let with_config = ["--config", path_str(&config)];

    let (out, _) = run_on_taken_port(tmp.path(), port, &with_config);
    let lines = stderr_lines(&out);
    assert_eq!(
        json_log_line(&lines[0])["message"],
        watch_warning(tmp.path())
    );

    let flagged = [&with_config[..], &["--log-format", "text"]].concat();
    let (out, _) = run_on_taken_port(tmp.path(), port, &flagged);
    let lines = stderr_lines(&out);
    assert!(lines[0].starts_with('['), "{lines:#?}");
    assert!(
        lines[0].ends_with(&format!(
            "WARN  sockwatch::commands::run] {}",
            watch_warning(tmp.path())
        )),
        "{lines:#?}"
    );
}

#[test]
fn a_scan_that_could_not_see_everything_exits_3_and_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    // Readable by nobody too.
    std::fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let mut cmd = sockwatch(&["scan", "--watch", path_str(tmp.path())]);
    // SAFETY: geteuid only reads the process's credentials.
    if unsafe { libc::geteuid() } == 0 {
        // nobody: setuid away from root clears every capability.
        cmd.uid(65534).gid(65534);
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let lines = stderr_lines(&out);
    assert!(
        lines.iter().any(|l| l.starts_with(
            "sockwatch scan: could not see everything: could not read the open files of "
        )),
        "{lines:#?}"
    );
    assert_eq!(
        lines.last().map(String::as_str),
        Some(
            "sockwatch scan: not clean, only nothing found in what it could see (exit status 3): \
             run it as root, with the capabilities the warnings name"
        )
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("sockwatch scan: 0 findings")
                && l.ends_with("; incomplete (see warnings)")),
        "{lines:#?}"
    );
}
