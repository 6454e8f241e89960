//! Property tests: random interleavings across a few processes, paths and files never panic,
//! stay within the limits, and every verdict has a cause in the input that produced it.
use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;
use crate::engine::{
    Claim, CloseReason, Fact, GuardDecision, GuardPolicy, HandOver, OrphanCause, RemovalOp,
    model::ScanSnapshot,
};

const LIMITS: Limits = Limits {
    max_sockets: 4,
    max_procs: 4,
    max_history_per_socket: 3,
    max_pending_removals: 2,
};
/// A takeover window a few steps long, so removals are taken over, expire, and are evicted.
const WINDOW: u64 = 300;

fn engine_() -> Engine {
    Engine::new(LIMITS)
        .expect("valid limits")
        .with_takeover_window(WINDOW)
}
const PATHS: [&str; 3] = ["/run/a.sock", "/run/b.sock", "/host/run/a.sock"];

fn proc_(tgid: u32) -> Proc {
    // Two workloads, two pods of the first, and host processes.
    let workload = match tgid % 4 {
        0 => None,
        k => Some(Workload {
            pod_uid: Some(format!("uid-{k}")),
            workload: Some(if k == 3 { "other" } else { "daemon" }.into()),
            ..Workload::default()
        }),
    };
    Proc {
        tgid,
        pid: tgid,
        comm: format!("p{tgid}"),
        cgroup_id: u64::from(tgid % 4) + 1,
        workload,
        exe: None,
        runtime: None,
    }
}

fn tgid() -> impl Strategy<Value = u32> {
    1u32..7
}
fn path() -> impl Strategy<Value = String> {
    (0..PATHS.len()).prop_map(|i| PATHS[i].to_owned())
}
fn file() -> impl Strategy<Value = FileId> {
    (1u64..7).prop_map(|ino| FileId {
        dev: 1,
        ino: ino << 31, // straddles the 32-bit boundary
    })
}
fn sock() -> impl Strategy<Value = u64> {
    1u64..9
}

fn live_at() -> impl Strategy<Value = Option<LiveAtUnlink>> {
    prop::option::of((
        tgid(),
        sock(),
        any::<bool>(),
        prop::option::of(any::<bool>()),
        prop::option::of(1u32..3),
    ))
    .prop_map(|o| {
        o.map(
            |(owner_tgid, sock_ino, listening, unlinker_holds_fd, links)| LiveAtUnlink {
                owner_tgid,
                sock_ino,
                listening,
                unlinker_holds_fd,
                links,
            },
        )
    })
}

fn fidelity_file() -> impl Strategy<Value = (Fidelity, Option<FileId>)> {
    prop_oneof![
        Just((Fidelity::PathOnly, None)),
        file().prop_map(|f| (Fidelity::Exact, Some(f))),
    ]
}

