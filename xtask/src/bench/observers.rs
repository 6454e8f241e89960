//! The observers compared with sockwatch in the overhead phase, switched on and off around
//! each window: a bpftrace script that reports what the tracepoint tier reports, the floor
//! (empty bpftrace programs where that tier attaches), and an auditd watch.
use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use super::{Variant, agent, agent::Agent, env::Env};
use crate::cmd;

/// The syscalls whose entry and exit sockwatch's tracepoint tier hooks, and those it hooks at
/// the exit only (arguments read from the saved registers).
const PAIRED_SYSCALLS: [&str; 5] = ["unlink", "unlinkat", "rename", "renameat", "renameat2"];
const EXIT_ONLY_SYSCALLS: [&str; 4] = ["bind", "listen", "connect", "sendto"];

/// The bpftrace program a user would write to report what the tracepoint tier reports: the
/// same syscall tracepoints, AF_UNIX paths read from user memory and filtered by the watched
/// directory's prefix, maps of bound descriptors and live socket paths, a line per event.
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

/// Empty programs on every tracepoint the tracepoint tier attaches (on a kernel with
/// `bpf_task_pt_regs`, as this host's) and on the script's fork and exit counters.
pub fn floor_script() -> String {
    let mut s = String::from("BEGIN { printf(\"ready\\n\"); }\n");
    for call in PAIRED_SYSCALLS {
        s += &format!("tracepoint:syscalls:sys_enter_{call} {{}}\n");
    }
    for call in PAIRED_SYSCALLS.iter().chain(&EXIT_ONLY_SYSCALLS) {
        s += &format!("tracepoint:syscalls:sys_exit_{call} {{}}\n");
    }
    s + "tracepoint:syscalls:sys_enter_close {}\ntracepoint:sched:sched_process_fork {}\n\
         tracepoint:sched:sched_process_exit {}\n"
}

/// The floor's empty program (named by bpftrace after its tracepoint) on the tracepoint the
/// tracepoint tier's `program` runs on: `bind_tp_ret` → `sys_exit_bind`.
pub fn floor_of(program: &str) -> Option<String> {
    let exit = program
        .strip_suffix("_tp_exit")
        .or_else(|| program.strip_suffix("_tp_ret"));
    let name = match (program.strip_suffix("_tp_enter"), exit, program) {
        (Some(call), _, _) => format!("sys_enter_{call}"),
        (_, Some(call), _) => format!("sys_exit_{call}"),
        (.., "release_tp" | "release_tp_b") => "sys_enter_close".into(),
        (.., "fork_tp_btf") => "sched_process_fork".into(),
        (.., "exit_tp" | "exit_tp_b") => "sched_process_exit".into(),
        _ => return None,
    };
    Some(name)
}

/// Whether two program names are the same once cut to the kernel's 15 characters.
pub fn same_program(a: &str, b: &str) -> bool {
    a.chars().take(15).eq(b.chars().take(15))
}

/// A running bpftrace, printing into a file on tmpfs.
pub struct Bpftrace {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

impl Bpftrace {
    /// bpftrace running `text` (written to `NAME.bt` in the bench's root, printing to
    /// `NAME.out`); returns once it said "Attaching" and holds one perf event per tracepoint
    /// probe, unchanged for 300 ms (its output is block-buffered: BEGIN's line cannot tell).
    pub fn start(env: &Env, name: &str, text: &str) -> anyhow::Result<Bpftrace> {
        let (script, out) = (
            env.root.join(format!("{name}.bt")),
            env.root.join(format!("{name}.out")),
        );
        fs::write(&script, text)?;
        let _ = fs::remove_file(&out);
        let err = out.with_extension("err");
        let child = cmd::command("bpftrace")
            .arg("-o")
            .arg(&out)
            .arg(script)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&err).context("bpftrace's stderr file")?)
            .spawn()
            .context("cannot start bpftrace")?;
        let mut b = Bpftrace { child, out, err };
        let probes = text
            .lines()
            .filter(|l| l.starts_with("tracepoint:"))
            .count();
        let t = Instant::now();
        let mut stable: Option<(usize, Instant)> = None;
        loop {
            if let Some(st) = b.child.try_wait()? {
                bail!("bpftrace exited ({st}): {}", b.stderr());
            }
            let events = perf_events(b.child.id());
            if fs::read_to_string(&b.out)
                .unwrap_or_default()
                .contains("Attaching")
                && events >= probes
            {
                match stable {
                    Some((n, since)) if n == events => {
                        if since.elapsed() > Duration::from_millis(300) {
                            return Ok(b);
                        }
                    }
                    _ => stable = Some((events, Instant::now())),
                }
            }
            if t.elapsed() > Duration::from_secs(60) {
                bail!("bpftrace did not attach in 60 s ({events} perf events, want {probes})");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its stderr, without the RLIMIT_MEMLOCK warning (BPF memory is charged to memcg here).
    fn stderr(&self) -> String {
        let text = fs::read_to_string(&self.err).unwrap_or_default();
        text.lines()
            .filter(|l| !l.contains("RLIMIT_MEMLOCK"))
            .collect::<Vec<_>>()
            .join(" / ")
    }

    /// SIGINT (it prints its maps and exits), then the lines it printed, by first word.
    pub fn stop(mut self) -> anyhow::Result<BTreeMap<String, u64>> {
        // Time to read what is still in its perf buffers: it drops them on exit.
        std::thread::sleep(Duration::from_millis(500));
        agent::interrupt(&mut self.child, "bpftrace", Duration::from_secs(20))?;
        let text = String::from_utf8_lossy(&fs::read(&self.out).unwrap_or_default()).into_owned();
        let mut by_word = BTreeMap::new();
        for w in text.lines().filter_map(|l| l.split_whitespace().next()) {
            *by_word.entry(w.to_string()).or_insert(0) += 1;
        }
        Ok(by_word)
    }

    /// Stops the floor's bpftrace: its empty programs report nothing to check, and one that
    /// ignores SIGINT is killed (its window's figures stand either way).
    pub fn stop_floor(self) {
        if let Err(e) = self.stop() {
            eprintln!("bench: the floor's bpftrace was killed: {e:#}");
        }
    }
}

impl Drop for Bpftrace {
    fn drop(&mut self) {
        agent::kill(&mut self.child);
    }
}

/// Perf-event descriptors a process holds.
fn perf_events(pid: u32) -> usize {
    let is_perf = |e: &fs::DirEntry| {
        fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().contains("perf_event"))
    };
    fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| {
        d.filter_map(Result::ok).filter(|e| is_perf(e)).count()
    })
}

