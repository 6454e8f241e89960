//! The bpftrace observer: a script that reports what sockwatch's tracepoint tier reports, and the
//! running bpftrace.
use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use super::process;
use crate::cmd;

/// The bpftrace program that reports what sockwatch's tracepoint tier reports, the way a user
/// would write it: the same syscall tracepoints (enter and exit), AF_UNIX addresses and paths
/// read from user memory, a path-prefix filter for the watched directory, a table of bound
/// descriptors (for listen and close) and of live socket paths (for unlink and rename-over),
/// one printed line per event, successful connects counted in a map.
pub fn script(watched: &Path) -> String {
    let prefix = format!("{}/", watched.display());
    let len = prefix.len();
    let unix_path = |ptr: &str| {
        format!(
            "$a = (uint64){ptr};\n  if ($a != 0 && *(uint16 *)uptr($a) == 1) {{\n    \
             $p = str(uptr($a + 2));\n    if (strncmp($p, \"{prefix}\", {len}) == 0) {{"
        )
    };
    let mut s = String::from("BEGIN { printf(\"ready\\n\"); }\n\n");
    s += &format!(
        "tracepoint:syscalls:sys_enter_bind {{\n  {}\n      @bind_path[tid] = $p; \
         @bind_fd[tid] = args->fd + 1;\n    }}\n  }}\n}}\n",
        unix_path("args->umyaddr")
    );
    s += "tracepoint:syscalls:sys_exit_bind /@bind_fd[tid]/ {\n  \
          printf(\"bind pid=%d tid=%d comm=%s ret=%d path=%s\\n\", pid, tid, comm, args->ret, \
          @bind_path[tid]);\n  if (args->ret == 0) {\n    \
          @fds[pid, @bind_fd[tid] - 1] = 1;\n    @live[@bind_path[tid]] = 1;\n  }\n  \
          delete(@bind_path[tid]); delete(@bind_fd[tid]);\n}\n";
    s += "tracepoint:syscalls:sys_enter_listen /@fds[pid, args->fd]/ { \
          @listen_fd[tid] = args->fd + 1; }\n\
          tracepoint:syscalls:sys_exit_listen /@listen_fd[tid]/ {\n  \
          printf(\"listen pid=%d tid=%d comm=%s ret=%d fd=%d\\n\", pid, tid, comm, args->ret, \
          @listen_fd[tid] - 1);\n  delete(@listen_fd[tid]);\n}\n";
    for (call, ptr) in [("connect", "args->uservaddr"), ("sendto", "args->addr")] {
        s += &format!(
            "tracepoint:syscalls:sys_enter_{call} {{\n  {}\n      @conn_path[tid] = $p; \
             @conn_on[tid] = 1;\n    }}\n  }}\n}}\n",
            unix_path(ptr)
        );
        s += &format!(
            "tracepoint:syscalls:sys_exit_{call} /@conn_on[tid]/ {{\n  if (args->ret < 0) {{\n    \
             printf(\"{call} pid=%d tid=%d comm=%s ret=%d path=%s\\n\", pid, tid, comm, \
             args->ret, @conn_path[tid]);\n  }} else {{\n    @connects_ok = count();\n  }}\n  \
             delete(@conn_path[tid]); delete(@conn_on[tid]);\n}}\n"
        );
    }
    for (call, path, cond) in [
        ("unlink", "args->pathname", ""),
        ("unlinkat", "args->pathname", " /(args->flag & 0x200) == 0/"),
        ("rename", "args->newname", ""),
        ("renameat", "args->newname", ""),
        ("renameat2", "args->newname", ""),
    ] {
        // `@rm_path[tid] = $p` after `@live[$p]` stores garbage in bpftrace 0.17 (Debian 12):
        // the path is read again instead.
        s += &format!(
            "tracepoint:syscalls:sys_enter_{call}{cond} {{\n  $p = str({path});\n  \
             if (@live[$p]) {{ @rm_path[tid] = str({path}); @rm_on[tid] = 1; }}\n}}\n\
             tracepoint:syscalls:sys_exit_{call} /@rm_on[tid]/ {{\n  \
             printf(\"{call} pid=%d tid=%d comm=%s ret=%d path=%s\\n\", pid, tid, comm, \
             args->ret, @rm_path[tid]);\n  if (args->ret == 0) {{ delete(@live[@rm_path[tid]]); }}\n  \
             delete(@rm_path[tid]); delete(@rm_on[tid]);\n}}\n"
        );
    }
    s += "tracepoint:syscalls:sys_enter_close /@fds[pid, args->fd]/ {\n  \
          printf(\"release pid=%d tid=%d comm=%s fd=%d\\n\", pid, tid, comm, args->fd);\n  \
          delete(@fds[pid, args->fd]);\n}\n\
          tracepoint:sched:sched_process_fork { @forks = count(); }\n\
          tracepoint:sched:sched_process_exit { @exits = count(); }\n";
    s
}

