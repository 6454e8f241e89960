//! `cargo xtask bench --vm SERIES`: the precise tiers, which this host cannot load, measured in
//! a QEMU guest on Debian's kernel. The guest's `/init` runs the workload's `serve` (two: the
//! operations that concern no watched socket in one that never binds one) pinned to
//! vCPU 0 and the agent pinned to vCPU 1, and times every operation with no agent, under each
//! tier in turn and under each tier's floor (`sockwatch-floor`: an empty program at every
//! attach point of the tier), the order rotated each round; then one pass per tier and floor
//! with `kernel.bpf_stats_enabled` on for each program's run count and time. It prints one
//! console line per figure; the host reads them from the console log.
//!
//! Each round of a mode, and each per-program pass, is a run of the guest's (`SOCKWATCH-VM-RUN:`
//! … `SOCKWATCH-VM-EXIT:`): a guest an emulation fault ends (TCG's stray `int3` after the
//! trampolines' text patching, `vm::resume`) is booted again from the run it faulted in, and
//! only the figures of runs that finished count.
use std::{fs, path::Path, time::Duration};

use anyhow::{Context as _, bail};

use super::plan::UNRELATED;
use crate::{
    cmd,
    kernels::Kernel,
    vm::{self, INIT_PREAMBLE, resume},
};

/// The agent's tiers (`--probe-mode`), the precise ones first.
pub const TIERS: [&str; 4] = ["lsm", "fentry", "kprobe", "tracepoint"];
/// No agent, every tier, and every tier's floor ([`floor`]).
pub const MODES: [&str; 9] = [
    "off",
    "lsm",
    "fentry",
    "kprobe",
    "tracepoint",
    "floor-lsm",
    "floor-fentry",
    "floor-kprobe",
    "floor-tracepoint",
];

/// The mode of `tier`'s floor: `sockwatch-floor`'s empty programs where the tier attaches.
pub fn floor(tier: &str) -> String {
    format!("floor-{tier}")
}
/// The operations and batch sizes of the host's overhead phase, half of each batch: TCG runs
/// these syscalls 3–9× slower than this host does, and batches of a fifth (60–80 ms each)
/// left interquartile ranges of ±30 points even for getppid.
pub const OPS: [(&str, u64); 10] = [
    ("getppid", 200_000),
    ("connect", 2_500),
    ("unlink", 5_000),
    ("sockcycle", 1_500),
    ("sockcycle-go", 1_500),
    ("open", 25_000),
    ("pipe", 20_000),
    ("socketpair", 10_000),
    ("sockcycle-unwatched", 1_500),
    ("fork", 500),
];
const OP_LINE: &str = "SOCKWATCH-BENCH-OP: ";
const PROG_LINE: &str = "SOCKWATCH-BENCH-PROG: ";
const START_LINE: &str = "SOCKWATCH-BENCH-START: ";
/// One guest's whole run may take this long (about 8 minutes for 10 rounds on an idle host).
const TIMEOUT: Duration = Duration::from_secs(3 * 3600);
/// Resumed boots per guest: 16 rounds attach and detach every tier 64 times, and a 6.12 guest
/// met TCG's stray `int3` in its third round.
const RESUMES: u32 = 4;

