//! A verdict as one sentence: who did what to which socket file, where they run, and, where
//! the verdict tells it, the likely cause and the fix. `run --format text` writes one a line
//! ([`super::line`]).
use crate::engine::{
    CloseReason, FileId, GuardPolicy, Guarded, HandOver, OrphanCause, Proc, Relation, RemovalOp,
    Runtime, ServedBy, StaleKind, Verdict,
};

use super::words::{duration, inode, inode_or_unknown, relation, who};
use crate::quote::quote;

/// `LABEL: sentence.` for one verdict.
pub fn sentence(v: &Verdict) -> String {
    match v {
        Verdict::ForeignUnlink { .. } | Verdict::Replaced { .. } | Verdict::Moved { .. } => {
            removal(v)
        }
        Verdict::UnlinkDenied(g) => unlink_denied(g),
        Verdict::UnlinkWouldDeny(g) => unlink_would_deny(g),
        Verdict::Takeover {
            served_by,
            successor_relation,
            ..
        } => takeover(&ServedAgain::of(v), *served_by, *successor_relation),
        Verdict::Hijack { .. } => hijack(&ServedAgain::of(v)),
        Verdict::OrphanOpened {
            cause,
            owner,
            removed_by,
            successor,
            path,
            file,
            ..
        } => {
            let by = successor.as_ref().or(removed_by.as_ref());
            orphan_opened(*cause, owner, by, path.as_deref(), *file)
        }
        Verdict::OrphanClosed {
            duration_ns,
            reason,
            owner,
            path,
            file,
            ..
        } => orphan_closed(*duration_ns, *reason, owner, path.as_deref(), *file),
        Verdict::StaleConnect {
            kind,
            actor,
            path,
            file,
            binder,
            removed_by,
            ..
        } => stale_connect(
            *kind,
            actor,
            path,
            *file,
            (binder.as_ref(), removed_by.as_ref()),
        ),
        Verdict::StaleSocketFile {
            binder,
            released_by,
            path,
            file,
            ..
        } => stale_socket_file(binder, released_by.as_ref(), path.as_deref(), *file),
    }
}

/// The sentence of a verdict about a removed or moved socket file.
fn removal(v: &Verdict) -> String {
    match v {
        Verdict::ForeignUnlink {
            actor,
            victim,
            relation,
            path,
            file,
            listening,
            stale_owner,
            ..
        } => {
            let removal = Removal {
                actor,
                owner: victim,
                path,
                file: *file,
                listening: *listening,
            };
            foreign_unlink(&removal, *relation, *stale_owner)
        }
        Verdict::Replaced {
            actor,
            victim,
            relation,
            foreign,
            path,
            file,
            new_file,
            listening,
            ..
        } => {
            let removal = Removal {
                actor,
                owner: victim,
                path,
                file: *file,
                listening: *listening,
            };
            replaced(&removal, *relation, *foreign, *new_file)
        }
        Verdict::Moved {
            actor,
            owner,
            relation,
            foreign,
            file,
            listening,
            from,
            to,
            exchanged_with,
            ..
        } => {
            let names = Renamed {
                from: from.as_deref(),
                to: to.as_deref(),
                swapped_with: *exchanged_with,
            };
            moved(
                (actor, owner, *relation),
                *foreign,
                *file,
                *listening,
                &names,
            )
        }
        _ => unreachable!("sentence routes only removals and moves here"),
    }
}

/// A live socket's file that a process made stop resolving at its path.
struct Removal<'a> {
    actor: &'a Proc,
    owner: &'a Proc,
    path: &'a str,
    file: FileId,
    listening: bool,
}

impl Removal<'_> {
    /// `the listening socket of comm (pid N)`.
    fn socket_of_owner(&self) -> String {
        format!("the {} of {}", socket(self.listening), who(self.owner))
    }
}

fn socket(listening: bool) -> &'static str {
    match listening {
        true => "listening socket",
        false => "socket",
    }
}

/// Why a stale owner's unlink happened and how to stop it, for what its runtime does on close.
struct Remedy {
    /// What removed the path: the remover's close, as its runtime does it.
    why: &'static str,
    fix: &'static str,
}

