//! The report's per-operation overhead section.
use std::fmt::Write as _;

use super::format::ns;
use crate::bench::{
    overhead::{GO_STEPS, Overhead},
    plan::{Op, Plan, UNRELATED, Variant},
    stats::Spread,
};

pub fn render(s: &mut String, plan: &Plan, o: &Overhead) -> std::fmt::Result {
    render_method(s, plan, o)?;
    for &(op, _) in &plan.ops {
        render_op(s, o, op)?;
    }
    render_steps(s, o)?;
    render_programs(s, o)?;
    render_checks(s, o)
}

/// How the phase measured, and the observers compared.
fn render_method(s: &mut String, plan: &Plan, o: &Overhead) -> std::fmt::Result {
    writeln!(s, "## 1. Per-operation overhead\n")?;
    let ops: Vec<String> = plan
        .ops
        .iter()
        .map(|(op, n)| format!("{} × {n}", op.arg()))
        .collect();
    writeln!(
        s,
        "A workload process (`bench/`, release build) times each operation in a batch \
         ({}; each batch after a tenth as many untimed) and reports nanoseconds per op; \
         those that concern no watched socket ({}) run in a second one, which never binds \
         a watched socket: the kernel tracks a process that did, and its children, for \
         the rest of its life (their closes and exits are looked at), and the other \
         workloads of a node never did. \
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
        UNRELATED.map(Op::arg).join(", "),
        plan.reps,
        o.rounds,
        plan.pause.as_millis(),
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
         package); **empty programs (floor)**, bpftrace with an empty program on each \
         tracepoint sockwatch's tracepoint tier attaches (`floor_script` in the same file): \
         what the attachment alone costs, which no program on those tracepoints can avoid. \
         Between auditd windows, and after the run, auditing is off and the \
         rule `-a never,task` is in place: once auditing has been enabled since boot the \
         kernel gives every new task an audit context unless a task rule says never, \
         and the other observers must not pay for it.\n"
    )
}

/// One operation's table: each observer's ns per op and its ratios to `off`.
fn render_op(s: &mut String, o: &Overhead, op: Op) -> std::fmt::Result {
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
                Spread::of(&o.cpu_ratios(v, op)).map_or("?".into(), |r| format!("{:.3}", r.p50)),
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
    writeln!(s)
}

/// The Go-order life cycle syscall by syscall: where an observer's cost lands.
fn render_steps(s: &mut String, o: &Overhead) -> std::fmt::Result {
    if !o.steps.contains_key(&Variant::Off) {
        return Ok(());
    }
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
        let Some(base) = o.step_p50(Variant::Off, i) else {
            continue;
        };
        write!(s, "| {name} | {base:.0} |")?;
        for &v in &others {
            let add = o.step_p50(v, i).map(|x| x - base);
            write!(s, " {} |", add.map_or("?".into(), ns))?;
        }
        writeln!(s)?;
    }
    writeln!(s)
}

/// sockwatch's kernel programs, from the extra pass with BPF run-time statistics on, each
/// beside the empty program on its tracepoint.
fn render_programs(s: &mut String, o: &Overhead) -> std::fmt::Result {
    if o.programs.is_empty() {
        return Ok(());
    }
    writeln!(
        s,
        "**sockwatch's kernel programs**, during one more pass of every batch above \
         with `kernel.bpf_stats_enabled=1` (outside the measured rounds; the \
         statistics add two clock reads to each run), and the empty program on the same \
         tracepoint during the same pass under the floor's bpftrace (its run time is what \
         the statistics see of a program that does nothing):\n"
    )?;
    writeln!(
        s,
        "| program | runs | ns per run | empty program, ns per run | × empty | total ms |\n\
         | --- | ---: | ---: | ---: | ---: | ---: |"
    )?;
    for (name, runs, avg) in &o.programs {
        let (floor, times) = match o.floor_of(name) {
            Some(f) => (format!("{f:.0}"), format!("{:.1}", avg / f)),
            None => ("—".into(), "—".into()),
        };
        writeln!(
            s,
            "| `{name}` | {runs} | {avg:.0} | {floor} | {times} | {:.1} |",
            *runs as f64 * avg / 1e6
        )?;
    }
    writeln!(s)
}

/// Whether every window's observer saw everything, and the windows left out.
fn render_checks(s: &mut String, o: &Overhead) -> std::fmt::Result {
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
