//! The floor on this kernel: empty programs at the tracepoint tier's attach points run once
//! per syscall the workload makes, and the report names the agent's program each stands for.
use std::{
    io::{BufRead as _, BufReader},
    os::unix::net::UnixListener,
    process::{Command, Stdio},
};

use sockwatch::kernel::features::KernelFeatures;
use sockwatch_common::Flavor;

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";
const BINDS: u64 = 50;

/// `kernel.bpf_stats_enabled` on while alive, back to what it was after.
struct Stats(String);

impl Stats {
    fn on() -> Self {
        let was = std::fs::read_to_string(BPF_STATS).expect("reading bpf_stats_enabled");
        std::fs::write(BPF_STATS, "1").expect("turning bpf_stats on (root?)");
        Self(was)
    }
}

impl Drop for Stats {
    fn drop(&mut self) {
        let _ = std::fs::write(BPF_STATS, self.0.trim());
    }
}

#[test]
fn empty_programs_run_where_the_tracepoint_tier_attaches() {
    let _stats = Stats::on();
    let mut floor = Command::new(env!("CARGO_BIN_EXE_sockwatch-floor"))
        .args(["--probe-mode", "tracepoint"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning sockwatch-floor");
    let mut err = BufReader::new(floor.stderr.take().expect("stderr"));
    let mut said = String::new();
    while !said.contains("running;") {
        let mut line = String::new();
        let n = err.read_line(&mut line).expect("reading stderr");
        assert!(n > 0, "sockwatch-floor exited before running: {said}");
        said.push_str(&line);
    }
    let dir = tempfile_dir();
    for i in 0..BINDS {
        UnixListener::bind(dir.join(format!("s{i}"))).expect("binding");
    }
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(floor.id() as i32, libc::SIGINT) }, 0);
    let out = floor
        .wait_with_output()
        .expect("waiting for sockwatch-floor");
    assert!(out.status.success(), "{:?}", out.status);
    let report = String::from_utf8(out.stdout).expect("UTF-8 report");
    let rows: Vec<(u32, &str, u64, u64)> = report
        .lines()
        .map(|l| match l.split(' ').collect::<Vec<_>>()[..] {
            [id, program, runs, ns] => (
                id.parse().expect("id"),
                program,
                runs.parse().expect("runs"),
                ns.parse().expect("ns"),
            ),
            _ => panic!("not `ID PROGRAM RUNS NS`: {l}"),
        })
        .collect();
    // Where the kernel has bpf_task_pt_regs, bind's tracepoint tier is one program at the exit;
    // without it, a pair.
    let flavor = KernelFeatures::read().expect("kernel BTF").flavor();
    let (exit, entry) = match flavor {
        Flavor::Helpers => ("bind_tp_ret", None),
        Flavor::Bounded => ("bind_tp_exit", Some("bind_tp_enter")),
    };
    let bind = rows
        .iter()
        .find(|r| r.1 == exit)
        .unwrap_or_else(|| panic!("no floor for {exit} in:\n{report}"));
    assert!(bind.0 > 0 && bind.2 >= BINDS && bind.3 > 0, "{bind:?}");
    let entries: Vec<_> = rows
        .iter()
        .filter(|r| r.1.starts_with("bind_tp_enter"))
        .collect();
    match entry {
        Some(e) => assert!(entries.iter().any(|r| r.1 == e && r.2 >= BINDS), "{report}"),
        None => assert!(
            entries.is_empty(),
            "an entry program under {flavor:?}: {report}"
        ),
    }
    assert!(
        rows.iter().all(|r| r.1.contains("_tp")),
        "only the tracepoint tier's programs: {report}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unknown_probe_mode_is_refused_in_one_line() {
    let out = Command::new(env!("CARGO_BIN_EXE_sockwatch-floor"))
        .args(["--probe-mode", "bogus"])
        .output()
        .expect("running sockwatch-floor");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid value 'bogus' for '--probe-mode"),
        "{err}"
    );
}

/// A fresh directory for the sockets.
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sockwatch-floor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("creating the socket directory");
    dir
}
