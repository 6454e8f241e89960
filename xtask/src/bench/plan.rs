//! What the bench runs: how much of everything (the full run or `--quick`), the operations
//! whose cost is compared, the observers compared, and the events of a socket life cycle.
use std::time::Duration;

/// Events the workload's socket life cycle yields: bind, listen, unlink, release.
pub const CYCLE_KINDS: [&str; 4] = ["bind", "listen", "unlink", "release"];

/// How much of everything: the full run, or `--quick`.
#[derive(Clone, Debug)]
pub struct Plan {
    pub rounds: usize,
    /// Repetitions of each op inside one observer window (their median is the round's value).
    pub reps: usize,
    /// Pause before each batch, so that an observer's work on the previous batch (draining
    /// and writing its events) is done and each batch pays only its own cost.
    pub pause: Duration,
    pub ops: Vec<(Op, u64)>,
    pub latency_samples: u64,
    /// Agent starts timed with the whole probe table.
    pub startup_runs: usize,
    pub metrics_samples: u64,
    /// Sustained rates tried, events per second, and how long each runs.
    pub steps: Vec<u64>,
    pub step_secs: f64,
    /// Bursts start here (life cycles) and double until loss, then bisect this many times.
    pub burst_start: u64,
    pub burst_max: u64,
    pub bisect: usize,
    pub idle_secs: u64,
    pub sockets: u64,
    pub scrapes: usize,
}

impl Plan {
    /// The full run's sizes, or `--quick`'s smaller ones (fewer rounds, samples and steps).
    pub fn new(quick: bool, rounds: usize) -> Plan {
        fn size<T>(quick: bool, full: T, short: T) -> T {
            if quick { short } else { full }
        }
        let ops = [
            (Op::Getppid, 400_000, 100_000),
            (Op::Connect, 5_000, 1_000),
            (Op::Unlink, 10_000, 2_000),
            (Op::SockCycle, 3_000, 600),
            (Op::SockCycleGo, 3_000, 600),
            (Op::Open, 50_000, 10_000),
            (Op::Pipe, 40_000, 8_000),
            (Op::SocketPair, 20_000, 4_000),
            (Op::SockCycleUnwatched, 3_000, 600),
            (Op::Fork, 1_000, 200),
        ];
        let steps = if quick {
            vec![10_000, 50_000]
        } else {
            vec![
                10_000, 25_000, 50_000, 75_000, 100_000, 150_000, 200_000, 300_000, 400_000,
            ]
        };
        Plan {
            rounds: size(quick, rounds.max(2), rounds.min(2)),
            reps: size(quick, 3, 1),
            pause: Duration::from_millis(50),
            ops: ops
                .map(|(op, full, short)| (op, size(quick, full, short)))
                .to_vec(),
            latency_samples: size(quick, 1_000, 100),
            startup_runs: size(quick, 10, 3),
            metrics_samples: size(quick, 200, 30),
            steps,
            step_secs: size(quick, 5.0, 1.0),
            burst_start: 1_024,
            burst_max: size(quick, 262_144, 32_768),
            bisect: size(quick, 5, 2),
            idle_secs: size(quick, 30, 3),
            sockets: 10_000,
            scrapes: size(quick, 100, 20),
        }
    }
}

/// The operations whose cost is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    Unlink,
    SockCycle,
    SockCycleGo,
    Connect,
    Getppid,
    Open,
    Pipe,
    SocketPair,
    SockCycleUnwatched,
    Fork,
}

/// The operations that concern no watched socket: what every workload on the node pays
/// (issue 38's node tax), each against its floor.
pub const UNRELATED: [Op; 6] = [
    Op::Getppid,
    Op::Open,
    Op::Pipe,
    Op::SocketPair,
    Op::SockCycleUnwatched,
    Op::Fork,
];

impl Op {
    /// The workload's name for it.
    pub fn arg(self) -> &'static str {
        match self {
            Op::Unlink => "unlink",
            Op::SockCycle => "sockcycle",
            Op::SockCycleGo => "sockcycle-go",
            Op::Connect => "connect",
            Op::Getppid => "getppid",
            Op::Open => "open",
            Op::Pipe => "pipe",
            Op::SocketPair => "socketpair",
            Op::SockCycleUnwatched => "sockcycle-unwatched",
            Op::Fork => "fork",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Op::Unlink => "unlink(2) of a regular file in the watched directory",
            Op::SockCycle => {
                "socket life cycle in the watched directory, C order (socket, bind, listen, \
                 socket, connect, accept, 3× close, unlink)"
            }
            Op::SockCycleGo => {
                "socket life cycle in the watched directory, Go order (socket, bind, listen, \
                 socket, connect, accept, unlink, 3× close: the file goes while the socket \
                 lives)"
            }
            Op::Connect => "connect to an unwatched socket (socket, connect, accept, 2× close)",
            Op::Getppid => "getppid(2), a syscall nothing observes",
            Op::Open => "open(2) and close(2) of a regular file outside the watched directory",
            Op::Pipe => "pipe(2) and two closes",
            Op::SocketPair => "socketpair(2) of unnamed UNIX sockets and two closes",
            Op::SockCycleUnwatched => {
                "socket life cycle outside the watched directory, C order (socket, bind, \
                 listen, socket, connect, accept, 3× close, unlink)"
            }
            Op::Fork => "fork(2) of a child that exits at once, and waitpid(2)",
        }
    }
}

/// Who observes the workload during a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Variant {
    Off,
    Sockwatch,
    Bpftrace,
    Auditd,
    /// Empty programs on the tracepoints sockwatch's tracepoint tier attaches: what the
    /// attachment itself costs, the floor sockwatch's cost is measured against.
    Floor,
}

impl Variant {
    pub fn name(self) -> &'static str {
        match self {
            Variant::Off => "off",
            Variant::Sockwatch => "sockwatch (tracepoint)",
            Variant::Bpftrace => "bpftrace",
            Variant::Auditd => "auditd",
            Variant::Floor => "empty programs (floor)",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_and_quick_sizes() {
        let full = Plan::new(false, 12);
        assert_eq!((full.rounds, full.reps, full.startup_runs), (12, 3, 10));
        assert_eq!(
            full.ops,
            [
                (Op::Getppid, 400_000),
                (Op::Connect, 5_000),
                (Op::Unlink, 10_000),
                (Op::SockCycle, 3_000),
                (Op::SockCycleGo, 3_000),
                (Op::Open, 50_000),
                (Op::Pipe, 40_000),
                (Op::SocketPair, 20_000),
                (Op::SockCycleUnwatched, 3_000),
                (Op::Fork, 1_000),
            ]
        );
        assert_eq!((full.steps.len(), full.step_secs), (9, 5.0));
        assert_eq!(
            (full.burst_max, full.bisect, full.idle_secs),
            (262_144, 5, 30)
        );
        let quick = Plan::new(true, 12);
        assert_eq!((quick.rounds, quick.reps, quick.startup_runs), (2, 1, 3));
        assert_eq!(quick.ops[0], (Op::Getppid, 100_000));
        assert_eq!(quick.steps, [10_000, 50_000]);
        assert_eq!((quick.latency_samples, quick.metrics_samples), (100, 30));
        assert_eq!((quick.burst_start, quick.burst_max), (1_024, 32_768));
        assert_eq!((quick.sockets, quick.scrapes), (10_000, 20));
        assert_eq!(
            Plan::new(false, 1).rounds,
            2,
            "at least two rounds to interleave"
        );
    }
}
