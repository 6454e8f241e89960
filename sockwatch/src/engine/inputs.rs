//! The engine's inputs, one struct each, as [`super::Input`] tags them. Every one carries
//! `ts_ns` (boot clock); all but [`Exit`] and [`Tick`] the acting process.
use serde::{Deserialize, Serialize};

use super::model::{Fidelity, FileId, GuardDecision, GuardPolicy, LiveAtUnlink, Proc, RemovalOp};

/// A socket bound to a path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bind {
    pub ts_ns: u64,
    pub proc: Proc,
    pub file: FileId,
    pub sock_ino: u64,
    pub path: String,
}

/// What happened to a bound socket: its listen, its last close (release), or its descriptor
/// received by SCM_RIGHTS (the receiver holds it now).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Socket {
    pub ts_ns: u64,
    pub proc: Proc,
    pub file: FileId,
    pub sock_ino: u64,
}

/// One file removed (`rm -r` yields one per socket file).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unlink {
    pub ts_ns: u64,
    pub proc: Proc,
    pub path: String,
    #[serde(default)]
    pub file: Option<FileId>,
    #[serde(default)]
    pub fidelity: Fidelity,
    #[serde(default)]
    pub live: Option<LiveAtUnlink>,
}

/// `replaced` is the displaced target inode; `live` describes the socket bound to it;
/// `moved` is the file now at `to` (the one moved into place: the kernel's, else where
/// userspace saw it); `from` its old name, where the tier gave it. An `exchange` swaps the
/// two names: `replaced` is then at `from`, and nothing is removed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rename {
    pub ts_ns: u64,
    pub proc: Proc,
    #[serde(default)]
    pub moved: Option<FileId>,
    #[serde(default)]
    pub from: Option<String>,
    pub to: String,
    #[serde(default)]
    pub exchange: bool,
    #[serde(default)]
    pub replaced: Option<FileId>,
    #[serde(default)]
    pub fidelity: Fidelity,
    #[serde(default)]
    pub live: Option<LiveAtUnlink>,
}

/// A removal the guard refused (LSM tier): nothing was removed. `live` is the listener it
/// protected. In audit mode (`decision: would_deny`) the removal went ahead, and its own input
/// follows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Denied {
    pub ts_ns: u64,
    pub proc: Proc,
    pub path: String,
    pub file: FileId,
    pub operation: RemovalOp,
    pub policy: GuardPolicy,
    pub live: LiveAtUnlink,
    #[serde(default)]
    pub decision: GuardDecision,
}

/// A connect (or datagram send) to a path, and what the kernel saw of its target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Connect {
    pub ts_ns: u64,
    pub proc: Proc,
    pub path: String,
    /// 0 on success, else the positive errno (111 ECONNREFUSED, 2 ENOENT, ...).
    pub errno: i32,
    #[serde(default)]
    pub target: Option<FileId>,
    #[serde(default)]
    pub target_nlink: Option<u32>,
    #[serde(default)]
    pub target_bound: Option<bool>,
    #[serde(default)]
    pub target_listening: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fork {
    pub ts_ns: u64,
    pub parent: Proc,
    pub child_tgid: u32,
}

/// The whole thread group is gone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    pub ts_ns: u64,
    pub tgid: u32,
}

/// Time passed (the live pipeline's drain timer, on the kernel's boot clock): decides the
/// removals whose takeover window ended. Every other input does the same by its own time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tick {
    pub ts_ns: u64,
}