/// The kernel's audit status (`auditctl -s`), as key → value.
fn audit_status() -> anyhow::Result<BTreeMap<String, String>> {
    let out = cmd::output(cmd::command("auditctl").arg("-s"))?;
    let pair = |l: &str| {
        l.split_once(' ')
            .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
    };
    Ok(out.lines().filter_map(pair).collect())
}

fn auditctl(args: &[&str]) -> anyhow::Result<()> {
    cmd::output(cmd::command("auditctl").args(args)).map(drop)
}

/// Records audit has lost since boot.
fn audit_lost() -> anyhow::Result<u64> {
    Ok(audit_status()?
        .get("lost")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0))
}

/// Audit off: no watch, auditing disabled, and `-a never,task` so that threads created from
/// now on carry no audit context (once auditing was enabled since boot, the kernel gives every
/// new task one unless a task rule says never).
fn audit_off() -> anyhow::Result<()> {
    auditctl(&["-D"])?;
    auditctl(&["-a", "never,task"])?;
    auditctl(&["-e", "0"])
}

/// auditd for the comparison; dropping it leaves auditing off (see [`audit_off`]), stops the
/// auditd the bench started and restores the backlog limit.
pub struct AuditGuard {
    started_pid: Option<u32>,
    backlog: String,
}

impl AuditGuard {
    pub fn prepare() -> anyhow::Result<AuditGuard> {
        let rules = cmd::output(cmd::command("auditctl").arg("-l"))?;
        let foreign: Vec<&str> = rules
            .lines()
            .filter(|l| !["No rules", "-a never,task", ""].contains(l))
            .collect();
        if !foreign.is_empty() {
            bail!(
                "this machine has audit rules of its own ({}); the bench does not touch them",
                foreign.join("; ")
            );
        }
        let st = audit_status()?;
        let backlog = st.get("backlog_limit").cloned().unwrap_or("64".into());
        let mut started_pid = None;
        if st.get("pid").is_none_or(|p| p == "0") {
            cmd::run(&mut cmd::command("auditd"))?;
            let t = Instant::now();
            while started_pid.is_none() {
                let pid = audit_status()?
                    .get("pid")
                    .and_then(|p| p.parse::<u32>().ok());
                started_pid = pid.filter(|p| *p != 0);
                if t.elapsed() > Duration::from_secs(10) {
                    bail!("auditd did not register with the kernel in 10 s");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let g = AuditGuard {
            started_pid,
            backlog,
        };
        auditctl(&["-b", "8192"])?; // as Debian's default rules (/etc/audit/rules.d) set it
        audit_off()?;
        Ok(g)
    }
}

impl Drop for AuditGuard {
    fn drop(&mut self) {
        let _ = audit_off();
        let _ = auditctl(&["-b", &self.backlog]);
        if let Some(pid) = self.started_pid {
            agent::signal(pid, libc::SIGTERM);
        }
    }
}

/// An observer switched on for one window.
pub enum Observer {
    Off,
    Sockwatch(Agent),
    /// Every directory watched: it sees the unwatched directories' binds too.
    SockwatchEverywhere(Agent),
    Bpftrace(Bpftrace),
    Auditd {
        lost_before: u64,
    },
    Floor(Bpftrace),
}

impl Observer {
    pub fn start(v: Variant, env: &Env) -> anyhow::Result<Observer> {
        Ok(match v {
            Variant::Off => Observer::Off,
            Variant::Sockwatch => Observer::Sockwatch(start_sockwatch(env)?),
            Variant::SockwatchDefault => Observer::SockwatchEverywhere(
                env.start_agent("overhead-default", "tracepoint", true, &[])?
                    .0,
            ),
            Variant::Bpftrace => {
                Observer::Bpftrace(Bpftrace::start(env, "bpftrace", &script(&env.watched))?)
            }
            Variant::Floor => Observer::Floor(Bpftrace::start(env, "floor", &floor_script())?),
            Variant::Auditd => {
                let lost_before = audit_lost()?;
                auditctl(&["-D"])?;
                let dir = env.watched.display().to_string();
                auditctl(&["-w", &dir, "-p", "wa", "-k", "sockwatch-bench"])?;
                auditctl(&["-e", "1"])?;
                Observer::Auditd { lost_before }
            }
        })
    }

    /// Switches it off; checks that it saw the window's `binds` socket binds (a tracer that
    /// saw nothing would make a cheap-looking figure). Returns a problem, if any.
    pub fn stop(self, binds: u64) -> anyhow::Result<Option<String>> {
        Ok(match self {
            Observer::Off => None,
            Observer::Sockwatch(agent) => sockwatch_saw(agent, binds, false)?,
            Observer::SockwatchEverywhere(agent) => sockwatch_saw(agent, binds, true)?,
            Observer::Bpftrace(b) => {
                let err = b.stderr();
                let lines = b.stop()?;
                let count = |w: &str| lines.get(w).copied().unwrap_or(0);
                let (got, lost) = (count("bind"), count("Lost"));
                (got != binds || lost != 0).then(|| {
                    format!(
                        "bpftrace printed {got} of {binds} binds, {lost} `Lost` lines; its lines by \
                         first word: {lines:?}; stderr: {err:?}"
                    )
                })
            }
            Observer::Floor(b) => {
                b.stop_floor();
                None
            }
            Observer::Auditd { lost_before } => {
                audit_off()?;
                let lost = audit_lost()?.saturating_sub(lost_before);
                (lost != 0).then(|| format!("audit lost {lost} records"))
            }
        })
    }
}

/// Stops `agent`; a problem unless it saw the window's `binds` watched binds (at least that
/// many when it watches `everywhere`) and lost no event.
fn sockwatch_saw(agent: Agent, binds: u64, everywhere: bool) -> anyhow::Result<Option<String>> {
    let m = agent.settle(Duration::from_secs(10))?;
    agent.stop()?;
    let got = m.sum("sockwatch_events_total", &[("kind", "bind")]) as u64;
    let lost = m.sum("sockwatch_events_lost_total", &[]) as u64;
    let saw_all = if everywhere {
        got >= binds
    } else {
        got == binds
    };
    Ok((!saw_all || lost != 0)
        .then(|| format!("sockwatch saw {got} of {binds} binds, {lost} events lost")))
}

/// sockwatch as the overhead phase runs it: tracepoint tier, the watched directory, /metrics.
pub fn start_sockwatch(env: &Env) -> anyhow::Result<Agent> {
    Ok(env
        .start_agent("overhead", "tracepoint", true, &env.watch_watched())?
        .0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracepoints(text: &str) -> Vec<&str> {
        let heads = text.lines().filter(|l| l.starts_with("tracepoint:"));
        heads
            .map(|l| l.split([' ', '{']).next().unwrap_or_default())
            .collect()
    }

    #[test]
    fn the_script_and_the_floor_cover_the_tracepoint_tiers_attach_points() {
        let (s, floor) = (script(Path::new("/run/w")), floor_script());
        for call in PAIRED_SYSCALLS.iter().chain(&EXIT_ONLY_SYSCALLS) {
            assert!(
                s.contains(&format!("sys_enter_{call} "))
                    && s.contains(&format!("sys_exit_{call} "))
            );
            assert!(floor.contains(&format!("sys_exit_{call} {{}}")), "{call}");
        }
        assert!(s.contains(r#"strncmp($p, "/run/w/", 7)"#) && s.contains("sys_enter_close"));
        assert_eq!(tracepoints(&s).len(), 21);
        let floor_points = tracepoints(&floor);
        assert_eq!(floor_points.len(), 2 * 5 + 4 + 3);
        assert!(floor_points.iter().all(|t| tracepoints(&s).contains(t)));
        assert!(
            EXIT_ONLY_SYSCALLS
                .iter()
                .all(|c| !floor.contains(&format!("sys_enter_{c} ")))
        );
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
            ("listen_tp_ret", "sys_exit_listen"),
            ("renameat2_tp_enter", "sys_enter_renameat2"),
            ("release_tp", "sys_enter_close"),
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