/// What one guest measured.
#[derive(Debug, Default, PartialEq)]
pub struct GuestBench {
    /// `uname -r` of the guest.
    pub release: String,
    pub rounds: usize,
    /// (round, mode, op, ns per op).
    pub ops: Vec<(usize, String, String, f64)>,
    /// (mode, program, runs, ns per run), from the pass with `bpf_stats` on.
    pub programs: Vec<(String, String, u64, f64)>,
    /// (mode, seconds from spawn to the agent's "running;").
    pub starts: Vec<(String, f64)>,
    /// The runs the guest was booted again from after an emulation fault, and the fault.
    pub resumed: Vec<(String, &'static str)>,
}

/// Builds the release agent and workload, boots each kernel in turn (one guest at a time:
/// the guest's two vCPUs take the host's two cores) and reads what it measured.
pub fn run(kernels: &[Kernel], busybox: &Path, rounds: usize) -> anyhow::Result<Vec<GuestBench>> {
    cmd::run(cmd::cargo().args([
        "build",
        "--release",
        "-p",
        "sockwatch",
        "-p",
        "bench",
        "-p",
        "floor",
    ]))?;
    let release = cmd::target_dir().join("release");
    let initrd = cmd::target_dir().join("vm/bench-initrd.gz");
    let mut img = vm::base_image(kernels, busybox)?;
    img.executable("bin/sockwatch", &release.join("sockwatch"))?;
    img.executable("bin/sockwatch-bench", &release.join("sockwatch-bench"))?;
    img.executable("bin/sockwatch-floor", &release.join("sockwatch-floor"))?;
    img.bytes("init", init_script(rounds), 0o755);
    vm::write_image(&img, &initrd)?;
    let mut out = Vec::new();
    for k in kernels {
        println!("bench: {} rounds in {} under QEMU/TCG", rounds, k.package);
        let o = vm::boot(k, &initrd, TIMEOUT, RESUMES)?;
        // The guest runs no test, so its own verdict is the one that counts.
        if o.verdict != Some(true) {
            let why = o.failure.as_deref().unwrap_or("its verdict was FAIL");
            bail!(
                "the bench guest on {} failed: {why}; log {}",
                k.package,
                o.log.display()
            );
        }
        let log =
            fs::read_to_string(&o.log).with_context(|| format!("reading {}", o.log.display()))?;
        let mut g = parse(&log)?;
        g.release = o.release.unwrap_or_default();
        g.rounds = rounds;
        g.resumed = o.resumed.into_iter().map(|r| (r.run, r.fault)).collect();
        out.push(g);
    }
    Ok(out)
}

/// The guest's `/init`: the workload's `serve` on vCPU 0 behind two FIFOs, then `rounds`
/// rounds of every mode in rotated order, then the per-program pass of each tier and floor.
fn init_script(rounds: usize) -> String {
    let mut s = format!("{INIT_PREAMBLE}{GUEST_FUNCTIONS}{}", resume::read_script());
    for r in 0..rounds {
        for i in 0..MODES.len() {
            let mode = MODES[(r + i) % MODES.len()];
            s.push_str(&step(
                &format!("round-{r}-{mode}"),
                &format!("round {r} {mode}"),
            ));
        }
    }
    for mode in &MODES[1..] {
        s.push_str(&step(
            &format!("programs-{mode}"),
            &format!("programs {mode}"),
        ));
    }
    s.push_str(resume::check_script());
    s.push_str("echo \"SOCKWATCH-VM-VERDICT: $verdict\"\npoweroff -f\n");
    s.replace("@OPS@", &ops_calls())
}

/// One step of the script as a run labelled `label`, skipped before a resume point.
fn step(label: &str, call: &str) -> String {
    resume::guard(label, &vm::run_lines(label, call))
}

/// `op` for each of [`OPS`], in order, `$1` the round and `$2` the mode; the operations that
/// concern no watched socket go to the second workload, which never binds one (as on the
/// host: the kernel tracks a process that did, and its children, for the rest of its life).
fn ops_calls() -> String {
    OPS.iter()
        .map(|(op, n)| {
            let to = if is_unrelated(op) { " unrelated" } else { "" };
            format!("  op $1 $2 {op} {n}{to} || return 1\n")
        })
        .collect()
}

/// Whether the workload's operation `name` concerns no watched socket ([`UNRELATED`]).
pub fn is_unrelated(name: &str) -> bool {
    UNRELATED.iter().any(|op| op.arg() == name)
}

/// The guest's shell functions. `start` starts the agent, or under `floor-TIER` the floor,
/// waits for its "running;" and reports the seconds from spawn (`/proc/uptime`, 10 ms steps);
/// each batch starts a second after, so start-up work is not charged to the batch. The
/// agent's programs are read from its descriptors; the floor reports its own on SIGINT.
const GUEST_FUNCTIONS: &str = r#"verdict=PASS
echo 1 > /proc/sys/net/core/bpf_jit_kallsyms
mkdir -p /tmp/b/w /tmp/b/u
mkdir -p /tmp/b/n
mkfifo /tmp/b/in /tmp/b/out /tmp/b/in-n /tmp/b/out-n
taskset -c 0 /bin/sockwatch-bench serve /tmp/b/w /tmp/b/u < /tmp/b/in > /tmp/b/out &
taskset -c 0 /bin/sockwatch-bench serve /tmp/b/n /tmp/b/n < /tmp/b/in-n > /tmp/b/out-n &
exec 3>/tmp/b/in 4</tmp/b/out 5>/tmp/b/in-n 6</tmp/b/out-n
AGENT=
start() {
  : > /tmp/b/agent.log
  t0=$(cut -d' ' -f1 /proc/uptime)
  case $1 in
  floor-*) taskset -c 1 /bin/sockwatch-floor --probe-mode ${1#floor-} > /tmp/b/floor.out 2> /tmp/b/agent.log & ;;
  *) taskset -c 1 /bin/sockwatch run --probe-mode $1 --events /tmp/b/events.jsonl --watch /tmp/b/w --listen 127.0.0.1:9464 > /dev/null 2> /tmp/b/agent.log & ;;
  esac
  AGENT=$!
  until grep -q "running;" /tmp/b/agent.log; do
    kill -0 $AGENT 2> /dev/null || { echo "SOCKWATCH-BENCH-ERROR: $1: the agent exited"; cat /tmp/b/agent.log; return 1; }
    sleep 0.05
  done
  echo "SOCKWATCH-BENCH-START: $1 $t0 $(cut -d' ' -f1 /proc/uptime)"
  sleep 1
}
stop() {
  kill -INT $AGENT
  wait $AGENT
  AGENT=
  rm -f /tmp/b/events.jsonl
}
op() {
  if [ "$5" = unrelated ]; then
    echo "op $3 $4" >&5
    read -r line <&6 || { echo "SOCKWATCH-BENCH-ERROR: the workload exited"; return 1; }
  else
    echo "op $3 $4" >&3
    read -r line <&4 || { echo "SOCKWATCH-BENCH-ERROR: the workload exited"; return 1; }
  fi
  echo "SOCKWATCH-BENCH-OP: $1 $2 $3 $line"
}
ops() {
@OPS@}
round() {
  if [ $2 = off ]; then ops $1 off; return; fi
  start $2 || return 1
  ops $1 $2
  rc=$?
  stop
  return $rc
}
programs() {
  echo 1 > /proc/sys/kernel/bpf_stats_enabled
  start $1 || return 1
  ops stats $1
  case $1 in floor-*)
    stop
    while read -r id name cnt ns; do
      echo "SOCKWATCH-BENCH-PROG: $1 $id $name $cnt $ns"
    done < /tmp/b/floor.out
    echo 0 > /proc/sys/kernel/bpf_stats_enabled
    return ;;
  esac
  grep " bpf_prog_" /proc/kallsyms > /tmp/b/syms
  for f in /proc/$AGENT/fdinfo/*; do
    cnt=$(sed -n 's/^run_cnt:[[:space:]]*//p' $f)
    [ -n "$cnt" ] || continue
    ns=$(sed -n 's/^run_time_ns:[[:space:]]*//p' $f)
    id=$(sed -n 's/^prog_id:[[:space:]]*//p' $f)
    tag=$(sed -n 's/^prog_tag:[[:space:]]*//p' $f)
    name=$(grep -m1 " bpf_prog_${tag}_" /tmp/b/syms | sed 's/.* bpf_prog_[0-9a-f]*_\([^[:space:]]*\).*/\1/')
    echo "SOCKWATCH-BENCH-PROG: $1 $id ${name:-$tag} $cnt $ns"
  done
  stop
  echo 0 > /proc/sys/kernel/bpf_stats_enabled
}
"#;

