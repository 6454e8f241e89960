//! Guard mode's kernel maps: the policy and allow-list of each slot, written once at start,
//! and the switch, flipped at run time (SIGUSR1, SIGUSR2) and saying enforce or audit. The
//! kernel can refuse only where the unlink hook runs on BPF LSM; elsewhere the guard is
//! unavailable and nothing is written.
use std::{os::unix::fs::MetadataExt, path::Path};

use aya::maps::{Array, HashMap};
use sockwatch_common::{
    GuardPolicy, GuardSwitch, Tier,
    guard::{GUARD_SLOTS, GuardAllowKey},
    maps,
};

use crate::{
    config::GuardConfig,
    kernel::{
        loader::{HookReport, LoadError, Probes},
        probes::{Hook, ProbeMode, is_guarded_hook},
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

/// One removal hook as the guard sees it: the tier it runs on, and why BPF LSM refused it
/// where that tier was tried.
pub struct RemovalHook {
    pub hook: Hook,
    pub tier: Option<Tier>,
    pub lsm_refused: Option<String>,
}

impl RemovalHook {
    /// From what `run` attached.
    pub fn attached(report: &[HookReport]) -> Vec<RemovalHook> {
        report
            .iter()
            .filter(|r| is_guarded_hook(r.hook))
            .map(|r| RemovalHook {
                hook: r.hook,
                tier: r.attached,
                lsm_refused: r
                    .refused
                    .iter()
                    .find(|(t, _)| *t == Tier::Lsm)
                    .map(|(_, why)| why.clone()),
            })
            .collect()
    }
}

/// Where the guard can refuse: the removal hooks on BPF LSM (unlink among them), or why it
/// cannot refuse at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuardTier {
    Lsm(Vec<Hook>),
    Unavailable(String),
}

impl GuardTier {
    /// The guard needs the unlink hook on BPF LSM, whose programs may return an error; a
    /// rename hook on another tier leaves renames over a live socket's file unguarded.
    pub fn of(hooks: &[RemovalHook], mode: ProbeMode) -> GuardTier {
        let Some(unlink) = hooks.iter().find(|h| h.hook == Hook::Unlink) else {
            return GuardTier::Unavailable("the unlink hook is not in the probe table".into());
        };
        match unlink.tier {
            Some(Tier::Lsm) => GuardTier::Lsm(
                hooks
                    .iter()
                    .filter(|h| h.tier == Some(Tier::Lsm))
                    .map(|h| h.hook)
                    .collect(),
            ),
            Some(t) => GuardTier::Unavailable(format!(
                "the unlink hook runs on {}, not BPF LSM ({})",
                t.name(),
                why_not_lsm(unlink, mode)
            )),
            None => GuardTier::Unavailable("the unlink hook did not attach".into()),
        }
    }

    /// `lsm (unlink, rename)`, or `unavailable: WHY`.
    pub fn line(&self) -> String {
        match self {
            GuardTier::Lsm(hooks) => {
                let names: Vec<&str> = hooks.iter().map(|h| h.name()).collect();
                format!("lsm ({})", names.join(", "))
            }
            GuardTier::Unavailable(why) => format!("unavailable: {why}"),
        }
    }
}

fn why_not_lsm(h: &RemovalHook, mode: ProbeMode) -> String {
    match &h.lsm_refused {
        Some(why) => format!("lsm refused: {why}"),
        None => format!("--probe-mode {} attaches no LSM program", mode.name()),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(hook: Hook, tier: Tier, lsm_refused: Option<&str>) -> RemovalHook {
        RemovalHook {
            hook,
            tier: Some(tier),
            lsm_refused: lsm_refused.map(str::to_owned),
        }
    }

    #[test]
    fn the_guard_names_its_hooks_or_why_it_cannot_refuse() {
        let both = [
            hook(Hook::Unlink, Tier::Lsm, None),
            hook(Hook::Rename, Tier::Lsm, None),
        ];
        assert_eq!(
            GuardTier::of(&both, ProbeMode::Auto).line(),
            "lsm (unlink, rename)"
        );
        let unlink_only = [
            hook(Hook::Unlink, Tier::Lsm, None),
            hook(
                Hook::Rename,
                Tier::Fentry,
                Some("BPF_PROG_LOAD failed: E2BIG"),
            ),
        ];
        assert_eq!(
            GuardTier::of(&unlink_only, ProbeMode::Auto),
            GuardTier::Lsm(vec![Hook::Unlink])
        );
        let refused = [hook(
            Hook::Unlink,
            Tier::Fentry,
            Some("BPF LSM is not active"),
        )];
        assert_eq!(
            GuardTier::of(&refused, ProbeMode::Auto).line(),
            "unavailable: the unlink hook runs on fentry, not BPF LSM (lsm refused: BPF LSM is \
             not active)"
        );
        let untried = [hook(Hook::Unlink, Tier::Kprobe, None)];
        assert_eq!(
            GuardTier::of(&untried, ProbeMode::Kprobe).line(),
            "unavailable: the unlink hook runs on kprobe, not BPF LSM (--probe-mode kprobe \
             attaches no LSM program)"
        );
    }
}
