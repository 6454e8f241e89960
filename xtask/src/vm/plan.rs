//! Which guests a run boots: per architecture, its kernel series and its tests.
use anyhow::Context as _;

use crate::{arch::Arch, kernels::Series};

/// The tests the arm64 guests run in the whole suite (`cargo xtask test`, CI): the kernel
/// tests on every tier (`kernel`, `lifecycle`), the verifier's counts (`headroom`), the
/// verdicts of S1 and S3 end to end (`verdicts` on every tier, `stale_connect`) and guard
/// mode (S21, where the LSM tier attaches). Everything runs under `cargo xtask vm-test --arch
/// aarch64`; all of it here would push the suite past its time budget under TCG.
pub const AARCH64_SUITE_TESTS: &[&str] = &[
    "kernel",
    "lifecycle",
    "headroom",
    "verdicts",
    "stale_connect",
    "guard",
];

/// Integration tests of the host layer alone, which the guests do not carry: each would only
/// print its skip there. `http_abuse` measures a userspace server against time bounds that
/// TCG would turn into bounds on the emulator; `prometheus_e2e` and `healthy_node` need
/// Debian's Prometheus, HAProxy and Node.js, which the guests do not have.
pub const HOST_ONLY_TESTS: &[&str] = &["healthy_node", "http_abuse", "prometheus_e2e"];

/// The agent's own user-space behaviour, the same code on every kernel whatever tier carries
/// its events: degradation when a hook is refused (the loader's test flag stands in for the
/// kernel), faults of its outputs and tables, capabilities, text output, a watch that waits
/// for its directory, replays, `scan`, first-run errors, FUSE. The host runs each on the
/// tracepoint tier; in the whole suite each runs in one x86-64 guest too, on the precise tier
/// `auto` picks there, not in all three: three copies were a third of each guest's time
/// (about 1,000 of 3,100 s under TCG in the run of 2026-12-07) and the suite outgrew CI's
/// 90 minutes. The kernels spread them across the guests: `faults` and `blocking` (the only
/// guest with FUSE) on 6.12, `degrade` on 5.10, the small ones on 6.1 (5.10 still ran
/// longest with five guests at once on 2026-12-07: three modules left at 3,600 s, where 6.1
/// had finished in 3,560 s).
/// Every probe and every verdict still runs on every kernel and tier: `kernel`, `lifecycle`,
/// `verdicts`, `overlay`, `patterns`, `renames`, `stale_connect`, `late_start`, `handover`,
/// `guard`, `scope`, `production`, `idle`, `headroom`. (module, `uname -r` pattern)
pub const ONE_GUEST_TESTS: &[(&str, &str)] = &[
    ("blocking", "6.12.*"),
    ("degrade", "5.10.*"),
    ("engine_replay", "6.1.*"),
    ("faults", "6.12.*"),
    ("first_run", "6.1.*"),
    ("privilege", "6.1.*"),
    ("readable", "6.1.*"),
    ("replay_run", "6.1.*"),
    ("scan_root", "6.1.*"),
    ("waiting", "6.1.*"),
];

/// The integration tests the x86-64 guests run in the whole suite: every one of
/// `agent_tests` but [`HOST_ONLY_TESTS`], those of [`ONE_GUEST_TESTS`] in their one guest.
fn x86_64_suite_tests(agent_tests: &[String]) -> Vec<String> {
    agent_tests
        .iter()
        .filter(|t| !HOST_ONLY_TESTS.contains(&t.as_str()))
        .cloned()
        .collect()
}