/// One input without its timestamp (assigned in order, with jitter, by the test).
fn input(ts: u64) -> impl Strategy<Value = Input> {
    let scanned_socket = (
        sock(),
        file(),
        path(),
        any::<bool>(),
        tgid(),
        prop::option::of(any::<bool>()),
    )
        .prop_map(
            |(sock_ino, f, path, listening, holder, file_linked)| ScannedSocket {
                sock_ino,
                file: Some(f),
                path,
                listening,
                holders: vec![proc_(holder)],
                file_linked,
                outside_watch: false,
            },
        );
    prop_oneof![
        4 => (tgid(), file(), sock(), path()).prop_map(move |(t, f, s, p)| bind(ts, &proc_(t), f, s, &p)),
        3 => (tgid(), file(), sock()).prop_map(move |(t, f, s)| listen(ts, &proc_(t), f, s)),
        2 => (tgid(), file(), sock()).prop_map(move |(t, f, s)| release(ts, &proc_(t), f, s)),
        4 => (tgid(), path(), fidelity_file(), live_at()).prop_map(move |(t, path, (fidelity, file), live)| Input::Unlink(inputs::Unlink {
            ts_ns: ts, proc: proc_(t), path, file, fidelity, live,
        })),
        2 => (tgid(), prop::option::of(file()), prop::option::of(path()), path(), any::<bool>(), fidelity_file(), live_at()).prop_map(move |(t, moved, from, to, exchange, (fidelity, replaced), live)| Input::Rename(inputs::Rename {
            ts_ns: ts, proc: proc_(t), moved, from, to, exchange, replaced, fidelity, live,
        })),
        1 => (tgid(), path(), file(), any::<bool>(), live_at(), any::<bool>()).prop_map(move |(t, path, file, rename, live, audit)| Input::Denied(inputs::Denied {
            ts_ns: ts, proc: proc_(t), path, file,
            operation: if rename { RemovalOp::Rename } else { RemovalOp::Unlink },
            policy: GuardPolicy::StaleOwner,
            live: live.unwrap_or(LiveAtUnlink { owner_tgid: 1, sock_ino: 1, listening: true, unlinker_holds_fd: Some(false), links: None }),
            decision: if audit { GuardDecision::WouldDeny } else { GuardDecision::Denied },
        })),
        3 => (tgid(), path(), prop_oneof![Just(0), Just(111), Just(2)], prop::option::of(file()),
              prop::option::of(0u32..2), prop::option::of(any::<bool>()), prop::option::of(any::<bool>()))
            .prop_map(move |(t, path, errno, target, target_nlink, target_bound, target_listening)| Input::Connect(inputs::Connect {
                ts_ns: ts, proc: proc_(t), path, errno, target, target_nlink, target_bound, target_listening,
            })),
        2 => (tgid(), tgid()).prop_map(move |(p, c)| fork(ts, &proc_(p), c)),
        2 => tgid().prop_map(move |t| exit(ts, t)),
        1 => Just(Input::Tick(inputs::Tick { ts_ns: ts })),
        1 => (tgid(), file(), sock()).prop_map(move |(t, f, s)| fd_received(ts, &proc_(t), f, s)),
        1 => (prop::collection::vec(scanned_socket, 0..3), any::<bool>()).prop_map(move |(sockets, complete)| {
            Input::Scan(ScanSnapshot {
                ts_ns: ts,
                sockets,
                complete,
                unreadable: None,
            })
        }),
    ]
}

fn set_ts(input: &mut Input, ts: u64) {
    match input {
        Input::Bind(inputs::Bind { ts_ns, .. })
        | Input::Listen(inputs::Socket { ts_ns, .. })
        | Input::Release(inputs::Socket { ts_ns, .. })
        | Input::Unlink(inputs::Unlink { ts_ns, .. })
        | Input::Rename(inputs::Rename { ts_ns, .. })
        | Input::Denied(inputs::Denied { ts_ns, .. })
        | Input::Connect(inputs::Connect { ts_ns, .. })
        | Input::Fork(inputs::Fork { ts_ns, .. })
        | Input::Exit(inputs::Exit { ts_ns, .. })
        | Input::Tick(inputs::Tick { ts_ns })
        | Input::FdReceived(inputs::Socket { ts_ns, .. }) => *ts_ns = ts,
        Input::Scan(s) => s.ts_ns = ts,
        Input::Fact(f) => f.ts_ns = ts,
    }
}

fn inputs() -> impl Strategy<Value = Vec<Input>> {
    // Timestamps mostly increase; the jitter lets a few go backwards, as per-CPU buffers do.
    prop::collection::vec((0u64..20, any::<bool>(), input(0)), 1..120).prop_map(|steps| {
        let mut ts = 1_000u64;
        steps
            .into_iter()
            .map(|(d, back, mut input)| {
                ts = if back {
                    ts.saturating_sub(d)
                } else {
                    ts + d * 10
                };
                set_ts(&mut input, ts);
                input
            })
            .collect()
    })
}