fn remedy(runtime: Option<Runtime>) -> Remedy {
    match runtime {
        Some(Runtime::Go) => Remedy {
            why: "its Close unlinked the path (Go's net.UnixListener unlinks its path on Close)",
            fix: "call SetUnlinkOnClose(false) or remove only your own inode",
        },
        Some(Runtime::Node) => Remedy {
            why: "its server.close() unlinked the path (Node.js: libuv unlinks a pipe server's \
                  path on close, whichever file is there by then)",
            fix: "do not rely on server.close() to remove the socket file: exit without it, \
                  and remove the path only before listen, after checking its inode",
        },
        Some(Runtime::Socat) => Remedy {
            why: "its exit unlinked the path (socat's unlink-close, on by default for UNIX \
                  sockets, removes the path when it closes the address, SIGTERM included)",
            fix: "give the listener unlink-close=0, and use unlink-early only on a path it \
                  owns",
        },
        Some(Runtime::Python) => Remedy {
            why: "it unlinked the path (Python's asyncio unlinks a server's path on close only \
                  since 3.13, and only if the inode is still its own: an os.unlink, or an \
                  older cleanup, does not check)",
            fix: "compare the path's st_ino with your socket's before os.unlink",
        },
        None => Remedy {
            why: "it unlinked a path whose socket it no longer owned",
            fix: "remove only your own inode (compare st_ino before unlink)",
        },
    }
}

/// The incident's cause and fix: sockwatch knows the remover lost its own listener here.
fn stale_owner_cause(runtime: Option<Runtime>) -> String {
    let Remedy { why, fix } = remedy(runtime);
    format!(
        "likely cause: the remover is a stale owner, its own listener at this path was \
         already replaced, yet {why}; fix: {fix}"
    )
}

fn foreign_unlink(r: &Removal, rel: Relation, stale_owner: bool) -> String {
    let what = format!(
        "FOREIGN UNLINK: {} removed {} (inode {}), the file of {}, so clients can no longer \
         reach it by path",
        who(r.actor),
        quote(r.path),
        inode(r.file),
        r.socket_of_owner()
    );
    match stale_owner {
        true => format!("{what}; {}.", stale_owner_cause(r.actor.runtime)),
        false => format!(
            "{what} ({}); the remover did not bind the path again.",
            relation(rel)
        ),
    }
}

/// Why the policy refuses (or would), and the fix for the remover where there is one.
fn guard_reason(policy: GuardPolicy, remover: &Proc) -> (&'static str, String) {
    match policy {
        GuardPolicy::StaleOwner => (
            "policy stale_owner: the remover's own listener at this path had already been \
             replaced",
            format!("; fix the remover: {}", remedy(remover.runtime).fix),
        ),
        GuardPolicy::Foreign | GuardPolicy::Off => (
            "policy foreign: the remover is outside the owner set and not on the allow-list",
            String::new(),
        ),
    }
}

fn unlink_denied(g: &Guarded) -> String {
    let tried = match g.operation {
        RemovalOp::Unlink => "tried to remove",
        RemovalOp::Rename => "tried to rename another file over",
    };
    let (why, fix) = guard_reason(g.policy, &g.actor);
    format!(
        "UNLINK DENIED: {} {tried} {} (inode {}), the file of the listening socket of {}; \
         the guard refused it with EPERM ({why}), so the listener stays reachable{fix}.",
        who(&g.actor),
        quote(&g.path),
        inode(g.file),
        who(&g.victim)
    )
}

fn unlink_would_deny(g: &Guarded) -> String {
    let did = match g.operation {
        RemovalOp::Unlink => "removed",
        RemovalOp::Rename => "renamed another file over",
    };
    let (why, fix) = guard_reason(g.policy, &g.actor);
    format!(
        "UNLINK WOULD BE DENIED: {} {did} {} (inode {}), the file of the listening socket of \
         {}; the guard, in audit mode, let it through: enforcing, it would have refused it with \
         EPERM ({why}){fix}.",
        who(&g.actor),
        quote(&g.path),
        inode(g.file),
        who(&g.victim)
    )
}

fn replaced(r: &Removal, rel: Relation, foreign: bool, new_file: Option<FileId>) -> String {
    let new = new_file.map_or_else(|| "another file".into(), |f| format!("inode {}", inode(f)));
    match foreign {
        true => format!(
            "REPLACED: {} renamed {new} over {}, displacing inode {}, the file of {} ({}), so \
             clients can no longer reach it by path.",
            who(r.actor),
            quote(r.path),
            inode(r.file),
            r.socket_of_owner(),
            relation(rel)
        ),
        false => format!(
            "REPLACED: {}, an owner, renamed {new} over its own socket's path {}, displacing \
             inode {}: its old {} can no longer be reached by path and should be closed.",
            who(r.actor),
            quote(r.path),
            inode(r.file),
            socket(r.listening)
        ),
    }
}

/// The names a rename moved a socket's file between.
struct Renamed<'a> {
    from: Option<&'a str>,
    to: Option<&'a str>,
    /// An exchange: the file now at `from`.
    swapped_with: Option<FileId>,
}