/// Empty programs on every tracepoint sockwatch's tracepoint tier attaches on a kernel with
/// `bpf_task_pt_regs` (this host's), and on the tracepoints of [`script`]'s fork and exit
/// counters: the attachment's own cost.
pub fn floor_script() -> String {
    let mut s = String::from("BEGIN { printf(\"ready\\n\"); }\n");
    for call in PAIRED_SYSCALLS {
        s += &format!("tracepoint:syscalls:sys_enter_{call} {{}}\n");
        s += &format!("tracepoint:syscalls:sys_exit_{call} {{}}\n");
    }
    for call in EXIT_ONLY_SYSCALLS {
        s += &format!("tracepoint:syscalls:sys_exit_{call} {{}}\n");
    }
    s += "tracepoint:syscalls:sys_enter_close {}\n\
          tracepoint:sched:sched_process_fork {}\n\
          tracepoint:sched:sched_process_exit {}\n";
    s
}

/// The empty program of [`floor_script`] on the tracepoint the tracepoint tier's `program`
/// runs on, by the name bpftrace gives it (`bind_tp_ret` → `sys_exit_bind`); the kernel keeps
/// 15 characters of a name, so compare with [`same_program`].
pub fn floor_of(program: &str) -> Option<String> {
    if let Some(call) = program.strip_suffix("_tp_enter") {
        return Some(format!("sys_enter_{call}"));
    }
    if let Some(call) = program
        .strip_suffix("_tp_exit")
        .or_else(|| program.strip_suffix("_tp_ret"))
    {
        return Some(format!("sys_exit_{call}"));
    }
    let tracepoint = match program {
        "release_tp_close" => "sys_enter_close",
        "fork_tp_btf" => "sched_process_fork",
        "exit_tp" | "exit_tp_b" => "sched_process_exit",
        _ => return None,
    };
    Some(tracepoint.to_owned())
}

/// Whether two program names are the same once cut to the kernel's 15 characters.
pub fn same_program(a: &str, b: &str) -> bool {
    a.chars().take(15).eq(b.chars().take(15))
}

/// The syscalls whose entry and exit sockwatch's tracepoint tier hooks.
const PAIRED_SYSCALLS: [&str; 6] = [
    "listen",
    "unlink",
    "unlinkat",
    "rename",
    "renameat",
    "renameat2",
];

/// The syscalls it hooks at the exit only, their arguments read from the saved registers.
const EXIT_ONLY_SYSCALLS: [&str; 3] = ["bind", "connect", "sendto"];

/// Tracepoint probes in [`script`].
pub fn probes(script: &str) -> usize {
    script
        .lines()
        .filter(|l| l.starts_with("tracepoint:"))
        .count()
}

