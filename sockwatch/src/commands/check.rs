//! `sockwatch check`: which tier of each hook this kernel accepts, what `run` would attach,
//! and (verbose) what each program costs the verifier. Exit 0: `run` attaches every hook;
//! 1: it would run without some; 2: it would refuse to start.
use std::{
    io::{self, Write},
    process::ExitCode,
};

use sockwatch_common::Tier;

use crate::{
    cli::CheckArgs,
    kernel::{
        guard::{GuardTier, RemovalHook},
        loader::{self, Coverage, Flavors, LoadError, ProgramLoad, SupportTable, TierSupport},
        preflight,
        probes::{Hook, Missed as _, PROBES, ProbeMode, is_guarded_hook},
    },
};

/// The verifier's limit on processed instructions per program.
pub const VERIFIER_LIMIT: u32 = 1_000_000;
/// Every program must stay under this share of [`VERIFIER_LIMIT`].
pub const HEADROOM_MAX_INSNS: u32 = VERIFIER_LIMIT / 10;

/// Prints the support table; the coverage `run` would get.
pub fn check(args: &CheckArgs, out: &mut impl Write) -> anyhow::Result<Coverage> {
    preflight::prepare()?;
    writeln!(
        out,
        "{:<10} {:<12} {:<10} detail",
        "hook", "tier", "supported"
    )?;
    let mut failed = None;
    // The other flavor's programs only for the costs `--verbose` prints.
    let flavors = match args.verbose {
        true => Flavors::Both,
        false => Flavors::Own,
    };
    let (features, table) = loader::probe_support(&args.stand_ins, flavors, |hook, tiers| {
        if let Err(e) = write_hook(out, hook, tiers) {
            failed.get_or_insert(e);
        }
    })
    .map_err(check_error)?;
    if let Some(e) = failed {
        return Err(e.into());
    }
    writeln!(out, "kernel helpers: {}", features.summary())?;
    let own = features.flavor();
    // The tier `run` takes for `hook`: the first candidate this kernel accepts.
    let pick = |hook: Hook, guarded: bool| -> Option<Tier> {
        let spec = PROBES.iter().find(|s| s.hook == hook)?;
        let supported = &table.iter().find(|(h, _)| *h == hook)?.1;
        let candidates = match guarded {
            true => args.probe_mode.guard_candidates(spec),
            false => args.probe_mode.candidates(spec),
        };
        candidates
            .into_iter()
            .map(|t| t.tier)
            .find(|t| supported.iter().any(|s| s.tier == *t && s.result.is_ok()))
    };
    let chosen = |hook: Hook| pick(hook, false);
    for spec in PROBES {
        match chosen(spec.hook) {
            Some(t) => writeln!(out, "run would attach {}: {}", spec.hook.name(), t.name())?,
            None => writeln!(
                out,
                "run would run without {}: {}",
                spec.hook.name(),
                spec.hook.missed_without()
            )?,
        }
    }
    let guard = guard_tier(&table, args.probe_mode, |h| pick(h, true));
    writeln!(out, "guard: {}", guard.line())?;
    if args.verbose {
        let loads: Vec<&ProgramLoad> = table
            .iter()
            .flat_map(|(_, tiers)| tiers)
            .flat_map(|t| &t.programs)
            .collect();
        write_costs(out, &loads, own)?;
    }
    let coverage = Coverage::of(|h| chosen(h).is_some());
    let verdict = match &coverage {
        Coverage::Complete => "run would attach every hook".to_owned(),
        Coverage::Degraded(m) => format!("run would run degraded, without {}", names(m)),
        Coverage::Insufficient(m) => format!(
            "run would refuse to start: bind and unlink or rename must attach (missing {})",
            names(m)
        ),
    };
    writeln!(out, "check: {verdict}")?;
    Ok(coverage)
}

/// One hook's lines, printed (and flushed) as soon as its tiers are probed.
fn write_hook(out: &mut impl Write, hook: Hook, tiers: &[TierSupport]) -> io::Result<()> {
    let hook = hook.name();
    for t in tiers {
        let (ok, detail) = match &t.result {
            Ok(degraded) if degraded.is_empty() => ("yes", String::new()),
            Ok(degraded) => ("partial", format!("degraded: {}", degraded.join("; "))),
            Err(why) => ("no", why.clone()),
        };
        writeln!(out, "{hook:<10} {:<12} {ok:<10} {detail}", t.tier.name())?;
    }
    out.flush()
}

/// The tier `run --guard` gets: its removal hooks as a guard policy makes `run` attach them
/// (BPF LSM first where the probe mode chooses), and why LSM was refused where it was tried.
fn guard_tier(
    table: &SupportTable,
    mode: ProbeMode,
    pick: impl Fn(Hook) -> Option<Tier>,
) -> GuardTier {
    let hooks: Vec<RemovalHook> = PROBES
        .iter()
        .filter(|spec| is_guarded_hook(spec.hook))
        .map(|spec| {
            let tries_lsm = mode
                .guard_candidates(spec)
                .iter()
                .any(|t| t.tier == Tier::Lsm);
            let lsm_refused = table
                .iter()
                .filter(|(h, _)| *h == spec.hook && tries_lsm)
                .flat_map(|(_, tiers)| tiers)
                .find(|t| t.tier == Tier::Lsm)
                .and_then(|t| t.result.as_ref().err().cloned());
            RemovalHook {
                hook: spec.hook,
                tier: pick(spec.hook),
                lsm_refused,
            }
        })
        .collect();
    GuardTier::of(&hooks, mode)
}

fn names(hooks: &[Hook]) -> String {
    hooks
        .iter()
        .map(|h| h.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The verbose table: one row per program and flavor loaded.
fn write_costs(
    out: &mut impl Write,
    loads: &[&ProgramLoad],
    own: sockwatch_common::Flavor,
) -> io::Result<()> {
    writeln!(
        out,
        "{:<18} {:<8} {:<11} {:<8} {:>9} {:>7} {:>9}  result",
        "program", "hook", "tier", "flavor", "insns", "limit%", "load ms"
    )?;
    for l in loads {
        let (insns, share) = match l.verified_insns {
            Some(n) => (
                n.to_string(),
                format!("{:.2}", 100.0 * f64::from(n) / f64::from(VERIFIER_LIMIT)),
            ),
            None => ("n/a".into(), "n/a".into()),
        };
        let result = match &l.refused {
            None => "loaded".to_owned(),
            Some(why) => format!("refused: {why}"),
        };
        let mark = if l.flavor == own {
            ""
        } else {
            " (not this kernel's)"
        };
        writeln!(
            out,
            "{:<18} {:<8} {:<11} {:<8} {insns:>9} {share:>7} {:>9.1}  {result}{mark}",
            l.program,
            l.hook.name(),
            l.tier.name(),
            l.flavor.name(),
            l.load_time.as_secs_f64() * 1e3
        )?;
    }
    Ok(())
}

fn check_error(e: LoadError) -> anyhow::Error {
    anyhow::Error::new(e).context("probing the kernel")
}

/// `sockwatch check`: 0 when `run` would attach every hook, 1 degraded, 2 refused or failed.
pub fn main(args: CheckArgs) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match check(&args, &mut out) {
        Ok(Coverage::Complete) => ExitCode::SUCCESS,
        Ok(Coverage::Degraded(_)) => ExitCode::from(1),
        Ok(Coverage::Insufficient(_)) => ExitCode::from(2),
        Err(e) => {
            eprintln!("sockwatch: {e:#}");
            ExitCode::from(2)
        }
    }
}