fn moved(
    (actor, owner, rel): (&Proc, &Proc, Relation),
    foreign: bool,
    file: FileId,
    listening: bool,
    names: &Renamed,
) -> String {
    let known =
        |p: Option<&str>| p.map_or_else(|| "an unknown path".into(), |p| quote(p).to_string());
    let (from, to) = (known(names.from), known(names.to));
    let swap = names.swapped_with.map_or_else(String::new, |f| {
        format!(", swapping it with inode {}", inode(f))
    });
    let f = inode(file);
    let what = match foreign {
        true => format!(
            "{} renamed inode {f}, the file of the {} of {} ({}),",
            who(actor),
            socket(listening),
            who(owner),
            relation(rel)
        ),
        false => format!(
            "{}, an owner, renamed inode {f}, its socket's file,",
            who(actor)
        ),
    };
    format!("MOVED: {what} from {from} to {to}{swap}: clients of {from} no longer reach it.")
}

/// A removed socket's path served again: what a takeover or a hijack sentence tells.
struct ServedAgain<'a> {
    remover: &'a Proc,
    victim: &'a Proc,
    successor: &'a Proc,
    path: &'a str,
    old_file: FileId,
    new_file: FileId,
    how: HandOver,
    gap_ns: u64,
}

impl<'a> ServedAgain<'a> {
    /// The facts a takeover and a hijack share; `sentence` calls it for those two only.
    fn of(v: &'a Verdict) -> Self {
        match v {
            Verdict::Takeover {
                remover,
                predecessor: victim,
                successor,
                how,
                path,
                old_file,
                new_file,
                gap_ns,
                ..
            }
            | Verdict::Hijack {
                remover,
                victim,
                successor,
                how,
                path,
                old_file,
                new_file,
                gap_ns,
                ..
            } => ServedAgain {
                remover,
                victim,
                successor,
                path,
                old_file: *old_file,
                new_file: *new_file,
                how: *how,
                gap_ns: *gap_ns,
            },
            _ => unreachable!("only a takeover or a hijack is served again"),
        }
    }

    /// `{remover} removed P (inode X), the file of the live socket of {victim},` or, for a
    /// rename, `{remover} renamed inode Y over P (inode X), …`.
    fn removal(&self) -> String {
        let (path, old) = (quote(self.path), inode(self.old_file));
        let victim = who(self.victim);
        match self.how {
            HandOver::Rebind => format!(
                "{} removed {path} (inode {old}), the file of the live socket of {victim},",
                who(self.remover)
            ),
            HandOver::Rename => format!(
                "{} renamed inode {}, the socket file of {}, over {path} (inode {old}), the \
                 file of the live socket of {victim}:",
                who(self.remover),
                inode(self.new_file),
                who(self.successor)
            ),
        }
    }
}

fn takeover(s: &ServedAgain, served_by: ServedBy, successor_relation: Relation) -> String {
    let removal = s.removal();
    let (new, gap) = (inode(s.new_file), duration(s.gap_ns));
    let closing = "the old listener should close as its process shuts down.";
    match (s.how, served_by) {
        (HandOver::Rename, _) => format!(
            "TAKEOVER: {removal} a hand-over by the same workload (as HAProxy's reload does), \
             the path served throughout: nothing to fix; {closing}"
        ),
        (HandOver::Rebind, ServedBy::Owner) => format!(
            "TAKEOVER: {removal} and its owner {} bound the path again (inode {new}) {gap} \
             later (as a device plugin re-registers after kubelet empties its directory): \
             served again, nothing to fix.",
            who(s.successor)
        ),
        (HandOver::Rebind, ServedBy::Workload) => {
            let binder = match successor_relation {
                Relation::SameProcess => "bound".to_string(),
                r => format!("{} ({}) bound", who(s.successor), relation(r)),
            };
            format!(
                "TAKEOVER: {removal} and {binder} a new socket there (inode {new}) {gap} \
                 later: a healthy rollout of the same workload, nothing to fix; {closing}"
            )
        }
    }
}

fn hijack(s: &ServedAgain) -> String {
    let removal = s.removal();
    let (successor, victim) = (who(s.successor), who(s.victim));
    let served = match s.how {
        HandOver::Rebind => format!(
            " and {successor}, another workload, bound its own socket there (inode {}) {} \
             later:",
            inode(s.new_file),
            duration(s.gap_ns)
        ),
        HandOver::Rename => format!(" {successor} is another workload:"),
    };
    format!(
        "HIJACK: {removal}{served} clients of {victim} now reach another program's socket; \
         find out why {successor} serves {} and restart {victim} or remove that socket.",
        quote(s.path)
    )
}

