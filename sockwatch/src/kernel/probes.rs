//! The probe table: for every hook, its tiers best first and the programs each tier attaches.
//! Pure data plus the choice of candidates for a probe mode; `loader` does the attaching.
use sockwatch_common::{Flavor, Tier};

/// A point in the socket life cycle that sockwatch observes: one per kind of event it gives.
pub use sockwatch_common::EventKind as Hook;

/// What the agent loses without a hook.
pub trait Missed {
    /// What the agent misses while this hook has no tier attached (one WARN line each).
    fn missed_without(self) -> &'static str;
}

impl Missed for Hook {
    fn missed_without(self) -> &'static str {
        match self {
            Hook::Bind => "no socket is learned from the kernel (the agent refuses to run)",
            Hook::Listen => {
                "listening state is learned from sweeps only: a listener bound after the last \
                 sweep is not reported orphaned when its file goes"
            }
            Hook::Unlink => "unlinks of live sockets are not seen (renames over them still are)",
            Hook::Rename => "renames over live sockets are not seen (unlinks still are)",
            Hook::Connect => "refused connects are not seen: no stale_connect verdicts",
            Hook::Release => {
                "releases are seen by sweeps only: verdicts that call a socket open are checked \
                 against its holder's descriptors first, and orphans closed since the last \
                 sweep end late"
            }
            Hook::Fork => {
                "forked holders join owner sets only at the next sweep (the in-kernel fd check \
                 still clears an unlinking holder)"
            }
            Hook::Exit => {
                "process exits and the releases they cause are seen by sweeps only, up to one \
                 scan interval late"
            }
            Hook::Receive => {
                "listener hand-overs (SCM_RIGHTS) are learned at the next sweep, or when the \
                 sender exits (its sockets are looked for in /proc/PID/fd): until then an unlink \
                 names the sender as victim"
            }
        }
    }
}

/// How one program attaches to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attach {
    Fentry {
        function: &'static str,
    },
    Fexit {
        function: &'static str,
    },
    Lsm {
        hook: &'static str,
    },
    Kprobe {
        function: &'static str,
    },
    Kretprobe {
        function: &'static str,
    },
    Tracepoint {
        category: &'static str,
        name: &'static str,
    },
    BtfTracepoint {
        name: &'static str,
    },
}

#[derive(Clone, Copy, Debug)]
pub struct ProgramSpec {
    /// ELF symbol of the program in the eBPF object.
    pub program: &'static str,
    /// Its twin for kernels without `bpf_loop` ([`Flavor::Bounded`]), if it needs one.
    pub bounded: Option<&'static str>,
    /// The one flavor it is loaded in: the other does its work with other programs.
    pub only: Option<Flavor>,
    pub attach: Attach,
    /// The tier works without it, with less detail (its target may be inlined on some
    /// kernels); the loader reports it as degraded.
    pub optional: bool,
}

/// One way of observing a hook: all its programs attach, or none do.
#[derive(Clone, Copy, Debug)]
pub struct TierSpec {
    pub tier: Tier,
    pub programs: &'static [ProgramSpec],
}

impl TierSpec {
    /// The programs this tier loads under `flavor`.
    pub fn programs_in(&self, flavor: Flavor) -> impl Iterator<Item = &'static ProgramSpec> {
        self.programs.iter().filter(move |p| p.loads_in(flavor))
    }
}

#[derive(Clone, Copy, Debug)]
pub struct HookSpec {
    pub hook: Hook,
    /// Preferred first.
    pub tiers: &'static [TierSpec],
}

impl ProgramSpec {
    /// The ELF symbol to load for this flavor.
    pub fn name(&self, flavor: Flavor) -> &'static str {
        match (flavor, self.bounded) {
            (Flavor::Bounded, Some(b)) => b,
            _ => self.program,
        }
    }

    /// The flavors this program exists in.
    pub fn flavors(&self) -> &'static [Flavor] {
        match (self.only, self.bounded) {
            (Some(Flavor::Bounded), _) => &[Flavor::Bounded],
            (None, Some(_)) => &[Flavor::Helpers, Flavor::Bounded],
            _ => &[Flavor::Helpers],
        }
    }

    /// Whether a tier loads it under `flavor`.
    pub fn loads_in(&self, flavor: Flavor) -> bool {
        self.only.is_none_or(|f| f == flavor)
    }

    /// Whether what is loaded differs by flavor (a twin, or one flavor only).
    pub fn per_flavor(&self) -> bool {
        self.bounded.is_some() || self.only.is_some()
    }
}

