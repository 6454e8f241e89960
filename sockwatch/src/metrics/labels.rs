//! The values each bounded label takes, derived from the type the label names.
use std::fmt;

use serde::{
    Deserialize, Deserializer, Serialize,
    de::{MapAccess, Visitor},
};
use sockwatch_common::{Counter, EventKind, Tier};

use crate::{
    engine::{OrphanCause, Relation, StaleKind},
    http::Dropped,
    kernel::probes::PROBES,
};

/// A type whose every value is a label value.
pub trait Label: Copy + 'static {
    /// Every value, in the order of the reference.
    const ALL: &'static [Self];
    fn label(self) -> &'static str;
}

/// Implements [`Label`] from one list of variants and their label values.
macro_rules! labels {
    ($ty:ident { $($variant:ident => $name:literal,)* }) => {
        impl Label for $ty {
            const ALL: &'static [Self] = &[$($ty::$variant),*];
            fn label(self) -> &'static str {
                // Exhaustive: a new variant does not compile until it has a label value.
                match self {
                    $($ty::$variant => $name,)*
                }
            }
        }
    };
}

// The engine's serialized names (a test holds them to it).
labels!(Relation {
    SameProcess => "same_process",
    SameCgroup => "same_cgroup",
    SamePod => "same_pod",
    SameWorkloadOtherPod => "same_workload_other_pod",
    HostProcess => "host_process",
    Other => "other",
    Unknown => "unknown",
});

labels!(OrphanCause {
    Unlinked => "unlinked",
    Replaced => "replaced",
    ListenAfterRemoval => "listen_after_removal",
    Scan => "scan",
    TakenOver => "taken_over",
    Hijacked => "hijacked",
});

labels!(StaleKind {
    UnlinkedPinned => "unlinked_pinned",
    DeadListener => "dead_listener",
});

/// Which reconciliation scan ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scan {
    /// The one right after the probes attached.
    Startup,
    /// The sweeps every scan interval.
    Periodic,
}

labels!(Scan {
    Startup => "startup",
    Periodic => "periodic",
});

/// Guard mode's state (the `state` label of `sockwatch_guard_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuardState {
    /// No watch has a policy.
    Off,
    /// Refusing (enforce mode).
    On,
    /// Deciding and reporting, refusing nothing (audit mode).
    Audit,
    /// Turned off at run time (SIGUSR1).
    Paused,
    /// A policy is set, but the kernel cannot refuse (no BPF LSM unlink hook).
    Unavailable,
}

labels!(GuardState {
    Off => "off",
    On => "on",
    Audit => "audit",
    Paused => "paused",
    Unavailable => "unavailable",
});

labels!(Dropped {
    Refused => "refused",
    EvictedIdle => "evicted_idle",
    EvictedReading => "evicted_reading",
    HeaderTimeout => "header_timeout",
    ResponseTimeout => "response_timeout",
    IdleTimeout => "idle_timeout",
});

impl Label for EventKind {
    const ALL: &'static [Self] = &EventKind::ALL;
    fn label(self) -> &'static str {
        self.name()
    }
}

impl Label for Tier {
    const ALL: &'static [Self] = &Tier::ALL;
    fn label(self) -> &'static str {
        self.name()
    }
}

/// The kernel's error counters (the `reason` label): every counter but the successful
/// connects and the guard's decisions, which have metrics of their own.
pub fn kernel_errors() -> impl Iterator<Item = Counter> {
    Counter::ALL.into_iter().filter(|c| {
        !matches!(
            c,
            Counter::ConnectOk
                | Counter::GuardDenied
                | Counter::GuardWouldDeny
                | Counter::GuardUnknown
        )
    })
}

/// The hooks of the probe table, in its order.
pub fn hooks() -> Vec<&'static str> {
    let mut hooks: Vec<&str> = PROBES.iter().map(|h| h.hook.name()).collect();
    hooks.dedup();
    hooks
}

/// Connect errors get a label of their own; every other errno is [`OTHER_ERRNO`].
const ERRNOS: &[(i32, &str)] = &[
    (libc::ECONNREFUSED, "ECONNREFUSED"),
    (libc::ENOENT, "ENOENT"),
    (libc::EACCES, "EACCES"),
    (libc::EPERM, "EPERM"),
    (libc::EPROTOTYPE, "EPROTOTYPE"),
    (libc::EAGAIN, "EAGAIN"),
];
const OTHER_ERRNO: &str = "other";

/// The `errno` label of a positive errno.
pub fn errno_name(errno: i32) -> &'static str {
    ERRNOS
        .iter()
        .find(|(n, _)| *n == errno)
        .map_or(OTHER_ERRNO, |(_, name)| name)
}

/// Every `errno` label value.
pub fn errno_names() -> impl Iterator<Item = &'static str> {
    ERRNOS.iter().map(|(_, name)| *name).chain([OTHER_ERRNO])
}

/// The counts in a struct of counters (the engine's evictions, ignored inputs, verdicts):
/// each field's serialized name and value, in field order, so a new field is a new label.
pub fn counts(counters: &impl Serialize) -> Vec<(String, u64)> {
    let json = serde_json::to_string(counters).expect("counters serialize");
    serde_json::from_str::<Counts>(&json)
        .expect("a struct of counters")
        .0
}

/// The field names of a struct of counters, as [`counts`] labels them.
pub fn count_names<T: Serialize + Default>() -> Vec<String> {
    counts(&T::default())
        .into_iter()
        .map(|(name, _)| name)
        .collect()
}

/// Name-value pairs in the order they were written (a JSON map would sort them).
struct Counts(Vec<(String, u64)>);

impl<'de> Deserialize<'de> for Counts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct InOrder;
        impl<'de> Visitor<'de> for InOrder {
            type Value = Counts;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map of counts")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Counts, A::Error> {
                let mut counts = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    counts.push(entry);
                }
                Ok(Counts(counts))
            }
        }
        d.deserialize_map(InOrder)
    }
}
