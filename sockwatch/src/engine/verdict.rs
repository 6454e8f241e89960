//! What the engine reports: each verdict names both parties, the file and the socket.
use serde::{Deserialize, Serialize};

use super::{
    model::{Fidelity, FileId, GuardPolicy, Proc, RemovalOp},
    workload::{HandOver, ServedBy},
};

/// How the unlinking (or renaming) process relates to the socket's owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Relation {
    /// Same tgid. Never on a [`Verdict::ForeignUnlink`] (a process is in its own owner set);
    /// seen on [`Verdict::Replaced`] when a daemon renames a new socket over its own.
    SameProcess,
    SameCgroup,
    /// Same pod uid, different cgroup: another container of the pod (e.g. a sidecar).
    SamePod,
    /// Same workload name (and namespace), different pod uid: a rolling restart's successor.
    SameWorkloadOtherPod,
    /// One side runs in a workload, the other on the host.
    HostProcess,
    Other,
    /// The owner is known only by its tgid (reported by the kernel, never seen by the engine).
    Unknown,
}

impl Relation {
    /// Relation of `actor` to `owner`, closest first.
    pub fn between(actor: &Proc, owner: &Proc) -> Self {
        if actor.tgid == owner.tgid {
            return Self::SameProcess;
        }
        if owner.is_unknown() || actor.is_unknown() {
            return Self::Unknown;
        }
        if actor.cgroup_id != 0 && actor.cgroup_id == owner.cgroup_id {
            return Self::SameCgroup;
        }
        match (&actor.workload, &owner.workload) {
            (None, None) => Self::Other,
            (Some(_), None) | (None, Some(_)) => Self::HostProcess,
            (Some(a), Some(o)) => {
                if a.pod_uid.is_some() && a.pod_uid == o.pod_uid {
                    Self::SamePod
                } else if a.workload.is_some()
                    && a.workload == o.workload
                    && (a.namespace.is_none()
                        || o.namespace.is_none()
                        || a.namespace == o.namespace)
                {
                    Self::SameWorkloadOtherPod
                } else {
                    Self::Other
                }
            }
        }
    }
}

/// Which source decided that the actor was outside the owner set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecidedBy {
    /// The kernel, at the moment of the syscall.
    Kernel,
    /// The engine's own state (owner sets, socket table).
    Engine,
}

/// Why a listener became orphaned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrphanCause {
    /// Its file was unlinked by a process outside the owner set.
    Unlinked,
    /// Its file was replaced by a rename-over.
    Replaced,
    /// It started listening after its file had been removed.
    ListenAfterRemoval,
    /// A scan found it listening on a file that no longer resolves (start-up or lost events).
    Scan,
    /// Its file was removed by a successor that serves the path again (a [`Verdict::Takeover`]):
    /// the listener of a daemon in its graceful shutdown.
    TakenOver,
    /// Another workload serves its path now (a [`Verdict::Hijack`]).
    Hijacked,
}

/// Why an orphaned listener stopped being one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CloseReason {
    /// The socket was closed (last close, or missing from a complete scan).
    Released,
    /// Its owner bound a new socket at the same path.
    Rebound,
    /// Its last owner exited.
    Exited,
    /// A scan found its path resolving to its file again.
    Relinked,
}

/// What kind of stale connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StaleKind {
    /// The inode has no links (nlink 0) yet the path reached it: a bind mount pins it (S3).
    UnlinkedPinned,
    /// The file exists but no socket is bound to it: a dead daemon's file (S4).
    DeadListener,
}

/// A removal the guard decided on: who tried, whose listener it was, and the policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Guarded {
    pub ts_ns: u64,
    /// The process whose unlink or rename was refused (or would have been).
    pub actor: Proc,
    /// The owner of the listener protected.
    pub victim: Proc,
    pub operation: RemovalOp,
    pub policy: GuardPolicy,
    /// The path as the actor named it.
    pub path: String,
    pub file: FileId,
    pub sock_ino: u64,
}