/// The agent's integration tests: the modules of its one test binary, `sockwatch/tests/it/*.rs`
/// but `main.rs`. The guests run them module by module (`it kernel::`).
pub fn agent_integration_tests() -> anyhow::Result<Vec<String>> {
    let dir = crate::cmd::workspace_root().join("sockwatch/tests/it");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir)
        .with_context(|| format!("listing the agent's tests in {}", dir.display()))?
    {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "rs")
            && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
            && stem != "main"
        {
            names.push(stem.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// One architecture's guests.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub arch: Arch,
    pub series: Vec<Series>,
    /// Test executables to carry; all of them when empty.
    pub only: Vec<String>,
    /// Those of them that run on one kernel only, by `uname -r` pattern.
    pub one_guest: &'static [(&'static str, &'static str)],
}

impl Plan {
    /// The guests of `cargo xtask test`: `series` on x86_64 with `only` or else every one of
    /// `agent_tests` but the host layer's own, and those of them the arm64 guest boots with
    /// `only` or else [`AARCH64_SUITE_TESTS`].
    pub fn suite(series: &[Series], only: &[String], agent_tests: &[String]) -> Vec<Plan> {
        let (x86_tests, arm64_tests) = if only.is_empty() {
            (
                x86_64_suite_tests(agent_tests),
                AARCH64_SUITE_TESTS
                    .iter()
                    .map(|t| (*t).to_owned())
                    .collect(),
            )
        } else {
            (only.to_vec(), only.to_vec())
        };
        // Placed only where every kernel boots: a subset of them must run everything.
        let placed: &[_] = if only.is_empty() && series == Series::ALL {
            ONE_GUEST_TESTS
        } else {
            &[]
        };
        [
            Plan::new(Arch::X86_64, series, x86_tests).map(|p| p.placing(placed)),
            Plan::new(Arch::Aarch64, series, arm64_tests),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// `arch`'s guests on those of `series` it boots; none if it boots none of them.
    pub fn new(arch: Arch, series: &[Series], only: Vec<String>) -> Option<Plan> {
        let series: Vec<Series> = series.iter().copied().filter(|s| s.offered(arch)).collect();
        (!series.is_empty()).then_some(Plan {
            arch,
            series,
            only,
            one_guest: &[],
        })
    }

    /// The plan with `placed`'s modules run only in the guest whose kernel matches.
    fn placing(self, placed: &'static [(&'static str, &'static str)]) -> Plan {
        Plan {
            one_guest: placed,
            ..self
        }
    }

    /// What `setup` fetches for `plans`: each architecture's kernel series.
    pub fn fetch(plans: &[Plan]) -> Vec<(Arch, Vec<Series>)> {
        plans.iter().map(|p| (p.arch, p.series.clone())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suite_runs_every_x86_kernel_and_the_arm64_subset_on_debian_12() {
        let agent_tests = agent_integration_tests().expect("sockwatch/tests");
        assert!(
            agent_tests.iter().any(|t| t == "verdicts"),
            "{agent_tests:?}"
        );
        let plans = Plan::suite(&Series::ALL, &[], &agent_tests);
        assert_eq!(plans.len(), 2);
        assert_eq!(plans[0].series, Series::ALL);
        let guest_tests: Vec<&String> = agent_tests
            .iter()
            .filter(|t| !HOST_ONLY_TESTS.contains(&t.as_str()))
            .collect();
        assert_eq!(
            plans[0].only.iter().collect::<Vec<_>>(),
            guest_tests,
            "x86_64 runs every test but the host layer's own"
        );
        assert!(
            HOST_ONLY_TESTS
                .iter()
                .all(|t| agent_tests.iter().any(|a| a == t)),
            "each host-only test exists"
        );
        assert_eq!(plans[0].one_guest, ONE_GUEST_TESTS);
        for (module, release) in ONE_GUEST_TESTS {
            assert!(plans[0].only.iter().any(|t| t == module), "{module}");
            assert!(
                ["5.10.*", "6.1.*", "6.12.*"].contains(release),
                "{module} runs on one kernel of the suite: {release}"
            );
        }
        assert_eq!(plans[1].arch, Arch::Aarch64);
        assert_eq!(plans[1].one_guest, &[]);
        assert_eq!(plans[1].series, [Series::V6_1, Series::V6_12]);
        assert_eq!(plans[1].only, AARCH64_SUITE_TESTS);
        // `--test` applies to both; an arm64-less series list boots no arm64 guest.
        let only = vec!["guard".to_owned()];
        let plans = Plan::suite(&[Series::V5_10], &only, &agent_tests);
        assert_eq!(plans.len(), 1);
        assert_eq!(plans[0].only, only);
        assert_eq!(
            plans[0].one_guest,
            &[],
            "a subset of the kernels runs every module"
        );
    }
}