const fn p(program: &'static str, attach: Attach) -> ProgramSpec {
    ProgramSpec {
        program,
        bounded: None,
        only: None,
        attach,
        optional: false,
    }
}
/// A program loaded in one flavor only.
const fn only(flavor: Flavor, program: &'static str, attach: Attach) -> ProgramSpec {
    ProgramSpec {
        only: Some(flavor),
        ..p(program, attach)
    }
}
/// A program with a `_b` twin: see [`Flavor`].
const fn flavored(program: &'static str, bounded: &'static str, attach: Attach) -> ProgramSpec {
    ProgramSpec {
        bounded: Some(bounded),
        ..p(program, attach)
    }
}
const fn optional(program: &'static str, attach: Attach) -> ProgramSpec {
    ProgramSpec {
        optional: true,
        ..p(program, attach)
    }
}
const fn fentry(function: &'static str) -> Attach {
    Attach::Fentry { function }
}
const fn fexit(function: &'static str) -> Attach {
    Attach::Fexit { function }
}
const fn kprobe(function: &'static str) -> Attach {
    Attach::Kprobe { function }
}
const fn kretprobe(function: &'static str) -> Attach {
    Attach::Kretprobe { function }
}
const fn sys(name: &'static str) -> Attach {
    Attach::Tracepoint {
        category: "syscalls",
        name,
    }
}
const fn tier(tier: Tier, programs: &'static [ProgramSpec]) -> TierSpec {
    TierSpec { tier, programs }
}

/// Syscall enter/exit tracepoint programs, named `<syscall>_tp_enter` and `<syscall>_tp_exit`.
macro_rules! syscall_pairs {
    ($($syscall:literal),+) => {
        &[$(
            p(concat!($syscall, "_tp_enter"), sys(concat!("sys_enter_", $syscall))),
            p(concat!($syscall, "_tp_exit"), sys(concat!("sys_exit_", $syscall))),
        )+]
    };
}

/// The tracepoint programs of a socket syscall that takes an address (bind, connect, sendto):
/// where the kernel has `bpf_task_pt_regs`, one program at the exit (`<syscall>_tp_ret`) reads
/// the arguments from the registers the syscall saved; without it, the entry keeps them for
/// the exit in a pending record.
macro_rules! addressed_syscalls {
    ($($syscall:literal),+) => {
        &[$(
            only(Flavor::Helpers, concat!($syscall, "_tp_ret"), sys(concat!("sys_exit_", $syscall))),
            only(Flavor::Bounded, concat!($syscall, "_tp_enter"), sys(concat!("sys_enter_", $syscall))),
            only(Flavor::Bounded, concat!($syscall, "_tp_exit"), sys(concat!("sys_exit_", $syscall))),
        )+]
    };
}

/// listen(2)'s tracepoint programs: as for [`addressed_syscalls`], one at the exit where the
/// kernel has `bpf_task_pt_regs`, else a pair.
const LISTEN_SYSCALL: &[ProgramSpec] = &[
    only(Flavor::Helpers, "listen_tp_ret", sys("sys_exit_listen")),
    only(Flavor::Bounded, "listen_tp_enter", sys("sys_enter_listen")),
    only(Flavor::Bounded, "listen_tp_exit", sys("sys_exit_listen")),
];

/// The tiers of a hook on a `unix_*` socket call (bind, listen): fexit, kprobe with
/// kretprobe, and the syscall's tracepoint programs `$tracepoints`, named `<hook>_<tier>`.
macro_rules! socket_call_tiers {
    ($hook:literal, $function:literal, $tracepoints:expr) => {
        &[
            tier(
                Tier::Fentry,
                &[p(concat!($hook, "_fexit"), fexit($function))],
            ),
            tier(
                Tier::Kprobe,
                &[
                    p(concat!($hook, "_kprobe"), kprobe($function)),
                    p(concat!($hook, "_kretprobe"), kretprobe($function)),
                ],
            ),
            tier(Tier::Tracepoint, $tracepoints),
        ]
    };
}

/// The program `<hook><suffix>` and its bounded twin `<hook><suffix>_b`.
macro_rules! twin {
    ($hook:literal, $suffix:literal, $attach:expr) => {
        flavored(
            concat!($hook, $suffix),
            concat!($hook, $suffix, "_b"),
            $attach,
        )
    };
}

