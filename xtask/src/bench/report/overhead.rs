//! Section 1, per-operation overhead: the method, a table per operation, the Go-order life
//! cycle syscall by syscall, sockwatch's kernel programs and the windows left out.
use super::table::{ns, table};
use crate::bench::{
    Op, Plan, Spread, Variant,
    overhead::{GO_STEPS, Overhead, Programs},
};

pub fn overhead_section(s: &mut String, plan: &Plan, o: &Overhead) {
    s.push_str("## 1. Per-operation overhead\n\n");
    method(s, plan, o);
    per_op(s, plan, o);
    if o.steps.contains_key(&Variant::Off) {
        by_syscall(s, o);
    }
    if !o.programs.is_empty() {
        programs(s, o);
    }
    problems(s, o);
}

/// How the rounds are run, and what each observer is.
fn method(s: &mut String, plan: &Plan, o: &Overhead) {
    let batches: Vec<String> = plan
        .ops
        .iter()
        .map(|(op, n)| format!("{} × {n}", op.arg()))
        .collect();
    let unrelated = Op::unrelated_names();
    para!(
        s,
        "A workload process (`bench/`, release build) times each operation in a batch ({}; each batch after a \
         tenth as many untimed) and reports nanoseconds per op; those that concern no watched socket ({}) run in \
         two more, as the node's other workloads: the kernel tracks a process that bound a watched socket, and \
         its children, for the rest of its life, and with every directory watched any path socket is one. So \
         the life cycles outside the watched directory run in one of their own, and the other operations in one \
         that never binds a path socket. xtask switches one \
         observer on, runs every batch {} time(s), switches it off, and goes on to the next; {} rounds, the order \
         of observers rotated each round, so drift in background load falls on all of them. Each batch starts \
         after a {} ms pause, so an observer's work on the previous batch is not charged to it, and runs in a \
         thread created for it (whether a thread is audited is decided when it is created). A round's value is \
         the median of its repetitions; the tables give the p50 over rounds and the interquartile range (IQR); \
         ratios are taken per round against the same round's `off`. The node-tax targets take per round an \
         observer's time less the floor's, in points of `off`'s, and are decided on their median's \
         distribution-free interval (order statistics): met when all of it is at most 3 points, missed when \
         none of it is, undecided when it holds 3. The last column is the ratio of the \
         workload thread's own CPU time (CLOCK_THREAD_CPUTIME_ID), which leaves out time it was preempted or \
         blocked (auditd's backlog, for one). Phase time: {:.0} s.",
        batches.join(", "),
        unrelated.join(", "),
        plan.reps,
        o.rounds,
        plan.pause.as_millis(),
        o.secs
    );
    para!(
        s,
        "Observers: **sockwatch** `run --probe-mode tracepoint --watch DIR` (events to a tmpfs file, /metrics on \
         loopback); **sockwatch (no --watch)**, the same without `--watch`, as the DaemonSet runs it by default: \
         every directory watched, so the life cycle outside DIR is a watched one (its process is tracked, and \
         this configuration's node tax leaves it out), while the process of the other unrelated operations, \
         which never binds a path socket, is not tracked; **bpftrace** with the script in `xtask/src/bench/observers.rs` (the same syscall \
         tracepoints, enter and exit, AF_UNIX paths read from user memory and filtered by the watched \
         directory's prefix, maps of bound descriptors and live socket paths, a line per event, output to \
         tmpfs); **auditd** with `auditctl -w DIR -p wa` (Debian's auditd, backlog 8192 as Debian's default \
         rules set it, log on disk); **empty programs (floor)**, bpftrace with an empty program on each \
         tracepoint sockwatch's tracepoint tier attaches (`floor_script`, same file): what the attachment alone \
         costs. Outside auditd's windows auditing is off with the rule `-a never,task`, so that the other \
         observers' threads get no audit context."
    );
}