/// The figures in a guest's console log, of the runs that finished: a run a fault ended is
/// run again, whole, by the resumed boot. A program held by two descriptors (its own and its
/// link's) is counted once.
pub fn parse(log: &str) -> anyhow::Result<GuestBench> {
    let mut g = GuestBench::default();
    // The figures of the run in progress, and the programs it printed.
    let mut run = GuestBench::default();
    let mut seen = std::collections::BTreeSet::new();
    for line in log.lines() {
        let line = line.trim_end();
        if after(line, vm::RUN_MARK).is_some() {
            (run, seen) = Default::default();
        } else if after(line, vm::EXIT_MARK).is_some() {
            g.ops.append(&mut run.ops);
            g.programs.append(&mut run.programs);
            g.starts.append(&mut run.starts);
        } else if let Some(rest) = after(line, OP_LINE) {
            run.ops.extend(parse_op(rest));
        } else if let Some(rest) = after(line, PROG_LINE) {
            let w: Vec<&str> = rest.split_whitespace().collect();
            if let [mode, id, name, runs, ns] = w[..] {
                let (runs, ns) = (runs.parse::<u64>()?, ns.parse::<f64>()?);
                if runs > 0 && seen.insert((mode.to_owned(), id.to_owned())) {
                    run.programs
                        .push((mode.to_owned(), name.to_owned(), runs, ns / runs as f64));
                }
            }
        } else if let Some(rest) = after(line, START_LINE) {
            let w: Vec<&str> = rest.split_whitespace().collect();
            if let [mode, t0, t1] = w[..] {
                run.starts
                    .push((mode.to_owned(), t1.parse::<f64>()? - t0.parse::<f64>()?));
            }
        }
    }
    if g.ops.is_empty() {
        bail!("the guest printed no timed operation");
    }
    Ok(g)
}

