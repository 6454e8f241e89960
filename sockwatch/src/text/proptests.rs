//! Whatever names the processes, pods and paths carry (newlines, a forged line, escape
//! sequences, C1 controls, bidi controls, multibyte characters cut anywhere, U+FFFD), every
//! sentence `run --format text` writes is one inert line, `explain`'s timeline (from the
//! agent's JSON answer, or from a scan) is inert line by line, and `scan`'s table is one inert
//! line per finding. None of them panics.
#![expect(
    clippy::indexing_slicing,
    reason = "the fixtures index the strings they were generated with; a panic fails the test"
)]
use proptest::prelude::*;

use super::{
    line,
    timeline::{PathAnswer, SocketView, scanned, timeline},
    verdict::sentence,
};
use crate::{
    engine::{
        CloseReason, DecidedBy, Fidelity, FileId, GuardPolicy, Guarded, HandOver, HistoryEntry,
        HistoryEvent, Orphan, OrphanCause, Proc, Relation, Released, Removal, RemovalHow,
        RemovalOp, ServedBy, SocketState, StaleKind, Verdict, Workload,
    },
    quote::inert,
    scan::{
        Counts, FileType, Findings, Holder, OnDisk, OrphanCause as ScanCause, OrphanedListener,
        ScanReport, ScannedSocket, SocketFileMount, StaleBindMount, StaleCause, StaleSocketFile,
        report::finding_lines,
    },
};

/// A string someone who can name a file, a process or a pod could choose.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        r"[a-z/.\n\t\r\x1b\x07\x7f\x{80}-\x{9f}\\'é€😀\x{FFFD}\x{2028}\x{202E}\[\];0-9 ]{0,24}",
        Just("x\n2026-12-02T21:35:27.906Z vm FOREIGN UNLINK: forged".to_owned()),
        Just("\x1b]0;title\x07\x1b[2J".to_owned()),
        // 12 bytes end inside a character: a container id cut by byte index panicked.
        Just("aéééééééééééé".to_owned()),
        Just(String::new()),
    ]
}

/// The strings every fixture is named with, by index.
const STRINGS: usize = 16;

fn strings() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec(hostile(), STRINGS)
}

fn file(ino: u64) -> FileId {
    FileId { dev: 2049, ino }
}

/// A process in a pod, one in a workload, one in a container, one without a comm, each
/// named by `u`; and one known only by its tgid.
fn procs(u: &[String]) -> [Proc; 5] {
    let proc = |tgid, comm: &String, workload| Proc {
        tgid,
        pid: tgid,
        comm: comm.clone(),
        cgroup_id: 7,
        workload: Some(workload),
        exe: Some(comm.clone()),
        runtime: None,
    };
    let some = |i: usize| Some(u[i].clone());
    [
        proc(
            100,
            &u[0],
            Workload {
                container_id: some(1),
                pod_uid: some(2),
                pod_name: some(3),
                namespace: some(4),
                workload: some(5),
            },
        ),
        proc(
            200,
            &u[6],
            Workload {
                namespace: some(4),
                workload: some(7),
                ..Workload::default()
            },
        ),
        proc(
            300,
            &u[8],
            Workload {
                container_id: some(9),
                ..Workload::default()
            },
        ),
        proc(
            400,
            &String::new(),
            Workload {
                pod_name: some(10),
                ..Workload::default()
            },
        ),
        Proc::unknown(500),
    ]
}