/// A table per operation: each observer's ns per op, its ratio to `off` and what it adds.
fn per_op(s: &mut String, plan: &Plan, o: &Overhead) {
    let head = [
        "observer",
        "ns per op, p50",
        "IQR",
        "ratio vs off, p50",
        "ratio IQR",
        "added ns",
        "ratio of thread CPU time, p50",
    ];
    for &(op, _) in &plan.ops {
        para!(s, "**{}**", op.label());
        let rows = o.variants.iter().filter_map(|&v| {
            let sp = Spread::of(o.ns.get(&(v, op))?)?;
            let (r, cpu) = (
                Spread::of(&o.ratios(v, op, false)),
                Spread::of(&o.ratios(v, op, true)),
            );
            let cells = match v {
                Variant::Off => ["1".into(), "—".into(), "—".into(), "1".into()],
                _ => [
                    r.map_or("?".into(), |r| format!("{:.3}", r.p50)),
                    r.map_or("?".into(), |r| format!("{:.3}–{:.3}", r.p25, r.p75)),
                    o.added_ns(v, op).map_or("?".into(), ns),
                    cpu.map_or("?".into(), |r| format!("{:.3}", r.p50)),
                ],
            };
            let head = [
                v.name().into(),
                format!("{:.0}", sp.p50),
                format!("{:.0}–{:.0}", sp.p25, sp.p75),
            ];
            Some(head.into_iter().chain(cells).collect())
        });
        table(s, &head, "lrrrrrr", rows);
    }
}

/// The Go-order life cycle syscall by syscall: `off`'s ns and what each observer adds.
fn by_syscall(s: &mut String, o: &Overhead) {
    let others: Vec<Variant> = o
        .variants
        .iter()
        .copied()
        .filter(|v| *v != Variant::Off)
        .collect();
    para!(
        s,
        "**The Go-order life cycle syscall by syscall** (each syscall timed on its own; p50 over rounds of ns \
         per call, and what each observer adds to it):"
    );
    let head: Vec<String> = others
        .iter()
        .map(|v| format!("{} adds", v.name()))
        .collect();
    let head: Vec<&str> = ["syscall", "off"]
        .into_iter()
        .chain(head.iter().map(String::as_str))
        .collect();
    let rows = GO_STEPS.iter().enumerate().filter_map(|(i, name)| {
        let base = o.step_p50(Variant::Off, i)?;
        let adds = others
            .iter()
            .map(|&v| o.step_p50(v, i).map_or("?".into(), |x| ns(x - base)));
        Some(
            [name.to_string(), format!("{base:.0}")]
                .into_iter()
                .chain(adds)
                .collect(),
        )
    });
    table(
        s,
        &head,
        &format!("l{}", "r".repeat(others.len() + 1)),
        rows,
    );
}

/// Each of sockwatch's programs: runs and ns per run, beside the empty program's.
fn programs(s: &mut String, o: &Overhead) {
    para!(
        s,
        "**sockwatch's kernel programs**, during three more passes of every batch above with \
         `kernel.bpf_stats_enabled=1` (outside the measured rounds; the statistics add two clock reads to each \
         run), each program's runs and ns per run from its median pass (a stall inside a run counts in full), \
         and the empty program on the same tracepoint during the same passes under the floor's bpftrace \
         (what the statistics see of a program that does nothing):"
    );
    program_table(s, &o.programs, |name| o.floor_of(name));
    if !o.cold_programs.is_empty() {
        let cold = Op::unrelated_names();
        para!(
            s,
            "**The cold paths** (issue 38): the same, on a fresh agent and floor, through passes of only the \
             operations that concern no watched socket ({}):",
            cold.join(", ")
        );
        program_table(s, &o.cold_programs, |name| o.cold_floor_of(name));
    }
}

/// A row per program: its runs and ns per run against the empty program's.
fn program_table(s: &mut String, programs: &Programs, floor_of: impl Fn(&str) -> Option<f64>) {
    let rows = programs.iter().map(|(name, runs, avg)| {
        let floor = floor_of(name);
        vec![
            format!("`{name}`"),
            runs.to_string(),
            format!("{avg:.0}"),
            floor.map_or("—".into(), |f| format!("{f:.0}")),
            floor.map_or("—".into(), |f| format!("{:.1}", avg / f)),
            format!("{:.1}", *runs as f64 * avg / 1e6),
        ]
    });
    table(
        s,
        &[
            "program",
            "runs",
            "ns per run",
            "empty program, ns per run",
            "× empty",
            "total ms",
        ],
        "lrrrrr",
        rows,
    );
}

/// Whether every window saw everything, or which did not.
fn problems(s: &mut String, o: &Overhead) {
    if o.problems.is_empty() {
        para!(
            s,
            "Every window was checked: sockwatch delivered and bpftrace printed exactly one bind per socket life \
             cycle run in it, with nothing lost; audit lost no record."
        );
    } else {
        let list: Vec<String> = o.problems.iter().map(|p| format!("- {p}")).collect();
        para!(
            s,
            "Windows whose observer did not see everything (left out of the figures above):\n\n{}",
            list.join("\n")
        );
    }
}
