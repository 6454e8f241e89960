//! The previous report's target figures, shown beside this run's so that a change is visible.
use std::{collections::BTreeMap, path::Path};

/// What the report about to be replaced measured, per target.
#[derive(Debug, Default)]
pub struct Before {
    /// The sockwatch revision that report measured.
    pub revision: String,
    measured: BTreeMap<String, String>,
}

impl Before {
    /// The report at `path`, if there is one with a targets table.
    pub fn read(path: &Path) -> Option<Before> {
        Self::parse(&std::fs::read_to_string(path).ok()?)
    }

    pub(super) fn parse(text: &str) -> Option<Before> {
        let revision = text
            .lines()
            .find_map(|l| l.strip_prefix("| sockwatch | "))?
            .trim_end_matches(" |")
            .rsplit("git ")
            .next()?
            .to_owned();
        let mut measured = BTreeMap::new();
        let mut in_targets = false;
        for line in text.lines() {
            if line.starts_with("## ") {
                in_targets = line.starts_with("## Targets");
                continue;
            }
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            if in_targets && cells.len() >= 3 && cells[0] != "target" && cells[0] != "---" {
                measured.insert(cells[0].to_owned(), cells[1].to_owned());
            }
        }
        (!measured.is_empty()).then_some(Before { revision, measured })
    }

    /// What the previous report measured for target `what`.
    pub fn measured(&self, what: &str) -> &str {
        self.measured.get(what).map_or("—", String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_previous_figures_are_read_per_target_with_their_revision() {
        let old = "# sockwatch benchmarks\n\n| machine | |\n| --- | --- |\n\
                   | sockwatch | sockwatch 0.1.0, git e7cf2eb |\n\n## Targets (issue 6)\n\n\
                   | target | measured | verdict |\n| --- | --- | --- |\n\
                   | zero loss | 0 lost of 9 | met |\n\
                   | agent CPU | 5.36 µs | **missed** by 3.36 µs |\n\n## 1. Overhead\n\n\
                   | observer | ns |\n| --- | --- |\n| off | 287 |\n";
        let b = Before::parse(old).expect("a previous report");
        assert_eq!(b.revision, "e7cf2eb");
        assert_eq!(b.measured("zero loss"), "0 lost of 9");
        assert_eq!(b.measured("agent CPU"), "5.36 µs");
        assert_eq!(
            b.measured("off"),
            "—",
            "rows outside the targets table are not targets"
        );
        assert!(Before::parse("# no table\n").is_none());
    }
}
