//! `cargo xtask bench --vm SERIES`: the precise tiers, which this host cannot load, measured in
//! a QEMU guest on Debian's kernel. The guest's `/init` runs a workload `serve` per
//! [`Runner`], as on the host, on vCPU 0 and the agent on vCPU 1, and times every operation
//! with no agent, under each tier and under each tier's floor (`sockwatch-floor`), the order
//! rotated each round; then two passes per tier and floor with `kernel.bpf_stats_enabled` on:
//! every operation, and only those that concern no watched socket (issue 38's cold paths). It prints a console line per figure. Each round of
//! a mode, and each pass, is a run (`vm::resume`): a guest an emulation fault ends is booted
//! again from the run it faulted in, and only the figures of runs that finished count.
use std::{fs, path::Path, time::Duration};

use anyhow::{Context as _, bail};

use super::{Op, Runner};
use crate::{
    cmd,
    kernels::Kernel,
    vm::{self, INIT_PREAMBLE, resume},
};

/// The agent's probe modes: its tiers, the precise ones first, then `auto` in the DaemonSet's
/// default configuration (no `--watch`: every directory watched), issue 38's node tax.
pub const TIERS: [&str; 5] = ["lsm", "fentry", "kprobe", "tracepoint", "auto"];

/// The mode of `tier`'s floor: `sockwatch-floor`'s empty programs where the tier attaches.
pub fn floor(tier: &str) -> String {
    format!("floor-{tier}")
}

/// No agent, every tier, and every tier's floor.
fn modes() -> Vec<String> {
    let tiers = TIERS.map(String::from);
    [
        vec!["off".to_owned()],
        tiers.to_vec(),
        TIERS.map(floor).to_vec(),
    ]
    .concat()
}

/// The host's batches, halved: TCG runs these syscalls 3–9× slower than this host, and
/// batches of a fifth left interquartile ranges of ±30 points even for getppid.
pub fn ops() -> [(Op, u64); 10] {
    Op::ALL.map(|op| (op, op.batch() / 2))
}

const OP_LINE: &str = "SOCKWATCH-BENCH-OP: ";
const PROG_LINE: &str = "SOCKWATCH-BENCH-PROG: ";
const START_LINE: &str = "SOCKWATCH-BENCH-START: ";

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
    /// The same, from the pass of only the operations that concern no watched socket.
    pub cold: Vec<(String, String, u64, f64)>,
    /// (mode, seconds from spawn to the agent's "running;").
    pub starts: Vec<(String, f64)>,
    /// The runs the guest was booted again from after an emulation fault, and the fault.
    pub resumed: Vec<(String, &'static str)>,
}

/// Builds the release agent, workload and floor, boots each kernel in turn (one guest at a
/// time: its two vCPUs take the host's two cores) and reads what it measured.
pub fn run(kernels: &[Kernel], busybox: &Path, rounds: usize) -> anyhow::Result<Vec<GuestBench>> {
    let build = [
        "build",
        "--release",
        "-p",
        "sockwatch",
        "-p",
        "bench",
        "-p",
        "floor",
    ];
    cmd::run(cmd::cargo().args(build))?;
    let release = cmd::target_dir().join("release");
    let initrd = cmd::target_dir().join("vm/bench-initrd.gz");
    let mut img = vm::base_image(kernels, busybox)?;
    for bin in ["sockwatch", "sockwatch-bench", "sockwatch-floor"] {
        img.executable(&format!("bin/{bin}"), &release.join(bin))?;
    }
    img.bytes("init", init_script(rounds), 0o755);
    vm::write_image(&img, &initrd)?;
    let mut out = Vec::new();
    for k in kernels {
        println!("bench: {rounds} rounds in {} under QEMU/TCG", k.package);
        // 3 hours at most; 4 resumed boots: 16 rounds attach and detach every tier 64 times,
        // and a 6.12 guest met TCG's stray `int3` in its third round.
        let o = vm::boot(k, &initrd, Duration::from_secs(3 * 3600), 4)?;
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
        (g.release, g.rounds) = (o.release.unwrap_or_default(), rounds);
        g.resumed = o.resumed.into_iter().map(|r| (r.run, r.fault)).collect();
        out.push(g);
    }
    Ok(out)
}