/// The exact tiers of a hook on a VFS path operation (unlink, rename): fentry with fexit
/// first (it also knows the result), then LSM (it decides before the operation), then kprobe
/// with kretprobe; every program has a bounded twin (`<name>_b`).
macro_rules! vfs_tiers {
    ($hook:literal, $function:literal, $lsm:literal) => {
        [
            tier(
                Tier::Fentry,
                &[
                    twin!($hook, "_fentry", fentry($function)),
                    twin!($hook, "_fexit", fexit($function)),
                ],
            ),
            tier(
                Tier::Lsm,
                &[twin!($hook, "_lsm", Attach::Lsm { hook: $lsm })],
            ),
            tier(
                Tier::Kprobe,
                &[
                    twin!($hook, "_kprobe", kprobe($function)),
                    twin!($hook, "_kret", kretprobe($function)),
                ],
            ),
        ]
    };
}

/// The syscall tracepoints of unlink and rename: asm-generic architectures (arm64) have only
/// the `*at` forms.
#[cfg(target_arch = "x86_64")]
const UNLINK_SYSCALLS: &[ProgramSpec] = syscall_pairs!("unlink", "unlinkat");
#[cfg(not(target_arch = "x86_64"))]
const UNLINK_SYSCALLS: &[ProgramSpec] = syscall_pairs!("unlinkat");
#[cfg(target_arch = "x86_64")]
const RENAME_SYSCALLS: &[ProgramSpec] = syscall_pairs!("rename", "renameat", "renameat2");
#[cfg(not(target_arch = "x86_64"))]
const RENAME_SYSCALLS: &[ProgramSpec] = syscall_pairs!("renameat", "renameat2");

const UNLINK_TIERS: [TierSpec; 3] = vfs_tiers!("unlink", "vfs_unlink", "inode_unlink");
const RENAME_TIERS: [TierSpec; 3] = vfs_tiers!("rename", "vfs_rename", "inode_rename");

pub const PROBES: &[HookSpec] = &[
    HookSpec {
        hook: Hook::Bind,
        tiers: socket_call_tiers!("bind", "unix_bind", addressed_syscalls!("bind")),
    },
    HookSpec {
        hook: Hook::Listen,
        tiers: socket_call_tiers!("listen", "unix_listen", LISTEN_SYSCALL),
    },
    HookSpec {
        hook: Hook::Unlink,
        tiers: &[
            UNLINK_TIERS[0],
            UNLINK_TIERS[1],
            UNLINK_TIERS[2],
            tier(Tier::Tracepoint, UNLINK_SYSCALLS),
        ],
    },
    HookSpec {
        hook: Hook::Rename,
        tiers: &[
            RENAME_TIERS[0],
            RENAME_TIERS[1],
            RENAME_TIERS[2],
            tier(Tier::Tracepoint, RENAME_SYSCALLS),
        ],
    },
    HookSpec {
        hook: Hook::Connect,
        tiers: &[
            tier(
                Tier::Fentry,
                &[
                    // Inlined on some kernels (6.12): then kern_path's result names the target.
                    optional("conn_tgt_fexit", fexit("unix_find_other")),
                    // Names the inode a connect's path resolved to (bound or not); without it
                    // the target is resolved in userspace.
                    optional("conn_path_fexit", fexit("kern_path")),
                    p("conn_stream_fexit", fexit("unix_stream_connect")),
                    p("conn_dgram_fexit", fexit("unix_dgram_connect")),
                    p("conn_sendmsg_fexit", fexit("unix_dgram_sendmsg")),
                ],
            ),
            tier(
                Tier::Kprobe,
                &[
                    optional("conn_tgt_kret", kretprobe("unix_find_other")),
                    p("conn_stream_kprobe", kprobe("unix_stream_connect")),
                    p("conn_stream_kret", kretprobe("unix_stream_connect")),
                    p("conn_dgram_kprobe", kprobe("unix_dgram_connect")),
                    p("conn_dgram_kret", kretprobe("unix_dgram_connect")),
                ],
            ),
            tier(Tier::Tracepoint, addressed_syscalls!("connect", "sendto")),
        ],
    },
    HookSpec {
        hook: Hook::Release,
        tiers: &[
            tier(Tier::Fentry, &[p("release_fentry", fentry("unix_release"))]),
            tier(Tier::Kprobe, &[p("release_kprobe", kprobe("unix_release"))]),
            tier(
                Tier::Tracepoint,
                &[flavored(
                    "release_tp",
                    "release_tp_b",
                    sys("sys_enter_close"),
                )],
            ),
        ],
    },
    HookSpec {
        hook: Hook::Receive,
        tiers: &[
            tier(
                Tier::Fentry,
                &[p("receive_fexit", fexit("security_file_receive"))],
            ),
            tier(
                Tier::Lsm,
                &[p(
                    "receive_lsm",
                    Attach::Lsm {
                        hook: "file_receive",
                    },
                )],
            ),
            tier(
                Tier::Kprobe,
                &[p("receive_kprobe", kprobe("security_file_receive"))],
            ),
            // No tracepoint sees a receipt: the sweeps stand in.
            tier(Tier::Tracepoint, BY_SWEEPS),
        ],
    },
    HookSpec {
        hook: Hook::Fork,
        tiers: &[tier(
            Tier::TpBtf,
            &[p(
                "fork_tp_btf",
                Attach::BtfTracepoint {
                    name: "sched_process_fork",
                },
            )],
        )],
    },
    HookSpec {
        hook: Hook::Exit,
        tiers: &[tier(
            Tier::Tracepoint,
            &[flavored(
                "exit_tp",
                "exit_tp_b",
                Attach::Tracepoint {
                    category: "sched",
                    name: "sched_process_exit",
                },
            )],
        )],
    },
];