/// A removal decided later than its own input: its window ended before `input`, its remover
/// exited, or another removal pushed it out of the full queue.
fn deferred(input: &Input, removed_ns: u64, remover: u32) -> bool {
    input.ts_ns() > removed_ns + WINDOW
        || matches!(input, Input::Exit(inputs::Exit { tgid, .. }) if *tgid == remover)
        || matches!(input, Input::Unlink(_))
}

/// Checks that `v` has a cause in `input`, keeping the set of open orphans in step.
fn check_cause(input: &Input, v: &Verdict, open: &mut BTreeSet<(FileId, u64)>) {
    match v {
        Verdict::ForeignUnlink {
            file,
            path,
            ts_ns,
            actor,
            ..
        } => match input {
            Input::Unlink(inputs::Unlink {
                file: f, path: p, ..
            }) if *f == Some(*file) || p == path => {}
            _ => assert!(deferred(input, *ts_ns, actor.tgid), "{v:?} from {input:?}"),
        },
        Verdict::Takeover {
            successor,
            new_file,
            gap_ns,
            how,
            ..
        }
        | Verdict::Hijack {
            successor,
            new_file,
            gap_ns,
            how,
            ..
        } => match (input, how) {
            (Input::Bind(inputs::Bind { proc, file, .. }), HandOver::Rebind) => {
                assert!(
                    proc.tgid == successor.tgid && file == new_file && *gap_ns <= WINDOW,
                    "{v:?} from {input:?}"
                );
            }
            // A live socket renamed over another: served at once.
            (Input::Rename(_), HandOver::Rename) => {
                assert_eq!(*gap_ns, 0, "{v:?}");
            }
            _ => panic!("{v:?} from {input:?}"),
        },
        Verdict::Replaced { file, path, .. } => match input {
            Input::Rename(inputs::Rename { replaced, to, .. }) => {
                assert!(
                    *replaced == Some(*file) || to == path,
                    "{v:?} from {input:?}"
                );
            }
            _ => panic!("{v:?} from {input:?}"),
        },
        // A move names the rename's new name; an exchange's other file takes the old one.
        Verdict::Moved { to, .. } => match input {
            Input::Rename(inputs::Rename {
                to: t, exchange, ..
            }) => {
                assert!(to.as_ref() == Some(t) || *exchange, "{v:?} from {input:?}");
            }
            _ => panic!("{v:?} from {input:?}"),
        },
        Verdict::UnlinkDenied(g) | Verdict::UnlinkWouldDeny(g) => match input {
            Input::Denied(inputs::Denied {
                file: f, path: p, ..
            }) => assert_eq!((f, p), (&g.file, &g.path), "{v:?} from {input:?}"),
            _ => panic!("{v:?} from {input:?}"),
        },
        Verdict::StaleConnect { path, .. } => match input {
            Input::Connect(inputs::Connect {
                errno: 111,
                path: p,
                ..
            }) => assert_eq!(p, path),
            _ => panic!("{v:?} from {input:?}"),
        },
        Verdict::StaleSocketFile { .. } => {
            assert!(
                matches!(
                    input,
                    // The closer's exit, a release by a process already gone, or a refused
                    // connect to the file.
                    Input::Exit(_)
                        | Input::Release(_)
                        | Input::Connect(inputs::Connect { errno: 111, .. })
                ),
                "{v:?} from {input:?}"
            );
        }
        Verdict::OrphanOpened {
            file,
            sock_ino,
            cause,
            since_ns,
            removed_by,
            ..
        } => {
            let remover = removed_by.as_ref().map_or(0, |p| p.tgid);
            let fits = matches!(
                (cause, input),
                (OrphanCause::Unlinked, Input::Unlink(_))
                    | (
                        OrphanCause::TakenOver | OrphanCause::Hijacked,
                        Input::Bind(_) | Input::Rename(_)
                    )
                    | (OrphanCause::Replaced, Input::Rename(_))
                    | (OrphanCause::ListenAfterRemoval, Input::Listen(_))
                    | (OrphanCause::Scan, Input::Scan(_))
            ) || (*cause == OrphanCause::Unlinked
                && deferred(input, *since_ns, remover));
            assert!(fits, "{v:?} from {input:?}");
            assert!(open.insert((*file, *sock_ino)), "opened twice: {v:?}");
        }
        Verdict::OrphanClosed {
            file,
            sock_ino,
            reason,
            ..
        } => {
            assert!(open.remove(&(*file, *sock_ino)), "closed unopened: {v:?}");
            let fits = match reason {
                CloseReason::Exited => matches!(input, Input::Exit(_)),
                CloseReason::Rebound => matches!(input, Input::Bind(_)),
                CloseReason::Relinked => matches!(input, Input::Scan(_)),
                CloseReason::Released => {
                    !matches!(input, Input::Exit(_) | Input::Fork(_) | Input::Tick(_))
                }
            };
            assert!(fits, "{v:?} from {input:?}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn random_interleavings_are_bounded_and_every_verdict_has_a_cause(inputs in inputs()) {
        let mut e = engine_();
        let mut open = BTreeSet::new();
        let mut evicted_orphans = 0;
        let mut all = Vec::new();
        for input in &inputs {
            let out = e.apply(input);
            for v in &out {
                check_cause(input, v, &mut open);
            }
            all.extend(out);
            let s = e.stats();
            prop_assert!(s.sockets <= LIMITS.max_sockets, "{s:?}");
            prop_assert!(s.procs <= LIMITS.max_procs, "{s:?}");
            prop_assert!(s.owner_pairs <= LIMITS.max_sockets * LIMITS.max_procs, "{s:?}");
            prop_assert!(s.open_orphans <= s.live_sockets && s.live_sockets <= s.sockets);
            prop_assert!(s.pending_removals <= LIMITS.max_pending_removals, "{s:?}");
            e.owners.assert_order_consistent();
            let (paths, socks, lru, pending) = e.sockets.index_sizes();
            prop_assert!(paths <= s.sockets * crate::engine::sockets::MAX_ALIASES);
            prop_assert!(socks <= s.sockets && lru == s.sockets && pending <= s.sockets);
            for f in open.iter().map(|(f, _)| *f).collect::<BTreeSet<_>>() {
                if let Some(sock) = e.socket(f) {
                    prop_assert!(sock.history.len() <= LIMITS.max_history_per_socket);
                }
            }
            let listed: BTreeSet<_> = e.orphans(input.ts_ns()).iter().map(|o| (o.file, o.sock_ino)).collect();
            if s.evictions.orphans == evicted_orphans {
                prop_assert_eq!(&listed, &open);
            } else {
                // An evicted orphan ends without a verdict; it may be opened again later.
                prop_assert!(listed.is_subset(&open));
                open = listed;
                evicted_orphans = s.evictions.orphans;
            }
        }
        // The end of input decides every waiting removal, as a foreign unlink.
        let flushed = e.flush();
        prop_assert!(flushed.iter().all(|v| matches!(v, Verdict::ForeignUnlink { .. } | Verdict::OrphanOpened { cause: OrphanCause::Unlinked, .. })), "{flushed:?}");
        prop_assert_eq!(e.stats().pending_removals, 0);
        all.extend(flushed);
        // Deterministic: a replay of the JSON log yields the same verdicts.
        let mut replay = engine_();
        let mut again = Vec::new();
        for input in &inputs {
            let line = serde_json::to_string(input).expect("serializes");
            let parsed: Input = serde_json::from_str(&line).expect("parses");
            prop_assert_eq!(&parsed, input);
            again.extend(replay.apply(&parsed));
        }
        again.extend(replay.flush());
        prop_assert_eq!(all, again);
    }
}

/// A host's answer to `claim`: made up, but the same each time it is asked.
fn host_says(claim: &Claim) -> bool {
    match claim {
        Claim::FileOnDisk { file, .. } => file.ino % 2 == 0,
        Claim::SocketOpen { tgid, sock_ino } => (u64::from(*tgid) + sock_ino) % 3 != 0,
    }
}

/// `run`'s side: answers every claim the held verdicts make, recording each fact, then lets
/// the rest stand.
fn answer_claims(e: &mut Engine, out: &mut Vec<Verdict>, recorded: &mut Vec<Input>) {
    for (ts_ns, claim) in e.open_claims() {
        let holds = host_says(&claim);
        let fact = Input::Fact(Fact {
            claim,
            holds,
            ts_ns,
        });
        e.apply_into(&fact, out);
        recorded.push(fact);
    }
    e.settle_into(out);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Held claims change only what a false answer withholds, never the order; and a replay
    /// of the inputs with the recorded facts decides as the run did.
    #[test]
    fn answered_claims_withhold_only_what_is_denied_and_replay_alike(inputs in inputs()) {
        let stands = |v: &Verdict| Claim::of(v).is_none_or(|c| host_says(&c));
        let (mut plain, mut run) = (engine_(), engine_().holding_claims());
        let (mut want, mut got, mut recorded) = (Vec::new(), Vec::new(), Vec::new());
        let (mut withheld, mut produced) = (Vec::new(), 0);
        for input in &inputs {
            let out = plain.apply(input);
            produced += out.len();
            want.extend(out.into_iter().filter(stands));
            recorded.push(input.clone());
            run.apply_into(input, &mut got);
            answer_claims(&mut run, &mut got, &mut recorded);
            withheld.extend(run.take_withheld());
        }
        let out = plain.flush();
        produced += out.len();
        want.extend(out.into_iter().filter(stands));
        let mut flushed = run.flush();
        answer_claims(&mut run, &mut flushed, &mut recorded);
        withheld.extend(run.take_withheld());
        got.extend(flushed);
        prop_assert_eq!(&got, &want);
        prop_assert_eq!(got.len() + withheld.len(), produced);
        for v in &withheld {
            prop_assert!(Claim::of(v).is_some_and(|c| !host_says(&c)), "{v:?}");
        }

        // `replay`: what waits on no recorded fact by the next input stands.
        let mut replay = engine_().holding_claims();
        let mut again = Vec::new();
        for input in &recorded {
            if !matches!(input, Input::Fact(_)) {
                replay.settle_into(&mut again);
            }
            replay.apply_into(input, &mut again);
        }
        let mut flushed = replay.flush();
        replay.settle_into(&mut flushed);
        again.extend(flushed);
        prop_assert_eq!(&again, &got);
    }
}

/// The generator is only worth something if it reaches every verdict: a property that no
/// input exercises would pass vacuously.
#[test]
fn the_generator_reaches_every_verdict_kind() {
    use proptest::{strategy::ValueTree, test_runner::TestRunner};
    let mut runner = TestRunner::deterministic();
    let mut seen = BTreeSet::new();
    let mut answers = std::collections::BTreeMap::new();
    for _ in 0..400 {
        let inputs = inputs().new_tree(&mut runner).expect("generates").current();
        let mut e = engine_();
        let mut verdicts: Vec<Verdict> = inputs.iter().flat_map(|i| e.apply(i)).collect();
        verdicts.extend(e.flush());
        seen.extend(verdicts.iter().map(Verdict::name));
        for c in verdicts.iter().filter_map(Claim::of) {
            *answers.entry(host_says(&c)).or_insert(0) += 1;
        }
    }
    assert!(
        answers.len() == 2,
        "the made-up host both confirms and denies claims: {answers:?}"
    );
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        vec![
            "foreign_unlink",
            "hijack",
            "moved",
            "orphan_closed",
            "orphan_opened",
            "replaced",
            "stale_connect",
            "stale_socket_file",
            "takeover",
            "unlink_denied",
            "unlink_would_deny"
        ]
    );
}
