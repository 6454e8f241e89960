//! The line `run` writes for each kernel event, and `replay` reads back; and the fields every
//! line of the stream carries besides its own ([`Stamped`]).
use serde::{Deserialize, Serialize};
use sockwatch_common::FileId;

use crate::{
    engine::{Runtime, Workload},
    events::KernelEvent,
};

/// The version of the lines' shape, written as `schema` on every line. Bumped when a field
/// is removed or changes its type or meaning; a field added leaves it (readers ignore fields
/// they do not know). docs/events.md lists each version.
pub const SCHEMA: u32 = 1;

/// A kernel event as completed in userspace: what the agent writes and replays.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventLine {
    #[serde(flatten)]
    pub event: KernelEvent,
    /// Container and pod of the acting process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<Workload>,
    /// Rename: the socket file now at the path (the one moved into place), as the actor's
    /// own view of the path showed it when the event was completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moved: Option<FileId>,
    /// Bind: the binder's executable (`/proc/PID/exe`), which tells a successor of the same
    /// program from another program.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    /// Bind, unlink, rename: the runtime the acting process's executable was recognised as.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
    /// Where the agent saw an event no kernel hook reported: a receive found in `/proc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen_in: Option<SeenIn>,
}

/// The source of an event line the kernel did not write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeenIn {
    /// `/proc/PID/fd`: a process holding a socket when its known owner exited (SCM_RIGHTS
    /// on a tier with no receive hook).
    Proc,
}

/// A line as `run` writes it: an event line or a verdict, then the stream's own fields. The
/// reference the hand-written JSON is held to (events/json.rs); `replay` reads event lines
/// as [`EventLine`], which ignores these fields (the engine is clock-free).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamped<T> {
    #[serde(flatten)]
    pub line: T,
    /// [`SCHEMA`] when written.
    pub schema: u32,
    /// Wall-clock time of `ts_ns`, RFC 3339 in UTC with nanoseconds.
    pub time: String,
    /// The node the agent runs on.
    pub node: String,
}