/// Every verdict in every form its sentence takes, named by `u`, timed from `ts`.
fn verdicts(u: &[String], ts: u64) -> Vec<Verdict> {
    let [a, b, c, d, e] = procs(u);
    let (path, other) = (u[11].clone(), u[12].clone());
    let mut out = Vec::new();
    for stale_owner in [true, false] {
        out.push(Verdict::ForeignUnlink {
            ts_ns: 0,
            actor: a.clone(),
            victim: b.clone(),
            relation: Relation::Other,
            path: path.clone(),
            victim_path: Some(other.clone()),
            file: file(1),
            sock_ino: 11,
            listening: stale_owner,
            victim_bound_ns: 1,
            decided_by: DecidedBy::Kernel,
            fidelity: Fidelity::Exact,
            stale_owner,
        });
    }
    for operation in [RemovalOp::Unlink, RemovalOp::Rename] {
        for policy in [GuardPolicy::StaleOwner, GuardPolicy::Foreign] {
            let guarded = Guarded {
                ts_ns: 0,
                actor: c.clone(),
                victim: d.clone(),
                operation,
                policy,
                path: path.clone(),
                file: file(1),
                sock_ino: 11,
            };
            out.push(Verdict::UnlinkDenied(guarded.clone()));
            out.push(Verdict::UnlinkWouldDeny(guarded));
        }
    }
    for foreign in [true, false] {
        out.push(Verdict::Replaced {
            ts_ns: 0,
            actor: e.clone(),
            victim: a.clone(),
            relation: Relation::HostProcess,
            foreign,
            path: path.clone(),
            victim_path: None,
            file: file(1),
            new_file: foreign.then(|| file(2)),
            sock_ino: 11,
            listening: true,
            victim_bound_ns: 1,
            decided_by: DecidedBy::Engine,
            fidelity: Fidelity::PathOnly,
        });
        for (from, to) in [(Some(&path), Some(&other)), (None, None)] {
            out.push(Verdict::Moved {
                ts_ns: 0,
                actor: b.clone(),
                owner: c.clone(),
                relation: Relation::SameCgroup,
                foreign,
                file: file(1),
                sock_ino: 11,
                listening: foreign,
                from: from.cloned(),
                to: to.cloned(),
                exchanged_with: foreign.then(|| file(3)),
                fidelity: Fidelity::Exact,
            });
        }
    }
    let forms = [
        (Relation::SameProcess, ServedBy::Workload, HandOver::Rebind),
        (Relation::SamePod, ServedBy::Workload, HandOver::Rebind),
        (Relation::SameProcess, ServedBy::Owner, HandOver::Rebind),
        (Relation::SameProcess, ServedBy::Workload, HandOver::Rename),
    ];
    for (successor_relation, served_by, how) in forms {
        out.push(Verdict::Takeover {
            ts_ns: 0,
            remover: d.clone(),
            predecessor: a.clone(),
            successor: b.clone(),
            relation: Relation::SameWorkloadOtherPod,
            successor_relation,
            served_by,
            how,
            path: path.clone(),
            old_file: file(1),
            new_file: file(2),
            old_sock_ino: 11,
            new_sock_ino: 22,
            gap_ns: 1_500_000,
            decided_by: DecidedBy::Kernel,
            fidelity: Fidelity::Exact,
        });
    }
    for how in [HandOver::Rebind, HandOver::Rename] {
        out.push(Verdict::Hijack {
            ts_ns: 0,
            remover: d.clone(),
            victim: a.clone(),
            successor: b.clone(),
            relation: Relation::Other,
            how,
            path: path.clone(),
            victim_path: Some(path.clone()),
            old_file: file(1),
            new_file: file(2),
            old_sock_ino: 11,
            new_sock_ino: 22,
            gap_ns: 1_500_000,
            decided_by: DecidedBy::Kernel,
            fidelity: Fidelity::Exact,
        });
    }
    let causes = [
        OrphanCause::Unlinked,
        OrphanCause::Replaced,
        OrphanCause::ListenAfterRemoval,
        OrphanCause::Scan,
        OrphanCause::TakenOver,
        OrphanCause::Hijacked,
    ];
    for (cause, path) in causes
        .into_iter()
        .zip([Some(&path), None].into_iter().cycle())
    {
        out.push(Verdict::OrphanOpened {
            ts_ns: 0,
            since_ns: 1,
            since_exact: true,
            cause,
            owner: a.clone(),
            removed_by: Some(c.clone()),
            successor: (cause == OrphanCause::TakenOver).then(|| d.clone()),
            path: path.cloned(),
            file: file(1),
            sock_ino: 11,
        });
    }
    let reasons = [
        CloseReason::Released,
        CloseReason::Rebound,
        CloseReason::Exited,
        CloseReason::Relinked,
    ];
    for (reason, path) in reasons
        .into_iter()
        .zip([Some(&path), None].into_iter().cycle())
    {
        out.push(Verdict::OrphanClosed {
            ts_ns: 0,
            since_ns: 1,
            duration_ns: 65_000_000_000,
            reason,
            owner: e.clone(),
            path: path.cloned(),
            file: file(1),
            sock_ino: 11,
        });
    }
    for kind in [StaleKind::UnlinkedPinned, StaleKind::DeadListener] {
        out.push(Verdict::StaleConnect {
            ts_ns: 0,
            kind,
            actor: c.clone(),
            path: other.clone(),
            file: (kind == StaleKind::UnlinkedPinned).then(|| file(1)),
            binder: Some(a.clone()),
            removed_by: Some(b.clone()),
            decided_by: DecidedBy::Kernel,
        });
    }
    for released_by in [Some(a.clone()), Some(d.clone()), None] {
        out.push(Verdict::StaleSocketFile {
            ts_ns: 0,
            binder: a.clone(),
            path: released_by.is_some().then(|| path.clone()),
            released_by,
            file: file(1),
            sock_ino: 11,
            bound_ns: 1,
            released_ns: 2,
        });
    }
    for (i, v) in (0..).zip(&mut out) {
        set_ts(v, ts + i);
    }
    out
}

