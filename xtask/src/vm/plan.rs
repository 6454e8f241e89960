//! Which guests a run boots: per architecture, its kernel series and its tests.
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

/// One architecture's guests.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub arch: Arch,
    pub series: Vec<Series>,
    /// Test executables to carry; all of them when empty.
    pub only: Vec<String>,
}

impl Plan {
    /// The guests of `cargo xtask test`: `series` on x86_64 with `only`, and those of them the
    /// arm64 guest boots with `only` or else [`AARCH64_SUITE_TESTS`].
    pub fn suite(series: &[Series], only: &[String]) -> Vec<Plan> {
        let arm64_tests = if only.is_empty() {
            AARCH64_SUITE_TESTS
                .iter()
                .map(|t| (*t).to_owned())
                .collect()
        } else {
            only.to_vec()
        };
        [
            Plan::new(Arch::X86_64, series, only.to_vec()),
            Plan::new(Arch::Aarch64, series, arm64_tests),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// `arch`'s guests on those of `series` it boots; none if it boots none of them.
    pub fn new(arch: Arch, series: &[Series], only: Vec<String>) -> Option<Plan> {
        let series: Vec<Series> = series.iter().copied().filter(|s| s.offered(arch)).collect();
        (!series.is_empty()).then_some(Plan { arch, series, only })
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
        let plans = Plan::suite(&Series::ALL, &[]);
        assert_eq!(plans.len(), 2);
        assert_eq!(plans[0].series, Series::ALL);
        assert!(plans[0].only.is_empty(), "x86_64 runs every test");
        assert_eq!(plans[1].arch, Arch::Aarch64);
        assert_eq!(plans[1].series, [Series::V6_1, Series::V6_12]);
        assert_eq!(plans[1].only, AARCH64_SUITE_TESTS);
        // `--test` applies to both; an arm64-less series list boots no arm64 guest.
        let only = vec!["guard".to_owned()];
        let plans = Plan::suite(&[Series::V5_10], &only);
        assert_eq!(plans.len(), 1);
        assert_eq!(plans[0].only, only);
    }
}