/// `by` is who took the path over (a successor), else who removed the file.
fn orphan_opened(
    cause: OrphanCause,
    owner: &Proc,
    by: Option<&Proc>,
    path: Option<&str>,
    file: FileId,
) -> String {
    let path = path.map_or_else(|| "its path".into(), |p| quote(p).to_string());
    let (owner, file) = (who(owner), inode(file));
    let by = |verb: &str| by.map_or_else(String::new, |p| format!(" {verb} {}", who(p)));
    const UNREACHABLE: &str = "no client can reach it by path";
    match cause {
        OrphanCause::Unlinked => format!(
            "ORPHANED LISTENER: {owner} listens on inode {file}, whose path {path} was \
             removed{}: {UNREACHABLE} until its owner binds again or exits.",
            by("by")
        ),
        OrphanCause::Replaced => format!(
            "ORPHANED LISTENER: {owner} listens on inode {file}, whose path {path} was renamed \
             over{}: {UNREACHABLE} until its owner binds again or exits.",
            by("by")
        ),
        OrphanCause::ListenAfterRemoval => format!(
            "ORPHANED LISTENER: {owner} started listening on inode {file} after its path \
             {path} was removed{}: {UNREACHABLE}.",
            by("by")
        ),
        OrphanCause::Scan => format!(
            "ORPHANED LISTENER: a scan found {owner} listening on inode {file}, whose path \
             {path} no longer leads to it (removed while no agent watched, or its events were \
             lost): {UNREACHABLE}."
        ),
        OrphanCause::TakenOver => format!(
            "ORPHANED LISTENER: {owner} still listens on inode {file}, whose path {path} was \
             taken over{}: expected while the old process shuts down; if it lingers, its \
             shutdown is stuck.",
            by("by")
        ),
        OrphanCause::Hijacked => format!(
            "ORPHANED LISTENER: {owner} listens on inode {file}, whose path {path} is served \
             by another workload now{}: its clients reach that socket instead.",
            by(",")
        ),
    }
}

fn orphan_closed(
    duration_ns: u64,
    reason: CloseReason,
    owner: &Proc,
    path: Option<&str>,
    file: FileId,
) -> String {
    let once = path.map_or_else(String::new, |p| format!(" (once {})", quote(p)));
    let why = match reason {
        CloseReason::Released => "it was closed",
        CloseReason::Rebound => "its owner bound a new socket at the path",
        CloseReason::Exited => "its last owner exited",
        CloseReason::Relinked => "its path leads to it again",
    };
    format!(
        "ORPHAN CLOSED: the orphaned listener of {} on inode {}{once} ended after {}: {why}.",
        who(owner),
        inode(file),
        duration(duration_ns)
    )
}

/// `(binder, removed_by)`: the file's last binder and its remover, where known.
fn stale_connect(
    kind: StaleKind,
    actor: &Proc,
    path: &str,
    file: Option<FileId>,
    (binder, removed_by): (Option<&Proc>, Option<&Proc>),
) -> String {
    let refused = format!(
        "STALE CONNECT: {} was refused (ECONNREFUSED) connecting to {}",
        who(actor),
        quote(path)
    );
    let bound_by = binder.map_or_else(String::new, |p| format!(" (last bound by {})", who(p)));
    let file = inode_or_unknown(file);
    match kind {
        StaleKind::UnlinkedPinned => format!(
            "{refused}: it reached {file}, a removed socket file{} that no socket listens \
             on{bound_by}, kept reachable by a bind mount of the file; likely cause: the socket \
             file itself is bind-mounted into the client's mount namespace (a hostPath of type \
             Socket, a volume of the file), so the daemon's new socket stays out of its view; \
             fix: mount the socket's directory, not the file.",
            removed_by.map_or_else(String::new, |p| format!(" (removed by {})", who(p)))
        ),
        StaleKind::DeadListener => format!(
            "{refused}: {file} is a socket file no socket listens on{bound_by}; likely cause: \
             its daemon closed the socket or exited without removing the file; fix: restart \
             the daemon, and have it remove its socket file on shutdown."
        ),
    }
}

