//! The replaced VM section's target figures, per kernel series, shown beside this run's.
use std::collections::BTreeMap;

/// What the previous VM section measured.
#[derive(Debug, Default, PartialEq)]
pub struct VmBefore {
    /// When it ran, as its first line gives it.
    pub date: String,
    /// (kernel series, target, tier) → the measured cell.
    measured: BTreeMap<(String, String, String), String>,
}

/// `6.12` of `6.12.118+deb12-cloud-amd64`: a point release of the same series compares.
pub fn series(release: &str) -> &str {
    let mut dots = release.match_indices('.').map(|(i, _)| i);
    match (dots.next(), dots.next()) {
        (Some(_), Some(second)) => &release[..second],
        _ => release,
    }
}

impl VmBefore {
    /// The figures of `section` (markers included), if it has a target table.
    pub fn parse(section: &str) -> Option<VmBefore> {
        let date = section
            .lines()
            .find_map(|l| l.strip_prefix('`')?.split_once("`, ")?.1.split_once(". "))?
            .0
            .to_owned();
        let mut measured = BTreeMap::new();
        let mut kernel = None;
        for line in section.lines() {
            if let Some(rest) = line.strip_prefix("### Kernel ") {
                kernel = rest.split_whitespace().next().map(|r| series(r).to_owned());
                continue;
            }
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            if let (Some(k), [target, tier, value, ..]) = (&kernel, &cells[..])
                && cells.len() >= 4
                && target.contains('≤')
            {
                let key = (k.clone(), (*target).to_owned(), (*tier).to_owned());
                measured.insert(key, (*value).to_owned());
            }
        }
        (!measured.is_empty()).then_some(VmBefore { date, measured })
    }

    /// The previous figure of `target` on `tier` in a guest of `release`'s series.
    pub fn measured(&self, release: &str, target: &str, tier: &str) -> &str {
        let key = (
            series(release).to_owned(),
            target.to_owned(),
            tier.to_owned(),
        );
        self.measured.get(&key).map_or("—", String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_previous_section_is_read_per_kernel_series_target_and_tier() {
        let old = "<!-- vm section: cargo xtask bench --vm -->\n## Every tier in a VM (QEMU/TCG)\n\n\
                   `cargo xtask bench --vm 6.12 --rounds 16`, 2026-12-04 21:58 UTC. This host \
                   refuses fentry. TCG.\n\n### Kernel 6.12.118+deb12-cloud-amd64 (16 rounds)\n\n\
                   | operation | `off`, ns per op (p50) | lsm |\n| --- | ---: | ---: |\n\
                   | getppid | 524 | +7.3 % (IQR -2.2 % … +19.4 %) |\n\n\
                   | target | tier | measured (p50) | met |\n| --- | --- | ---: | --- |\n\
                   | sockcycle ≤ +3.0 % | lsm | +81.6 % | **no** |\n\
                   | getppid ≤ +1.0 % | fentry | +0.3 % | yes |\n\n\
                   ### Kernel 6.1.0-41-cloud-amd64 (16 rounds)\n\n\
                   | target | tier | measured (p50) | met |\n\
                   | sockcycle ≤ +3.0 % | lsm | +62.0 % | **no** |\n";
        let b = VmBefore::parse(old).expect("a previous section");
        assert_eq!(b.date, "2026-12-04 21:58 UTC");
        assert_eq!(
            b.measured("6.12.130+deb12-cloud-amd64", "sockcycle ≤ +3.0 %", "lsm"),
            "+81.6 %"
        );
        assert_eq!(
            b.measured("6.12.118", "getppid ≤ +1.0 %", "fentry"),
            "+0.3 %"
        );
        assert_eq!(
            b.measured("6.1.0-41-cloud-amd64", "sockcycle ≤ +3.0 %", "lsm"),
            "+62.0 %"
        );
        assert_eq!(
            b.measured("6.1.0-41-cloud-amd64", "getppid ≤ +1.0 %", "fentry"),
            "—"
        );
        assert_eq!(VmBefore::parse("no section"), None);
    }
}