fn set_ts(v: &mut Verdict, ts: u64) {
    match v {
        Verdict::ForeignUnlink { ts_ns, .. }
        | Verdict::UnlinkDenied(Guarded { ts_ns, .. })
        | Verdict::UnlinkWouldDeny(Guarded { ts_ns, .. })
        | Verdict::Replaced { ts_ns, .. }
        | Verdict::Moved { ts_ns, .. }
        | Verdict::Takeover { ts_ns, .. }
        | Verdict::Hijack { ts_ns, .. }
        | Verdict::OrphanOpened { ts_ns, .. }
        | Verdict::OrphanClosed { ts_ns, .. }
        | Verdict::StaleConnect { ts_ns, .. }
        | Verdict::StaleSocketFile { ts_ns, .. } => *ts_ns = ts,
    }
}

const HISTORY: [HistoryEvent; 21] = [
    HistoryEvent::Bound,
    HistoryEvent::Listen,
    HistoryEvent::FdReceived,
    HistoryEvent::Forked,
    HistoryEvent::OwnerUnlink,
    HistoryEvent::CleanedUp,
    HistoryEvent::LinkRemoved,
    HistoryEvent::ForeignUnlink,
    HistoryEvent::RemovalDenied,
    HistoryEvent::TakenOver,
    HistoryEvent::Hijacked,
    HistoryEvent::TookOver,
    HistoryEvent::Replaced,
    HistoryEvent::Moved,
    HistoryEvent::OrphanOpened,
    HistoryEvent::OrphanClosed,
    HistoryEvent::Released,
    HistoryEvent::OwnerExited,
    HistoryEvent::ConnectRefused,
    HistoryEvent::StaleConnect,
    HistoryEvent::Scanned,
];

