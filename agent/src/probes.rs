//! The probe table: for every hook, its tiers best first and the programs each tier attaches.
//! Pure data plus the choice of candidates for a probe mode; `loader` does the attaching.
use agent_common::Tier;

/// A point in the socket life cycle that sockwatch observes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hook {
    Bind,
    Listen,
    Unlink,
    Rename,
    Connect,
    Release,
    Fork,
    Exit,
}

impl Hook {
    pub fn name(self) -> &'static str {
        match self {
            Hook::Bind => "bind",
            Hook::Listen => "listen",
            Hook::Unlink => "unlink",
            Hook::Rename => "rename",
            Hook::Connect => "connect",
            Hook::Release => "release",
            Hook::Fork => "fork",
            Hook::Exit => "exit",
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

#[derive(Clone, Copy, Debug)]
pub struct HookSpec {
    pub hook: Hook,
    /// Preferred first.
    pub tiers: &'static [TierSpec],
}

const fn p(program: &'static str, attach: Attach) -> ProgramSpec {
    ProgramSpec {
        program,
        attach,
        optional: false,
    }
}
const fn optional(program: &'static str, attach: Attach) -> ProgramSpec {
    ProgramSpec {
        program,
        attach,
        optional: true,
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

pub const PROBES: &[HookSpec] = &[
    HookSpec {
        hook: Hook::Bind,
        tiers: &[
            tier(Tier::Fentry, &[p("bind_fexit", fexit("unix_bind"))]),
            tier(
                Tier::Kprobe,
                &[
                    p("bind_kprobe", kprobe("unix_bind")),
                    p("bind_kretprobe", kretprobe("unix_bind")),
                ],
            ),
            tier(
                Tier::Tracepoint,
                &[
                    p("bind_tp_enter", sys("sys_enter_bind")),
                    p("bind_tp_exit", sys("sys_exit_bind")),
                ],
            ),
        ],
    },
    HookSpec {
        hook: Hook::Listen,
        tiers: &[
            tier(Tier::Fentry, &[p("listen_fexit", fexit("unix_listen"))]),
            tier(
                Tier::Kprobe,
                &[
                    p("listen_kprobe", kprobe("unix_listen")),
                    p("listen_kretprobe", kretprobe("unix_listen")),
                ],
            ),
            tier(
                Tier::Tracepoint,
                &[
                    p("listen_tp_enter", sys("sys_enter_listen")),
                    p("listen_tp_exit", sys("sys_exit_listen")),
                ],
            ),
        ],
    },
    HookSpec {
        hook: Hook::Unlink,
        tiers: &[
            // fentry/fexit first: it also knows the result; LSM decides before the unlink.
            tier(
                Tier::Fentry,
                &[
                    p("unlink_fentry", fentry("vfs_unlink")),
                    p("unlink_fexit", fexit("vfs_unlink")),
                ],
            ),
            tier(
                Tier::Lsm,
                &[p(
                    "unlink_lsm",
                    Attach::Lsm {
                        hook: "inode_unlink",
                    },
                )],
            ),
            tier(
                Tier::Kprobe,
                &[
                    p("unlink_kprobe", kprobe("vfs_unlink")),
                    p("unlink_kretprobe", kretprobe("vfs_unlink")),
                ],
            ),
            tier(
                Tier::Tracepoint,
                &[
                    p("unlink_tp_enter", sys("sys_enter_unlink")),
                    p("unlink_tp_exit", sys("sys_exit_unlink")),
                    p("unlinkat_tp_enter", sys("sys_enter_unlinkat")),
                    p("unlinkat_tp_exit", sys("sys_exit_unlinkat")),
                ],
            ),
        ],
    },
    HookSpec {
        hook: Hook::Rename,
        tiers: &[
            tier(
                Tier::Fentry,
                &[
                    p("rename_fentry", fentry("vfs_rename")),
                    p("rename_fexit", fexit("vfs_rename")),
                ],
            ),
            tier(
                Tier::Lsm,
                &[p(
                    "rename_lsm",
                    Attach::Lsm {
                        hook: "inode_rename",
                    },
                )],
            ),
            tier(
                Tier::Kprobe,
                &[
                    p("rename_kprobe", kprobe("vfs_rename")),
                    p("rename_kretprobe", kretprobe("vfs_rename")),
                ],
            ),
            tier(
                Tier::Tracepoint,
                &[
                    p("rename_tp_enter", sys("sys_enter_rename")),
                    p("rename_tp_exit", sys("sys_exit_rename")),
                    p("renameat_tp_enter", sys("sys_enter_renameat")),
                    p("renameat_tp_exit", sys("sys_exit_renameat")),
                    p("renameat2_tp_enter", sys("sys_enter_renameat2")),
                    p("renameat2_tp_exit", sys("sys_exit_renameat2")),
                ],
            ),
        ],
    },
    HookSpec {
        hook: Hook::Connect,
        tiers: &[
            tier(
                Tier::Fentry,
                &[
                    // Inlined on some kernels (6.12): then the target is resolved in userspace.
                    optional("conn_tgt_fexit", fexit("unix_find_other")),
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
            tier(
                Tier::Tracepoint,
                &[
                    p("connect_tp_enter", sys("sys_enter_connect")),
                    p("connect_tp_exit", sys("sys_exit_connect")),
                    p("sendto_tp_enter", sys("sys_enter_sendto")),
                    p("sendto_tp_exit", sys("sys_exit_sendto")),
                ],
            ),
        ],
    },
    HookSpec {
        hook: Hook::Release,
        tiers: &[
            tier(Tier::Fentry, &[p("release_fentry", fentry("unix_release"))]),
            tier(Tier::Kprobe, &[p("release_kprobe", kprobe("unix_release"))]),
            tier(
                Tier::Tracepoint,
                &[p("release_tp_close", sys("sys_enter_close"))],
            ),
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
            &[p(
                "exit_tp",
                Attach::Tracepoint {
                    category: "sched",
                    name: "sched_process_exit",
                },
            )],
        )],
    },
];

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
            assert!(
                h.tiers
                    .iter()
                    .all(|t| t.programs.iter().any(|p| !p.optional))
            );
        }
    }

    #[test]
    fn program_names_are_unique_within_the_kernel_limit() {
        // The kernel keeps 15 characters of a program name: they must stay distinct.
        let mut seen = HashSet::new();
        for p in PROBES.iter().flat_map(|h| h.tiers).flat_map(|t| t.programs) {
            let short: String = p.program.chars().take(15).collect();
            assert!(seen.insert(short), "duplicate program name {}", p.program);
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
    }
}
