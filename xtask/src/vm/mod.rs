//! `cargo xtask vm-test`: the agent's integration tests, as root, inside QEMU on Debian's stock
//! kernels, 5.10 (Debian 11), 6.1 and 6.12 (Debian 12), where fentry/fexit, kprobes and the BPF
//! LSM are all available.
use std::{
    fs,
    io::{BufRead as _, BufReader, Read as _, Write},
    path::{Path, PathBuf},
    process::{Child, ChildStdout, ExitStatus},
    sync::{
        Mutex,
        atomic::{AtomicUsize, Ordering},
        mpsc,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::{
    arch::Arch,
    cmd,
    initramfs::Image,
    kernels::{Kernel, version_cmp},
    setup::Ready,
    testrun::{self, Counts},
};

mod payload;
mod plan;
mod qemu;
pub mod resume;

pub use payload::INTEGRATION_TESTS;
use payload::{GO_LISTENER_GUEST, Payload};
pub use plan::{Plan, agent_integration_tests};
use resume::{Fault, Resumed};

const VERDICT: &str = "SOCKWATCH-VM-VERDICT: ";
/// What each guest kernel's tests must be able to attach (`SOCKWATCH_REQUIRE_TIERS`; a tier
/// not required that fails to load skips its tests, with the reason printed): every tier,
/// except on arm64 before 6.4, where BPF trampolines cannot attach to kernel functions (ftrace
/// direct calls came to arm64 in 6.4), so fentry, fexit and LSM programs fail to attach with
/// ENOTSUPP and the kprobe tier is the precise one. (`uname -r` pattern, tiers.)
const REQUIRED: [(&str, &str); 2] = [
    ("6.1.*-arm64", "kprobe,tracepoint"),
    ("*", "lsm,fentry,kprobe,tracepoint"),
];
/// The end-to-end verdict tests that start the agent under `auto`, run once per tier
/// (`SOCKWATCH_PROBE_MODE`), so that every verdict is proven on every tier the guest loads,
/// not only on the one `auto` picks. (`handover`, `late_start` and `stale_connect` loop over
/// the modes themselves.)
const PER_TIER_TESTS: &[&str] = &["verdicts", "overlay", "patterns", "renames"];
/// Every tier, as `vm-test --all-tiers` runs them on every kernel.
const ALL_MODES: &str = "lsm fentry kprobe tracepoint";
/// The tiers each kernel runs the agent's end-to-end tests under in the whole suite (`cargo
/// xtask test`, CI): every tier on 6.1 and 6.12, every precise tier on 5.10. 5.10 leaves
/// `tracepoint` (run natively on the host and in the other two guests) to `--all-tiers`: under
/// TCG one of its two runs locked up (soft lockups on both vCPUs) at the first test of that
/// tier. arm64's 6.1 runs the tiers it gives (see [`REQUIRED`]). (`uname -r` pattern, modes.)
const ROTATION: [(&str, &str); 3] = [
    ("5.10.*", "lsm fentry kprobe"),
    ("6.1.*-arm64", "kprobe tracepoint"),
    ("*", ALL_MODES),
];

/// Which tiers the guests run the end-to-end tests under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tiers {
    /// Every tier on every kernel.
    All,
    /// [`ROTATION`].
    Rotation,
}
/// How long the host waits on a guest's console.
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// From the verdict line to killing QEMU, for the guest to power off.
    poweroff_grace: Duration,
    /// From QEMU's start to `/init`'s first line (12-16 s with three guests on two cores). TCG
    /// guests sometimes hang in early boot (a CI run's 5.10 guest: RCU stalls on its second
    /// vCPU at 30 s, `/init` never ran); past this the boot is tried again.
    boot: Duration,
    /// Time without a line from `/init`'s programs (kernel messages do not count) once
    /// `/init` runs that means a hung guest: a test binary prints a line per test, and the
    /// slowest test takes about three minutes under TCG. A CI run's 5.10 guest locked up
    /// (soft lockups on both vCPUs) and printed only kernel messages from then on.
    silence: Duration,
    /// The same, once the guest kernel has reported a lockup: such a guest is
    /// [resumed](resume), and waiting the whole silence for it would only cost time.
    lockup_silence: Duration,
}