/// The text after `marker` in `line`, wherever the console put it.
fn after<'a>(line: &'a str, marker: &str) -> Option<&'a str> {
    line.find(marker).map(|i| &line[i + marker.len()..])
}

/// `ROUND MODE OP {"ns":…}`; the per-program pass's rounds (`stats`) are not timed figures.
fn parse_op(rest: &str) -> Option<(usize, String, String, f64)> {
    let mut w = rest.splitn(4, ' ');
    let round = w.next()?.parse().ok()?;
    let (mode, op) = (w.next()?.to_owned(), w.next()?.to_owned());
    let v: serde_json::Value = serde_json::from_str(w.next()?).ok()?;
    Some((round, mode, op, v["ns"].as_f64()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_rotates_the_modes_and_profiles_each_tier() {
        let s = init_script(2);
        let rounds: Vec<&str> = s.lines().filter(|l| l.starts_with("round ")).collect();
        assert_eq!(rounds.len(), 2 * MODES.len());
        assert_eq!(rounds[0], "round 0 off");
        assert_eq!(rounds[5], "round 0 floor-lsm");
        assert_eq!(rounds[9], "round 1 lsm");
        assert_eq!(rounds[17], "round 1 off");
        let programs: Vec<&str> = s.lines().filter(|l| l.starts_with("programs ")).collect();
        assert_eq!(programs.len(), 8);
        assert_eq!(programs[4], "programs floor-lsm");
        // The operations that concern no watched socket go to the workload that binds none.
        assert!(s.contains("  op $1 $2 sockcycle 1500 || return 1\n"));
        assert!(s.contains("  op $1 $2 sockcycle-unwatched 1500 unrelated || return 1\n"));
        assert!(s.contains("  op $1 $2 fork 500 unrelated || return 1\n"));
        assert!(s.contains("serve /tmp/b/n /tmp/b/n < /tmp/b/in-n > /tmp/b/out-n &"));
        // A floor mode starts the floor for its tier, and reads the floor's own report.
        assert!(s.contains("floor-*) taskset -c 1 /bin/sockwatch-floor --probe-mode ${1#floor-}"));
        assert!(s.contains(
            "echo \"SOCKWATCH-BENCH-PROG: $1 $id $name $cnt $ns\"\n    done < /tmp/b/floor.out"
        ));
        // Every step is a run a resumed boot can start again from.
        assert!(s.contains(
            "[ \"$resume\" != \"round-1-lsm\" ]; then\n\
             echo \"SOCKWATCH-VM-SKIP: round-1-lsm (finished before the fault)\"\n\
             else\n\
             resume=\n\
             echo \"SOCKWATCH-VM-RUN: round-1-lsm\"\n\
             round 1 lsm\n\
             rc=$?\n\
             echo \"SOCKWATCH-VM-EXIT: round-1-lsm $rc\"\n"
        ));
        assert!(s.contains("/proc/cmdline"));
        assert!(s.contains("no run named $resume to resume from"));
        assert!(s.contains("  op $1 $2 sockcycle-go 1500 || return 1\n"));
        assert!(!s.contains("@OPS@"));
        assert!(s.trim_end().ends_with("poweroff -f"));
    }

    #[test]
    fn parses_ops_programs_and_starts_once_each() {
        let log = "\
[   12.0] random kernel line\n\
SOCKWATCH-VM-RUN: round-3-lsm\n\
SOCKWATCH-BENCH-START: lsm 10.50 12.75\n\
SOCKWATCH-BENCH-OP: 3 lsm getppid {\"ns\":812.5,\"cpu_ns\":800.0,\"steps\":[]}\n\
SOCKWATCH-VM-EXIT: round-3-lsm 0\n\
SOCKWATCH-VM-RUN: programs-lsm\n\
SOCKWATCH-BENCH-OP: stats lsm getppid {\"ns\":900.0,\"cpu_ns\":800.0,\"steps\":[]}\n\
SOCKWATCH-BENCH-PROG: lsm 41 bind_lsm 100 250000\n\
SOCKWATCH-BENCH-PROG: lsm 41 bind_lsm 100 250000\n\
SOCKWATCH-BENCH-PROG: lsm 42 idle_prog 0 0\n\
SOCKWATCH-VM-EXIT: programs-lsm 0\n";
        let g = parse(log).expect("parses");
        assert_eq!(g.ops, vec![(3, "lsm".into(), "getppid".into(), 812.5)]);
        assert_eq!(
            g.programs,
            vec![("lsm".into(), "bind_lsm".into(), 100, 2500.0)]
        );
        assert_eq!(g.starts.len(), 1);
        assert!((g.starts[0].1 - 2.25).abs() < 1e-9);
        assert!(parse("SOCKWATCH-VM-VERDICT: PASS\n").is_err());
    }

    #[test]
    fn a_run_a_fault_ended_counts_only_as_the_resumed_boot_ran_it() {
        let op = |round: u32, ns: f64| {
            format!("SOCKWATCH-BENCH-OP: {round} fentry unlink {{\"ns\":{ns},\"steps\":[]}}\n")
        };
        let prog = |id: u32, runs: u32| {
            format!("SOCKWATCH-BENCH-PROG: fentry {id} unlink_fentry {runs} 4000\n")
        };
        let log = [
            "SOCKWATCH-VM-RUN: round-0-fentry\n".to_owned(),
            op(0, 100.0),
            "SOCKWATCH-VM-EXIT: round-0-fentry 0\n".to_owned(),
            "SOCKWATCH-VM-RUN: round-1-fentry\n".to_owned(),
            op(1, 999.0),
            "[   80.1] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n".to_owned(),
            "----- boot 2: resumed from round-1-fentry -----\n".to_owned(),
            "SOCKWATCH-VM-SKIP: round-0-fentry (finished before the fault)\n".to_owned(),
            "SOCKWATCH-VM-RUN: round-1-fentry\n".to_owned(),
            op(1, 110.0),
            "SOCKWATCH-VM-EXIT: round-1-fentry 0\n".to_owned(),
            "SOCKWATCH-VM-RUN: programs-fentry\n".to_owned(),
            prog(7, 10),
            "SOCKWATCH-VM-RUN: programs-fentry\n".to_owned(),
            prog(7, 20),
            "SOCKWATCH-VM-EXIT: programs-fentry 0\n".to_owned(),
        ]
        .concat();
        let g = parse(&log).expect("parses");
        let ns: Vec<(usize, f64)> = g.ops.iter().map(|o| (o.0, o.3)).collect();
        assert_eq!(ns, vec![(0, 100.0), (1, 110.0)]);
        // Program ids start again in a new boot: the rerun's program 7 is not the first's.
        assert_eq!(
            g.programs,
            vec![("fentry".into(), "unlink_fentry".into(), 20, 200.0)]
        );
    }
}