/// A socket file in each state `explain` tells apart (serving, orphaned, open but unlinked,
/// stale, gone), each with every history line, by each kind of process and by nobody known.
fn sockets(u: &[String]) -> Vec<SocketView> {
    let [a, b, c, d, e] = procs(u);
    let tgids = [a.tgid, b.tgid, c.tgid, d.tgid, e.tgid, 0, 999];
    let states = [
        (true, true, false),
        (true, false, true),
        (true, false, false),
    ]
    .into_iter()
    .chain([(false, true, false), (false, false, false)]);
    (0..)
        .zip(states)
        .map(|(i, (live, linked, orphan))| {
            let mut state = *SocketState::new(file(i + 1), 10 * (i + 1), a.clone(), 1);
            state.bind_path = Some(u[11].clone());
            state.paths = vec![u[11].clone(), u[12].clone()];
            state.listening = i % 2 == 0;
            state.history = (0..)
                .zip(HISTORY)
                .map(|(n, event)| HistoryEntry {
                    ts_ns: 1 + n,
                    tgid: tgids[usize::try_from(n).expect("small") % tgids.len()],
                    event,
                })
                .collect();
            state.released = (!live).then(|| Released {
                ts_ns: 50,
                by: Some(b.clone()),
            });
            state.removed = (!linked).then(|| Removal {
                ts_ns: 40,
                by: Some(c.clone()),
                how: RemovalHow::Unlinked,
                foreign: Some(true),
            });
            state.orphan = orphan.then(|| {
                Box::new(Orphan {
                    since_ns: 40,
                    since_exact: true,
                    cause: OrphanCause::Unlinked,
                    removed_by: Some(d.clone()),
                    successor: Some(b.clone()),
                })
            });
            let owners = match i {
                0 => Vec::new(),
                _ => vec![a.clone(), e.clone()],
            };
            SocketView { state, owners }
        })
        .collect()
}

/// A scan's view: a socket at `u[11]` in each state, and one finding of each kind there.
fn report(u: &[String]) -> ScanReport {
    let holder = |tgid| Holder {
        tgid,
        comm: u[0].clone(),
        cgroup: u[13].clone(),
        cgroup_id: Some(7),
    };
    let holders = vec![holder(100), holder(200)];
    let states = [
        (Some(false), true),
        (Some(false), false),
        (Some(true), true),
        (Some(true), false),
        (None, true),
    ];
    let sockets = (1..)
        .zip(states)
        .map(|(ino, (file_linked, listening))| ScannedSocket {
            sock_ino: ino,
            file: Some(file(ino)),
            ino_low32: ino % 2 == 0,
            path: u[11].clone(),
            listening,
            sock_type: 1,
            state: 10,
            holders: holders.clone(),
            file_linked,
            dir: None,
            outside_watch: false,
        })
        .collect();
    let orphan = |cause| OrphanedListener {
        path: u[11].clone(),
        sock_ino: 2,
        file: file(2),
        ino_low32: false,
        cause,
        pending: Some(1),
        backlog: Some(8),
        holders: holders.clone(),
    };
    let stale = |cause| StaleSocketFile {
        path: u[11].clone(),
        file: file(3),
        cause,
        holders: holders.clone(),
    };
    let findings = Findings {
        orphaned_listeners: vec![
            orphan(ScanCause::Unlinked),
            orphan(ScanCause::Replaced { now: file(4) }),
        ],
        stale_socket_files: vec![
            stale(StaleCause::NoSocket),
            stale(StaleCause::NotListening {
                sock_inos: vec![5, 6],
            }),
        ],
        stale_bind_mounts: vec![StaleBindMount {
            mount_point: u[11].clone(),
            source: u[12].clone(),
            source_dev: u[14].clone(),
            file: file(5),
            nlink: 0,
            mntns: 4_026_532_000,
            served_by: None,
            processes: holders.clone(),
            process_count: 3,
        }],
        socket_file_mounts: vec![SocketFileMount {
            mount_point: u[12].clone(),
            source: u[11].clone(),
            source_dev: u[14].clone(),
            file: file(6),
            mntns: 4_026_532_001,
            pid: 42,
            served_by: Some(7),
            workload: procs(u)[0].workload.clone(),
            processes: holders.clone(),
            process_count: 2,
            fix: crate::scan::SOCKET_FILE_MOUNT_FIX,
            watch: Some(0),
        }],
    };
    ScanReport {
        sockets,
        findings,
        counts: Counts::default(),
        warnings: Vec::new(),
        complete: true,
        unreadable: None,
    }
}

/// What the agent found at the path, by `pick`: nothing looked up, each kind, or an error
/// holding one of the hostile strings.
fn on_disk(u: &[String], pick: usize) -> Option<OnDisk> {
    let file = FileId { dev: 2049, ino: 1 };
    [
        None,
        Some(OnDisk::Absent),
        Some(OnDisk::Socket { file }),
        Some(OnDisk::Socket {
            file: FileId { dev: 2049, ino: 77 },
        }),
        Some(OnDisk::Other {
            file_type: FileType::Directory,
        }),
        Some(OnDisk::Unreadable {
            error: u[4].clone(),
        }),
    ]
    .into_iter()
    .nth(pick)
    .flatten()
}

