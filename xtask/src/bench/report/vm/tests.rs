use super::*;

fn guest() -> GuestBench {
    let mut g = GuestBench {
        release: "6.12.0-test".into(),
        rounds: 2,
        ..GuestBench::default()
    };
    for r in 0..2 {
        for (op, _) in ops() {
            for (mode, ns) in [
                ("off", 1000.0),
                ("lsm", 1010.0 + r as f64 * 20.0),
                ("floor-lsm", 1010.0),
            ] {
                g.ops.push((r, mode.into(), op.arg().into(), ns));
            }
        }
    }
    // The kernel names the agent's programs to 15 bytes, the floor reports them whole.
    for (mode, name, runs, ns) in [
        ("lsm", "bind_lsm", 10, 1500.0),
        ("lsm", "conn_sendmsg_fe", 4, 900.0),
        ("floor-lsm", "conn_sendmsg_fexit", 4, 300.0),
        ("lsm", "release_fentry", 8, 200.0),
        ("floor-lsm", "release_fentry", 8, 100.0),
    ] {
        g.programs.push((mode.into(), name.into(), runs, ns));
    }
    for (mode, name, runs, ns) in [
        ("lsm", "release_fentry", 30, 1200.0),
        ("floor-lsm", "release_fentry", 30, 100.0),
        ("lsm", "exit_tp", 2, 500.0),
        ("floor-lsm", "exit_tp", 2, 250.0),
    ] {
        g.cold.push((mode.into(), name.into(), runs, ns));
    }
    g.starts.push(("lsm".into(), 2.5));
    g
}

#[test]
fn the_section_states_ratios_targets_programs_starts_and_the_missed_reason() {
    let a = added(&guest(), "getppid", "lsm");
    assert!(a.len() == 2 && (a[0] - 0.01).abs() < 1e-9 && (a[1] - 0.03).abs() < 1e-9);
    let text = render(
        &[guest()],
        "cargo xtask bench --vm 6.12",
        "2026-12-03",
        None,
    );
    assert!(
        text.starts_with(BEGIN)
            && text.trim_end().ends_with(END)
            && text.contains("TCG distorts absolute times")
    );
    for row in [
        "| getppid | 1000 | +2.0 % (IQR +1.5 % … +2.5 %) | — | — | — | — |",
        "| sockcycle ≤ +3.0 % | lsm | +2.0 % | yes |",
        "| getppid ≤ +1.0 % | lsm | +2.0 % | **no** |",
        "| lsm | `bind_lsm` | 10 | 1500 | — | — |",
        "| lsm | `conn_sendmsg_fe` | 4 | 900 | 300 | 3.0 |",
        "| lsm | `release_fentry` | 8 | 200 | 100 | 2.0 |",
        // The floor added 1 % each round; lsm 1 % and 3 %: a p50 of 2 %, twice the floor's.
        "| getppid | +1.0 % (IQR +1.0 % … +1.0 %); tier 2.0× | — | — | — | — |",
        "| sockcycle ≤ 2× the floor | lsm | +2.0 % vs +1.0 % (2.0×) | yes |",
        "| every program ≤ 2× its empty program | lsm | 1 of 2; the most `conn_sendmsg_fe` 3.0× | **no** |",
        "- **lsm**: sockcycle +2.0 % (floor +1.0 %), sockcycle-go +2.0 % (floor +1.0 %), unlink +2.0 % (floor \
         +1.0 %), getppid +2.0 % (floor +1.0 %); for unlink, getppid the empty programs alone add more than the \
         target",
        "largest first: `conn_sendmsg_fe` 0.0 ms (3.0×), `release_fentry` 0.0 ms (2.0×).",
        "lsm 2.50 s;",
        "**The cold paths** (issue 38): the same, through a pass of only the operations that concern no \
         watched socket (getppid, open, pipe, socketpair, sockcycle-unwatched, fork), on a fresh agent and \
         floor; not under `auto`, where every directory is watched:",
        "| lsm | `release_fentry` | 30 | 1200 | 100 | 12.0 |",
        "| lsm | `exit_tp` | 2 | 500 | 250 | 2.0 |",
        "| cold paths: every program ≤ 10× its empty program | lsm | 1 of 2; the most `release_fentry` 12.0× | **no** |",
    ] {
        assert!(text.contains(row), "{row} in\n{text}");
    }
    assert!(
        !text.contains("| floor-lsm | `conn_sendmsg_fexit`")
            && !text.contains("| sockcycle ≤ 2× the floor | fentry")
    );
    // Two rounds are too few for a node-tax interval.
    assert!(!text.contains("≤ the floor + 3 points") && !text.contains("emulation fault"));
    let mut g = guest();
    g.resumed.push(("round-1-lsm".into(), "int3 Oops"));
    for o in g.ops.iter_mut().filter(|o| o.1 == "floor-lsm") {
        o.3 = 995.0;
    }
    assert_eq!(floor_multiple(&g, "sockcycle", "lsm"), None);
    let text = render(&[g], "cargo xtask bench --vm 6.12", "2026-12-03", None);
    assert!(
        text.contains("| getppid | -0.5 % (IQR -0.5 % … -0.5 %); no multiple |")
            && !text.contains("× the floor |")
    );
    assert!(text.contains("faulted in, which ran again whole: `round-1-lsm` (int3 Oops)."));
}