/// A running bpftrace with [`script`], printing into a file on tmpfs.
pub struct Bpftrace {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Bpftrace {
    /// Starts it and returns once every tracepoint is attached: bpftrace has said "Attaching"
    /// and holds one perf event per tracepoint probe (its output is block-buffered, so BEGIN's
    /// line cannot tell).
    pub fn start(script: &Path, out: &Path, probes: usize) -> anyhow::Result<Bpftrace> {
        let _ = fs::remove_file(out);
        let err = out.with_extension("err");
        let child = cmd::command("bpftrace")
            .arg("-o")
            .arg(out)
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&err).context("bpftrace's stderr file")?)
            .spawn()
            .context("cannot start bpftrace")?;
        let mut b = Bpftrace {
            child,
            out: out.to_path_buf(),
            err,
        };
        let t = Instant::now();
        let mut stable_since: Option<(usize, Instant)> = None;
        loop {
            if let Some(st) = b.child.try_wait()? {
                bail!("bpftrace exited ({st}): {}", b.stderr());
            }
            let said = fs::read_to_string(out).unwrap_or_default();
            let events = perf_events(b.child.id());
            if said.contains("Attaching") && events >= probes {
                match stable_since {
                    Some((n, since)) if n == events => {
                        if since.elapsed() > Duration::from_millis(300) {
                            return Ok(b);
                        }
                    }
                    _ => stable_since = Some((events, Instant::now())),
                }
            }
            if t.elapsed() > Duration::from_secs(60) {
                bail!("bpftrace did not attach in 60 s ({events} perf events, want {probes})");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What it wrote to stderr, without the RLIMIT_MEMLOCK warning (BPF memory is accounted
    /// by memcg on this kernel; the limit cannot be raised here and does not matter).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stderr(&self) -> String {
        fs::read_to_string(&self.err)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.contains("RLIMIT_MEMLOCK"))
            .collect::<Vec<_>>()
            .join(" / ")
    }

    /// SIGINT (bpftrace prints its maps and exits), then the lines it printed, by first word.
    pub fn stop(mut self) -> anyhow::Result<BTreeMap<String, u64>> {
        // Time to read what is still in its perf buffers: it drops them on exit.
        std::thread::sleep(Duration::from_millis(500));
        process::interrupt(&mut self.child, "bpftrace", Duration::from_secs(20))?;
        let text = String::from_utf8_lossy(&fs::read(&self.out).unwrap_or_default()).into_owned();
        let mut by_word = BTreeMap::new();
        for l in text.lines() {
            if let Some(w) = l.split_whitespace().next() {
                *by_word.entry(w.to_string()).or_insert(0) += 1;
            }
        }
        Ok(by_word)
    }
}

impl Drop for Bpftrace {
    fn drop(&mut self) {
        process::kill(&mut self.child);
    }
}

/// Perf-event descriptors a process holds.
fn perf_events(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| {
        d.filter_map(Result::ok)
            .filter(|e| {
                fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().contains("perf_event"))
            })
            .count()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bpftrace_script_covers_the_tracepoint_tiers_syscalls() {
        let s = script(Path::new("/run/w"));
        for call in PAIRED_SYSCALLS.iter().chain(&EXIT_ONLY_SYSCALLS) {
            assert!(s.contains(&format!("sys_enter_{call} ")), "{call}");
            assert!(s.contains(&format!("sys_exit_{call} ")), "{call}");
        }
        assert!(s.contains("sys_enter_close"));
        assert!(s.contains(r#"strncmp($p, "/run/w/", 7)"#));
        assert_eq!(probes(&s), 21);
    }

    #[test]
    fn the_floor_has_an_empty_program_where_sockwatch_attaches_and_the_script_too() {
        let (s, floor) = (script(Path::new("/run/w")), floor_script());
        let tracepoints = |text: &str| -> Vec<String> {
            text.lines()
                .filter(|l| l.starts_with("tracepoint:"))
                .map(|l| l.split([' ', '{']).next().unwrap_or_default().to_owned())
                .collect()
        };
        let (script_points, floor_points) = (tracepoints(&s), tracepoints(&floor));
        assert_eq!(floor_points.len(), 2 * 6 + 3 + 3);
        assert!(floor_points.iter().all(|t| script_points.contains(t)));
        for call in EXIT_ONLY_SYSCALLS {
            assert!(!floor.contains(&format!("sys_enter_{call} ")), "{call}");
            assert!(floor.contains(&format!("sys_exit_{call} ")), "{call}");
        }
        assert!(
            floor
                .lines()
                .filter(|l| l.starts_with("tracepoint:"))
                .all(|l| l.ends_with(" {}"))
        );
    }

    #[test]
    fn each_tracepoint_program_has_the_empty_program_on_its_tracepoint() {
        let floor = floor_script();
        for (program, empty) in [
            ("bind_tp_ret", "sys_exit_bind"),
            ("sendto_tp_ret", "sys_exit_sendto"),
            ("listen_tp_exit", "sys_exit_listen"),
            ("renameat2_tp_enter", "sys_enter_renameat2"),
            ("release_tp_close", "sys_enter_close"),
            ("fork_tp_btf", "sched_process_fork"),
            ("exit_tp", "sched_process_exit"),
        ] {
            assert_eq!(floor_of(program).as_deref(), Some(empty));
            assert!(
                floor.contains(&format!(":{empty} {{}}")),
                "{empty} not in the floor"
            );
        }
        assert_eq!(floor_of("bind_fexit"), None);
        assert!(same_program("sys_enter_renam", "sys_enter_renameat2"));
        assert!(!same_program("sys_enter_bind", "sys_exit_bind"));
    }
}