/// One finding. Serialized as a JSON object tagged `"verdict"`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// A live socket's file was removed by a process outside its owner set.
    ForeignUnlink {
        ts_ns: u64,
        actor: Proc,
        /// The owner whose socket lost its file.
        victim: Proc,
        relation: Relation,
        /// The path as the actor named it.
        path: String,
        /// The path as the victim bound it, when known.
        victim_path: Option<String>,
        file: FileId,
        sock_ino: u64,
        listening: bool,
        /// When the victim bound the socket.
        victim_bound_ns: u64,
        decided_by: DecidedBy,
        fidelity: Fidelity,
        /// The actor owns (or owned) a listener bound at the same path whose file is gone: a
        /// stale owner removing its successor's socket (S1's Go `Close`). Reported at once.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        stale_owner: bool,
    },
    /// The guard refused a removal of a live listener's file (LSM tier): the listener keeps
    /// its path. Informational: the incident was prevented; the actor is what to fix.
    UnlinkDenied(Guarded),
    /// Audit mode: the guard would have refused this removal, and let it through; the
    /// removal's own verdicts (a foreign unlink, an orphan) follow.
    UnlinkWouldDeny(Guarded),
    /// A live socket's file was replaced by a rename-over; reported even for a hand-over.
    Replaced {
        ts_ns: u64,
        actor: Proc,
        victim: Proc,
        relation: Relation,
        /// False when the actor is in the victim's owner set (a daemon replacing its own file).
        foreign: bool,
        /// The replaced path, as the actor named it.
        path: String,
        victim_path: Option<String>,
        /// The displaced file.
        file: FileId,
        /// The file moved into place, when known.
        new_file: Option<FileId>,
        sock_ino: u64,
        listening: bool,
        victim_bound_ns: u64,
        decided_by: DecidedBy,
        fidelity: Fidelity,
    },
    /// A live socket's file was renamed: its old path no longer leads to it, its new one does.
    /// Informational: clients that connect by the old path now fail or reach another file.
    /// An exchange moves both files: one verdict per live socket, each naming the other file.
    Moved {
        ts_ns: u64,
        actor: Proc,
        /// The owner of the socket moved.
        owner: Proc,
        relation: Relation,
        /// False when the actor is in the owner set (a daemon moving its own file).
        foreign: bool,
        file: FileId,
        sock_ino: u64,
        listening: bool,
        /// The path that led to the socket before (its bind path, else the old name as the
        /// actor gave it), when known.
        from: Option<String>,
        /// The path that leads to it now, when known (an exchange on an exact tier names the
        /// other file's old name only where its directory is known).
        to: Option<String>,
        /// An exchange: the file now at `from`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exchanged_with: Option<FileId>,
        fidelity: Fidelity,
    },
    /// A live socket's file was removed (or renamed over) by a process outside its owner set,
    /// and within the takeover window the victim's own workload served the path again: the
    /// owner re-bound it (a plugin re-registering), or a successor of the same workload did (a
    /// rolling restart, HAProxy's rename hand-over). Informational.
    Takeover {
        /// When the file was removed.
        ts_ns: u64,
        remover: Proc,
        /// The owner whose socket lost its file.
        predecessor: Proc,
        /// The process that bound the new socket.
        successor: Proc,
        /// How the remover relates to the predecessor.
        relation: Relation,
        /// How the successor relates to the remover (same process, cgroup or pod).
        successor_relation: Relation,
        /// Whether the owner itself or another process of its workload serves the path now.
        served_by: ServedBy,
        /// A removal then a bind, or a rename of the successor's file over the old one.
        #[serde(default, skip_serializing_if = "HandOver::is_rebind")]
        how: HandOver,
        /// The path as the remover named it.
        path: String,
        old_file: FileId,
        new_file: FileId,
        old_sock_ino: u64,
        new_sock_ino: u64,
        /// From the removal to the successor's bind (0 for a rename: served throughout).
        gap_ns: u64,
        decided_by: DecidedBy,
        fidelity: Fidelity,
    },
    /// A live socket's file was removed (or renamed over) by a process outside its owner set,
    /// and within the takeover window another workload served the path: clients of the victim
    /// now reach a stranger's socket. Warning.
    Hijack {
        /// When the file was removed.
        ts_ns: u64,
        remover: Proc,
        /// The owner whose socket lost its path.
        victim: Proc,
        /// The process that serves the path now.
        successor: Proc,
        /// How the remover relates to the victim.
        relation: Relation,
        how: HandOver,
        /// The path as the remover named it.
        path: String,
        /// The path as the victim bound it, when known.
        victim_path: Option<String>,
        old_file: FileId,
        new_file: FileId,
        old_sock_ino: u64,
        new_sock_ino: u64,
        /// From the removal to the successor's bind (0 for a rename).
        gap_ns: u64,
        decided_by: DecidedBy,
        fidelity: Fidelity,
    },
    /// A listening socket lost its file: nobody can connect to it by path any more.
    OrphanOpened {
        ts_ns: u64,
        /// When it became an orphan; the scan's time when not known (`since_exact: false`).
        since_ns: u64,
        since_exact: bool,
        cause: OrphanCause,
        owner: Proc,
        removed_by: Option<Proc>,
        /// The process that serves the path now, for a `taken_over` orphan.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        successor: Option<Proc>,
        path: Option<String>,
        file: FileId,
        sock_ino: u64,
    },
    /// An orphaned listener ended.
    OrphanClosed {
        ts_ns: u64,
        since_ns: u64,
        duration_ns: u64,
        reason: CloseReason,
        owner: Proc,
        path: Option<String>,
        file: FileId,
        sock_ino: u64,
    },
    /// ECONNREFUSED on a socket file with no bound socket.
    StaleConnect {
        ts_ns: u64,
        kind: StaleKind,
        /// The client.
        actor: Proc,
        path: String,
        file: Option<FileId>,
        /// The last process known to have bound the file, when known.
        binder: Option<Proc>,
        /// Who removed the file, when known.
        removed_by: Option<Proc>,
        decided_by: DecidedBy,
    },
    /// A socket file whose socket was closed without unlinking it, and whose closer exited.
    StaleSocketFile {
        ts_ns: u64,
        binder: Proc,
        /// The process that closed the socket last, when known.
        released_by: Option<Proc>,
        path: Option<String>,
        file: FileId,
        sock_ino: u64,
        bound_ns: u64,
        released_ns: u64,
    },
}

