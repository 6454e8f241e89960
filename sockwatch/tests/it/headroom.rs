//! Verifier headroom, measured on the running kernel: every program of every tier this kernel
//! loads, in each flavor, must stay under 10 % of the verifier's 1,000,000-instruction limit
//! (and verify within 1 s on the host). The table is printed with `SOCKWATCH-HEADROOM` lines
//! that `cargo xtask test` gathers into docs/VERIFIER.md.
use crate::common;

use std::{io::Write as _, time::Duration};

use common::*;
use sockwatch::{
    commands::check::HEADROOM_MAX_INSNS,
    kernel::{
        features::KernelFeatures,
        loader::{self, ProgramLoad},
        preflight,
    },
};
use sockwatch_common::Flavor;

/// Kernels before 5.16 report no processed-instruction count (`bpf_prog_info.verified_insns`):
/// there the loader reads it from the verifier's own state (`programs/verifier.rs`).
fn reports_verified_insns(release: &str) -> bool {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (major, minor) >= (5, 16)
}

fn release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .expect("osrelease")
        .trim()
        .to_owned()
}

/// `helpers`/`bounded` for a program with a twin or of one flavor; `any` for one both flavors
/// share.
fn flavor_of(l: &ProgramLoad) -> &'static str {
    let twinned = sockwatch::kernel::probes::PROBES
        .iter()
        .flat_map(|h| h.tiers)
        .flat_map(|t| t.programs)
        .any(|p| p.per_flavor() && p.name(l.flavor) == l.program);
    if twinned { l.flavor.name() } else { "any" }
}

fn row(kernel: &str, l: &ProgramLoad) -> String {
    let insns = l.verified_insns.map_or("n/a".into(), |n| n.to_string());
    let result = match &l.refused {
        None => "loaded".to_owned(),
        Some(why) => format!("refused: {why}"),
    };
    format!(
        "SOCKWATCH-HEADROOM|{kernel}|{}|{}|{}|{}|{insns}|{:.1}|{result}",
        l.program,
        l.hook.name(),
        l.tier.name(),
        flavor_of(l),
        l.load_time.as_secs_f64() * 1e3
    )
}

#[test]
fn every_program_stays_under_a_tenth_of_the_verifier_limit() {
    if !is_root() {
        assert!(
            std::env::var_os("SOCKWATCH_REQUIRE_TIERS").is_none(),
            "tiers are required but not running as root"
        );
        skip("headroom", "needs root to load eBPF programs");
        return;
    }
    preflight::prepare().expect("preflight");
    let kernel = release();
    let counted = reports_verified_insns(&kernel);
    let own = KernelFeatures::read().expect("kernel BTF").flavor();
    let (_, table) = loader::probe_support(&Default::default(), loader::Flavors::Both, |_, _| {})
        .expect("probe support");
    let loads: Vec<&ProgramLoad> = table
        .iter()
        .flat_map(|(_, t)| t)
        .flat_map(|t| &t.programs)
        .collect();
    let on_host = std::env::var_os("SOCKWATCH_IN_VM").is_none();
    let mut problems = Vec::new();
    // Straight to stdout, past the test harness's capture: the table belongs in the log.
    let mut out = std::io::stdout().lock();
    for l in &loads {
        writeln!(out, "{}", row(&kernel, l)).expect("stdout");
        if l.refused.is_some() {
            // A required tier's programs in this kernel's flavor must load (optional ones may
            // be inlined away, as unix_find_other is on 6.12).
            let optional = sockwatch::kernel::probes::PROBES
                .iter()
                .flat_map(|h| h.tiers)
                .flat_map(|t| t.programs)
                .any(|p| p.optional && p.name(l.flavor) == l.program);
            if is_required(l.tier) && l.flavor == own && !optional {
                problems.push(format!("{} refused on a required tier", l.program));
            }
            continue;
        }
        match l.verified_insns {
            Some(n) if n > HEADROOM_MAX_INSNS => problems.push(format!(
                "{} ({}) processed {n} instructions, over {HEADROOM_MAX_INSNS}",
                l.program,
                l.flavor.name()
            )),
            None => problems.push(format!("{}: no instruction count", l.program)),
            _ => {}
        }
        if on_host && l.load_time > Duration::from_secs(1) {
            problems.push(format!("{} took {:?} to load", l.program, l.load_time));
        }
    }
    let loaded = loads.iter().filter(|l| l.refused.is_none()).count();
    writeln!(
        out,
        "SOCKWATCH-HEADROOM-SUMMARY {kernel}: {loaded} programs loaded, {} refused; instruction \
         counts {}",
        loads.len() - loaded,
        if counted {
            "from program info"
        } else {
            "read from the verifier (program info lacks them before 5.16)"
        }
    )
    .expect("stdout");
    assert!(loaded > 0, "no program loaded");
    assert!(
        loads
            .iter()
            .any(|l| l.refused.is_none() && l.flavor == Flavor::Bounded),
        "the bounded flavor loads on every kernel"
    );
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn minor_versions_compare_numerically() {
    assert!(reports_verified_insns("6.1.0-57-cloud-amd64"));
    assert!(reports_verified_insns("5.16.0"));
    assert!(!reports_verified_insns("5.10.0-43-cloud-amd64"));
    assert!(!reports_verified_insns("5.9.0"));
}
