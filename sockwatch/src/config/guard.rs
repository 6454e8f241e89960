//! Guard mode's settings: a policy and an allow-list at the top level (sockets outside every
//! watch, or every socket without watches) and per watch, which falls back to the top level.
use std::path::{Component, Path, PathBuf};

use serde::Deserialize;
use sockwatch_common::{GuardPolicy, GuardSwitch};

/// Bytes of a `comm` the kernel keeps (the 16th is its NUL).
pub const COMM_MAX: usize = 15;

/// What the guard does with a removal its policy refuses (`--guard-mode`, config key
/// `guard_mode`): one setting for the node, switched in the kernel by a map write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum GuardMode {
    /// Refuse it with `EPERM`: an `unlink_denied` verdict.
    #[default]
    Enforce,
    /// Let it through, counted and reported as an `unlink_would_deny` verdict: a policy tried
    /// on a node before it refuses anything.
    Audit,
}

impl GuardMode {
    pub fn name(self) -> &'static str {
        match self {
            GuardMode::Enforce => "enforce",
            GuardMode::Audit => "audit",
        }
    }

    /// The kernel's switch while the guard runs in this mode.
    pub fn switch(self) -> GuardSwitch {
        match self {
            GuardMode::Enforce => GuardSwitch::On,
            GuardMode::Audit => GuardSwitch::Audit,
        }
    }
}

/// One scope's guard: what it refuses, and whom `foreign` lets through.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuardConfig {
    pub policy: GuardPolicy,
    pub allow_comms: Vec<String>,
    /// cgroup v2 directories, relative to the cgroup2 mount (`/system.slice/kubelet.service`).
    pub allow_cgroups: Vec<PathBuf>,
}

/// A watch's own guard settings; each unset one is the top level's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GuardOverride {
    pub policy: Option<GuardPolicy>,
    pub allow_comms: Option<Vec<String>>,
    pub allow_cgroups: Option<Vec<PathBuf>>,
}

impl GuardOverride {
    /// The settings in force for the watch, over the top level's.
    pub fn over(&self, top: &GuardConfig) -> GuardConfig {
        GuardConfig {
            policy: self.policy.unwrap_or(top.policy),
            allow_comms: self.allow_comms.clone().unwrap_or(top.allow_comms.clone()),
            allow_cgroups: self
                .allow_cgroups
                .clone()
                .unwrap_or(top.allow_cgroups.clone()),
        }
    }
}

/// The guard keys as TOML spells them, at the top level and in each watch.
pub(super) struct RawGuard {
    guard: Option<GuardPolicy>,
    guard_allow_comms: Option<Vec<String>>,
    guard_allow_cgroups: Option<Vec<String>>,
}

impl RawGuard {
    pub fn new(
        guard: Option<GuardPolicy>,
        guard_allow_comms: Option<Vec<String>>,
        guard_allow_cgroups: Option<Vec<String>>,
    ) -> Self {
        Self {
            guard,
            guard_allow_comms,
            guard_allow_cgroups,
        }
    }

    /// Checks the values; `at` prefixes the field names in errors (`watches[0].`).
    pub fn check(self, at: &str) -> Result<GuardOverride, (String, String)> {
        let comms = self.guard_allow_comms;
        for (i, c) in comms.iter().flatten().enumerate() {
            check_comm(c).map_err(|p| (format!("{at}guard_allow_comms[{i}]"), p))?;
        }
        let mut cgroups = None;
        if let Some(list) = self.guard_allow_cgroups {
            let mut paths = Vec::new();
            for (i, c) in list.iter().enumerate() {
                let p =
                    check_cgroup(c).map_err(|p| (format!("{at}guard_allow_cgroups[{i}]"), p))?;
                paths.push(p);
            }
            cgroups = Some(paths);
        }
        Ok(GuardOverride {
            policy: self.guard,
            allow_comms: comms,
            allow_cgroups: cgroups,
        })
    }
}

fn check_comm(c: &str) -> Result<(), String> {
    if c.is_empty() || c.len() > COMM_MAX || c.contains('\0') {
        return Err(format!(
            "`{c}` is no command name: 1 to {COMM_MAX} bytes, as the kernel keeps `comm`"
        ));
    }
    Ok(())
}

/// A cgroup directory below the cgroup2 mount: absolute, no `..`.
fn check_cgroup(c: &str) -> Result<PathBuf, String> {
    let p = Path::new(c);
    let plain = p
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !p.is_absolute() || !plain {
        return Err(format!(
            "`{c}` must be a cgroup path from the cgroup2 root, e.g. /system.slice/kubelet.service"
        ));
    }
    Ok(p.to_path_buf())
}
