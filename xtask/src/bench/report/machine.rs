//! The facts the report records about the machine and the build: CPU, memory, kernel, OS,
//! versions, and `sockwatch check`.
use std::fs;

use crate::{bench::env::Env, cmd};

/// `/proc/loadavg`'s three averages.
pub fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The machine table's rows.
pub fn facts(env: &Env) -> Vec<(&'static str, String)> {
    vec![
        (
            "CPUs (nproc)",
            std::thread::available_parallelism().map_or("?".into(), |n| n.to_string()),
        ),
        ("CPU model", cpu_model()),
        ("RAM", ram()),
        (
            "kernel",
            fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
        ),
        ("OS", os()),
        ("sockwatch", sockwatch(env)),
        (
            "bpftrace",
            first_line(cmd::output(cmd::command("bpftrace").arg("--version"))),
        ),
        (
            "auditd",
            first_line(cmd::output(cmd::command("auditctl").arg("-v"))),
        ),
    ]
}

/// `sockwatch check`'s output, or why it failed.
pub fn check(env: &Env) -> String {
    cmd::output(cmd::command(&env.sockwatch).arg("check"))
        .unwrap_or_else(|e| format!("sockwatch check failed: {e:#}"))
}

/// Now, in UTC, to the minute.
pub fn date() -> String {
    first_line(cmd::output(
        cmd::command("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]),
    ))
}

/// The first line of a command's output, or why the command failed.
fn first_line(out: anyhow::Result<String>) -> String {
    out.map_or_else(
        |e| format!("unknown ({e})"),
        |s| s.lines().next().unwrap_or_default().trim().to_string(),
    )
}

fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
        .map_or_else(|| "unknown".into(), |(_, v)| v.trim().to_string())
}

fn ram() -> String {
    fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or("unknown".into(), |kib| {
            format!("{:.1} GiB", kib / 1024.0 / 1024.0)
        })
}

fn os() -> String {
    fs::read_to_string("/etc/os-release")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_default()
}

/// `sockwatch --version`, the git revision, and the files with uncommitted changes.
fn sockwatch(env: &Env) -> String {
    let git = |args: &[&str]| {
        cmd::output(
            cmd::command("git")
                .args(args)
                .current_dir(cmd::workspace_root()),
        )
    };
    let rev = first_line(git(&["rev-parse", "--short", "HEAD"]));
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .map(|s| {
            s.lines()
                .filter_map(|l| l.get(3..))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    format!(
        "{}, git {rev}{}",
        first_line(cmd::output(cmd::command(&env.sockwatch).arg("--version"))),
        if dirty.is_empty() {
            String::new()
        } else {
            format!(" (uncommitted changes in: {dirty})")
        }
    )
}