impl Verdict {
    /// The verdict's tag, as serialized.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::ForeignUnlink { .. } => "foreign_unlink",
            Verdict::UnlinkDenied(_) => "unlink_denied",
            Verdict::UnlinkWouldDeny(_) => "unlink_would_deny",
            Verdict::Replaced { .. } => "replaced",
            Verdict::Moved { .. } => "moved",
            Verdict::Takeover { .. } => "takeover",
            Verdict::Hijack { .. } => "hijack",
            Verdict::OrphanOpened { .. } => "orphan_opened",
            Verdict::OrphanClosed { .. } => "orphan_closed",
            Verdict::StaleConnect { .. } => "stale_connect",
            Verdict::StaleSocketFile { .. } => "stale_socket_file",
        }
    }

    pub fn ts_ns(&self) -> u64 {
        match self {
            Verdict::ForeignUnlink { ts_ns, .. }
            | Verdict::Replaced { ts_ns, .. }
            | Verdict::Moved { ts_ns, .. }
            | Verdict::Takeover { ts_ns, .. }
            | Verdict::Hijack { ts_ns, .. }
            | Verdict::OrphanOpened { ts_ns, .. }
            | Verdict::OrphanClosed { ts_ns, .. }
            | Verdict::StaleConnect { ts_ns, .. }
            | Verdict::StaleSocketFile { ts_ns, .. } => *ts_ns,
            Verdict::UnlinkDenied(g) | Verdict::UnlinkWouldDeny(g) => g.ts_ns,
        }
    }
}

impl Verdict {
    /// The socket (holder's tgid, sockfs inode) the verdict says is still open: the victim of a
    /// removal, or an orphaned listener.
    pub fn open_socket(&self) -> Option<(u32, u64)> {
        match self {
            Verdict::ForeignUnlink {
                victim, sock_ino, ..
            }
            | Verdict::Replaced {
                victim, sock_ino, ..
            } => Some((victim.tgid, *sock_ino)),
            Verdict::OrphanOpened {
                owner, sock_ino, ..
            } => Some((owner.tgid, *sock_ino)),
            _ => None,
        }
    }

    /// Whether the verdict names `f` as one of its files (removed, new, moved or swapped).
    pub fn names_file(&self, f: FileId) -> bool {
        match self {
            Verdict::Replaced { file, new_file, .. } => *file == f || *new_file == Some(f),
            Verdict::Moved {
                file,
                exchanged_with,
                ..
            } => *file == f || *exchanged_with == Some(f),
            Verdict::Takeover {
                old_file, new_file, ..
            }
            | Verdict::Hijack {
                old_file, new_file, ..
            } => *old_file == f || *new_file == f,
            Verdict::StaleConnect { file, .. } => *file == Some(f),
            Verdict::ForeignUnlink { file, .. }
            | Verdict::OrphanOpened { file, .. }
            | Verdict::OrphanClosed { file, .. }
            | Verdict::StaleSocketFile { file, .. } => *file == f,
            Verdict::UnlinkDenied(g) | Verdict::UnlinkWouldDeny(g) => g.file == f,
        }
    }

    /// The path the verdict is about, as its actor named it, where there is one.
    pub fn path(&self) -> Option<&str> {
        match self {
            Verdict::ForeignUnlink { path, .. }
            | Verdict::Replaced { path, .. }
            | Verdict::Takeover { path, .. }
            | Verdict::Hijack { path, .. }
            | Verdict::StaleConnect { path, .. } => Some(path),
            Verdict::UnlinkDenied(g) | Verdict::UnlinkWouldDeny(g) => Some(&g.path),
            Verdict::OrphanOpened { path, .. }
            | Verdict::Moved { to: path, .. }
            | Verdict::OrphanClosed { path, .. }
            | Verdict::StaleSocketFile { path, .. } => path.as_deref(),
        }
    }
}