fn stale_socket_file(
    binder: &Proc,
    released_by: Option<&Proc>,
    path: Option<&str>,
    file: FileId,
) -> String {
    let closer = match released_by {
        Some(p) if p.tgid == binder.tgid => "it".to_string(),
        Some(p) => who(p),
        None => "its last holder".to_string(),
    };
    format!(
        "STALE SOCKET FILE: {} (inode {}), bound by {}, was left behind when {closer} closed \
         the socket without removing the file: clients connecting get ECONNREFUSED; fix: \
         remove the file, and have the daemon remove its socket file on shutdown (or before \
         it binds).",
        path.map_or_else(|| "a socket file".into(), |p| quote(p).to_string()),
        inode(file),
        who(binder)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{DecidedBy, Fidelity, Workload};

    const P: &str = "/run/multus/multus.sock";

    fn proc(tgid: u32, comm: &str, pod: Option<&str>) -> Proc {
        Proc {
            tgid,
            pid: tgid + 1,
            comm: comm.into(),
            cgroup_id: u64::from(tgid),
            workload: pod.map(|name| Workload {
                pod_name: Some(name.into()),
                namespace: Some("kube-system".into()),
                ..Workload::default()
            }),
            exe: None,
            runtime: None,
        }
    }

    /// The old daemon (a Go program), its successor and a client.
    fn old() -> Proc {
        Proc {
            runtime: Some(Runtime::Go),
            ..proc(100, "golistener", Some("multus-a"))
        }
    }
    fn new() -> Proc {
        proc(200, "multus", Some("multus-b"))
    }
    fn client() -> Proc {
        proc(300, "kubelet", None)
    }

    fn file(ino: u64) -> FileId {
        FileId { dev: 2049, ino }
    }

    fn foreign_unlink(stale_owner: bool) -> Verdict {
        Verdict::ForeignUnlink {
            ts_ns: 5,
            actor: old(),
            victim: new(),
            relation: Relation::SameWorkloadOtherPod,
            path: P.into(),
            victim_path: Some(P.into()),
            file: file(2),
            sock_ino: 22,
            listening: true,
            victim_bound_ns: 4,
            decided_by: DecidedBy::Kernel,
            fidelity: Fidelity::Exact,
            stale_owner,
        }
    }

    #[test]
    fn a_stale_owners_unlink_names_both_pods_the_inode_the_cause_and_the_fix() {
        assert_eq!(
            sentence(&foreign_unlink(true)),
            "FOREIGN UNLINK: golistener (pid 100, pod kube-system/multus-a) removed \
             /run/multus/multus.sock (inode 2049:2), the file of the listening socket of multus \
             (pid 200, pod kube-system/multus-b), so clients can no longer reach it by path; \
             likely cause: the remover is a stale owner, its own listener at this path was \
             already replaced, yet its Close unlinked the path (Go's net.UnixListener unlinks \
             its path on Close); fix: call SetUnlinkOnClose(false) or remove only your own \
             inode."
        );
    }

    /// The cause and fix of a stale owner's unlink by a remover of `runtime`.
    fn stale_owner_sentence(runtime: Option<Runtime>) -> String {
        let mut v = foreign_unlink(true);
        if let Verdict::ForeignUnlink { actor, .. } = &mut v {
            actor.runtime = runtime;
        }
        let s = sentence(&v);
        let cause = s.split_once("; likely cause: ").expect("a cause").1;
        cause.to_owned()
    }

    #[test]
    fn a_stale_owners_cause_and_fix_are_its_runtimes() {
        let stale = "the remover is a stale owner, its own listener at this path was already \
                     replaced, yet";
        let cases = [
            (
                Some(Runtime::Node),
                "its server.close() unlinked the path (Node.js: libuv unlinks a pipe server's \
                 path on close, whichever file is there by then); fix: do not rely on \
                 server.close() to remove the socket file: exit without it, and remove the \
                 path only before listen, after checking its inode.",
            ),
            (
                Some(Runtime::Socat),
                "its exit unlinked the path (socat's unlink-close, on by default for UNIX \
                 sockets, removes the path when it closes the address, SIGTERM included); fix: \
                 give the listener unlink-close=0, and use unlink-early only on a path it owns.",
            ),
            (
                Some(Runtime::Python),
                "it unlinked the path (Python's asyncio unlinks a server's path on close only \
                 since 3.13, and only if the inode is still its own: an os.unlink, or an older \
                 cleanup, does not check); fix: compare the path's st_ino with your socket's \
                 before os.unlink.",
            ),
            (
                None,
                "it unlinked a path whose socket it no longer owned; fix: remove only your own \
                 inode (compare st_ino before unlink).",
            ),
        ];
        for (runtime, cause) in cases {
            assert_eq!(
                stale_owner_sentence(runtime),
                format!("{stale} {cause}"),
                "{runtime:?}"
            );
        }
    }

    #[test]
    fn a_denial_names_who_tried_whose_listener_was_kept_and_the_policy() {
        let guarded = |operation, policy| Guarded {
            ts_ns: 5,
            actor: old(),
            victim: new(),
            operation,
            policy,
            path: P.into(),
            file: file(2),
            sock_ino: 22,
        };
        let denied = |operation, policy| Verdict::UnlinkDenied(guarded(operation, policy));
        assert_eq!(
            sentence(&denied(RemovalOp::Unlink, GuardPolicy::StaleOwner)),
            "UNLINK DENIED: golistener (pid 100, pod kube-system/multus-a) tried to remove \
             /run/multus/multus.sock (inode 2049:2), the file of the listening socket of multus \
             (pid 200, pod kube-system/multus-b); the guard refused it with EPERM (policy \
             stale_owner: the remover's own listener at this path had already been replaced), \
             so the listener stays reachable; fix the remover: call SetUnlinkOnClose(false) or \
             remove only your own inode."
        );
        assert_eq!(
            sentence(&denied(RemovalOp::Rename, GuardPolicy::Foreign)),
            "UNLINK DENIED: golistener (pid 100, pod kube-system/multus-a) tried to rename \
             another file over /run/multus/multus.sock (inode 2049:2), the file of the \
             listening socket of multus (pid 200, pod kube-system/multus-b); the guard refused \
             it with EPERM (policy foreign: the remover is outside the owner set and not on the \
             allow-list), so the listener stays reachable."
        );
        let audited = Verdict::UnlinkWouldDeny(guarded(RemovalOp::Unlink, GuardPolicy::StaleOwner));
        assert_eq!(
            sentence(&audited),
            "UNLINK WOULD BE DENIED: golistener (pid 100, pod kube-system/multus-a) removed \
             /run/multus/multus.sock (inode 2049:2), the file of the listening socket of multus \
             (pid 200, pod kube-system/multus-b); the guard, in audit mode, let it through: \
             enforcing, it would have refused it with EPERM (policy stale_owner: the remover's \
             own listener at this path had already been replaced); fix the remover: call \
             SetUnlinkOnClose(false) or remove only your own inode."
        );
        let mut by_socat = denied(RemovalOp::Unlink, GuardPolicy::StaleOwner);
        if let Verdict::UnlinkDenied(g) = &mut by_socat {
            g.actor.runtime = Some(Runtime::Socat);
        }
        assert!(
            sentence(&by_socat).ends_with(
                "so the listener stays reachable; fix the remover: give the listener \
                 unlink-close=0, and use unlink-early only on a path it owns."
            ),
            "{}",
            sentence(&by_socat)
        );
    }

    #[test]
    fn any_other_foreign_unlink_says_how_the_two_relate() {
        assert_eq!(
            sentence(&foreign_unlink(false)),
            "FOREIGN UNLINK: golistener (pid 100, pod kube-system/multus-a) removed \
             /run/multus/multus.sock (inode 2049:2), the file of the listening socket of multus \
             (pid 200, pod kube-system/multus-b), so clients can no longer reach it by path \
             (same workload, another pod); the remover did not bind the path again."
        );
    }

    fn replaced(foreign: bool) -> Verdict {
        Verdict::Replaced {
            ts_ns: 5,
            actor: client(),
            victim: new(),
            relation: Relation::HostProcess,
            foreign,
            path: P.into(),
            victim_path: Some(P.into()),
            file: file(2),
            new_file: foreign.then(|| file(3)),
            sock_ino: 22,
            listening: true,
            victim_bound_ns: 4,
            decided_by: DecidedBy::Engine,
            fidelity: Fidelity::PathOnly,
        }
    }

    #[test]
    fn a_rename_over_says_which_file_displaced_which() {
        assert_eq!(
            sentence(&replaced(true)),
            "REPLACED: kubelet (pid 300) renamed inode 2049:3 over /run/multus/multus.sock, \
             displacing inode 2049:2, the file of the listening socket of multus (pid 200, pod \
             kube-system/multus-b) (one on the host, one in a container), so clients can no \
             longer reach it by path."
        );
        assert_eq!(
            sentence(&replaced(false)),
            "REPLACED: kubelet (pid 300), an owner, renamed another file over its own socket's \
             path /run/multus/multus.sock, displacing inode 2049:2: its old listening socket \
             can no longer be reached by path and should be closed."
        );
    }

    fn moved(foreign: bool, exchanged_with: Option<FileId>) -> Verdict {
        Verdict::Moved {
            ts_ns: 5,
            actor: client(),
            owner: new(),
            relation: Relation::HostProcess,
            foreign,
            file: file(2),
            sock_ino: 22,
            listening: false,
            from: Some(P.into()),
            to: None,
            exchanged_with,
            fidelity: Fidelity::Exact,
        }
    }

    #[test]
    fn a_move_names_both_paths_and_a_swapped_file() {
        assert_eq!(
            sentence(&moved(true, Some(file(9)))),
            "MOVED: kubelet (pid 300) renamed inode 2049:2, the file of the socket of multus \
             (pid 200, pod kube-system/multus-b) (one on the host, one in a container), from \
             /run/multus/multus.sock to an unknown path, swapping it with inode 2049:9: clients \
             of /run/multus/multus.sock no longer reach it."
        );
        assert_eq!(
            sentence(&moved(false, None)),
            "MOVED: kubelet (pid 300), an owner, renamed inode 2049:2, its socket's file, from \
             /run/multus/multus.sock to an unknown path: clients of /run/multus/multus.sock no \
             longer reach it."
        );
    }

    fn takeover(successor: Proc, successor_relation: Relation) -> Verdict {
        Verdict::Takeover {
            ts_ns: 5,
            remover: new(),
            predecessor: old(),
            successor,
            relation: Relation::SameWorkloadOtherPod,
            successor_relation,
            served_by: ServedBy::Workload,
            how: HandOver::Rebind,
            path: P.into(),
            old_file: file(1),
            new_file: file(2),
            old_sock_ino: 11,
            new_sock_ino: 22,
            gap_ns: 1_500_000,
            decided_by: DecidedBy::Kernel,
            fidelity: Fidelity::Exact,
        }
    }

    #[test]
    fn a_takeover_says_it_is_healthy() {
        assert_eq!(
            sentence(&takeover(new(), Relation::SameProcess)),
            "TAKEOVER: multus (pid 200, pod kube-system/multus-b) removed \
             /run/multus/multus.sock (inode 2049:1), the file of the live socket of golistener \
             (pid 100, pod kube-system/multus-a), and bound a new socket there (inode 2049:2) \
             1 ms later: a healthy rollout of the same workload, nothing to fix; the old \
             listener should close as its process shuts down."
        );
        let sidecar = proc(201, "init", Some("multus-b"));
        assert!(sentence(&takeover(sidecar, Relation::SamePod)).contains(
            ", and init (pid 201, pod kube-system/multus-b) (same pod, another container) \
                 bound a new socket there"
        ));
    }

    fn opened(cause: OrphanCause, removed_by: Option<Proc>, successor: Option<Proc>) -> Verdict {
        Verdict::OrphanOpened {
            ts_ns: 5,
            since_ns: 5,
            since_exact: true,
            cause,
            owner: new(),
            removed_by,
            successor,
            path: Some(P.into()),
            file: file(2),
            sock_ino: 22,
        }
    }

    #[test]
    fn an_orphan_says_why_nobody_reaches_it() {
        let owner = "ORPHANED LISTENER: multus (pid 200, pod kube-system/multus-b)";
        let cases = [
            (
                opened(OrphanCause::Unlinked, Some(old()), None),
                format!(
                    "{owner} listens on inode 2049:2, whose path /run/multus/multus.sock was \
                     removed by golistener (pid 100, pod kube-system/multus-a): no client can \
                     reach it by path until its owner binds again or exits."
                ),
            ),
            (
                opened(OrphanCause::Replaced, None, None),
                format!(
                    "{owner} listens on inode 2049:2, whose path /run/multus/multus.sock was \
                     renamed over: no client can reach it by path until its owner binds again \
                     or exits."
                ),
            ),
            (
                opened(OrphanCause::ListenAfterRemoval, Some(client()), None),
                format!(
                    "{owner} started listening on inode 2049:2 after its path \
                     /run/multus/multus.sock was removed by kubelet (pid 300): no client can \
                     reach it by path."
                ),
            ),
            (
                opened(OrphanCause::Scan, None, None),
                "ORPHANED LISTENER: a scan found multus (pid 200, pod kube-system/multus-b) \
                 listening on inode 2049:2, whose path /run/multus/multus.sock no longer leads \
                 to it (removed while no agent watched, or its events were lost): no client can \
                 reach it by path."
                    .to_string(),
            ),
            (
                opened(OrphanCause::TakenOver, Some(client()), Some(old())),
                format!(
                    "{owner} still listens on inode 2049:2, whose path /run/multus/multus.sock \
                     was taken over by golistener (pid 100, pod kube-system/multus-a): expected \
                     while the old process shuts down; if it lingers, its shutdown is stuck."
                ),
            ),
        ];
        for (v, text) in cases {
            assert_eq!(sentence(&v), text);
        }
    }

    #[test]
    fn an_orphans_end_says_how_long_and_why() {
        let closed = |reason, path: Option<&str>| Verdict::OrphanClosed {
            ts_ns: 9,
            since_ns: 5,
            duration_ns: 65_000_000_000,
            reason,
            owner: new(),
            path: path.map(str::to_owned),
            file: file(2),
            sock_ino: 22,
        };
        let start = "ORPHAN CLOSED: the orphaned listener of multus (pid 200, pod \
                     kube-system/multus-b) on inode 2049:2";
        let cases = [
            (
                closed(CloseReason::Released, Some(P)),
                format!(
                    "{start} (once /run/multus/multus.sock) ended after 1 min 5 s: it was \
                     closed."
                ),
            ),
            (
                closed(CloseReason::Rebound, None),
                format!("{start} ended after 1 min 5 s: its owner bound a new socket at the path."),
            ),
            (
                closed(CloseReason::Exited, None),
                format!("{start} ended after 1 min 5 s: its last owner exited."),
            ),
            (
                closed(CloseReason::Relinked, None),
                format!("{start} ended after 1 min 5 s: its path leads to it again."),
            ),
        ];
        for (v, text) in cases {
            assert_eq!(sentence(&v), text);
        }
    }

    fn stale_connect(kind: StaleKind, file: Option<FileId>) -> Verdict {
        Verdict::StaleConnect {
            ts_ns: 5,
            kind,
            actor: client(),
            path: "/var/lib/kubelet/multus.sock".into(),
            file,
            binder: Some(old()),
            removed_by: Some(new()),
            decided_by: DecidedBy::Kernel,
        }
    }

    #[test]
    fn a_stale_connect_through_a_bind_mount_says_mount_the_directory() {
        assert_eq!(
            sentence(&stale_connect(StaleKind::UnlinkedPinned, Some(file(1)))),
            "STALE CONNECT: kubelet (pid 300) was refused (ECONNREFUSED) connecting to \
             /var/lib/kubelet/multus.sock: it reached inode 2049:1, a removed socket file \
             (removed by multus (pid 200, pod kube-system/multus-b)) that no socket listens on \
             (last bound by golistener (pid 100, pod kube-system/multus-a)), kept reachable by \
             a bind mount of the file; likely cause: the socket file itself is bind-mounted into \
             the client's mount namespace (a hostPath of type Socket, a volume of the file), so \
             the daemon's new socket stays out of its view; fix: mount the socket's directory, \
             not the file."
        );
    }

    #[test]
    fn a_stale_connect_to_a_dead_daemons_file_says_restart_it() {
        assert_eq!(
            sentence(&stale_connect(StaleKind::DeadListener, None)),
            "STALE CONNECT: kubelet (pid 300) was refused (ECONNREFUSED) connecting to \
             /var/lib/kubelet/multus.sock: an unknown inode is a socket file no socket listens \
             on (last bound by golistener (pid 100, pod kube-system/multus-a)); likely cause: \
             its daemon closed the socket or exited without removing the file; fix: restart \
             the daemon, and have it remove its socket file on shutdown."
        );
    }

    #[test]
    fn a_stale_socket_file_names_its_binder_and_closer() {
        let stale = |released_by| Verdict::StaleSocketFile {
            ts_ns: 9,
            binder: old(),
            released_by,
            path: Some(P.into()),
            file: file(1),
            sock_ino: 11,
            bound_ns: 1,
            released_ns: 8,
        };
        let end = "closed the socket without removing the file: clients connecting get \
                   ECONNREFUSED; fix: remove the file, and have the daemon remove its socket \
                   file on shutdown (or before it binds).";
        let start = "STALE SOCKET FILE: /run/multus/multus.sock (inode 2049:1), bound by \
                     golistener (pid 100, pod kube-system/multus-a), was left behind when";
        assert_eq!(sentence(&stale(Some(old()))), format!("{start} it {end}"));
        assert_eq!(
            sentence(&stale(Some(client()))),
            format!("{start} kubelet (pid 300) {end}")
        );
        assert_eq!(
            sentence(&stale(None)),
            format!("{start} its last holder {end}")
        );
    }

    #[test]
    fn a_line_starts_with_the_time_and_the_node() {
        let v = foreign_unlink(true);
        let line = super::super::line(1_796_232_001_123_456_789, "node-1", &sentence(&v));
        assert!(
            line.starts_with("2026-12-02T17:20:01.123Z node-1 FOREIGN UNLINK: golistener"),
            "{line}"
        );
        let bare = super::super::line(1_796_232_001_123_456_789, "", "X");
        assert_eq!(bare, "2026-12-02T17:20:01.123Z X");
    }
}
