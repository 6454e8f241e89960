//! What the engine is fed: one [`Input`] per kernel observation or reconciliation scan.
//!
//! Every type here derives serde so a recorded log (JSON lines, snake_case tags) replays into
//! the same verdicts. Identities are 64-bit throughout (S14); a socket file is known by its
//! [`FileId`], never by its path (S13).
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

pub use sockwatch_common::{Fidelity, FileId, GuardPolicy};

use super::{claims::Fact, inputs};

/// A table keyed by numbers the kernel assigns (inodes, tgids), looked up on every event:
/// a fast hash, seeded per process. Paths, which users choose, stay in ordered maps.
pub type NumberMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The process behind an input, as the kernel saw it at that moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proc {
    pub tgid: u32,
    pub pid: u32,
    pub comm: String,
    pub cgroup_id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<Workload>,
    /// The executable, as `/proc/PID/exe` named it when the process bound a socket (in its
    /// own mount namespace; ` (deleted)` dropped). Known for binders only: it tells a
    /// successor of the same program from another program (see `engine::workload`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exe: Option<String>,
    /// The runtime the executable was recognised as, read with `exe` for binders and for
    /// removers of socket files: it names the cause and the fix of a stale owner's unlink.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
}

impl Proc {
    /// A process known only by its tgid (a kernel-reported owner the engine never saw).
    pub fn unknown(tgid: u32) -> Self {
        Self {
            tgid,
            pid: tgid,
            ..Self::default()
        }
    }

    /// True when nothing but the tgid is known.
    pub fn is_unknown(&self) -> bool {
        self.comm.is_empty() && self.cgroup_id == 0 && self.workload.is_none()
    }

    /// Whether `sighting` says more than, or otherwise than, `self`: a sighting without an
    /// executable (any event but a bind) keeps the one known.
    pub fn differs_from(&self, sighting: &Proc) -> bool {
        self.tgid != sighting.tgid
            || self.pid != sighting.pid
            || self.comm != sighting.comm
            || self.cgroup_id != sighting.cgroup_id
            || self.workload != sighting.workload
            || (sighting.exe.is_some() && self.exe != sighting.exe)
            || (sighting.runtime.is_some() && self.runtime != sighting.runtime)
    }
}

/// A runtime whose own code unlinks a listener's path by name, told from its executable
/// (see `attribution::runtime`). Each has its own cause and fix for a stale owner's unlink.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Runtime {
    /// A Go binary (its `.go.buildinfo` section): `net.UnixListener.Close` unlinks its path.
    Go,
    /// Node.js (`node`, `nodejs`): libuv unlinks a pipe server's path on close.
    Node,
    /// socat: `unlink-close`, on by default for UNIX sockets, unlinks its path on exit.
    Socat,
    /// CPython (`python3*`): asyncio unlinks on close only since 3.13, after an inode check.
    Python,
}

impl Runtime {
    /// The name as the JSON lines spell it.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Go => "go",
            Runtime::Node => "node",
            Runtime::Socat => "socat",
            Runtime::Python => "python",
        }
    }
}

/// Where a process runs, when it runs in a container.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workload {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Owner name, e.g. the daemonset `multus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
}

/// What the kernel decided at the moment of an unlink or rename-over about the socket bound to
/// the removed file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveAtUnlink {
    pub owner_tgid: u32,
    pub sock_ino: u64,
    pub listening: bool,
    /// Whether the unlinking process holds an fd of the socket. `None` when the tier could see
    /// the socket but not the unlinker's fd table: the engine then decides ownership itself.
    #[serde(default)]
    pub unlinker_holds_fd: Option<bool>,
    /// The file's link count before the removal (`i_nlink`), where the tier read it. More
    /// than one: the socket keeps another name, and removing this one orphans nothing (S20).
    #[serde(default)]
    pub links: Option<u32>,
}

/// The operation a removal was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RemovalOp {
    Unlink,
    /// A rename onto the file.
    Rename,
}

/// What the guard did with a removal its policy refuses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuardDecision {
    /// Refused with `EPERM` (enforce mode): nothing was removed.
    #[default]
    Denied,
    /// Let through (audit mode): the removal follows as its own input.
    WouldDeny,
}

/// One observation (see [`inputs`] for each one's fields).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Input {
    Bind(inputs::Bind),
    Listen(inputs::Socket),
    /// Last close of a bound socket.
    Release(inputs::Socket),
    Unlink(inputs::Unlink),
    Rename(inputs::Rename),
    Denied(inputs::Denied),
    Connect(inputs::Connect),
    Fork(inputs::Fork),
    Exit(inputs::Exit),
    /// A bound socket's descriptor received by SCM_RIGHTS: the receiver holds it now.
    FdReceived(inputs::Socket),
    /// Reconciliation: the kernel's current view.
    Scan(ScanSnapshot),
    Tick(inputs::Tick),
    /// What the host answered about a held verdict's claim (see [`super::claims`]).
    Fact(Fact),
}

impl Input {
    /// The input's boot-clock timestamp.
    pub fn ts_ns(&self) -> u64 {
        match self {
            Input::Bind(i) => i.ts_ns,
            Input::Listen(i) | Input::Release(i) | Input::FdReceived(i) => i.ts_ns,
            Input::Unlink(i) => i.ts_ns,
            Input::Rename(i) => i.ts_ns,
            Input::Denied(i) => i.ts_ns,
            Input::Connect(i) => i.ts_ns,
            Input::Fork(i) => i.ts_ns,
            Input::Exit(i) => i.ts_ns,
            Input::Tick(i) => i.ts_ns,
            Input::Scan(s) => s.ts_ns,
            Input::Fact(f) => f.ts_ns,
        }
    }
}

/// The kernel's view of path-bound UNIX sockets at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanSnapshot {
    pub ts_ns: u64,
    pub sockets: Vec<ScannedSocket>,
    /// True when every path-bound socket of the node is listed: absent ones are gone.
    pub complete: bool,
    /// Not complete only because these processes could not be read: an absent socket none of
    /// whose known owners is among them is gone (a socket lives in its creator's network
    /// namespace, which the scan dumped when the creator was readable).
    #[serde(default)]
    pub unreadable: Option<Vec<u32>>,
}

/// One socket as a scan saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScannedSocket {
    pub sock_ino: u64,
    /// Bound file's (dev, ino) from sock_diag `UNIX_DIAG_VFS`.
    #[serde(default)]
    pub file: Option<FileId>,
    pub path: String,
    pub listening: bool,
    /// Processes holding the socket open, from `/proc/*/fd`.
    #[serde(default)]
    pub holders: Vec<Proc>,
    /// Does `path` still resolve to `file`?
    #[serde(default)]
    pub file_linked: Option<bool>,
    /// Outside every watched path: a socket the engine does not track already is not
    /// adopted (the operator asked about the watched paths only).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outside_watch: bool,
}

/// Abstract (`@name`) and unnamed sockets have no file: the engine never tracks them (S9).
pub fn is_path_bound(path: &str) -> bool {
    !path.is_empty() && !path.starts_with('@') && !path.starts_with('\0')
}
