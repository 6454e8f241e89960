//! The run's circumstances: the command, the date, the load average and the machine table.
use std::fs;

use crate::{bench::env::Env, cmd};

/// `cargo xtask` and `args`, as the report names the command that wrote it.
pub fn command_line(args: impl IntoIterator<Item = String>) -> String {
    std::iter::once("cargo xtask".to_string())
        .chain(args)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The first line of a command's output, or why it failed.
fn first_line(cmd: &mut std::process::Command) -> String {
    cmd::output(cmd).map_or_else(
        |e| format!("unknown ({e})"),
        |s| s.lines().next().unwrap_or_default().trim().into(),
    )
}

/// Now, in UTC, to the minute.
pub fn date() -> String {
    first_line(cmd::command("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]))
}

/// `/proc/loadavg`'s three averages.
pub fn loadavg() -> String {
    let text = fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The value after `key` in the first line of `file` that has it.
fn proc_field(file: &str, key: &str, sep: char) -> Option<String> {
    let text = fs::read_to_string(file).ok()?;
    text.lines().find_map(|l| {
        Some(
            l.strip_prefix(key)?
                .split_once(sep)?
                .1
                .trim()
                .trim_matches('"')
                .to_owned(),
        )
    })
}

/// The machine table's rows.
pub fn machine(env: &Env) -> Vec<(&'static str, String)> {
    let git = |args: &[&str]| {
        cmd::output(
            cmd::command("git")
                .args(args)
                .current_dir(cmd::workspace_root()),
        )
    };
    let rev = git(&["rev-parse", "--short", "HEAD"])
        .unwrap_or_default()
        .trim()
        .to_owned();
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).unwrap_or_default();
    let dirty: Vec<&str> = dirty.lines().filter_map(|l| l.get(3..)).collect();
    let dirty = if dirty.is_empty() {
        String::new()
    } else {
        format!(" (uncommitted changes in: {})", dirty.join(", "))
    };
    let ram = proc_field("/proc/meminfo", "MemTotal", ':')
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    vec![
        (
            "CPUs (nproc)",
            std::thread::available_parallelism().map_or("?".into(), |n| n.to_string()),
        ),
        (
            "CPU model",
            proc_field("/proc/cpuinfo", "model name", ':').unwrap_or("unknown".into()),
        ),
        (
            "RAM",
            ram.map_or("unknown".into(), |kib| {
                format!("{:.1} GiB", kib / 1024.0 / 1024.0)
            }),
        ),
        ("kernel", kernel.trim().to_owned()),
        (
            "OS",
            proc_field("/etc/os-release", "PRETTY_NAME", '=').unwrap_or_default(),
        ),
        (
            "sockwatch",
            format!(
                "{}, git {rev}{dirty}",
                first_line(cmd::command(&env.sockwatch).arg("--version"))
            ),
        ),
        (
            "bpftrace",
            first_line(cmd::command("bpftrace").arg("--version")),
        ),
        ("auditd", first_line(cmd::command("auditctl").arg("-v"))),
    ]
}