/// The tier of a hook whose observations the sweeps make instead of a program: nothing to
/// load, the owner sets learn from each sweep's `/proc/PID/fd` scan.
const BY_SWEEPS: &[ProgramSpec] = &[];

/// Which tiers `run` may attach.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProbeMode {
    /// The best tier this kernel accepts, per hook.
    Auto,
    /// Any tier but syscall tracepoints (fentry/fexit, LSM, kprobes), best first.
    Precise,
    /// LSM hooks where a hook has one (unlink, rename); fentry/fexit for the others.
    Lsm,
    /// fentry/fexit only.
    Fentry,
    /// kprobes/kretprobes only.
    Kprobe,
    /// Syscall tracepoints only.
    Tracepoint,
}

impl ProbeMode {
    pub fn name(self) -> &'static str {
        match self {
            ProbeMode::Auto => "auto",
            ProbeMode::Precise => "precise",
            ProbeMode::Lsm => "lsm",
            ProbeMode::Fentry => "fentry",
            ProbeMode::Kprobe => "kprobe",
            ProbeMode::Tracepoint => "tracepoint",
        }
    }

    /// The tiers of `hook` to try under this mode, preferred first. Process events (fork,
    /// exit) have only tracepoint tiers and keep them under every mode.
    pub fn candidates(self, hook: &HookSpec) -> Vec<&'static TierSpec> {
        let has = |t: Tier| hook.tiers.iter().any(|s| s.tier == t);
        let keep = |t: Tier| match self {
            ProbeMode::Auto => true,
            _ if is_process_hook(hook.hook) => true,
            ProbeMode::Precise => !matches!(t, Tier::Tracepoint | Tier::TpBtf),
            ProbeMode::Lsm if has(Tier::Lsm) => t == Tier::Lsm,
            ProbeMode::Lsm | ProbeMode::Fentry => t == Tier::Fentry,
            ProbeMode::Kprobe => t == Tier::Kprobe,
            ProbeMode::Tracepoint => t == Tier::Tracepoint,
        };
        hook.tiers.iter().filter(|s| keep(s.tier)).collect()
    }

    /// [`ProbeMode::candidates`] when a guard policy is set: under the modes that choose
    /// among tiers (auto, precise), the removal hooks (unlink, rename) try BPF LSM first, the
    /// only tier whose programs can refuse; every other hook keeps its order.
    pub fn guard_candidates(self, hook: &HookSpec) -> Vec<&'static TierSpec> {
        let mut tiers = self.candidates(hook);
        if matches!(self, ProbeMode::Auto | ProbeMode::Precise) && is_guarded_hook(hook.hook) {
            tiers.sort_by_key(|t| t.tier != Tier::Lsm);
        }
        tiers
    }
}

/// The hooks whose LSM programs the guard refuses in.
pub fn is_guarded_hook(h: Hook) -> bool {
    matches!(h, Hook::Unlink | Hook::Rename)
}

