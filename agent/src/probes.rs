//! The probe table: for every hook, its tiers best first and the programs each tier attaches.
//! Pure data plus the choice of candidates for a probe mode; `loader` does the attaching.
use agent_common::Tier;

/// A point in the socket life cycle that sockwatch observes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hook {
    Bind,
}

impl Hook {
    pub fn name(self) -> &'static str {
        match self {
            Hook::Bind => "bind",
        }
    }
}

/// How one program attaches to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attach {
    Fexit {
        function: &'static str,
    },
    Tracepoint {
        category: &'static str,
        name: &'static str,
    },
}

#[derive(Clone, Copy, Debug)]
pub struct ProgramSpec {
    /// ELF symbol of the program in the eBPF object.
    pub program: &'static str,
    pub attach: Attach,
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
    /// Best first.
    pub tiers: &'static [TierSpec],
}

pub const PROBES: &[HookSpec] = &[HookSpec {
    hook: Hook::Bind,
    tiers: &[
        TierSpec {
            tier: Tier::Fentry,
            programs: &[ProgramSpec {
                program: "bind_fexit",
                attach: Attach::Fexit {
                    function: "unix_bind",
                },
            }],
        },
        TierSpec {
            tier: Tier::Tracepoint,
            programs: &[
                ProgramSpec {
                    program: "bind_tp_enter",
                    attach: Attach::Tracepoint {
                        category: "syscalls",
                        name: "sys_enter_bind",
                    },
                },
                ProgramSpec {
                    program: "bind_tp_exit",
                    attach: Attach::Tracepoint {
                        category: "syscalls",
                        name: "sys_exit_bind",
                    },
                },
            ],
        },
    ],
}];

/// Which tiers `run` may attach.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProbeMode {
    /// The best tier this kernel accepts, per hook.
    Auto,
    /// Any tier but tracepoints (LSM, fentry/fexit, kprobes), best first.
    Precise,
    /// Tracepoints only.
    Tracepoint,
}

impl ProbeMode {
    /// The tiers of `hook` to try under this mode, best first.
    pub fn candidates(self, hook: &HookSpec) -> Vec<&'static TierSpec> {
        hook.tiers
            .iter()
            .filter(|t| match self {
                ProbeMode::Auto => true,
                ProbeMode::Precise => t.tier != Tier::Tracepoint,
                ProbeMode::Tracepoint => t.tier == Tier::Tracepoint,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn every_hook_has_a_tracepoint_fallback_and_tiers_are_ordered() {
        for h in PROBES {
            let tiers: Vec<Tier> = h.tiers.iter().map(|t| t.tier).collect();
            assert_eq!(tiers.last(), Some(&Tier::Tracepoint), "{:?}", h.hook);
            assert!(tiers.windows(2).all(|w| w[0] < w[1]), "{:?}", h.hook);
            assert!(h.tiers.iter().all(|t| !t.programs.is_empty()));
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
        let bind = &PROBES[0];
        let tiers =
            |m: ProbeMode| -> Vec<Tier> { m.candidates(bind).iter().map(|t| t.tier).collect() };
        assert_eq!(tiers(ProbeMode::Auto), vec![Tier::Fentry, Tier::Tracepoint]);
        assert_eq!(tiers(ProbeMode::Precise), vec![Tier::Fentry]);
        assert_eq!(tiers(ProbeMode::Tracepoint), vec![Tier::Tracepoint]);
    }
}
