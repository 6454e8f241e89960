//! Resuming a guest that QEMU's emulation faulted: TCG's emulation of a 2-vCPU guest on a busy
//! 2-core host now and then breaks the guest kernel in two ways, each seen at a different test
//! every time:
//! - a lockup: soft lockups or RCU stalls on both vCPUs, after which `/init` prints nothing more
//!   (5.10, 6.1);
//! - an `int3` Oops, then a panic: a vCPU executes a breakpoint that the kernel's live text
//!   patching (static keys, BPF trampolines and tracepoints attaching or detaching) had already
//!   retired, so no handler claims it (6.12: in `sched_clock_cpu` before `/init`, in
//!   `kernel_clone`, in a run).
//!
//! Such a guest is booted once more, with the run it faulted in named on the kernel command
//! line: its `/init` skips the runs that already finished and starts again from that one. The
//! faulted run's partial output counts for nothing (only `test result:` lines are counted, and
//! it printed none); the resumed boot runs it whole. A guest that faults again, hangs without
//! the kernel reporting a lockup (a test of ours stuck), or dies of any other Oops fails as
//! before.

/// Resumed boots per test guest (a bench guest, which attaches and detaches every tier many
/// times over, has its own allowance). One was not enough: a CI run's 6.12 guest took an
/// `int3` Oops in `degrade` and another one 20 minutes into the resumed boot, in `patterns`, each at
/// a syscall tracepoint being patched. Each fault is named in the log and counted in the
/// layer table; a fourth fails the guest.
pub const RESUMES: u32 = 3;

/// The kernel command-line parameter naming the run to resume from. Dotted, so the kernel
/// passes it to neither init's argv nor its environment; `/init` reads it from /proc/cmdline.
const PARAM: &str = "sockwatch.resume";

/// The kernel command-line argument that resumes a guest from `run`.
pub fn kernel_arg(run: &str) -> String {
    format!("{PARAM}={run}")
}

/// `/init`'s lines that read the resume point, if any, into `$resume`.
pub fn read_script() -> String {
    format!(
        "resume=$(sed -n 's/.*{PARAM}=\\([^ ]*\\).*/\\1/p' /proc/cmdline)\n\
         [ -z \"$resume\" ] || echo \"SOCKWATCH-VM-RESUME: from $resume\"\n"
    )
}

/// Wraps `run` (the shell lines of the run labelled `label`): skipped while `$resume` names a
/// later run, and from the resume point on run as usual.
pub fn guard(label: &str, run: &str) -> String {
    format!(
        "if [ -n \"$resume\" ] && [ \"$resume\" != \"{label}\" ]; then\n\
         echo \"SOCKWATCH-VM-SKIP: {label} (finished before the fault)\"\n\
         else\n\
         resume=\n\
         {run}fi\n"
    )
}

/// `/init`'s check, after the runs, that a resume point was found (a name that matches no run
/// would skip them all).
pub fn check_script() -> &'static str {
    "[ -z \"$resume\" ] || { echo \"SOCKWATCH-VM-ERROR: no run named $resume to resume from\"; \
     verdict=FAIL; }\n"
}

/// An emulation fault that ended a boot: its kind ("lockup", "int3 Oops") and the kernel's
/// report of it.
pub struct Fault {
    pub kind: &'static str,
    pub report: String,
}

/// A run a boot was resumed from, and the kind of fault that made it necessary.
pub struct Resumed {
    pub run: String,
    pub fault: &'static str,
}

/// Whether the kernel's first Oops (as [`Console`](super::Console) keeps it) is a stray `int3`.
pub fn is_int3_oops(panic: &str) -> bool {
    panic.starts_with("Oops: int3")
}

/// The guest kernel's report that a CPU is stuck, from a console line.
pub fn lockup_report(line: &str) -> Option<&str> {
    ["soft lockup", "detected stall"]
        .iter()
        .find(|m| line.contains(*m))
        .map(|_| {
            let from = ["watchdog:", "rcu:"]
                .iter()
                .find_map(|p| line.find(p))
                .unwrap_or(0);
            line[from..].trim_end()
        })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Runs three guarded runs in `sh` with /proc/cmdline's stand-in `cmdline`; returns what
    /// they printed.
    fn runs_with(cmdline: &str) -> String {
        let mut script = read_script().replace("/proc/cmdline", "\"$CMDLINE\"");
        script.push_str("verdict=PASS\n");
        for label in ["kernel", "overlay@lsm", "overlay@fentry"] {
            script.push_str(&guard(label, &format!("echo ran {label}\n")));
        }
        script.push_str(check_script());
        script.push_str("echo verdict=$verdict\n");
        // One file per call: the tests run in parallel.
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("resume-test-{}-{call}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("cmdline");
        std::fs::write(&file, cmdline).expect("cmdline");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .env("CMDLINE", &file)
            .output()
            .expect("sh");
        let _ = std::fs::remove_dir_all(&dir);
        String::from_utf8(out.stdout).expect("utf-8")
    }

    #[test]
    fn a_first_boot_runs_everything() {
        assert_eq!(
            runs_with("console=ttyS0 quiet\n"),
            "ran kernel\nran overlay@lsm\nran overlay@fentry\nverdict=PASS\n"
        );
    }

    #[test]
    fn a_resumed_boot_starts_at_the_hung_run() {
        let cmdline = format!("console=ttyS0 {} quiet\n", kernel_arg("overlay@lsm"));
        assert_eq!(
            runs_with(&cmdline),
            "SOCKWATCH-VM-RESUME: from overlay@lsm\n\
             SOCKWATCH-VM-SKIP: kernel (finished before the fault)\n\
             ran overlay@lsm\nran overlay@fentry\nverdict=PASS\n"
        );
    }

    #[test]
    fn a_resume_point_that_names_no_run_fails_the_guest() {
        let out = runs_with(&format!("{}\n", kernel_arg("nosuch")));
        assert!(!out.contains("ran "), "{out}");
        assert!(
            out.ends_with("SOCKWATCH-VM-ERROR: no run named nosuch to resume from\nverdict=FAIL\n"),
            "{out}"
        );
    }

    #[test]
    fn lockups_and_stalls_are_recognised() {
        assert_eq!(
            lockup_report(
                "[ 2672.906567] watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [x:1]\n"
            ),
            Some("watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [x:1]")
        );
        assert_eq!(
            lockup_report("[  29.7] rcu: INFO: rcu_sched detected stalls on CPUs/tasks:"),
            Some("rcu: INFO: rcu_sched detected stalls on CPUs/tasks:")
        );
        assert_eq!(lockup_report("test overlay ... ok"), None);
    }
}