fn is_process_hook(h: Hook) -> bool {
    matches!(h, Hook::Fork | Hook::Exit)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn spec(h: Hook) -> &'static HookSpec {
        PROBES.iter().find(|s| s.hook == h).expect("hook in table")
    }

    fn tiers(m: ProbeMode, h: Hook) -> Vec<Tier> {
        m.candidates(spec(h)).iter().map(|t| t.tier).collect()
    }

    #[test]
    fn every_socket_hook_falls_back_to_tracepoints() {
        for h in PROBES.iter().filter(|h| !is_process_hook(h.hook)) {
            let last = h.tiers.last().map(|t| t.tier);
            assert_eq!(last, Some(Tier::Tracepoint), "{:?}", h.hook);
            // Every tier loads a required program, but the one the sweeps stand in for.
            assert!(
                h.tiers
                    .iter()
                    .filter(|t| !std::ptr::eq(t.programs, BY_SWEEPS))
                    .all(|t| t.programs.iter().any(|p| !p.optional))
            );
        }
    }

    #[test]
    fn program_names_are_unique_within_the_kernel_limit() {
        // The kernel keeps 15 characters of a program name: they must stay distinct.
        let mut seen = HashSet::new();
        let programs = PROBES.iter().flat_map(|h| h.tiers).flat_map(|t| t.programs);
        for name in programs.flat_map(|p| p.flavors().iter().map(|f| p.name(*f))) {
            let short: String = name.chars().take(15).collect();
            assert!(seen.insert(short), "duplicate program name {name}");
        }
    }

    #[test]
    fn modes_select_tiers() {
        use Tier::*;
        assert_eq!(
            tiers(ProbeMode::Auto, Hook::Unlink),
            vec![Fentry, Lsm, Kprobe, Tracepoint]
        );
        assert_eq!(
            tiers(ProbeMode::Precise, Hook::Unlink),
            vec![Fentry, Lsm, Kprobe]
        );
        assert_eq!(tiers(ProbeMode::Lsm, Hook::Unlink), vec![Lsm]);
        assert_eq!(tiers(ProbeMode::Lsm, Hook::Bind), vec![Fentry]);
        assert_eq!(tiers(ProbeMode::Kprobe, Hook::Connect), vec![Kprobe]);
        assert_eq!(tiers(ProbeMode::Tracepoint, Hook::Bind), vec![Tracepoint]);
        assert_eq!(tiers(ProbeMode::Fentry, Hook::Fork), vec![TpBtf]);
        assert_eq!(tiers(ProbeMode::Precise, Hook::Exit), vec![Tracepoint]);
        assert_eq!(tiers(ProbeMode::Lsm, Hook::Receive), vec![Lsm]);
        assert_eq!(
            tiers(ProbeMode::Tracepoint, Hook::Receive),
            vec![Tracepoint]
        );
    }

    #[test]
    fn a_guard_puts_lsm_first_for_the_removal_hooks_where_the_mode_chooses() {
        use Tier::*;
        let guarded = |m: ProbeMode, h: Hook| -> Vec<Tier> {
            m.guard_candidates(spec(h)).iter().map(|t| t.tier).collect()
        };
        for h in [Hook::Unlink, Hook::Rename] {
            assert_eq!(
                guarded(ProbeMode::Auto, h),
                vec![Lsm, Fentry, Kprobe, Tracepoint]
            );
            assert_eq!(guarded(ProbeMode::Precise, h), vec![Lsm, Fentry, Kprobe]);
            assert_eq!(guarded(ProbeMode::Fentry, h), vec![Fentry]);
            assert_eq!(guarded(ProbeMode::Tracepoint, h), vec![Tracepoint]);
        }
        for h in [Hook::Bind, Hook::Connect, Hook::Receive] {
            assert_eq!(
                guarded(ProbeMode::Auto, h),
                tiers(ProbeMode::Auto, h),
                "{h:?}"
            );
        }
    }

    #[test]
    fn only_the_receive_hook_leaves_its_tracepoint_tier_to_the_sweeps() {
        let swept: Vec<Hook> = PROBES
            .iter()
            .filter(|h| h.tiers.iter().any(|t| t.programs.is_empty()))
            .map(|h| h.hook)
            .collect();
        assert_eq!(swept, vec![Hook::Receive]);
        let tp = spec(Hook::Receive).tiers.last().expect("a tracepoint tier");
        assert_eq!((tp.tier, tp.programs.len()), (Tier::Tracepoint, 0));
    }
}