/// `text` is one line a terminal shows as it is: no control, no line break of any kind.
fn one_inert_line(text: &str) -> Result<(), TestCaseError> {
    prop_assert!(inert(text), "not inert: {text:?}");
    prop_assert_eq!(text.lines().count(), 1, "not one line: {:?}", text);
    Ok(())
}

proptest! {
    #[test]
    fn every_sentence_is_one_inert_line(u in strings(), wall in any::<u64>()) {
        let node = &u[15];
        for v in verdicts(&u, 10_000) {
            let s = sentence(&v);
            one_inert_line(&s)?;
            one_inert_line(&line(wall, node, &s))?;
            one_inert_line(&line(wall, "", &s))?;
        }
    }

    #[test]
    fn every_timeline_line_is_inert_one_per_step(
        u in strings(),
        omitted in 0usize..3,
        disk in 0usize..6,
    ) {
        let kept = verdicts(&u, 10_000);
        let on_disk = on_disk(&u, disk);
        let answer = PathAnswer {
            path: u[11].clone(),
            node: u[15].clone(),
            boot_to_wall_ns: 1_796_232_000_000_000_000,
            sockets: sockets(&u),
            sockets_omitted: omitted,
            verdicts: kept,
            on_disk: on_disk.clone(),
        };
        // As `explain` reads it: the agent's JSON answer.
        let served = serde_json::to_string(&answer).expect("serializes");
        let read: PathAnswer = serde_json::from_str(&served).expect("parses");
        prop_assert_eq!(&read, &answer);
        let lines = timeline(&read);
        for l in &lines {
            one_inert_line(l)?;
        }
        // The heading, the note of left-out sockets, every history line, every verdict (none
        // tells a history line: their times differ), one `now:` per socket, one for the path
        // when the agent looked at it.
        let history: usize = answer.sockets.iter().map(|s| s.state.history.len()).sum();
        let want = 1 + usize::from(omitted > 0) + history + answer.verdicts.len()
            + answer.sockets.len() + usize::from(on_disk.is_some());
        prop_assert_eq!(lines.len(), want);
    }

    #[test]
    fn a_scans_lines_are_inert_one_per_socket_and_finding(u in strings()) {
        let r = report(&u);
        let table = finding_lines(&r.findings);
        prop_assert_eq!(table.len(), 6);
        for l in &table {
            one_inert_line(l)?;
        }
        let error = OnDisk::Unreadable { error: u[4].clone() };
        let lines = scanned(&u[11], &r, &error);
        for l in &lines {
            one_inert_line(l)?;
        }
        let about = finding_lines(&r.findings.about(&u[11])).len();
        prop_assert_eq!(lines.len(), 2 + r.sockets.len() + about);
    }
}

#[test]
fn a_forged_line_and_escape_sequences_stay_inside_one_quoted_sentence() {
    let forged =
        "/tmp/x\n2026-12-02T21:35:27.906Z vm FOREIGN UNLINK: forged\x1b]0;title\x07\x1b[2J";
    let mut u = vec!["actor".to_owned(); STRINGS];
    u[11] = forged.to_owned();
    let v = verdicts(&u, 10_000).remove(1);
    assert_eq!(
        line(1_796_232_001_123_456_789, "vm", &sentence(&v)),
        "2026-12-02T17:20:01.123Z vm FOREIGN UNLINK: actor (pid 100, pod actor/actor) removed \
         $'/tmp/x\\n2026-12-02T21:35:27.906Z vm FOREIGN UNLINK: forged\\e]0;title\\a\\e[2J' \
         (inode 2049:1), the file of the socket of actor (pid 200, workload actor/actor), so \
         clients can no longer reach it by path (unrelated processes); the remover did not \
         bind the path again."
    );
}
