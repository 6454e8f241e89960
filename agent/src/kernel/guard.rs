//! Guard mode's kernel maps: the policy and allow-list of each slot, written once at start,
//! and the switch, flipped at run time (SIGUSR1, SIGUSR2). The kernel can refuse only where
//! the unlink hook runs on BPF LSM; elsewhere the guard is unavailable and nothing is written.
use std::{os::unix::fs::MetadataExt, path::Path};

use agent_common::{
    GuardPolicy, GuardSwitch, Tier,
    guard::{GUARD_SLOTS, GuardAllowKey},
    maps,
};
use aya::maps::{Array, HashMap};

use crate::{
    config::GuardConfig,
    kernel::{
        loader::{HookReport, LoadError, Probes},
        probes::Hook,
    },
};

/// Where cgroup v2 is mounted: allow-listed cgroups are directories below it.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("guard: {0} slots, at most {GUARD_SLOTS}")]
    Slots(usize),
    #[error("guard allow-list: cgroup {path}: {source}")]
    Cgroup {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("guard: updating map {0}: {1}")]
    MapUpdate(&'static str, #[source] aya::maps::MapError),
}

/// Why the kernel cannot refuse here, or `None` when it can: the unlink hook must run on
/// BPF LSM (whose programs may return an error), not only be traced.
pub fn unavailable(report: &[HookReport]) -> Option<String> {
    let unlink = report.iter().find(|r| r.hook == Hook::Unlink)?;
    match unlink.attached {
        Some(Tier::Lsm) => None,
        Some(t) => {
            let lsm = unlink
                .refused
                .iter()
                .find(|(t, _)| *t == Tier::Lsm)
                .map_or_else(|| "not tried".to_owned(), |(_, why)| why.clone());
            Some(format!(
                "the unlink hook runs on {}, not BPF LSM (lsm: {lsm})",
                t.name()
            ))
        }
        None => Some("the unlink hook did not attach".into()),
    }
}

/// Whether any slot refuses anything.
pub fn wanted(slots: &[GuardConfig]) -> bool {
    slots.iter().any(|s| s.policy != GuardPolicy::Off)
}

impl Probes {
    /// Writes every slot's policy and allow-list (slot 0 the top level, then the watches').
    pub fn guard_policies(&mut self, slots: &[GuardConfig]) -> Result<(), GuardError> {
        if slots.len() > GUARD_SLOTS as usize {
            return Err(GuardError::Slots(slots.len()));
        }
        let mut allow = Vec::new();
        for (slot, g) in (0u32..).zip(slots) {
            for comm in &g.allow_comms {
                allow.push(GuardAllowKey::comm(slot, comm.as_bytes()));
            }
            for path in &g.allow_cgroups {
                allow.push(GuardAllowKey::cgroup(slot, cgroup_id(path)?));
            }
        }
        let mut policies: Array<_, u32> = Array::try_from(self.map_mut(maps::GUARD_POLICIES)?)
            .map_err(|e| GuardError::MapUpdate(maps::GUARD_POLICIES, e))?;
        for (slot, g) in (0u32..).zip(slots) {
            policies
                .set(slot, g.policy as u32, 0)
                .map_err(|e| GuardError::MapUpdate(maps::GUARD_POLICIES, e))?;
        }
        let mut list: HashMap<_, GuardAllowKey, u32> =
            HashMap::try_from(self.map_mut(maps::GUARD_ALLOW)?)
                .map_err(|e| GuardError::MapUpdate(maps::GUARD_ALLOW, e))?;
        for key in allow {
            list.insert(key, 1, 0)
                .map_err(|e| GuardError::MapUpdate(maps::GUARD_ALLOW, e))?;
        }
        Ok(())
    }

    /// Turns the kernel's decisions on, pauses them, or leaves them unused.
    pub fn guard_switch(&mut self, to: GuardSwitch) -> Result<(), GuardError> {
        let mut switch: Array<_, u32> = Array::try_from(self.map_mut(maps::GUARD_SWITCH)?)
            .map_err(|e| GuardError::MapUpdate(maps::GUARD_SWITCH, e))?;
        switch
            .set(0, to as u32, 0)
            .map_err(|e| GuardError::MapUpdate(maps::GUARD_SWITCH, e))
    }
}

/// A cgroup v2 directory's id: its inode number in the cgroup2 filesystem.
fn cgroup_id(relative: &Path) -> Result<u64, GuardError> {
    let rel = relative.strip_prefix("/").unwrap_or(relative);
    let path = Path::new(CGROUP_ROOT).join(rel);
    std::fs::metadata(&path)
        .map(|m| m.ino())
        .map_err(|source| GuardError::Cgroup {
            path: path.display().to_string(),
            source,
        })
}
