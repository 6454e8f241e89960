//! Following a guest's serial console: its lines, the limits on silence and boot, and what
//! ended it (a verdict, a hang, a kernel panic, an emulation fault).
use std::{
    io::{BufRead as _, BufReader, Write},
    process::ChildStdout,
    sync::mpsc,
    thread::JoinHandle,
    time::{Duration, Instant},
};

use super::{
    init::{EXIT_MARK, RUN_MARK, VERDICT},
    resume::{self, Fault},
};
use crate::testrun::Counts;

/// How long the host waits on a guest's console.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    /// From the verdict line to killing QEMU, for the guest to power off.
    pub(super) poweroff_grace: Duration,
    /// From QEMU's start to `/init`'s first line (12-16 s with three guests on two cores). TCG
    /// guests sometimes hang in early boot (a CI run's 5.10 guest: RCU stalls on its second
    /// vCPU at 30 s, `/init` never ran); past this the boot is tried again.
    pub(super) boot: Duration,
    /// Time without a line from `/init`'s programs (kernel messages do not count) once
    /// `/init` runs that means a hung guest: a test binary prints a line per test, and the
    /// slowest test takes about three minutes under TCG. A CI run's 5.10 guest locked up
    /// (soft lockups on both vCPUs) and printed only kernel messages from then on.
    pub(super) silence: Duration,
    /// The same, once the guest kernel has reported a lockup: such a guest is
    /// [resumed](resume), and waiting the whole silence for it would only cost time.
    pub(super) lockup_silence: Duration,
}

pub(super) const LIMITS: Limits = Limits {
    poweroff_grace: Duration::from_secs(30),
    boot: Duration::from_secs(240),
    silence: Duration::from_secs(600),
    lockup_silence: Duration::from_secs(300),
};

/// `line` without terminal escape sequences (SeaBIOS and the guest reset the screen) and
/// control characters other than tab and newline.
pub(super) fn printable(line: &str) -> String {
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

/// Why [`Console::follow`] stopped reading a guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stop {
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
    pub(super) fn failure(
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

    pub(super) fn reason(
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
pub(super) fn read_lines(stdout: ChildStdout) -> (mpsc::Receiver<String>, JoinHandle<()>) {
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
pub(super) fn is_kernel_message(line: &str) -> bool {
    line.trim_start().starts_with('[')
}

/// What the guest's console has shown so far.
pub(super) struct Console {
    pub(super) label: String,
    pub(super) started: Instant,
    pub(super) text: String,
    pub(super) verdict: Option<bool>,
    pub(super) release: Option<String>,
    pub(super) boot_time: Option<Duration>,
    /// QEMU's exit status when it exited without a verdict.
    pub(super) exit_status: Option<String>,
    /// The guest kernel's first Oops or BUG line, its first `RIP:` line, then its panic line.
    pub(super) panic: Option<String>,
    /// The run `/init` started last and has not finished (`SOCKWATCH-VM-RUN:` without its
    /// `SOCKWATCH-VM-EXIT:`).
    pub(super) running: Option<String>,
    /// The guest kernel's first lockup report since `/init`'s last line.
    pub(super) lockup: Option<String>,
}

impl Console {
    pub(super) fn new(label: String, started: Instant) -> Console {
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
    pub(super) fn emulation_fault(&self, stop: Stop) -> Option<Fault> {
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
    pub(super) fn follow(
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
    pub(super) fn next_limit(
        &self,
        deadline: Instant,
        last_line: Instant,
        limits: Limits,
    ) -> (Instant, Stop) {
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
    pub(super) fn take(&mut self, line: String) {
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

#[cfg(test)]
mod tests {
    use super::*;

    const KERNEL: &str = "SOCKWATCH-VM-KERNEL: 6.1.0 lsm=bpf";
    const LONG: Duration = Duration::from_secs(5);

    #[test]
    fn console_lines_are_made_printable() {
        assert_eq!(
            printable("\x1bc\x1b[?7l\x1b[2JSOCKWATCH-VM-KERNEL: 6.1.0\r\n"),
            "SOCKWATCH-VM-KERNEL: 6.1.0\n"
        );
        assert_eq!(printable("\x1b[0mSeaBIOS\ttext\x07"), "SeaBIOS\ttext");
        assert_eq!(printable("plain"), "plain");
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