/// The guest's `/init`: `rounds` rounds of every mode in rotated order, then the per-program
/// passes of each tier and floor, each step a run a resumed boot can start again from.
fn init_script(rounds: usize) -> String {
    let modes = modes();
    let step = |label: String, call: String| resume::guard(&label, &vm::run_lines(&label, &call));
    let mut s = format!("{INIT_PREAMBLE}{GUEST_FUNCTIONS}{}", resume::read_script());
    for r in 0..rounds {
        for i in 0..modes.len() {
            let mode = &modes[(r + i) % modes.len()];
            s += &step(format!("round-{r}-{mode}"), format!("round {r} {mode}"));
        }
    }
    for mode in &modes[1..] {
        s += &step(format!("programs-{mode}"), format!("programs {mode}"));
    }
    // Not `auto`: with every directory watched, its unwatched life cycles are watched ones.
    for mode in modes[1..].iter().filter(|m| !m.ends_with("auto")) {
        s += &step(format!("cold-{mode}"), format!("programs {mode} cold"));
    }
    s += resume::check_script();
    s += "echo \"SOCKWATCH-VM-VERDICT: $verdict\"\npoweroff -f\n";
    // `op ROUND MODE KIND N [RUNNER]`: to the workload process of the operation's runner.
    let call = |&(op, n): &(Op, u64)| {
        let to = match op.runner() {
            Runner::Watched => "",
            Runner::Unrelated => " unrelated",
            Runner::Cycles => " cycles",
        };
        format!("  op $1 $2 {} {n}{to} || return 1\n", op.arg())
    };
    let cold: String = ops().iter().filter(|o| o.0.unrelated()).map(call).collect();
    s.replace("@OPS@", &ops().iter().map(call).collect::<String>())
        .replace("@COLD@", &cold)
}

/// The guest's shell functions. `start` starts the agent, or under `floor-TIER` the floor,
/// waits for its "running;" and reports the seconds from spawn (`/proc/uptime`); each batch
/// starts a second after. The agent's programs are read from its descriptors; the floor
/// reports its own on SIGINT. `programs MODE cold` passes only the unrelated operations, its
/// lines' mode `cold-MODE`.
const GUEST_FUNCTIONS: &str = r#"verdict=PASS
echo 1 > /proc/sys/net/core/bpf_jit_kallsyms
mkdir -p /tmp/b/w /tmp/b/u
mkdir -p /tmp/b/n
mkfifo /tmp/b/in /tmp/b/out /tmp/b/in-n /tmp/b/out-n /tmp/b/in-c /tmp/b/out-c
taskset -c 0 /bin/sockwatch-bench serve /tmp/b/w /tmp/b/u < /tmp/b/in > /tmp/b/out &
taskset -c 0 /bin/sockwatch-bench serve /tmp/b/n /tmp/b/n < /tmp/b/in-n > /tmp/b/out-n &
taskset -c 0 /bin/sockwatch-bench serve /tmp/b/n /tmp/b/n < /tmp/b/in-c > /tmp/b/out-c &
exec 3>/tmp/b/in 4</tmp/b/out 5>/tmp/b/in-n 6</tmp/b/out-n 7>/tmp/b/in-c 8</tmp/b/out-c
AGENT=
start() {
  : > /tmp/b/agent.log
  t0=$(cut -d' ' -f1 /proc/uptime)
  case $1 in
  floor-*) taskset -c 1 /bin/sockwatch-floor --probe-mode ${1#floor-} > /tmp/b/floor.out 2> /tmp/b/agent.log & ;;
  *) watch="--watch /tmp/b/w"; [ $1 = auto ] && watch=
    taskset -c 1 /bin/sockwatch run --probe-mode $1 --events /tmp/b/events.jsonl $watch --listen 127.0.0.1:9464 > /dev/null 2> /tmp/b/agent.log & ;;
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
  case "$5" in
  unrelated) echo "op $3 $4" >&5; read -r line <&6 ;;
  cycles) echo "op $3 $4" >&7; read -r line <&8 ;;
  *) echo "op $3 $4" >&3; read -r line <&4 ;;
  esac || { echo "SOCKWATCH-BENCH-ERROR: the workload exited"; return 1; }
  echo "SOCKWATCH-BENCH-OP: $1 $2 $3 $line"
}
ops() {
@OPS@}
cold() {
@COLD@}
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
  ${2:-ops} stats $1
  label=${2:+$2-}$1
  case $1 in floor-*)
    stop
    while read -r id name cnt ns; do
      echo "SOCKWATCH-BENCH-PROG: $label $id $name $cnt $ns"
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
    echo "SOCKWATCH-BENCH-PROG: $label $id ${name:-$tag} $cnt $ns"
  done
  stop
  echo 0 > /proc/sys/kernel/bpf_stats_enabled
}
"#;

