//! docs/BENCHMARKS.md: the machine, the exact command, every figure, and the targets.
use std::{fmt::Write as _, fs, time::Duration};

use super::{
    env::Env,
    footprint::Footprint,
    latency::Latency,
    log::Notes,
    overhead::Overhead,
    plan::{Op, Plan, Variant},
    stats::{Spread, quantile},
    throughput::{Load, Throughput},
};

/// How the targets on sockwatch's per-operation cost begin.
const OVERHEAD_TARGETS: [&str; 2] = ["tracepoint tier", "cheaper than the bpftrace"];

/// The syscalls of the workload's Go-order life cycle, in the order it times them.
const GO_STEPS: [&str; 10] = [
    "socket",
    "bind",
    "listen",
    "socket",
    "connect",
    "accept",
    "unlink",
    "close (accepted)",
    "close (client)",
    "close (listener)",
];
use crate::cmd;

pub struct Report {
    plan: Plan,
    command: String,
    date: String,
    machine: Vec<(&'static str, String)>,
    check: String,
    load_start: String,
    pub load_after_overhead: String,
    load_end: String,
    duration: Duration,
    pub notes: Notes,
    pub overhead: Option<Overhead>,
    pub latency: Option<Latency>,
    pub throughput: Option<Throughput>,
    pub footprint: Option<Footprint>,
}

/// `/proc/loadavg`'s three averages.
pub fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn first_line(out: anyhow::Result<String>) -> String {
    out.map(|s| s.lines().next().unwrap_or_default().trim().to_string())
        .unwrap_or_else(|e| format!("unknown ({e})"))
}

impl Report {
    pub fn new(plan: &Plan, args: Vec<String>, env: &Env) -> anyhow::Result<Report> {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_gib = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map_or("unknown".into(), |kib| {
                format!("{:.1} GiB", kib / 1024.0 / 1024.0)
            });
        let os = fs::read_to_string("/etc/os-release")
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_default();
        let git = first_line(cmd::output(
            cmd::command("git")
                .args(["rev-parse", "--short", "HEAD"])
                .current_dir(cmd::workspace_root()),
        ));
        let dirty = cmd::output(
            cmd::command("git")
                .args(["status", "--porcelain", "--untracked-files=no"])
                .current_dir(cmd::workspace_root()),
        )
        .map(|s| {
            s.lines()
                .filter_map(|l| l.get(3..))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
        let machine = vec![
            (
                "CPUs (nproc)",
                std::thread::available_parallelism().map_or("?".into(), |n| n.to_string()),
            ),
            ("CPU model", model),
            ("RAM", mem_gib),
            (
                "kernel",
                fs::read_to_string("/proc/sys/kernel/osrelease")
                    .unwrap_or_default()
                    .trim()
                    .to_string(),
            ),
            ("OS", os),
            (
                "sockwatch",
                format!(
                    "{}, git {git}{}",
                    first_line(cmd::output(cmd::command(&env.sockwatch).arg("--version"))),
                    if dirty.is_empty() {
                        String::new()
                    } else {
                        format!(" (uncommitted changes in: {dirty})")
                    }
                ),
            ),
            (
                "bpftrace",
                first_line(cmd::output(cmd::command("bpftrace").arg("--version"))),
            ),
            (
                "auditd",
                first_line(cmd::output(cmd::command("auditctl").arg("-v"))),
            ),
        ];
        let check = cmd::output(cmd::command(&env.sockwatch).arg("check"))
            .unwrap_or_else(|e| format!("sockwatch check failed: {e:#}"));
        Ok(Report {
            plan: plan.clone(),
            command: std::iter::once("cargo xtask".to_string())
                .chain(args)
                .collect::<Vec<_>>()
                .join(" "),
            date: first_line(cmd::output(
                cmd::command("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]),
            )),
            machine,
            check,
            load_start: loadavg(),
            load_after_overhead: String::new(),
            load_end: String::new(),
            duration: Duration::ZERO,
            notes: Notes::default(),
            overhead: None,
            latency: None,
            throughput: None,
            footprint: None,
        })
    }

    pub fn finish(&mut self, took: Duration) {
        self.load_end = loadavg();
        self.duration = took;
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = self.render_into(&mut s);
        s
    }

    fn render_into(&self, s: &mut String) -> std::fmt::Result {
        writeln!(s, "# sockwatch benchmarks\n")?;
        writeln!(
            s,
            "<!-- Written by `cargo xtask bench` (xtask/src/bench/, workload in bench/) from a \
             real run; rerun it rather than editing the figures. -->\n"
        )?;
        writeln!(
            s,
            "Run `{}` as root on {}; it took {:.1} min. Host figures, native (no emulation). \
             Probe tier: **tracepoint** (`--probe-mode tracepoint`); the tiers this host offers \
             are in `sockwatch check` below.\n",
            self.command,
            self.date,
            self.duration.as_secs_f64() / 60.0
        )?;
        writeln!(s, "| machine | |\n| --- | --- |")?;
        for (k, v) in &self.machine {
            writeln!(s, "| {k} | {v} |")?;
        }
        writeln!(
            s,
            "| load average (1, 5, 15 min) | start {}; after the overhead phase {}; end {} |\n",
            self.load_start, self.load_after_overhead, self.load_end
        )?;
        writeln!(
            s,
            "The load average above says how busy the machine was during the run. The \
             overhead phase interleaves observers round by \
             round, so drift in background load falls on every observer alike; the other \
             phases are single runs and carry that noise.\n"
        )?;
        writeln!(
            s,
            "`sockwatch check` on this host:\n\n```\n{}```\n",
            self.check
        )?;
        self.render_targets(s)?;
        if let Some(o) = &self.overhead {
            self.render_overhead(s, o)?;
        }
        if let Some(t) = &self.throughput {
            self.render_throughput(s, t)?;
        }
        if let Some(f) = &self.footprint {
            self.render_footprint(s, f)?;
        }
        if let Some(l) = &self.latency {
            self.render_latency(s, l)?;
        }
        self.render_missed(s)?;
        writeln!(s, "## Not measured here\n")?;
        writeln!(
            s,
            "- **Precise tiers (fentry/fexit, BPF LSM, kprobes).** The bench runs the agent in \
             the tracepoint tier only, so their targets (≤ 5 % per socket operation, ≤ 1 % per \
             regular-file unlink and per unrelated syscall) are not measured by this run."
        )?;
        if let Some(f) = &self.footprint {
            writeln!(
                s,
                "- **10,000 /metrics series.** The scrape was timed with {} configured \
                 watches, which gave {} series (see the scrape section).",
                f.watches, f.series
            )?;
        }
        for n in self.notes.iter() {
            writeln!(s, "- {n}")?;
        }
        writeln!(s)?;
        Ok(())
    }

    fn targets(&self) -> Vec<(String, String, Verdict)> {
        let mut t = Vec::new();
        if let Some(o) = &self.overhead {
            for (op, order) in [(Op::SockCycle, "C order"), (Op::SockCycleGo, "Go order")] {
                if let Some(r) = Spread::of(&o.ratios(Variant::Sockwatch, op)) {
                    t.push((
                        format!(
                            "tracepoint tier: ≤ 10 % added per socket operation (life cycle, \
                             {order})"
                        ),
                        format!("{:+.1} % (p50 of per-round ratios)", (r.p50 - 1.0) * 100.0),
                        Verdict::at_most(r.p50 - 1.0, 0.10, |x| format!("{:.1} points", x * 100.0)),
                    ));
                }
            }
            for (v, rule, factor) in [
                (Variant::Bpftrace, "cheaper than the bpftrace script", 1.0),
                (
                    Variant::Auditd,
                    "far cheaper than auditd (≤ ⅓ of its added cost)",
                    1.0 / 3.0,
                ),
            ] {
                if !o.variants.contains(&v) {
                    continue;
                }
                let mut worse = Vec::new();
                let mut tied = Vec::new();
                let mut shown = Vec::new();
                for op in [
                    Op::Unlink,
                    Op::SockCycle,
                    Op::SockCycleGo,
                    Op::Connect,
                    Op::Getppid,
                ] {
                    let (Some(sw), Some(other)) =
                        (o.added_ns(Variant::Sockwatch, op), o.added_ns(v, op))
                    else {
                        continue;
                    };
                    shown.push(format!("{}: {} vs {}", op.arg(), ns(sw), ns(other)));
                    if sw > other.max(0.0) * factor && sw > 0.0 {
                        // Within the spread of the per-round ratios, the order is noise.
                        let r = |v| Spread::of(&o.ratios(v, op));
                        match (r(Variant::Sockwatch), r(v)) {
                            (Some(a), Some(b)) if factor == 1.0 && a.p25 <= b.p75 => {
                                tied.push(op.arg())
                            }
                            _ => worse.push(op.arg()),
                        }
                    }
                }
                let tie = if tied.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; {} higher by less than the rounds' spread (ratio IQRs overlap)",
                        tied.join(", ")
                    )
                };
                let verdict = if worse.is_empty() {
                    Verdict::Met.with(tie)
                } else {
                    Verdict::Missed(format!("not for {}{tie}", worse.join(", ")))
                };
                t.push((
                    format!("{rule}, added ns per op"),
                    shown.join("; "),
                    verdict,
                ));
            }
        }
        if let Some(th) = &self.throughput {
            let at50 = th.steps.iter().find(|l| l.target == 50_000);
            t.push((
                "zero loss at 50,000 events/s sustained".into(),
                at50.map_or("not reached".into(), |l| {
                    format!(
                        "{} lost of {} at {:.0} events/s",
                        l.lost,
                        l.produced,
                        l.rate()
                    )
                }),
                match at50 {
                    Some(l) if l.lost == 0 && l.rate() >= 0.95 * 50_000.0 && l.exact => {
                        Verdict::Met
                    }
                    Some(l) if l.lost > 0 => Verdict::Missed(format!("{} events lost", l.lost)),
                    Some(l) if !l.exact => Verdict::Missed("counts do not add up".into()),
                    _ => Verdict::Missed("the workload could not produce the rate".into()),
                },
            ));
            if let Some(l) = at50.filter(|l| l.delivered > 0) {
                let us = l.cpu_secs / l.delivered as f64 * 1e6;
                t.push((
                    "≤ 2 µs agent CPU per event".into(),
                    format!("{us:.2} µs at 50,000 events/s"),
                    Verdict::at_most(us, 2.0, |x| format!("{x:.2} µs")),
                ));
            }
        }
        if let Some(f) = &self.footprint {
            let mib = f.rss_kib as f64 / 1024.0;
            t.push((
                format!("RSS ≤ 64 MiB with {} live watched sockets", f.sockets),
                format!("{mib:.1} MiB"),
                Verdict::at_most(mib, 64.0, |x| format!("{x:.1} MiB")),
            ));
            if let Some(p99) = quantile(&f.scrape_ms, 0.99) {
                t.push((
                    "scrape ≤ 50 ms".into(),
                    format!("p99 {p99:.1} ms at {} series", f.series),
                    Verdict::at_most(p99, 50.0, |x| format!("{x:.1} ms")),
                ));
            }
        }
        if let Some(max) = self
            .latency
            .as_ref()
            .and_then(|l| quantile(&l.startup, 1.0))
        {
            t.push((
                "start-up ≤ 2 s with the whole probe table (issue 9; spawn → running)".into(),
                format!("{max:.2} s (slowest of the starts)"),
                Verdict::at_most(max, 2.0, |x| format!("{x:.2} s")),
            ));
        }
        if let Some(l) = &self.latency
            && let Some(p99) = quantile(&l.to_line, 0.99)
        {
            let ms = p99 / 1e6;
            t.push((
                "p99 event latency ≤ 20 ms (syscall return → event line)".into(),
                format!("{ms:.1} ms"),
                Verdict::at_most(ms, 20.0, |x| format!("{x:.1} ms")),
            ));
        }
        t
    }

    fn render_targets(&self, s: &mut String) -> std::fmt::Result {
        writeln!(s, "## Targets (issue 6)\n")?;
        writeln!(s, "| target | measured | verdict |\n| --- | --- | --- |")?;
        for (what, got, v) in self.targets() {
            writeln!(s, "| {what} | {got} | {} |", v.text())?;
        }
        writeln!(s)
    }

    fn render_overhead(&self, s: &mut String, o: &Overhead) -> std::fmt::Result {
        writeln!(s, "## 1. Per-operation overhead\n")?;
        let ops: Vec<String> = self
            .plan
            .ops
            .iter()
            .map(|(op, n)| format!("{} × {n}", op.arg()))
            .collect();
        writeln!(
            s,
            "One workload process (`bench/`, release build) times each operation in a batch \
             ({}; each batch after a tenth as many untimed) and reports nanoseconds per op. \
             xtask switches one observer on, runs every batch {} time(s), switches it off, and \
             goes on to the next observer; {} rounds, the order of observers rotated each \
             round, so drift in background load falls on all of them. Each batch starts after a \
             {} ms pause, so an observer's work on the previous batch is not charged to the \
             next. A round's value is the median of its repetitions; the tables give the median \
             (p50) over rounds and the interquartile range (IQR). Ratios are taken per round \
             against the same round's `off` value. The last column is the ratio of the \
             workload thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), which leaves out time \
             it spent preempted by other work on the machine — and also time it spent \
             blocked (auditd's backlog, for one). Each batch runs in a thread created for it: \
             whether a thread is audited is decided when it is created. Phase time: {:.0} s.\n",
            ops.join(", "),
            self.plan.reps,
            o.rounds,
            self.plan.pause.as_millis(),
            o.secs
        )?;
        writeln!(
            s,
            "Observers: **sockwatch** `run --probe-mode tracepoint --watch DIR` (events to a \
             tmpfs file, /metrics on loopback); **bpftrace** with the script in \
             `xtask/src/bench/bpftrace.rs` (the same syscall tracepoints, enter and exit, AF_UNIX \
             paths read from user memory and filtered by the watched directory's prefix, maps \
             of bound descriptors and live socket paths, a printed line per event, output to a \
             tmpfs file); **auditd** with `auditctl -w DIR -p wa` (Debian's auditd, backlog \
             8192 as Debian's default rules set it, log on disk as configured by the \
             package). Between auditd windows, and after the run, auditing is off and the \
             rule `-a never,task` is in place: once auditing has been enabled since boot the \
             kernel gives every new task an audit context unless a task rule says never, \
             and the other observers must not pay for it.\n"
        )?;
        for &(op, _) in &self.plan.ops {
            writeln!(s, "**{}**\n", op.label())?;
            writeln!(
                s,
                "| observer | ns per op, p50 | IQR | ratio vs off, p50 | ratio IQR | added ns | \
                 ratio of thread CPU time, p50 |\n\
                 | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
            )?;
            for &v in &o.variants {
                let Some(sp) = o.ns.get(&(v, op)).and_then(|x| Spread::of(x)) else {
                    continue;
                };
                let (ratio, riqr, added, cpu) = if v == Variant::Off {
                    (
                        "1".to_string(),
                        "—".to_string(),
                        "—".to_string(),
                        "1".to_string(),
                    )
                } else {
                    let r = Spread::of(&o.ratios(v, op));
                    (
                        r.map_or("?".into(), |r| format!("{:.3}", r.p50)),
                        r.map_or("?".into(), |r| format!("{:.3}–{:.3}", r.p25, r.p75)),
                        o.added_ns(v, op).map_or("?".into(), ns),
                        Spread::of(&o.cpu_ratios(v, op))
                            .map_or("?".into(), |r| format!("{:.3}", r.p50)),
                    )
                };
                writeln!(
                    s,
                    "| {} | {:.0} | {:.0}–{:.0} | {ratio} | {riqr} | {added} | {cpu} |",
                    v.name(),
                    sp.p50,
                    sp.p25,
                    sp.p75
                )?;
            }
            writeln!(s)?;
        }
        self.render_steps(s, o)?;
        if !o.programs.is_empty() {
            writeln!(
                s,
                "**sockwatch's kernel programs**, during one more pass of every batch above \
                 with `kernel.bpf_stats_enabled=1` (outside the measured rounds; the \
                 statistics add two clock reads to each run):\n"
            )?;
            writeln!(
                s,
                "| program | runs | ns per run | total ms |\n| --- | ---: | ---: | ---: |"
            )?;
            for (name, runs, avg) in &o.programs {
                writeln!(
                    s,
                    "| `{name}` | {runs} | {avg:.0} | {:.1} |",
                    *runs as f64 * avg / 1e6
                )?;
            }
            writeln!(s)?;
        }
        if o.problems.is_empty() {
            writeln!(
                s,
                "Every window was checked: sockwatch delivered and bpftrace printed exactly one \
                 bind per socket life cycle run in it, with nothing lost; audit lost no \
                 record.\n"
            )?;
        } else {
            writeln!(
                s,
                "Windows whose observer did not see everything (left out of the figures above; \
                 every other window was checked like them):\n"
            )?;
            for p in &o.problems {
                writeln!(s, "- {p}")?;
            }
            writeln!(s)?;
        }
        Ok(())
    }

    /// The Go-order life cycle syscall by syscall: where an observer's cost lands.
    fn render_steps(&self, s: &mut String, o: &Overhead) -> std::fmt::Result {
        let Some(off) = o.steps.get(&Variant::Off) else {
            return Ok(());
        };
        writeln!(
            s,
            "**The Go-order life cycle syscall by syscall** (each syscall timed on its own; \
             p50 over rounds of ns per call, and what each observer adds to it):\n"
        )?;
        let others: Vec<Variant> = o
            .variants
            .iter()
            .copied()
            .filter(|v| *v != Variant::Off)
            .collect();
        write!(s, "| syscall | off |")?;
        for v in &others {
            write!(s, " {} adds |", v.name())?;
        }
        write!(s, "\n| --- | ---: |")?;
        for _ in &others {
            write!(s, " ---: |")?;
        }
        writeln!(s)?;
        for (i, name) in GO_STEPS.iter().enumerate() {
            let col = |v: &Vec<Vec<f64>>| -> Option<f64> {
                let xs: Vec<f64> = v.iter().filter_map(|r| r.get(i).copied()).collect();
                Spread::of(&xs).map(|sp| sp.p50)
            };
            let Some(base) = col(off) else { continue };
            write!(s, "| {name} | {base:.0} |")?;
            for v in &others {
                let add = o.steps.get(v).and_then(col).map(|x| x - base);
                write!(s, " {} |", add.map_or("?".into(), ns))?;
            }
            writeln!(s)?;
        }
        writeln!(s)
    }

    /// For a missed overhead target: sockwatch's cost broken down by the figures above.
    fn render_missed(&self, s: &mut String) -> std::fmt::Result {
        let missed = self.targets().into_iter().any(|(what, _, v)| {
            matches!(v, Verdict::Missed(_)) && OVERHEAD_TARGETS.iter().any(|t| what.starts_with(t))
        });
        let Some(o) = self.overhead.as_ref().filter(|_| missed) else {
            return Ok(());
        };
        writeln!(s, "## Missed targets: the measured breakdown\n")?;
        let top: Vec<String> = self
            .sockwatch_steps()
            .into_iter()
            .take(5)
            .map(|(n, x)| format!("{n} {}", ns(x)))
            .collect();
        let change = |r: Vec<f64>| {
            Spread::of(&r).map_or("?".into(), |r| format!("{:+.0} %", (r.p50 - 1.0) * 100.0))
        };
        let cpu = |op| change(o.cpu_ratios(Variant::Sockwatch, op));
        let wall = |op| change(o.ratios(Variant::Sockwatch, op));
        writeln!(
            s,
            "**Per-operation overhead (tracepoint tier).** sockwatch adds {} per getppid call. \
             Syscall by syscall (Go order), the largest additions are: {}. The workload \
             thread's CPU time grows {} (C order) and {} (Go order), against wall-clock ratios \
             of {} and {}. The costliest program runs (programs run at least 100 times): {}. \
             Added per call against the programs' own run time: {}.\n",
            o.added_ns(Variant::Sockwatch, Op::Getppid)
                .map_or("?".into(), ns),
            if top.is_empty() {
                "?".into()
            } else {
                top.join(", ")
            },
            cpu(Op::SockCycle),
            cpu(Op::SockCycleGo),
            wall(Op::SockCycle),
            wall(Op::SockCycleGo),
            costliest_programs(o),
            self.program_share(o),
        )
    }

    /// For bind and listen: what sockwatch adds to the call, and its two programs' run time.
    fn program_share(&self, o: &Overhead) -> String {
        let steps = self.sockwatch_steps();
        let run = |name: &str| {
            o.programs
                .iter()
                .find(|(n, _, _)| n == name)
                .map(|(_, _, avg)| *avg)
        };
        let mut out = Vec::new();
        for (call, progs) in [
            ("bind", ["bind_tp_enter", "bind_tp_exit"]),
            ("listen", ["listen_tp_enter", "listen_tp_exit"]),
        ] {
            let added = steps.iter().find(|(n, _)| *n == call).map(|(_, x)| *x);
            let ran: Option<f64> = progs.iter().map(|p| run(p)).sum();
            if let (Some(a), Some(r)) = (added, ran) {
                out.push(format!(
                    "{call} gets {} per call, of which its two programs run {:.0} ns",
                    ns(a),
                    r
                ));
            }
        }
        if out.is_empty() {
            "not measured".into()
        } else {
            out.join("; ")
        }
    }

    /// Added ns per syscall of the Go-order cycle under sockwatch, largest first.
    fn sockwatch_steps(&self) -> Vec<(&'static str, f64)> {
        let Some(o) = &self.overhead else {
            return Vec::new();
        };
        let (Some(off), Some(sw)) = (o.steps.get(&Variant::Off), o.steps.get(&Variant::Sockwatch))
        else {
            return Vec::new();
        };
        let p50 = |v: &Vec<Vec<f64>>, i: usize| {
            let xs: Vec<f64> = v.iter().filter_map(|r| r.get(i).copied()).collect();
            Spread::of(&xs).map(|sp| sp.p50)
        };
        let mut out: Vec<(&'static str, f64)> = GO_STEPS
            .iter()
            .enumerate()
            .filter_map(|(i, n)| Some((*n, p50(sw, i)? - p50(off, i)?)))
            .collect();
        out.sort_by(|a, b| b.1.total_cmp(&a.1));
        out
    }

    fn render_throughput(&self, s: &mut String, t: &Throughput) -> std::fmt::Result {
        writeln!(s, "## 2. Throughput and loss\n")?;
        writeln!(
            s,
            "The workload runs socket life cycles in a watched directory (socket, bind, \
             listen, unlink, close: four events each — bind, listen, unlink, release), paced \
             to a rate for {} s per step by as many threads as there are CPUs (so the agent \
             competes with the producers for the CPUs), stepping up until a step loses events \
             or the workload cannot reach the rate. Produced = life cycles × 4 (calibrated: {} cycles \
             gave {} submitted + {} lost, exact: {}). For every event kind the check is \
             produced = submitted + lost (`sockwatch_kernel_events_submitted_total`, \
             `sockwatch_events_lost_total`), submitted = delivered \
             (`sockwatch_events_total`) = lines in the events file (tmpfs). Agent CPU is \
             utime + stime from /proc/PID/stat ({:.0} ms ticks).\n",
            self.plan.step_secs,
            t.calibration.cycles,
            t.calibration.submitted,
            t.calibration.lost,
            yes(t.calibration.exact),
            1e3 / super::process::clock_ticks()
        )?;
        load_table(s, "events/s asked", &t.steps)?;
        let best = t
            .steps
            .iter()
            .filter(|l| l.lost == 0 && l.exact && l.rate() >= 0.95 * l.target as f64)
            .max_by_key(|l| l.target);
        writeln!(
            s,
            "Highest sustained rate with zero loss at the asked rate: **{}**.{}\n",
            best.map_or("none of the steps".into(), |l| format!(
                "{:.0} events/s (step {})",
                l.rate(),
                l.target
            )),
            match t.steps.last() {
                Some(l) if l.lost == 0 && l.rate() < 0.95 * l.target as f64 => format!(
                    " The last step asked for {} and the producers reached only {:.0} \
                     events/s, with no loss (producers and agent share the same {} CPUs).",
                    l.target,
                    l.rate(),
                    std::thread::available_parallelism().map_or(0, |n| n.get())
                ),
                _ => String::new(),
            }
        )?;
        writeln!(
            s,
            "Bursts: life cycles back to back, as fast as the producer threads make them, the \
             size doubled until loss and then bisected; the agent runs throughout.\n"
        )?;
        load_table(s, "events in the burst", &t.bursts)?;
        let clean = t
            .bursts
            .iter()
            .filter(|l| l.lost == 0)
            .map(|l| l.target)
            .max();
        let lossy = t
            .bursts
            .iter()
            .filter(|l| l.lost > 0)
            .map(|l| l.target)
            .min();
        match lossy {
            Some(l) => writeln!(
                s,
                "With the agent running, loss begins between bursts of **{}** and **{l}** \
                 events.",
                clean.map_or("—".into(), |c| c.to_string()),
            )?,
            None => writeln!(
                s,
                "With the agent running, **no burst lost events**, up to {} events (the \
                 largest tried).",
                clean.map_or("—".into(), |c| c.to_string()),
            )?,
        }
        writeln!(
            s,
            "Verdict lines written during the phase: {}.\n",
            t.verdicts
        )?;
        let r = &t.ring;
        writeln!(
            s,
            "The ring buffer alone: a burst of {} events made while the agent was stopped \
             (SIGSTOP, then SIGCONT) kept **{}** of them and counted {} lost (exact: {}).\n",
            r.produced,
            r.submitted,
            r.lost,
            yes(r.exact)
        )
    }

    fn render_footprint(&self, s: &mut String, f: &Footprint) -> std::fmt::Result {
        writeln!(s, "## 3. Agent footprint\n")?;
        writeln!(
            s,
            "One agent with {} configured watches, events to tmpfs, /metrics on loopback, the \
             agent's default intervals.\n",
            f.watches
        )?;
        writeln!(s, "| what | value |\n| --- | ---: |")?;
        writeln!(
            s,
            "| idle CPU over {} s, no sockets | {:.3} % of one CPU |",
            f.idle_secs,
            f.idle_cpu * 100.0
        )?;
        writeln!(
            s,
            "| RSS idle | {:.1} MiB |",
            f.rss_idle_kib as f64 / 1024.0
        )?;
        writeln!(
            s,
            "| sockets held (made at 5,000/s in {:.1} s); live in the engine | {}; {:.0} |",
            f.hold_secs, f.sockets, f.live_in_engine
        )?;
        writeln!(
            s,
            "| RSS with them (VmRSS); peak (VmHWM) | {:.1} MiB; {:.1} MiB |",
            f.rss_kib as f64 / 1024.0,
            f.hwm_kib as f64 / 1024.0
        )?;
        writeln!(
            s,
            "| idle CPU over {} s with them | {:.3} % of one CPU |\n",
            f.idle_secs,
            f.idle_cpu_loaded * 100.0
        )?;
        if let Some(t) = &self.throughput {
            writeln!(
                s,
                "CPU per event is in the throughput table above (agent utime + stime over \
                 events delivered, per step){}.\n",
                t.steps
                    .iter()
                    .find(|l| l.target == 50_000 && l.delivered > 0)
                    .map_or(String::new(), |l| format!(
                        ": {:.2} µs at 50,000 events/s",
                        l.cpu_secs / l.delivered as f64 * 1e6
                    ))
            )?;
        }
        writeln!(s, "## 4. /metrics scrape time\n")?;
        writeln!(
            s,
            "{} sequential scrapes over loopback (connect, request, whole body), with the \
             {} sockets above live: **{} series**, {} bytes.\n",
            f.scrape_ms.len(),
            f.sockets,
            f.series,
            f.bytes
        )?;
        writeln!(
            s,
            "| live sockets | p50 | p99 | max |\n| ---: | ---: | ---: | ---: |"
        )?;
        for (n, v) in [(0, &f.scrape_idle_ms), (f.sockets, &f.scrape_ms)] {
            writeln!(
                s,
                "| {n} | {} | {} | {} |",
                ms_q(v, 0.5),
                ms_q(v, 0.99),
                ms_q(v, 1.0)
            )?;
        }
        writeln!(s)?;
        let p50 = |v: &[f64]| quantile(v, 0.5).filter(|x| *x > 0.0);
        if let (Some(idle), Some(held)) = (p50(&f.scrape_idle_ms), p50(&f.scrape_ms)) {
            writeln!(
                s,
                "With {} live sockets the p50 scrape took {:.1}× its time with none.\n",
                f.sockets,
                held / idle
            )?;
        }
        Ok(())
    }

    fn render_latency(&self, s: &mut String, l: &Latency) -> std::fmt::Result {
        writeln!(s, "## 5. Latency\n")?;
        writeln!(
            s,
            "Each sample: a random pause of 0–25 ms (so that samples do not fall into step \
             with any timer), a bind in the watched directory, then the time from bind's \
             return until the `bind` line naming that path is in the events file (followed \
             with inotify), or until `sockwatch_events_total{{kind=\"bind\"}}` has grown in \
             /metrics (polled every millisecond, each poll a whole scrape). Both clocks are \
             the workload's CLOCK_MONOTONIC.\n"
        )?;
        writeln!(
            s,
            "| path | samples | missed (2 s) | p50 | p90 | p99 | max |\n\
             | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
        )?;
        for (what, v, missed) in [
            ("syscall return → event line", &l.to_line, l.line_missed),
            ("syscall return → /metrics", &l.to_metrics, l.metrics_missed),
        ] {
            let ms: Vec<f64> = v.iter().map(|x| x / 1e6).collect();
            writeln!(
                s,
                "| {what} | {} | {missed} | {} | {} | {} | {} |",
                ms.len(),
                ms_q(&ms, 0.5),
                ms_q(&ms, 0.9),
                ms_q(&ms, 0.99),
                ms_q(&ms, 1.0)
            )?;
        }
        writeln!(
            s,
            "\nAgent start-up with the whole probe table (`--probe-mode auto`: every tier of \
             every hook tried; spawn → running, probes attached and the startup scan done), \
             {} starts: p50 {}, max {}.\n",
            l.startup.len(),
            secs_q(&l.startup, 0.5),
            secs_q(&l.startup, 1.0)
        )
    }
}

/// The four programs (of those run at least 100 times) with the highest average run time.
fn costliest_programs(o: &Overhead) -> String {
    let mut p: Vec<_> = o
        .programs
        .iter()
        .filter(|(_, runs, _)| *runs >= 100)
        .collect();
    p.sort_by(|a, b| b.2.total_cmp(&a.2));
    let top: Vec<String> = p
        .iter()
        .take(4)
        .map(|(n, _, avg)| format!("`{n}` {avg:.0} ns"))
        .collect();
    if top.is_empty() {
        "not measured".into()
    } else {
        top.join(", ")
    }
}

fn secs_q(secs: &[f64], q: f64) -> String {
    quantile(secs, q).map_or("n/a".into(), |v| format!("{v:.2} s"))
}

fn load_table(s: &mut String, first: &str, loads: &[Load]) -> std::fmt::Result {
    writeln!(
        s,
        "| {first} | threads | achieved events/s | produced | lost | delivered | exact | \
         agent CPU | CPU per event |\n\
         | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"
    )?;
    for l in loads {
        writeln!(
            s,
            "| {} | {} | {:.0} | {} | {} | {} | {} | {:.2} s | {} |",
            l.target,
            l.threads,
            l.rate(),
            l.produced,
            l.lost,
            l.delivered,
            yes(l.exact),
            l.cpu_secs,
            if l.delivered > 0 {
                format!("{:.2} µs", l.cpu_secs / l.delivered as f64 * 1e6)
            } else {
                "—".into()
            }
        )?;
    }
    writeln!(s)
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "**no**" }
}

fn ns(x: f64) -> String {
    format!("{x:+.0} ns")
}

fn ms_q(ms: &[f64], q: f64) -> String {
    quantile(ms, q).map_or("—".into(), |v| format!("{v:.2} ms"))
}

pub enum Verdict {
    Met,
    MetWith(String),
    Missed(String),
}

impl Verdict {
    fn at_most(got: f64, limit: f64, show: impl Fn(f64) -> String) -> Verdict {
        if got <= limit {
            Verdict::Met
        } else {
            Verdict::Missed(format!("by {}", show(got - limit)))
        }
    }

    /// Met, with a remark when there is one.
    fn with(self, remark: String) -> Verdict {
        match self {
            Verdict::Met if !remark.is_empty() => Verdict::MetWith(remark),
            v => v,
        }
    }

    fn text(&self) -> String {
        match self {
            Verdict::Met => "met".into(),
            Verdict::MetWith(r) => format!("met{r}"),
            Verdict::Missed(why) => format!("**missed** {why}"),
        }
    }
}
