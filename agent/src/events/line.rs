//! The line `run` writes for each kernel event, and `replay` reads back.
use agent_common::FileId;
use serde::{Deserialize, Serialize};

use crate::{engine::Workload, events::KernelEvent};

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
}