/// Six rounds in which `lsm` and `auto` add, beyond their floors, 0.5–2.9 points to every
/// operation, 1–6 to pipe and 4–9 to open.
fn node_tax_guest() -> GuestBench {
    let mut g = GuestBench {
        release: "6.12.0-test".into(),
        rounds: 6,
        ..GuestBench::default()
    };
    let points = |op: &str| match op {
        "open" => [4.0, 5.0, 6.2, 7.0, 8.0, 9.0],
        "pipe" => [1.0, 2.0, 3.2, 4.0, 5.0, 6.0],
        _ => [0.5, 1.0, 1.4, 2.2, 2.5, 2.9],
    };
    for r in 0..6 {
        for op in ops().map(|(op, _)| op.arg()) {
            g.ops.push((r, "off".into(), op.into(), 1000.0));
            for tier in ["lsm", "auto"] {
                g.ops.push((r, floor(tier), op.into(), 1010.0));
                g.ops
                    .push((r, tier.into(), op.into(), 1010.0 + points(op)[r] * 10.0));
            }
        }
    }
    g
}

#[test]
fn a_node_tax_row_is_decided_on_the_interval_of_its_rounds() {
    let g = node_tax_guest();
    let rows = targets(&g);
    let row = |op: &str, tier: &str| {
        let what = format!("{op} ≤ the floor + 3 points");
        let r = rows.iter().find(|r| r.0 == what && r.1 == tier)?;
        Some((r.2.as_str(), r.3))
    };
    assert_eq!(
        row("getppid", "lsm"),
        Some(("+1.8 (+0.5 … +2.9)", Some(true)))
    );
    assert_eq!(
        row("open", "lsm"),
        Some(("+6.6 (+4.0 … +9.0)", Some(false)))
    );
    assert_eq!(row("pipe", "lsm"), Some(("+3.6 (+1.0 … +6.0)", None)));
    // With every directory watched the unwatched life cycle is a watched one.
    assert!(row("sockcycle-unwatched", "lsm").is_some());
    assert_eq!(row("sockcycle-unwatched", "auto"), None);
    assert!(row("fork", "auto").is_some() && row("connect", "lsm").is_none());
    let text = render(&[g], "cargo xtask bench --vm 6.12", "2026-12-07", None);
    assert!(
        text.contains("| pipe ≤ the floor + 3 points | lsm | +3.6 (+1.0 … +6.0) | undecided |"),
        "{text}"
    );
    assert!(text.contains("| open ≤ the floor + 3 points | lsm | +6.6 (+4.0 … +9.0) | **no** |"));
}

#[test]
fn the_previous_sections_figures_stand_beside_each_target() {
    let old = render(
        &[guest()],
        "cargo xtask bench --vm 6.12",
        "2026-12-03 10:00 UTC",
        None,
    );
    let before = VmBefore::parse(section(&old).expect("a section")).expect("figures");
    let mut g = guest();
    g.ops
        .iter_mut()
        .filter(|o| o.1 == "lsm")
        .for_each(|o| o.3 += 5.0);
    let text = render(
        &[g],
        "cargo xtask bench --vm 6.12",
        "2026-12-04",
        Some(&before),
    );
    assert!(
        text.contains("| target | tier | measured (p50) | before (2026-12-03 10:00 UTC) | met |")
    );
    assert!(
        text.contains("| sockcycle ≤ +3.0 % | lsm | +2.5 % | +2.0 % | yes |"),
        "{text}"
    );
    let first = splice("# Host\n\nfigures\n", &format!("{BEGIN}\nold\n{END}\n"));
    assert_eq!(
        section(&first),
        Some(format!("{BEGIN}\nold\n{END}").as_str())
    );
    let second = splice(&first, &format!("{BEGIN}\nnew\n{END}\n"));
    assert!(
        second.starts_with("# Host\n\nfigures\n")
            && second.contains("new")
            && !second.contains("old")
    );
    assert_eq!(
        (second.matches(BEGIN).count(), section("# no section")),
        (1, None)
    );
}

/// The committed report's VM section is what the next `--vm` run reads as "before".
#[test]
fn the_committed_vm_section_is_read_as_before() {
    let doc = include_str!("../../../../../docs/BENCHMARKS.md");
    let b = VmBefore::parse(section(doc).expect("a VM section")).expect("figures");
    assert!(!b.date.is_empty() && doc.contains(&format!("`, {}. ", b.date)));
    // Every target row this code writes is in the committed section, under each kernel,
    // by the same name, and read back with its measured cell; a floor-multiple row alone may
    // be absent (the guest's floor added nothing measurable), and is then read back as none.
    let releases: Vec<&str> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("### Kernel ")?.split(' ').next())
        .collect();
    assert!(!releases.is_empty());
    let rows = targets(&guest());
    for release in releases {
        let part = doc
            .split(&format!("### Kernel {release} "))
            .nth(1)
            .and_then(|rest| rest.split("### Kernel ").next())
            .expect("its part");
        for (target, tier, ..) in rows.iter().filter(|r| r.1 == "lsm") {
            let row = part
                .lines()
                .find_map(|l| l.strip_prefix(&format!("| {target} | {tier} | ")));
            let cell = row.and_then(|r| r.split(" | ").next());
            assert!(
                cell.is_some() || target.contains("× the floor"),
                "{release}: no row for {target}"
            );
            assert_eq!(
                b.measured(release, target, tier),
                cell.unwrap_or("—"),
                "{release} {target}"
            );
        }
    }
    assert_eq!(
        b.measured("6.1.0-57", "sockcycle ≤ +3.0 %", "tracepoint"),
        "—"
    );
    assert_eq!(VmBefore::parse("no section"), None);
}
