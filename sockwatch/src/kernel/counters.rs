//! The kernel side's own counters (records emitted and lost per kind, map and walk
//! failures), as the agent reads them.
use sockwatch_common::{Counter, EventKind};

/// The kernel side's counters at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelCounters {
    pub other: Vec<(Counter, u64)>,
    /// Records submitted to the ring buffer, per kind.
    pub emitted: Vec<(EventKind, u64)>,
    /// Records lost to a full ring buffer, per kind.
    pub lost: Vec<(EventKind, u64)>,
}

impl KernelCounters {
    pub fn get(&self, c: Counter) -> u64 {
        self.other
            .iter()
            .find(|(k, _)| *k == c)
            .map_or(0, |(_, n)| *n)
    }

    pub fn emitted_total(&self) -> u64 {
        self.emitted.iter().map(|(_, n)| n).sum()
    }

    pub fn lost_total(&self) -> u64 {
        self.lost.iter().map(|(_, n)| n).sum()
    }

    /// One log line.
    pub fn summary(&self) -> String {
        let mut parts = vec![
            format!("emitted={}", self.emitted_total()),
            format!("lost={}", self.lost_total()),
        ];
        parts.extend(self.other.iter().map(|(c, n)| format!("{}={n}", c.name())));
        parts.join(" ")
    }
}