/// The figures in a guest's console log, of the runs that finished (a run a fault ended is
/// run again, whole, by the resumed boot). A program held by two descriptors (its own and its
/// link's) is counted once; program ids start again in a resumed boot.
pub fn parse(log: &str) -> anyhow::Result<GuestBench> {
    let (mut g, mut run) = (GuestBench::default(), GuestBench::default());
    let mut seen = std::collections::BTreeSet::new();
    for line in log.lines() {
        let after = |marker: &str| {
            line.find(marker)
                .map(|i| line[i + marker.len()..].trim_end())
        };
        let words: Vec<&str> = [PROG_LINE, START_LINE]
            .iter()
            .find_map(|m| after(m))
            .map_or(Vec::new(), |rest| rest.split_whitespace().collect());
        if after(vm::RUN_MARK).is_some() {
            (run, seen) = Default::default();
        } else if after(vm::EXIT_MARK).is_some() {
            g.ops.append(&mut run.ops);
            g.programs.append(&mut run.programs);
            g.cold.append(&mut run.cold);
            g.starts.append(&mut run.starts);
        } else if let Some(rest) = after(OP_LINE) {
            // `ROUND MODE OP {"ns":…}`; the per-program pass's (`stats`) are not timed figures.
            let mut w = rest.splitn(4, ' ');
            let (round, mode, op, json) = (w.next(), w.next(), w.next(), w.next());
            let v: Option<serde_json::Value> = json.and_then(|j| serde_json::from_str(j).ok());
            if let (Some(Ok(round)), Some(mode), Some(op), Some(ns)) = (
                round.map(str::parse),
                mode,
                op,
                v.and_then(|v| v["ns"].as_f64()),
            ) {
                run.ops.push((round, mode.to_owned(), op.to_owned(), ns));
            }
        } else if let (Some(_), [mode, id, name, runs, ns]) = (after(PROG_LINE), &words[..]) {
            let (runs, ns) = (runs.parse::<u64>()?, ns.parse::<f64>()?);
            if runs > 0 && seen.insert((mode.to_string(), id.to_string())) {
                let (into, mode) = match mode.strip_prefix("cold-") {
                    Some(mode) => (&mut run.cold, mode),
                    None => (&mut run.programs, *mode),
                };
                into.push((mode.to_string(), name.to_string(), runs, ns / runs as f64));
            }
        } else if let (Some(_), [mode, t0, t1]) = (after(START_LINE), &words[..]) {
            run.starts
                .push((mode.to_string(), t1.parse::<f64>()? - t0.parse::<f64>()?));
        }
    }
    if g.ops.is_empty() {
        bail!("the guest printed no timed operation");
    }
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_rotates_the_modes_and_profiles_each_tier() {
        let s = init_script(2);
        let rounds: Vec<&str> = s.lines().filter(|l| l.starts_with("round ")).collect();
        assert_eq!(rounds.len(), 2 * 11);
        assert_eq!(
            (rounds[0], rounds[5], rounds[6], rounds[11], rounds[21]),
            (
                "round 0 off",
                "round 0 auto",
                "round 0 floor-lsm",
                "round 1 lsm",
                "round 1 off"
            )
        );
        let programs: Vec<&str> = s.lines().filter(|l| l.starts_with("programs ")).collect();
        assert_eq!((programs.len(), programs[5]), (18, "programs floor-lsm"));
        assert_eq!(programs[17], "programs floor-tracepoint cold");
        assert!(!s.contains("programs auto cold"));
        let cold = &s[s.find("cold() {").expect("a cold pass")..];
        let cold = &cold[..cold.find("\n}").expect("its end")];
        assert_eq!(
            cold.lines().count(),
            1 + Op::unrelated_names().len(),
            "{cold}"
        );
        assert!(
            cold.contains("  op $1 $2 open 25000 unrelated || return 1"),
            "{cold}"
        );
        assert!(
            !cold.contains("sockcycle ") && !cold.contains("unlink"),
            "{cold}"
        );
        for call in [
            "getppid 200000 unrelated",
            "sockcycle 1500",
            "sockcycle-go 1500",
            "sockcycle-unwatched 1500 cycles",
            "fork 500 unrelated",
        ] {
            assert!(
                s.contains(&format!("  op $1 $2 {call} || return 1\n")),
                "{call}"
            );
        }
        assert!(s.contains("serve /tmp/b/n /tmp/b/n < /tmp/b/in-n > /tmp/b/out-n &"));
        assert!(s.contains("serve /tmp/b/n /tmp/b/n < /tmp/b/in-c > /tmp/b/out-c &"));
        assert!(s.contains("  cycles) echo \"op $3 $4\" >&7; read -r line <&8 ;;\n"));
        assert!(s.contains("floor-*) taskset -c 1 /bin/sockwatch-floor --probe-mode ${1#floor-}"));
        assert!(s.contains("watch=\"--watch /tmp/b/w\"; [ $1 = auto ] && watch=\n"));
        assert!(s.contains(
            "echo \"SOCKWATCH-BENCH-PROG: $label $id $name $cnt $ns\"\n    done < /tmp/b/floor.out"
        ));
        assert!(s.contains("  ${2:-ops} stats $1\n  label=${2:+$2-}$1\n"));
        assert!(s.contains(
            "[ \"$resume\" != \"round-1-lsm\" ]; then\necho \"SOCKWATCH-VM-SKIP: round-1-lsm (finished before \
             the fault)\"\nelse\nresume=\necho \"SOCKWATCH-VM-RUN: round-1-lsm\"\nround 1 lsm\nrc=$?\n\
             echo \"SOCKWATCH-VM-EXIT: round-1-lsm $rc\"\n"
        ));
        assert!(s.contains("/proc/cmdline") && s.contains("no run named $resume to resume from"));
        assert!(!s.contains("@OPS@") && s.trim_end().ends_with("poweroff -f"));
    }

    #[test]
    fn parses_the_runs_that_finished_once_each() {
        let op = |round: u32, mode: &str, ns: f64| {
            format!(
                "SOCKWATCH-BENCH-OP: {round} {mode} unlink {{\"ns\":{ns},\"cpu_ns\":1.0,\"steps\":[]}}\n"
            )
        };
        let prog = |id: u32, runs: u32| {
            format!("SOCKWATCH-BENCH-PROG: fentry {id} unlink_fentry {runs} 4000\n")
        };
        let log = [
            "[   12.0] random kernel line\nSOCKWATCH-VM-RUN: round-0-fentry\n",
            "SOCKWATCH-BENCH-START: fentry 10.50 12.75\n",
            &op(0, "fentry", 100.0),
            "SOCKWATCH-VM-EXIT: round-0-fentry 0\nSOCKWATCH-VM-RUN: round-1-fentry\n",
            &op(1, "fentry", 999.0),
            "[   80.1] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n----- boot 2: resumed from round-1-fentry -----\n",
            "SOCKWATCH-VM-SKIP: round-0-fentry (finished before the fault)\nSOCKWATCH-VM-RUN: round-1-fentry\n",
            &op(1, "fentry", 110.0),
            "SOCKWATCH-VM-EXIT: round-1-fentry 0\nSOCKWATCH-VM-RUN: programs-fentry\n",
            &prog(7, 10),
            "SOCKWATCH-VM-RUN: programs-fentry\n",
            &op(0, "stats", 5.0).replace("0 stats", "stats fentry"),
            &prog(7, 20),
            &prog(7, 20),
            &prog(8, 0),
            "SOCKWATCH-VM-EXIT: programs-fentry 0\n",
            "SOCKWATCH-VM-RUN: cold-fentry\n",
            "SOCKWATCH-BENCH-PROG: cold-fentry 9 release_tp_close 40 8000\n",
            "SOCKWATCH-BENCH-PROG: cold-floor-fentry 3 release_tp_close 40 4000\n",
            "SOCKWATCH-VM-EXIT: cold-fentry 0\n",
        ]
        .concat();
        let g = parse(&log).expect("parses");
        let ns: Vec<(usize, f64)> = g.ops.iter().map(|o| (o.0, o.3)).collect();
        assert_eq!(ns, vec![(0, 100.0), (1, 110.0)]);
        assert_eq!(
            g.programs,
            vec![("fentry".into(), "unlink_fentry".into(), 20, 200.0)]
        );
        assert_eq!(
            g.cold,
            vec![
                ("fentry".into(), "release_tp_close".into(), 40, 200.0),
                ("floor-fentry".into(), "release_tp_close".into(), 40, 100.0)
            ]
        );
        assert_eq!(g.starts.len(), 1);
        assert!((g.starts[0].1 - 2.25).abs() < 1e-9);
        assert!(parse("SOCKWATCH-VM-VERDICT: PASS\n").is_err());
    }
}
