//! The agent's effective capabilities (`CapEff` of /proc/self/status), so that a refusal is
//! reported with the capability that would have allowed it instead of a guess.
use std::{fmt, fs, io};

/// One Linux capability: its bit in the capability masks and its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cap {
    pub bit: u32,
    pub name: &'static str,
}

pub const CAP_DAC_OVERRIDE: Cap = Cap {
    bit: 1,
    name: "CAP_DAC_OVERRIDE",
};
pub const CAP_DAC_READ_SEARCH: Cap = Cap {
    bit: 2,
    name: "CAP_DAC_READ_SEARCH",
};
pub const CAP_SYS_PTRACE: Cap = Cap {
    bit: 19,
    name: "CAP_SYS_PTRACE",
};
pub const CAP_SYS_ADMIN: Cap = Cap {
    bit: 21,
    name: "CAP_SYS_ADMIN",
};
pub const CAP_PERFMON: Cap = Cap {
    bit: 38,
    name: "CAP_PERFMON",
};
pub const CAP_BPF: Cap = Cap {
    bit: 39,
    name: "CAP_BPF",
};

/// A capability mask, as /proc/PID/status prints it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapSet(pub u64);

impl CapSet {
    /// The calling thread's effective set.
    pub fn effective() -> io::Result<CapSet> {
        let status = fs::read_to_string("/proc/self/status")?;
        parse_cap_eff(&status).ok_or_else(|| io::Error::other("no CapEff line"))
    }

    pub fn has(self, cap: Cap) -> bool {
        self.0 & (1 << cap.bit) != 0
    }

    /// Those of `caps` this set lacks, in the given order.
    pub fn lacking(self, caps: &[Cap]) -> Vec<Cap> {
        caps.iter().copied().filter(|&c| !self.has(c)).collect()
    }
}

impl fmt::LowerHex for CapSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

/// `CapEff:` of /proc/PID/status, a hex mask.
pub fn parse_cap_eff(status: &str) -> Option<CapSet> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .map(CapSet)
}

/// "CAP_A", "CAP_A and CAP_B", "CAP_A, CAP_B and CAP_C".
pub fn names(caps: &[Cap]) -> String {
    match caps {
        [] => String::new(),
        [one] => one.name.to_string(),
        [init @ .., last] => {
            let init: Vec<&str> = init.iter().map(|c| c.name).collect();
            format!("{} and {}", init.join(", "), last.name)
        }
    }
}

/// "CAP_X is not in the agent's effective set" for what `caps` lacks of `needed`; `None`
/// when it holds them all.
pub fn lacking_clause(caps: CapSet, needed: &[Cap]) -> Option<String> {
    let lacking = caps.lacking(needed);
    let verb = if lacking.len() == 1 { "is" } else { "are" };
    (!lacking.is_empty()).then(|| {
        format!(
            "{} {verb} not in the agent's effective set",
            names(&lacking)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cap_eff() {
        let status = "Name:\tx\nCapPrm:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(parse_cap_eff(status), Some(CapSet(0x1ff_ffff_ffff)));
        // The DaemonSet's set: DAC_READ_SEARCH, SYS_PTRACE, SYS_ADMIN, PERFMON, BPF.
        let daemonset = "CapInh:\t0000000000000000\nCapEff:\t000000c000280004\n";
        let caps = parse_cap_eff(daemonset).expect("CapEff");
        for c in [
            CAP_DAC_READ_SEARCH,
            CAP_SYS_PTRACE,
            CAP_SYS_ADMIN,
            CAP_PERFMON,
            CAP_BPF,
        ] {
            assert!(caps.has(c), "{}", c.name);
        }
        assert!(!caps.has(CAP_DAC_OVERRIDE));
        assert_eq!(parse_cap_eff("Name:\tx\n"), None);
        assert_eq!(parse_cap_eff("CapEff:\tnot-hex\n"), None);
    }

    #[test]
    fn names_what_is_lacking() {
        let ptrace_only = CapSet(1 << CAP_SYS_PTRACE.bit);
        assert_eq!(lacking_clause(ptrace_only, &[CAP_SYS_PTRACE]), None);
        assert_eq!(
            lacking_clause(CapSet(0), &[CAP_SYS_PTRACE]).as_deref(),
            Some("CAP_SYS_PTRACE is not in the agent's effective set")
        );
        assert_eq!(
            lacking_clause(ptrace_only, &[CAP_SYS_ADMIN, CAP_SYS_PTRACE, CAP_BPF]).as_deref(),
            Some("CAP_SYS_ADMIN and CAP_BPF are not in the agent's effective set")
        );
        assert_eq!(
            names(&[CAP_SYS_ADMIN, CAP_BPF, CAP_PERFMON]),
            "CAP_SYS_ADMIN, CAP_BPF and CAP_PERFMON"
        );
    }
}