const LIMITS: Limits = Limits {
    poweroff_grace: Duration::from_secs(30),
    boot: Duration::from_secs(240),
    silence: Duration::from_secs(600),
    lockup_silence: Duration::from_secs(300),
};
/// Boots of one kernel that may hang before `/init` runs before the guest counts as failed.
const BOOT_ATTEMPTS: u32 = 3;
/// What starts each boot after the first in a guest's console log.
pub const BOOT_SEPARATOR: &str = "\n----- boot ";
/// The start of every guest's `/init`: busybox's applets, the filesystems the probes and tests
/// need, loopback, each kernel's modules, and the kernel line the host waits for.
pub const INIT_PREAMBLE: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root TMPDIR=/tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing
mount -t securityfs securityfs /sys/kernel/security
mount -t cgroup2 cgroup2 /sys/fs/cgroup
ip link set lo up
for m in /lib/modules/$(uname -r)/*.ko; do
  [ -e "$m" ] && { insmod "$m" || echo "SOCKWATCH-VM-WARNING: insmod $m failed"; }
done
echo "SOCKWATCH-VM-KERNEL: $(uname -r) lsm=$(cat /sys/kernel/security/lsm)"
"#;

/// The guest's `/init`: mounts what the probes and tests need, runs every test binary with one
/// thread, and ends with a verdict line the host looks for.
fn init_script(tests: &[String], go_listener: bool, tiers: Tiers) -> String {
    let mut s = format!("{INIT_PREAMBLE}verdict=PASS\n");
    if go_listener {
        s.push_str(&format!(
            "export SOCKWATCH_GO_LISTENER={GO_LISTENER_GUEST}\n"
        ));
    }
    s.push_str(&modes_script(tiers));
    s.push_str(&resume::read_script());
    // What this kernel lets the agent attach, tier by tier, in the console log.
    s.push_str("/bin/sockwatch check 2>&1 | sed 's/^/SOCKWATCH-VM-CHECK: /'\n");
    for t in tests {
        if PER_TIER_TESTS.contains(&t.as_str()) {
            let label = format!("{t}@$mode");
            s.push_str("for mode in $MODES; do\n");
            s.push_str(&resume::guard(
                &label,
                &test_run(t, &label, "SOCKWATCH_PROBE_MODE=$mode "),
            ));
            s.push_str("done\n");
        } else {
            s.push_str(&resume::guard(t, &test_run(t, t, "")));
        }
    }
    s.push_str(resume::check_script());
    s.push_str(&format!("echo \"{VERDICT}$verdict\"\npoweroff -f\n"));
    s
}

/// Sets `MODES` (space-separated) for this guest's kernel, `SOCKWATCH_TEST_MODES` (the same,
/// comma-separated) for the tests that loop over the modes themselves, and `REQUIRE`.
fn modes_script(tiers: Tiers) -> String {
    let mut s = match tiers {
        Tiers::All => format!("MODES=\"{ALL_MODES}\"\n"),
        Tiers::Rotation => by_release("MODES", &ROTATION),
    };
    s.push_str(&by_release("REQUIRE", &REQUIRED));
    s.push_str(
        "export SOCKWATCH_TEST_MODES=$(echo $MODES | tr ' ' ,)\n\
         echo \"SOCKWATCH-VM-MODES: $MODES (required: $REQUIRE)\"\n",
    );
    s
}

/// A `case` on `uname -r` that sets `var` to the value of the first matching pattern.
fn by_release(var: &str, table: &[(&str, &str)]) -> String {
    let mut c = String::from("case \"$(uname -r)\" in\n");
    for (pattern, value) in table {
        c.push_str(&format!("  {pattern}) {var}=\"{value}\" ;;\n"));
    }
    c + "esac\n"
}

/// One test binary's run in the guest, labelled `label`, with `env` (`VAR=value `) before it.
fn test_run(test: &str, label: &str, env: &str) -> String {
    run_lines(
        label,
        &format!(
            "{env}SOCKWATCH_REQUIRE_TIERS=$REQUIRE SOCKWATCH_BIN=/bin/sockwatch SOCKWATCH_IN_VM=1 \
             RUST_BACKTRACE=1 /tests/{INTEGRATION_TESTS} {test}:: --test-threads=1"
        ),
    )
}

/// `/init`'s lines for `command` as a run labelled `label`: its start and end on the console
/// (where a [resume](resume) finds the run a fault ended), a failure failing the guest.
pub fn run_lines(label: &str, command: &str) -> String {
    format!(
        "echo \"{RUN_MARK}{label}\"\n\
         {command}\n\
         rc=$?\n\
         echo \"{EXIT_MARK}{label} $rc\"\n\
         [ $rc -eq 0 ] || verdict=FAIL\n"
    )
}

/// The console line a run starts with, before its label.
pub const RUN_MARK: &str = "SOCKWATCH-VM-RUN: ";
/// The console line a run ends with, before its label and exit status.
pub const EXIT_MARK: &str = "SOCKWATCH-VM-EXIT: ";

/// Writes the guest's initramfs (busybox, sockwatch, the tests, their libraries, each kernel's
/// [`modules`](Kernel::modules) under `/lib/modules/<release>/`, `/init`).
pub fn build_initramfs(
    payload: &Payload,
    modules: &[String],
    kernels: &[Kernel],
    busybox: &Path,
    tiers: Tiers,
    out: &Path,
) -> anyhow::Result<()> {
    let mut img = base_image(kernels, busybox)?;
    img.executable("bin/sockwatch", &payload.sockwatch)?;
    if let Some(go) = &payload.go_listener {
        img.executable(GO_LISTENER_GUEST, go)?;
    }
    img.executable(&format!("tests/{INTEGRATION_TESTS}"), &payload.tests)?;
    let init = init_script(modules, payload.go_listener.is_some(), tiers);
    img.bytes("init", init, 0o755);
    write_image(&img, out)
}

/// What every guest's initramfs holds: its directories, `/dev/console`, `busybox` (built for
/// the kernels' architecture) and each kernel's [`modules`](Kernel::modules) under
/// `/lib/modules/<release>/`.
pub fn base_image(kernels: &[Kernel], busybox: &Path) -> anyhow::Result<Image> {
    let mut img = Image::default();
    for d in [
        "proc", "sys", "dev", "tmp", "run", "root", "sbin", "usr/bin", "usr/sbin",
    ] {
        img.dir(d);
    }
    // The kernel opens /dev/console for /init before anything is mounted.
    img.char_dev("dev/console", 5, 1);
    img.executable("bin/busybox", busybox)
        .with_context(|| format!("busybox ({})", busybox.display()))?;
    img.symlink("bin/sh", "busybox");
    for k in kernels {
        for m in &k.modules {
            let name = m.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            img.copy(&format!("lib/modules/{}/{name}", k.release()), m, 0o644);
        }
    }
    Ok(img)
}

/// Writes `img`, gzipped, to `out`, creating its directory.
pub fn write_image(img: &Image, out: &Path) -> anyhow::Result<()> {
    if let Some(dir) = out.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    img.write_gz(out)
}

/// `line` without terminal escape sequences (SeaBIOS and the guest reset the screen) and
/// control characters other than tab and newline.
fn printable(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => {
                // CSI (`ESC [ ... final`) or a two-character escape (`ESC c`).
                if chars.next_if_eq(&'[').is_some() {
                    while chars.next().is_some_and(|c| !('@'..='~').contains(&c)) {}
                } else {
                    chars.next();
                }
            }
            '\t' | '\n' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// What one guest boot showed.
pub struct Outcome {
    pub label: String,
    pub kernel: Kernel,
    /// `uname -r` as the guest printed it.
    pub release: Option<String>,
    pub counts: Counts,
    /// From QEMU's start to the guest's first line from `/init`.
    pub boot_time: Option<Duration>,
    /// `None` when the run passed; otherwise why it failed.
    pub failure: Option<String>,
    /// The guest's own verdict line, if it printed one.
    pub verdict: Option<bool>,
    pub elapsed: Duration,
    pub log: PathBuf,
    /// The runs a [resumed](resume) boot started again from, after an emulation fault.
    pub resumed: Vec<Resumed>,
}

/// The guest's name in labels and paths: the kernel's upstream version, after its architecture
/// where that is not x86-64 (the arm64 guests boot the same versions).
pub fn guest_name(kernel: &Kernel) -> String {
    match kernel.arch {
        Arch::X86_64 => kernel.upstream().to_owned(),
        other => format!("{other} {}", kernel.upstream()),
    }
}

/// Boots `kernel` with `initrd` under TCG, streams the serial console to
/// `target/vm/<kernel>/console.log` and reads the verdict from it. A boot that hangs before
/// `/init` runs is tried again, up to [`BOOT_ATTEMPTS`] boots within `timeout`; a guest an
/// emulation fault ended inside a run is [resumed](resume) from that run, at most `resumes`
/// times.
pub fn boot(
    kernel: &Kernel,
    initrd: &Path,
    timeout: Duration,
    resumes: u32,
) -> anyhow::Result<Outcome> {
    let label = format!("vm {}", guest_name(kernel));
    let dir = cmd::target_dir()
        .join("vm")
        .join(guest_name(kernel).replace(' ', "-"));
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let log_path = dir.join("console.log");
    let mut log =
        fs::File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let started = Instant::now();
    let deadline = started + timeout;
    let mut attempt = 1;
    // Results of the boots an emulation fault ended, and the runs each was resumed from.
    let mut earlier = Counts::default();
    let mut resumed: Vec<Resumed> = Vec::new();
    loop {
        let from = resumed.last().map(|r| r.run.as_str());
        let (console, stop) = boot_once(kernel, initrd, from, &label, &mut log, deadline)?;
        let panicked_at_boot = console.boot_time.is_none() && console.panic.is_some();
        if (stop == Stop::BootStalled || panicked_at_boot) && attempt < BOOT_ATTEMPTS {
            // Nothing of ours has run yet: a hang or an emulation fault of the guest kernel.
            let why = match &console.panic {
                Some(p) if panicked_at_boot => format!("the kernel panicked before /init ({p})"),
                _ => format!("/init did not start within {:?}", LIMITS.boot),
            };
            println!("xtask: {label}: {why} (boot {attempt} of {BOOT_ATTEMPTS}); booting again");
            writeln!(log, "{BOOT_SEPARATOR}{} -----", attempt + 1)?;
            attempt += 1;
            continue;
        }
        let mut counts = testrun::sum_results(&console.text);
        if let (Some(fault), Some(run)) = (console.emulation_fault(stop), &console.running)
            && resumed.len() < resumes as usize
        {
            println!(
                "xtask: {label}: a guest-kernel {} in {run} ({}); booting again from {run} \
                 (resume {} of {})",
                fault.kind,
                fault.report,
                resumed.len() + 1,
                resumes
            );
            writeln!(
                log,
                "{BOOT_SEPARATOR}{}: resumed from {run} -----",
                attempt + 1
            )?;
            earlier += counts;
            resumed.push(Resumed {
                run: run.clone(),
                fault: fault.kind,
            });
            attempt += 1;
            continue;
        }
        counts += earlier;
        return Ok(Outcome {
            failure: stop.failure(&console, &counts, timeout, attempt),
            verdict: console.verdict,
            label: console.label,
            kernel: kernel.clone(),
            release: console.release,
            counts,
            boot_time: console.boot_time,
            elapsed: started.elapsed(),
            log: log_path,
            resumed,
        });
    }
}

/// One QEMU run, its console appended to `log`, until it exits or a limit ends it.
fn boot_once(
    kernel: &Kernel,
    initrd: &Path,
    resume_from: Option<&str>,
    label: &str,
    log: &mut fs::File,
    deadline: Instant,
) -> anyhow::Result<(Console, Stop)> {
    let started = Instant::now();
    let mut child = qemu::command(kernel, initrd, resume_from.map(resume::kernel_arg))
        .spawn()
        .with_context(|| qemu::missing(kernel.arch))?;
    let (lines, reader) = read_lines(child.stdout.take().expect("piped"));
    let mut stderr = child.stderr.take().expect("piped");
    let stderr_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });

    let mut console = Console::new(label.to_owned(), started);
    let mut stop = console.follow(&lines, log, deadline, LIMITS)?;
    let status = reap(&mut child, stop)?;
    let _ = reader.join();
    let qemu_stderr = stderr_reader.join().unwrap_or_default();
    if !qemu_stderr.is_empty() {
        writeln!(log, "--- qemu stderr ---\n{qemu_stderr}")?;
    }
    if stop == Stop::Exited && console.verdict.is_none() {
        console.exit_status = Some(status.to_string());
    }
    if stop == Stop::PoweredOff {
        stop = Stop::Exited;
    }
    Ok((console, stop))
}

/// QEMU's exit status. After it closed its console it is exiting: it gets a few seconds to do
/// so (killing it at once made every such exit read "signal 9"); otherwise it is killed.
fn reap(child: &mut Child, stop: Stop) -> anyhow::Result<ExitStatus> {
    if stop == Stop::Exited {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Some(status) = child.try_wait().context("waiting for qemu")? {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let _ = child.kill();
    child.wait().context("waiting for qemu")
}

/// Why [`Console::follow`] stopped reading a guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    /// QEMU closed its console.
    Exited,
    /// The guest had its grace to power off after its verdict.
    PoweredOff,
    /// The whole run's deadline passed.
    TimedOut,
    /// No line from `/init` within the boot limit.
    BootStalled,
    /// `/init` ran, then the console was silent past the silence limit.
    Silent,
}

impl Stop {
    /// `None` when the guest passed; otherwise why it failed.
    fn failure(
        self,
        console: &Console,
        counts: &Counts,
        timeout: Duration,
        boots: u32,
    ) -> Option<String> {
        let why = self.reason(console, counts, timeout, boots)?;
        Some(match &console.panic {
            Some(p) => format!("{why}; the guest kernel: {p}"),
            None => why,
        })
    }

    fn reason(
        self,
        console: &Console,
        counts: &Counts,
        timeout: Duration,
        boots: u32,
    ) -> Option<String> {
        match self {
            Stop::TimedOut => Some(format!("timed out after {timeout:?}")),
            Stop::BootStalled => Some(format!(
                "/init never started: {boots} boots hung past {:?}",
                LIMITS.boot
            )),
            Stop::Silent => Some(format!(
                "hung: the console was silent for {:?}",
                if console.lockup.is_some() {
                    LIMITS.lockup_silence
                } else {
                    LIMITS.silence
                }
            )),
            Stop::Exited | Stop::PoweredOff => match console.verdict {
                Some(true) if counts.runs == 0 => Some("the guest ran no test".to_owned()),
                Some(true) => None,
                Some(false) => Some("guest verdict FAIL".to_owned()),
                None => Some(format!(
                    "no verdict line; qemu exited ({})",
                    console.exit_status.as_deref().unwrap_or("?")
                )),
            },
        }
    }
}

/// A thread sending each line of `stdout`, made [`printable`], until it closes.
fn read_lines(stdout: ChildStdout) -> (mpsc::Receiver<String>, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        while matches!(r.read_until(b'\n', &mut buf), Ok(n) if n > 0) {
            let line = printable(&String::from_utf8_lossy(&buf));
            if tx.send(line).is_err() {
                break;
            }
            buf.clear();
        }
    });
    (rx, reader)
}

/// A line of the guest kernel's log (`[  123.456] …`): a locked-up guest goes on printing
/// these (soft lockups, RCU stalls), so they are not progress.
fn is_kernel_message(line: &str) -> bool {
    line.trim_start().starts_with('[')
}

/// What the guest's console has shown so far.
struct Console {
    label: String,
    started: Instant,
    text: String,
    verdict: Option<bool>,
    release: Option<String>,
    boot_time: Option<Duration>,
    /// QEMU's exit status when it exited without a verdict.
    exit_status: Option<String>,
    /// The guest kernel's first Oops or BUG line, its first `RIP:` line, then its panic line.
    panic: Option<String>,
    /// The run `/init` started last and has not finished (`SOCKWATCH-VM-RUN:` without its
    /// `SOCKWATCH-VM-EXIT:`).
    running: Option<String>,
    /// The guest kernel's first lockup report since `/init`'s last line.
    lockup: Option<String>,
}

impl Console {
    fn new(label: String, started: Instant) -> Console {
        Console {
            label,
            started,
            text: String::new(),
            verdict: None,
            release: None,
            boot_time: None,
            exit_status: None,
            panic: None,
            running: None,
            lockup: None,
        }
    }

    /// The emulation fault that ended this boot, if one did: a lockup (the console silent after
    /// the kernel's lockup reports) or an `int3` Oops (QEMU exited after the kernel's panic).
    fn emulation_fault(&self, stop: Stop) -> Option<Fault> {
        match (stop, &self.lockup, &self.panic) {
            (Stop::Silent, Some(lockup), _) => Some(Fault {
                kind: "lockup",
                report: format!("{lockup}; /init silent for {:?}", LIMITS.lockup_silence),
            }),
            (Stop::Exited, _, Some(panic))
                if self.verdict.is_none() && resume::is_int3_oops(panic) =>
            {
                Some(Fault {
                    kind: "int3 Oops",
                    report: panic.clone(),
                })
            }
            _ => None,
        }
    }

    /// Takes `lines` into `log` until QEMU closes its console or the first of `deadline` and
    /// `limits` passes.
    fn follow(
        &mut self,
        lines: &mpsc::Receiver<String>,
        log: &mut impl Write,
        deadline: Instant,
        limits: Limits,
    ) -> anyhow::Result<Stop> {
        let mut last_line = Instant::now();
        loop {
            let (limit, stop) = self.next_limit(deadline, last_line, limits);
            let Some(wait) = limit.checked_duration_since(Instant::now()) else {
                return Ok(stop);
            };
            match lines.recv_timeout(wait) {
                Ok(line) => {
                    if !is_kernel_message(&line) {
                        last_line = Instant::now();
                    }
                    log.write_all(line.as_bytes())?;
                    self.take(line);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => return Ok(stop),
                // QEMU closed its console: it has exited.
                Err(mpsc::RecvTimeoutError::Disconnected) => return Ok(Stop::Exited),
            }
        }
    }

    /// The earliest limit that applies now, and what passing it means.
    fn next_limit(&self, deadline: Instant, last_line: Instant, limits: Limits) -> (Instant, Stop) {
        let own = if self.verdict.is_some() {
            (last_line + limits.poweroff_grace, Stop::PoweredOff)
        } else if self.boot_time.is_none() {
            (self.started + limits.boot, Stop::BootStalled)
        } else if self.lockup.is_some() {
            (last_line + limits.lockup_silence, Stop::Silent)
        } else {
            (last_line + limits.silence, Stop::Silent)
        };
        if deadline <= own.0 {
            (
                deadline,
                if self.verdict.is_some() {
                    Stop::PoweredOff
                } else {
                    Stop::TimedOut
                },
            )
        } else {
            own
        }
    }

    /// Notes the verdict and kernel lines, echoes the lines worth following live.
    fn take(&mut self, line: String) {
        let text = line.trim_end();
        if let Some(v) = text.split(VERDICT).nth(1) {
            self.verdict = Some(v.trim() == "PASS");
        }
        if let Some(at) = ["Oops:", "BUG:", "Kernel panic"]
            .iter()
            .find_map(|m| text.find(m))
        {
            let what = &text[at..];
            match &mut self.panic {
                None => self.panic = Some(what.to_owned()),
                Some(p) if what.starts_with("Kernel panic") => *p = format!("{p}; {what}"),
                Some(_) => {}
            }
        } else if let (Some(p), Some(at)) = (&mut self.panic, text.find("RIP: "))
            && !p.contains("RIP: ")
        {
            // Where the first Oops hit.
            *p = format!("{p}; {}", &text[at..]);
        }
        if is_kernel_message(text) {
            if self.lockup.is_none() {
                self.lockup = resume::lockup_report(text).map(str::to_owned);
            }
        } else {
            self.lockup = None;
        }
        if let Some(run) = text.split(RUN_MARK).nth(1) {
            self.running = Some(run.trim().to_owned());
        }
        if text.contains(EXIT_MARK) {
            self.running = None;
        }
        if let Some(r) = text.split("SOCKWATCH-VM-KERNEL: ").nth(1) {
            self.release = r.split_whitespace().next().map(str::to_owned);
            self.boot_time = Some(self.started.elapsed());
        }
        if text.contains("SOCKWATCH-VM-")
            || text.contains("SOCKWATCH-BENCH-")
            || text.contains(crate::headroom::PREFIX)
            || text.contains("test result:")
            || text.starts_with("test ")
        {
            let at = self.started.elapsed().as_secs_f64();
            println!("[{} {at:>6.1}s] {text}", self.label);
        }
        self.text.push_str(&line);
    }
}

/// Builds each architecture's payload and initramfs once, then boots the kernels, `jobs`
/// guests at a time (each guest's tests run one thread, which leaves a core idle while a lone
/// guest runs). A failed boot prints its whole console log.
pub fn test(
    ready: &Ready,
    plans: &[Plan],
    tiers: Tiers,
    timeout: Duration,
    jobs: usize,
) -> anyhow::Result<Vec<Outcome>> {
    let initrds = initramfs_per_arch(ready, plans, tiers)?;
    boot_all(ready, &initrds, timeout, jobs)
}

/// Each plan's initramfs, built (the test executables compiled, the image written) before
/// any guest boots, so the suite can build them while other work waits.
pub fn initramfs_per_arch(
    ready: &Ready,
    plans: &[Plan],
    tiers: Tiers,
) -> anyhow::Result<Vec<(Arch, PathBuf)>> {
    plans
        .iter()
        .map(|plan| {
            let busybox = ready
                .busybox
                .iter()
                .find(|(a, _)| *a == plan.arch)
                .map(|(_, b)| b.as_path())
                .with_context(|| format!("setup fetched no busybox for {}", plan.arch))?;
            Ok((plan.arch, prepare(plan, busybox, &ready.kernels, tiers)?))
        })
        .collect()
}

/// Boots every kernel `ready` holds on its architecture's initramfs, `jobs` guests at a time,
/// and reports each guest's outcome.
pub fn boot_all(
    ready: &Ready,
    initrds: &[(Arch, PathBuf)],
    timeout: Duration,
    jobs: usize,
) -> anyhow::Result<Vec<Outcome>> {
    let kernels = &ready.kernels;
    let initrd_of = |k: &Kernel| {
        initrds
            .iter()
            .find(|(a, _)| *a == k.arch)
            .map(|(_, p)| p.as_path())
            .with_context(|| format!("no initramfs for {}'s architecture {}", k.package, k.arch))
    };
    let queue = longest_first(kernels, |k| {
        initrd_of(k).map_or(0, |p| fs::metadata(p).map_or(0, |m| m.len()))
    });
    // A queue of kernels: each of `jobs` threads boots the next one when its guest is done.
    let next = AtomicUsize::new(0);
    let booted = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, kernels.len().max(1)) {
            s.spawn(|| {
                while let Some(kernel) = queue.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let o = initrd_of(kernel)
                        .and_then(|initrd| boot_and_report(kernel, initrd, timeout));
                    booted.lock().expect("outcomes lock").push(o);
                }
            });
        }
    });
    let mut outcomes = booted
        .into_inner()
        .expect("outcomes lock")
        .into_iter()
        .collect::<anyhow::Result<Vec<Outcome>>>()?;
    // In the order asked for, whichever guest finished first.
    outcomes.sort_by_key(|o| kernels.iter().position(|k| k.package == o.kernel.package));
    Ok(outcomes)
}

/// The guests in the order to boot them, the longest first, so that the last ones to start
/// are short and no lone guest leaves a core idle at the end: a larger initramfs carries more
/// test executables, and a newer kernel loads more tiers (each tier runs its tests again).
fn longest_first(kernels: &[Kernel], initrd_size: impl Fn(&Kernel) -> u64) -> Vec<&Kernel> {
    let mut sized: Vec<(u64, &Kernel)> = kernels.iter().map(|k| (initrd_size(k), k)).collect();
    sized.sort_by(|(sa, a), (sb, b)| {
        sb.cmp(sa)
            .then_with(|| version_cmp(b.upstream(), a.upstream()))
    });
    sized.into_iter().map(|(_, k)| k).collect()
}

/// Builds `plan`'s payload and writes its initramfs, `target/vm/<arch>/initrd.gz`.
fn prepare(
    plan: &Plan,
    busybox: &Path,
    kernels: &[Kernel],
    tiers: Tiers,
) -> anyhow::Result<PathBuf> {
    let started = Instant::now();
    let modules = test_modules(&plan.only)?;
    let payload = payload::build_payload(plan.arch)?;
    let initrd = cmd::target_dir()
        .join("vm")
        .join(plan.arch.to_string())
        .join("initrd.gz");
    let kernels: Vec<Kernel> = kernels
        .iter()
        .filter(|k| k.arch == plan.arch)
        .cloned()
        .collect();
    build_initramfs(&payload, &modules, &kernels, busybox, tiers, &initrd)?;
    let size = fs::metadata(&initrd).map_or(0, |m| m.len());
    println!(
        "xtask: {} initramfs {} ({:.1} MiB, tests: {}) ready in {:.1?}",
        plan.arch,
        initrd.display(),
        size as f64 / f64::from(1 << 20),
        modules.join(", "),
        started.elapsed()
    );
    Ok(initrd)
}

/// The integration tests' modules named in `only` (all when it is empty), each of which must
/// exist.
fn test_modules(only: &[String]) -> anyhow::Result<Vec<String>> {
    let modules = agent_integration_tests()?;
    if let Some(unknown) = only.iter().find(|n| !modules.contains(n)) {
        bail!("no test module `{unknown}` in agent/tests/it (there are: {modules:?})");
    }
    Ok(if only.is_empty() {
        modules
    } else {
        only.to_vec()
    })
}

/// [`boot`], then the summary line, and the whole console log when the guest failed.
fn boot_and_report(kernel: &Kernel, initrd: &Path, timeout: Duration) -> anyhow::Result<Outcome> {
    println!(
        "xtask: booting {} ({}) under QEMU/TCG",
        kernel.package, kernel.version
    );
    let o = boot(kernel, initrd, timeout, resume::RESUMES)?;
    if o.failure.is_some() {
        let log = fs::read_to_string(&o.log).unwrap_or_default();
        // One print: another guest's lines must not land inside this log.
        print!(
            "----- {label} console ({path}) -----\n{log}----- end of {label} console -----\n",
            label = o.label,
            path = o.log.display()
        );
    }
    println!("{}", o.summary());
    Ok(o)
}

impl Outcome {
    pub fn summary(&self) -> String {
        format!(
            "xtask: {} ({}, kernel {}): {} passed, {} failed, {} ignored; boot {}, total {:.1?}{}: {}",
            self.label,
            self.kernel.package,
            self.release.as_deref().unwrap_or("?"),
            self.counts.passed,
            self.counts.failed,
            self.counts.ignored,
            self.boot_time
                .map_or("?".to_owned(), |b| format!("{b:.1?}")),
            self.elapsed,
            if self.resumed.is_empty() {
                String::new()
            } else {
                let each: Vec<String> = self
                    .resumed
                    .iter()
                    .map(|r| format!("{} in {}", r.fault, r.run))
                    .collect();
                format!("; resumed after a guest-kernel {}", each.join(", "))
            },
            match &self.failure {
                None => "PASS".to_owned(),
                Some(why) => format!("FAIL ({why}; log {})", self.log.display()),
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guests_boot_longest_first() {
        let kernel = |arch, version: &str| Kernel {
            package: format!("linux-image-{version}-{arch}"),
            version: format!("{version}-1"),
            arch,
            vmlinuz: PathBuf::new(),
            modules: Vec::new(),
        };
        // The order setup lists them in: by architecture, oldest kernel first.
        let kernels = [
            kernel(Arch::X86_64, "5.10.251"),
            kernel(Arch::X86_64, "6.1.192"),
            kernel(Arch::X86_64, "6.12.118"),
            kernel(Arch::Aarch64, "6.1.192"),
            kernel(Arch::Aarch64, "6.12.118"),
            kernel(Arch::Aarch64, "6.9.1"),
        ];
        let initrd_size = |k: &Kernel| if k.arch == Arch::X86_64 { 90 } else { 40 };
        let order: Vec<_> = longest_first(&kernels, initrd_size)
            .iter()
            .map(|k| format!("{} {}", k.arch, k.upstream()))
            .collect();
        assert_eq!(
            order,
            [
                "x86_64 6.12.118",
                "x86_64 6.1.192",
                "x86_64 5.10.251",
                "aarch64 6.12.118",
                "aarch64 6.9.1",
                "aarch64 6.1.192",
            ]
        );
    }

    #[test]
    fn console_lines_are_made_printable() {
        assert_eq!(
            printable("\x1bc\x1b[?7l\x1b[2JSOCKWATCH-VM-KERNEL: 6.1.0\r\n"),
            "SOCKWATCH-VM-KERNEL: 6.1.0\n"
        );
        assert_eq!(printable("\x1b[0mSeaBIOS\ttext\x07"), "SeaBIOS\ttext");
        assert_eq!(printable("plain"), "plain");
    }

    #[test]
    fn init_runs_each_test_and_ends_with_a_verdict() {
        let s = init_script(&["kernel".into(), "cli".into()], true, Tiers::Rotation);
        assert!(s.starts_with("#!/bin/busybox sh\n"));
        for m in [
            "bpf /sys/fs/bpf",
            "tracefs /sys/kernel/tracing",
            "cgroup2 /sys/fs/cgroup",
        ] {
            assert!(s.contains(m), "{m}");
        }
        assert!(
            s.contains("SOCKWATCH_IN_VM=1 RUST_BACKTRACE=1 /tests/it kernel:: --test-threads=1")
        );
        assert!(s.contains("/tests/it cli:: --test-threads=1"));
        let v = init_script(&["verdicts".into()], false, Tiers::Rotation);
        assert!(
            v.contains(
                "for mode in $MODES; do\n\
                 if [ -n \"$resume\" ] && [ \"$resume\" != \"verdicts@$mode\" ]; then\n"
            ),
            "{v}"
        );
        assert!(
            v.contains(
                "resume=\necho \"SOCKWATCH-VM-RUN: verdicts@$mode\"\n\
                 SOCKWATCH_PROBE_MODE=$mode SOCKWATCH_REQUIRE_TIERS="
            ),
            "{v}"
        );
        assert!(v.contains("/proc/cmdline"), "{v}");
        assert!(s.contains("for m in /lib/modules/$(uname -r)/*.ko"));
        assert!(s.contains("export SOCKWATCH_GO_LISTENER=/bin/golistener\n"));
        assert!(!init_script(&[], false, Tiers::All).contains("SOCKWATCH_GO_LISTENER"));
        assert!(
            s.trim_end()
                .ends_with("echo \"SOCKWATCH-VM-VERDICT: $verdict\"\npoweroff -f")
        );
    }

    /// The guest's shell picks the modes by `uname -r`: run the same script with a stand-in.
    fn modes_in(release: &str, tiers: Tiers) -> String {
        let script = format!(
            "uname() {{ echo {release}; }}\n{}echo \"$MODES|$SOCKWATCH_TEST_MODES|$REQUIRE\"",
            modes_script(tiers)
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .output()
            .expect("sh");
        let text = String::from_utf8(out.stdout).expect("utf-8");
        text.lines().last().unwrap_or_default().to_owned()
    }

    #[test]
    fn each_kernel_runs_its_rotation_of_tiers_or_all_of_them() {
        let all = "lsm,fentry,kprobe,tracepoint";
        for (release, want) in [
            (
                "5.10.0-43-cloud-amd64",
                format!("lsm fentry kprobe|lsm,fentry,kprobe|{all}"),
            ),
            (
                "6.1.0-57-cloud-amd64",
                format!("lsm fentry kprobe tracepoint|{all}|{all}"),
            ),
            (
                "6.12.117+deb12-cloud-amd64",
                format!("lsm fentry kprobe tracepoint|{all}|{all}"),
            ),
            // No trampolines on arm64 before 6.4: kprobes are its precise tier.
            (
                "6.1.0-57-cloud-arm64",
                "kprobe tracepoint|kprobe,tracepoint|kprobe,tracepoint".to_owned(),
            ),
            (
                "6.12.118+deb12-cloud-arm64",
                format!("lsm fentry kprobe tracepoint|{all}|{all}"),
            ),
        ] {
            assert_eq!(modes_in(release, Tiers::Rotation), want, "{release}");
        }
        assert_eq!(
            modes_in("5.10.0-43-cloud-amd64", Tiers::All),
            format!("lsm fentry kprobe tracepoint|{all}|{all}")
        );
        assert_eq!(
            modes_in("6.1.0-57-cloud-arm64", Tiers::All),
            "lsm fentry kprobe tracepoint|lsm,fentry,kprobe,tracepoint|kprobe,tracepoint"
        );
    }

    /// A guest's console: `lines` sent by a thread, one every `gap`, then held open for `hold`.
    fn guest(lines: &[&str], gap: Duration, hold: Duration) -> mpsc::Receiver<String> {
        let (tx, rx) = mpsc::channel();
        let lines: Vec<String> = lines.iter().map(|l| format!("{l}\n")).collect();
        std::thread::spawn(move || {
            for l in lines {
                std::thread::sleep(gap);
                let _ = tx.send(l);
            }
            std::thread::sleep(hold);
        });
        rx
    }

    fn follow(lines: &[&str], hold: Duration, deadline: Duration) -> (Stop, Console) {
        let limits = Limits {
            poweroff_grace: Duration::from_millis(300),
            boot: Duration::from_millis(600),
            silence: Duration::from_millis(600),
            lockup_silence: Duration::from_millis(600),
        };
        let rx = guest(lines, Duration::from_millis(50), hold);
        let started = Instant::now();
        let mut console = Console::new("vm test".to_owned(), started);
        let stop = console
            .follow(&rx, &mut Vec::new(), started + deadline, limits)
            .expect("follow");
        (stop, console)
    }

    const KERNEL: &str = "SOCKWATCH-VM-KERNEL: 6.1.0 lsm=bpf";
    const LONG: Duration = Duration::from_secs(5);

    #[test]
    fn a_boot_that_never_reaches_init_is_stalled_not_timed_out() {
        let (stop, console) = follow(
            &["[ 29.7] rcu: INFO: rcu_sched detected stalls"],
            LONG,
            LONG,
        );
        assert_eq!(stop, Stop::BootStalled);
        assert!(console.boot_time.is_none());
    }

    #[test]
    fn a_kernel_panic_is_named_in_the_failure() {
        let (stop, console) = follow(
            &[
                "[   11.898742] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI",
                "[   11.903106] Oops: int3: 0000 [#2] PREEMPT SMP NOPTI",
                "[   11.903454] Kernel panic - not syncing: Fatal exception in interrupt",
            ],
            Duration::ZERO,
            LONG,
        );
        // The console closed: QEMU exited after the panic (`-no-reboot`).
        assert_eq!(stop, Stop::Exited);
        assert!(
            console.boot_time.is_none(),
            "panicked before /init: booted again"
        );
        let why = stop
            .failure(&console, &Counts::default(), LONG, 1)
            .expect("a failure");
        assert!(
            why.ends_with(
                "the guest kernel: Oops: int3: 0000 [#1] PREEMPT SMP NOPTI; \
                 Kernel panic - not syncing: Fatal exception in interrupt"
            ),
            "{why}"
        );
    }

    #[test]
    fn a_silent_guest_after_init_is_hung() {
        let (stop, _) = follow(&[KERNEL, "test a ... ok"], LONG, LONG);
        assert_eq!(stop, Stop::Silent);
    }

    #[test]
    fn a_verdict_ends_the_run_after_the_grace_or_at_exit() {
        let verdict = "SOCKWATCH-VM-VERDICT: PASS";
        let (stop, console) = follow(&[KERNEL, verdict], LONG, LONG);
        assert_eq!((stop, console.verdict), (Stop::PoweredOff, Some(true)));
        let (stop, _) = follow(&[KERNEL, verdict], Duration::ZERO, LONG);
        assert_eq!(stop, Stop::Exited);
    }

    #[test]
    fn kernel_messages_are_no_progress() {
        let lockup = "[ 2672.906567] watchdog: BUG: soft lockup - CPU#1 stuck for 23s!";
        let lines = [KERNEL, "test a ... ok", lockup, lockup, lockup, lockup];
        let rx = guest(&lines, Duration::from_millis(200), LONG);
        let started = Instant::now();
        let mut console = Console::new("vm test".to_owned(), started);
        let limits = Limits {
            poweroff_grace: Duration::from_millis(300),
            boot: Duration::from_secs(5),
            silence: Duration::from_millis(500),
            lockup_silence: Duration::from_millis(500),
        };
        let stop = console
            .follow(&rx, &mut Vec::new(), started + LONG, limits)
            .expect("follow");
        assert_eq!(stop, Stop::Silent);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_lockup_in_a_run_is_named_and_waited_for_less() {
        let lockup = "[ 2672.906567] watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [x:1]";
        let lines = [
            KERNEL,
            "SOCKWATCH-VM-RUN: kernel",
            "SOCKWATCH-VM-EXIT: kernel 0",
            "SOCKWATCH-VM-RUN: overlay@tracepoint",
            "test s19 ... ok",
            lockup,
        ];
        let rx = guest(&lines, Duration::from_millis(20), LONG);
        let started = Instant::now();
        let mut console = Console::new("vm test".to_owned(), started);
        let limits = Limits {
            poweroff_grace: Duration::from_millis(300),
            boot: Duration::from_secs(5),
            silence: LONG,
            lockup_silence: Duration::from_millis(300),
        };
        let stop = console
            .follow(&rx, &mut Vec::new(), started + LONG * 2, limits)
            .expect("follow");
        assert_eq!(stop, Stop::Silent);
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(console.running.as_deref(), Some("overlay@tracepoint"));
        assert_eq!(
            console.lockup.as_deref(),
            Some("watchdog: BUG: soft lockup - CPU#1 stuck for 23s! [x:1]")
        );
    }

    #[test]
    fn a_lockup_the_guest_recovered_from_is_forgotten() {
        let console = console_of(&[
            KERNEL,
            "SOCKWATCH-VM-RUN: kernel",
            "[ 30.1] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:",
            "test a ... ok",
            "SOCKWATCH-VM-EXIT: kernel 0",
        ]);
        assert_eq!((console.lockup, console.running), (None, None));
    }

    /// A console that took `lines`, one by one.
    fn console_of(lines: &[&str]) -> Console {
        let mut console = Console::new("vm test".to_owned(), Instant::now());
        for line in lines {
            console.take(format!("{line}\n"));
        }
        console
    }

    #[test]
    fn an_int3_oops_in_a_run_is_an_emulation_fault_with_its_rip() {
        let console = console_of(&[
            KERNEL,
            "SOCKWATCH-VM-RUN: verdicts@fentry",
            "test s1_rolling_restart ... ok",
            "[  812.1] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI",
            "[  812.1] CPU: 1 UID: 0 PID: 0 Comm: swapper/1 Not tainted 6.12.118 #1",
            "[  812.1] RIP: 0010:ktime_get+0x1/0xb0",
            "[  812.2] RIP: 0010:second_oops+0x5/0x10",
            "[  812.3] Kernel panic - not syncing: Fatal exception in interrupt",
        ]);
        assert_eq!(console.running.as_deref(), Some("verdicts@fentry"));
        let fault = console
            .emulation_fault(Stop::Exited)
            .expect("an int3 Oops is resumed");
        assert_eq!(fault.kind, "int3 Oops");
        assert_eq!(
            fault.report,
            "Oops: int3: 0000 [#1] PREEMPT SMP NOPTI; RIP: 0010:ktime_get+0x1/0xb0; \
             Kernel panic - not syncing: Fatal exception in interrupt"
        );
    }

    #[test]
    fn any_other_oops_or_a_verdict_is_no_emulation_fault() {
        let in_run = [KERNEL, "SOCKWATCH-VM-RUN: verdicts@kprobe"];
        for oops in [
            "[ 9.1] BUG: kernel NULL pointer dereference, address: 0000000000000008",
            "[ 9.1] Oops: general protection fault, probably for non-canonical address",
        ] {
            let console = console_of(&[in_run[0], in_run[1], oops]);
            assert!(console.emulation_fault(Stop::Exited).is_none(), "{oops}");
        }
        let int3 = "[ 9.1] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI";
        let passed = console_of(&[KERNEL, int3, "SOCKWATCH-VM-VERDICT: PASS"]);
        assert!(passed.emulation_fault(Stop::Exited).is_none());
        // Silent without a lockup report: a test of ours hung.
        let hung = console_of(&in_run);
        assert!(hung.emulation_fault(Stop::Silent).is_none());
        let locked = console_of(&[
            in_run[0],
            in_run[1],
            "[ 30.1] watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [t:9]",
        ]);
        let fault = locked.emulation_fault(Stop::Silent).expect("a lockup");
        assert_eq!(fault.kind, "lockup");
        assert!(
            fault
                .report
                .starts_with("watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [t:9]; "),
            "{}",
            fault.report
        );
    }

    #[test]
    fn the_deadline_wins_over_a_later_limit() {
        let (stop, _) = follow(&[KERNEL], LONG, Duration::from_millis(200));
        assert_eq!(stop, Stop::TimedOut);
    }
}
