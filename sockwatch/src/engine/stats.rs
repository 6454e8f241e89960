//! Counters the engine keeps: table sizes, quiet outcomes, ignored inputs, evictions.
use std::collections::BTreeMap;

use serde::Serialize;

use super::verdict::Verdict;

/// Outcomes that are correct and deliberately not reported.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct QuietCounters {
    /// A process in the owner set unlinked the socket's file (S2, S6, S7).
    pub owner_unlink: u64,
    /// A file whose socket was already closed was unlinked or renamed over (cleanup).
    pub stale_file_removed: u64,
    /// One name of a live socket's file with several links was removed; it keeps the others.
    pub link_removed: u64,
    /// Failed connects that are not stale connects (S8's bound-not-listening refusal, ENOENT,
    /// ...), by errno. Errnos outside 1..=4095 are counted under -1.
    pub connect_error: BTreeMap<i32, u64>,
}

/// Inputs that changed nothing because the engine could not place them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct IgnoredCounters {
    /// Binds and scanned sockets without a path (abstract `@name`, unnamed): S9.
    pub not_path_bound: u64,
    /// Listen, release or fd receipt of a socket never bound nor scanned.
    pub unknown_socket: u64,
    /// Unlinks and renames of files the engine does not know as socket files.
    pub unlink_unknown: u64,
    /// Path-only unlinks and renames whose path matches several socket files (mount namespaces)
    /// and that nothing narrows down.
    pub unlink_ambiguous: u64,
    /// ECONNREFUSED on a file the engine does not know, without the kernel's view of it.
    pub connect_undecided: u64,
    /// ECONNREFUSED on a file the engine does not track (or no file named), at a path
    /// outside every watched directory: counted here, not as an errno or undecided.
    pub connect_outside_watch: u64,
    /// Scanned sockets without a file identity.
    pub scan_without_file: u64,
    /// Scanned sockets outside every watched path that the engine did not track already.
    pub scan_outside_watch: u64,
}

/// What the bounds pushed out.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Evictions {
    /// Socket entries evicted (released ones first).
    pub sockets: u64,
    /// ... of which were still live.
    pub live_sockets: u64,
    /// ... of which were open orphans (they end without an `orphan_closed`).
    pub orphans: u64,
    /// Process entries evicted (exited ones first).
    pub procs: u64,
    /// ... of which still owned sockets (they leave those owner sets).
    pub owner_procs: u64,
    /// History lines dropped past `max_history_per_socket`.
    pub history: u64,
    /// Removals waiting for a successor pushed out past `max_pending_removals` (each decided
    /// at once, as a foreign unlink).
    pub pending_removals: u64,
}

/// Verdicts emitted, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct VerdictCounts {
    pub foreign_unlink: u64,
    pub unlink_denied: u64,
    pub unlink_would_deny: u64,
    pub replaced: u64,
    pub moved: u64,
    pub takeover: u64,
    pub hijack: u64,
    pub orphan_opened: u64,
    pub orphan_closed: u64,
    pub stale_connect: u64,
    pub stale_socket_file: u64,
}

impl VerdictCounts {
    pub(super) fn count(&mut self, v: &Verdict) {
        let c = match v {
            Verdict::ForeignUnlink { .. } => &mut self.foreign_unlink,
            Verdict::UnlinkDenied(_) => &mut self.unlink_denied,
            Verdict::UnlinkWouldDeny(_) => &mut self.unlink_would_deny,
            Verdict::Replaced { .. } => &mut self.replaced,
            Verdict::Moved { .. } => &mut self.moved,
            Verdict::Takeover { .. } => &mut self.takeover,
            Verdict::Hijack { .. } => &mut self.hijack,
            Verdict::OrphanOpened { .. } => &mut self.orphan_opened,
            Verdict::OrphanClosed { .. } => &mut self.orphan_closed,
            Verdict::StaleConnect { .. } => &mut self.stale_connect,
            Verdict::StaleSocketFile { .. } => &mut self.stale_socket_file,
        };
        *c += 1;
    }
}

/// A snapshot of the engine's sizes and counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub inputs: u64,
    pub sockets: usize,
    pub live_sockets: usize,
    pub open_orphans: usize,
    /// Removals waiting for a successor's bind (takeover window).
    pub pending_removals: usize,
    pub procs: usize,
    /// (owner, socket) pairs across all owner sets.
    pub owner_pairs: usize,
    pub quiet: QuietCounters,
    pub ignored: IgnoredCounters,
    pub evictions: Evictions,
    pub verdicts: VerdictCounts,
}

/// The running counters; sizes are filled in by [`super::Engine::stats`].
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub inputs: u64,
    pub quiet: QuietCounters,
    pub ignored: IgnoredCounters,
    pub evictions: Evictions,
    pub verdicts: VerdictCounts,
}

impl Counters {
    pub fn connect_error(&mut self, errno: i32) {
        let key = if (1..=4095).contains(&errno) {
            errno
        } else {
            -1
        };
        *self.quiet.connect_error.entry(key).or_default() += 1;
    }
}
