//! docs/events.schema.json against the writer: a sample of every event kind, every verdict and
//! every notice, written as `run` writes them, must match it, and what the writer never writes
//! must not.
use serde_json::{Value, json};
use sockwatch_common::{EventKind, Fidelity, FileId, Owner, Tier};

use crate::{
    engine::{
        Claim, CloseReason, DecidedBy, Fact, GuardPolicy, Guarded, HandOver, OrphanCause, Proc,
        Relation, RemovalOp, Runtime, ServedBy, StaleKind, Verdict, Workload,
    },
    events::{EventLine, KernelEvent, SCHEMA, Stamped, json},
    host::wall,
    kernel::{loader::HookReport, probes::Hook},
    metrics::Scan,
    pipeline::notice::Notice,
};

/// 2026-12-02T17:20:01.123456789Z, as nanoseconds since the Unix epoch.
const WALL_NS: u64 = 1_796_232_001_123_456_789;
const NODE: &str = "node-1";

fn validator() -> jsonschema::Validator {
    super::schema_validator::events_schema()
}

/// The schema's complaints about `line`, one per error.
fn errors(schema: &jsonschema::Validator, line: &Value) -> Vec<String> {
    schema
        .iter_errors(line)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

fn file(ino: u64) -> FileId {
    FileId { dev: 64_768, ino }
}

fn event(kind: EventKind) -> KernelEvent {
    KernelEvent {
        ts_ns: 5_000_000_000,
        tgid: 4242,
        pid: 4243,
        comm: "server".into(),
        cgroup_id: 7,
        dev: 64_768,
        ino: 9,
        sock_ino: 90,
        ..KernelEvent::sample(kind, "/run/app/app.sock")
    }
}

/// One line per event kind, each with the fields only its kind has.
fn event_lines() -> Vec<EventLine> {
    let owner = Owner {
        tgid: 4242,
        cgroup_id: 7,
        bind_ns: 4_000_000_000,
        ..Owner::default()
    };
    let workload = Workload {
        pod_uid: Some("6a1f".into()),
        namespace: Some("kube-system".into()),
        workload: Some("multus".into()),
        ..Workload::default()
    };
    EventKind::ALL
        .into_iter()
        .map(|kind| {
            let mut e = event(kind);
            let mut moved = None;
            match kind {
                EventKind::Listen => e.backlog = Some(128),
                EventKind::Fork => e.child_tgid = Some(4300),
                EventKind::Connect => {
                    e.ret = -111;
                    e.mntns = Some(4_026_531_841);
                    e.flags.resolved_in_userspace = true;
                }
                EventKind::Rename => {
                    e.from = Some(file(10));
                    e.from_path = Some("/run/app/app.sock.new".into());
                    e.from_dir = Some(file(2));
                    e.flags.from_live = true;
                    moved = Some(file(10));
                }
                EventKind::Unlink | EventKind::Receive => {
                    e.owner = Some(owner);
                    e.dir = Some(file(2));
                    e.flags.live = true;
                    e.flags.listening = true;
                }
                _ => {}
            }
            EventLine {
                event: e,
                workload: (kind == EventKind::Bind).then(|| workload.clone()),
                moved,
                exe: (kind == EventKind::Bind).then(|| "/usr/bin/app".into()),
                runtime: match kind {
                    EventKind::Bind => Some(Runtime::Go),
                    EventKind::Unlink => Some(Runtime::Node),
                    _ => None,
                },
                seen_in: (kind == EventKind::Receive).then_some(crate::events::SeenIn::Proc),
            }
        })
        .collect()
}

fn proc(tgid: u32) -> Proc {
    Proc {
        tgid,
        pid: tgid,
        comm: format!("p{tgid}"),
        cgroup_id: u64::from(tgid),
        workload: None,
        exe: None,
        runtime: None,
    }
}

/// One verdict of each variant, optional fields set in some, not in others.
fn verdicts() -> Vec<Verdict> {
    let actor = Proc {
        runtime: Some(Runtime::Socat),
        ..proc(20)
    };
    let victim = proc(10);
    vec![
        Verdict::ForeignUnlink {
            ts_ns: 3,
            actor: actor.clone(),
            victim: victim.clone(),
            relation: Relation::Other,
            path: "/run/app/app.sock".into(),
            victim_path: None,
            file: file(9),
            sock_ino: 90,
            listening: true,
            victim_bound_ns: 1,
            decided_by: DecidedBy::Engine,
            fidelity: Fidelity::PathOnly,
            stale_owner: true,
        },
        Verdict::Replaced {
            ts_ns: 3,
            actor: actor.clone(),
            victim: victim.clone(),
            relation: Relation::SameCgroup,
            foreign: false,
            path: "/run/app/app.sock".into(),
            victim_path: Some("/run/app/app.sock".into()),
            file: file(9),
            new_file: Some(file(10)),
            sock_ino: 90,
            listening: true,
            victim_bound_ns: 1,
            decided_by: DecidedBy::Kernel,
            fidelity: Fidelity::Exact,
        },
        Verdict::Moved {
            ts_ns: 3,
            actor: actor.clone(),
            owner: victim.clone(),
            relation: Relation::Unknown,
            foreign: true,
            file: file(9),
            sock_ino: 90,
            listening: false,
            from: Some("/run/app/a.sock".into()),
            to: None,
            exchanged_with: Some(file(11)),
            fidelity: Fidelity::Exact,
        },
        Verdict::Takeover {
            ts_ns: 3,
            remover: actor.clone(),
            predecessor: victim.clone(),
            successor: actor.clone(),
            relation: Relation::SameWorkloadOtherPod,
            successor_relation: Relation::SameProcess,
            served_by: ServedBy::Workload,
            how: HandOver::Rebind,
            path: "/run/app/app.sock".into(),
            old_file: file(9),
            new_file: file(10),
            old_sock_ino: 90,
            new_sock_ino: 100,
            gap_ns: 2,
            decided_by: DecidedBy::Engine,
            fidelity: Fidelity::Exact,
        },
        Verdict::Hijack {
            ts_ns: 3,
            remover: actor.clone(),
            victim: victim.clone(),
            successor: actor.clone(),
            relation: Relation::Other,
            how: HandOver::Rename,
            path: "/run/app/app.sock".into(),
            victim_path: None,
            old_file: file(9),
            new_file: file(10),
            old_sock_ino: 90,
            new_sock_ino: 100,
            gap_ns: 0,
            decided_by: DecidedBy::Kernel,
            fidelity: Fidelity::Exact,
        },
        Verdict::OrphanOpened {
            ts_ns: 3,
            since_ns: 3,
            since_exact: true,
            cause: OrphanCause::TakenOver,
            owner: victim.clone(),
            removed_by: Some(actor.clone()),
            successor: Some(actor.clone()),
            path: Some("/run/app/app.sock".into()),
            file: file(9),
            sock_ino: 90,
        },
        Verdict::OrphanClosed {
            ts_ns: 9,
            since_ns: 3,
            duration_ns: 6,
            reason: CloseReason::Exited,
            owner: victim.clone(),
            path: None,
            file: file(9),
            sock_ino: 90,
        },
        Verdict::StaleConnect {
            ts_ns: 9,
            kind: StaleKind::DeadListener,
            actor: actor.clone(),
            path: "/run/app/app.sock".into(),
            file: Some(file(9)),
            binder: Some(victim.clone()),
            removed_by: None,
            decided_by: DecidedBy::Engine,
        },
        Verdict::UnlinkDenied(guarded(&actor, &victim)),
        Verdict::UnlinkWouldDeny(guarded(&actor, &victim)),
        Verdict::StaleSocketFile {
            ts_ns: 9,
            binder: victim,
            released_by: None,
            path: Some("/run/app/app.sock".into()),
            file: file(9),
            sock_ino: 90,
            bound_ns: 1,
            released_ns: 8,
        },
    ]
}

/// The guard's decision on `actor`'s unlink of `victim`'s listener.
fn guarded(actor: &Proc, victim: &Proc) -> Guarded {
    Guarded {
        ts_ns: 10,
        actor: actor.clone(),
        victim: victim.clone(),
        operation: RemovalOp::Unlink,
        policy: GuardPolicy::StaleOwner,
        path: "/run/app/app.sock".into(),
        file: file(9),
        sock_ino: 90,
    }
}

/// One notice of each kind (a scan failure of each scan).
fn notices() -> Vec<Notice> {
    let missing = HookReport {
        hook: Hook::Exit,
        attached: None,
        refused: vec![(
            Tier::Tracepoint,
            "sched_process_exit: no such tracepoint".into(),
        )],
        degraded: Vec::new(),
        programs: Vec::new(),
    };
    vec![
        Notice::hook_missing(&missing, 3).expect("no tier attached"),
        Notice::EventsLost {
            lost: vec![(EventKind::Bind, 3), (EventKind::Exit, 1)],
            total: 4,
            ts_ns: 3,
        },
        Notice::LiveTableFull {
            refused: 2,
            ts_ns: 3,
        },
        Notice::ScanFailed {
            scan: Scan::Startup,
            reason: "sock_diag: the kernel has no unix_diag".into(),
            ts_ns: 3,
        },
        Notice::ScanFailed {
            scan: Scan::Periodic,
            reason: "reading /proc: Too many open files".into(),
            ts_ns: 4,
        },
        Notice::ScanRecovered {
            failed_scans: 5,
            ts_ns: 9,
        },
    ]
}

/// One checked fact of each claim.
fn facts() -> Vec<Fact> {
    vec![
        Fact {
            claim: Claim::FileOnDisk {
                path: "/run/app/app.sock".into(),
                file: file(12),
            },
            holds: false,
            ts_ns: 7,
        },
        Fact {
            claim: Claim::SocketOpen {
                tgid: 4242,
                sock_ino: 99,
            },
            holds: true,
            ts_ns: 8,
        },
    ]
}

/// An event line as `run` writes it.
fn written_event(line: &EventLine) -> Vec<u8> {
    let mut out = Vec::new();
    json::write_line(&mut out, line).expect("write to a Vec");
    json::stamp(&mut out, &wall::rfc3339(WALL_NS), NODE).expect("write to a Vec");
    out
}

/// A verdict line as `run` writes it.
fn written_verdict(v: &Verdict) -> Vec<u8> {
    let mut out = serde_json::to_vec(v).expect("serde");
    json::stamp(&mut out, &wall::rfc3339(WALL_NS), NODE).expect("write to a Vec");
    out
}

/// A notice or fact line as `run` writes it.
fn written_notice(n: &impl serde::Serialize) -> Vec<u8> {
    let mut out = serde_json::to_vec(n).expect("serde");
    json::stamp(&mut out, &wall::rfc3339(WALL_NS), NODE).expect("write to a Vec");
    out
}

fn parsed(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).expect("a written line is JSON")
}

fn sample_lines() -> Vec<Value> {
    let events = event_lines()
        .into_iter()
        .map(|l| parsed(&written_event(&l)));
    let verdicts = verdicts().into_iter().map(|v| parsed(&written_verdict(&v)));
    let notices = notices().into_iter().map(|n| parsed(&written_notice(&n)));
    let facts = facts().into_iter().map(|f| parsed(&written_notice(&f)));
    events.chain(verdicts).chain(notices).chain(facts).collect()
}

#[test]
fn every_event_kind_verdict_and_notice_as_written_matches_the_schema() {
    let schema = validator();
    for line in sample_lines() {
        let found = errors(&schema, &line);
        assert!(found.is_empty(), "{line}: {found:#?}");
    }
}

/// The example lines of docs/events.md (its `json` blocks), real output, match the schema too.
#[test]
fn every_example_line_of_the_docs_matches_the_schema() {
    let schema = validator();
    let doc = include_str!("../../../../docs/events.md");
    let examples: Vec<&str> = doc
        .split("```json\n")
        .skip(1)
        .filter_map(|block| block.split_once("\n```").map(|(lines, _)| lines))
        .flat_map(str::lines)
        .collect();
    let notices = examples.iter().filter(|l| l.starts_with(r#"{"notice":"#));
    assert_eq!(notices.count(), 5, "one example per notice");
    for line in examples {
        let value: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        let found = errors(&schema, &value);
        assert!(found.is_empty(), "{line}: {found:#?}");
    }
}

/// A notice kind the schema does not list, or one without a sample here, fails.
#[test]
fn the_notice_samples_are_every_notice_the_schema_lists() {
    let schema: Value = serde_json::from_str(include_str!("../../../../docs/events.schema.json"))
        .expect("docs/events.schema.json is JSON");
    let listed = &schema["$defs"]["notice"]["properties"]["notice"]["enum"];
    let mut sampled: Vec<Value> = sample_lines()
        .into_iter()
        .filter_map(|l| l.get("notice").cloned())
        .collect();
    sampled.dedup();
    assert_eq!(&Value::Array(sampled), listed);
}

#[test]
fn a_stamped_verdict_is_serdes_stamped_verdict() {
    let time = String::from_utf8(wall::rfc3339(WALL_NS).to_vec()).expect("ASCII");
    for v in verdicts() {
        let reference = Stamped {
            line: v.clone(),
            schema: SCHEMA,
            time: time.clone(),
            node: NODE.to_owned(),
        };
        let ours = String::from_utf8(written_verdict(&v)).expect("utf-8");
        assert_eq!(ours, serde_json::to_string(&reference).expect("serde"));
        let back: Stamped<Verdict> = serde_json::from_str(&ours).expect("reads back");
        assert_eq!(back, reference, "{ours}");
    }
}

/// A sample line changed as `change` says: the schema must refuse it.
fn refused(what: &str, pick: impl Fn(&Value) -> bool, change: impl Fn(&mut Value)) {
    let schema = validator();
    let mut line = sample_lines()
        .into_iter()
        .find(|l| pick(l))
        .unwrap_or_else(|| panic!("no sample for {what}"));
    change(&mut line);
    assert!(
        !errors(&schema, &line).is_empty(),
        "{what}: the schema accepts {line}"
    );
}

fn kind(k: &'static str) -> impl Fn(&Value) -> bool {
    move |l| l["kind"] == k && l.get("verdict").is_none()
}

fn verdict(v: &'static str) -> impl Fn(&Value) -> bool {
    move |l| l["verdict"] == v
}

fn notice(n: &'static str) -> impl Fn(&Value) -> bool {
    move |l| l["notice"] == n
}

#[test]
fn the_schema_refuses_checks_the_writer_never_writes() {
    let check = |c: &'static str| move |l: &Value| l["check"] == c;
    refused("an unknown check", check("socket_open"), |l| {
        l["check"] = json!("guessed");
    });
    refused("a check without its answer", check("file_on_disk"), |l| {
        l.as_object_mut().expect("object").remove("holds");
    });
    refused(
        "a socket check without its socket",
        check("socket_open"),
        |l| {
            l.as_object_mut().expect("object").remove("sock_ino");
        },
    );
    refused(
        "a file's field on a socket check",
        check("socket_open"),
        |l| {
            l["path"] = json!("/run/x.sock");
        },
    );
}

#[test]
fn the_schema_refuses_notices_the_writer_never_writes() {
    refused("an unknown notice", notice("hook_missing"), |l| {
        l["notice"] = json!("blind");
    });
    refused("a notice without ts_ns", notice("scan_recovered"), |l| {
        l.as_object_mut().expect("object").remove("ts_ns");
    });
    refused(
        "a notice without its stamp",
        notice("live_table_full"),
        |l| {
            l.as_object_mut().expect("object").remove("node");
        },
    );
    refused(
        "an event field on a notice",
        notice("live_table_full"),
        |l| {
            l["tier"] = json!("fentry");
        },
    );
    refused("a hook that is none", notice("hook_missing"), |l| {
        l["hook"] = json!("open");
    });
    refused("a refused tier that is none", notice("hook_missing"), |l| {
        l["refused"][0]["tier"] = json!("uprobe");
    });
    refused("a kind that lost nothing", notice("events_lost"), |l| {
        l["lost"]["bind"] = json!(0);
    });
    refused("a loss of an unknown kind", notice("events_lost"), |l| {
        l["lost"]["open"] = json!(1);
    });
    refused("nothing lost", notice("events_lost"), |l| {
        l["lost"] = json!({});
    });
    refused("a loss without its total", notice("events_lost"), |l| {
        l.as_object_mut().expect("object").remove("total");
    });
    refused(
        "a full table that refused nothing",
        notice("live_table_full"),
        |l| {
            l["refused"] = json!(0);
        },
    );
    refused("an unknown scan", notice("scan_failed"), |l| {
        l["scan"] = json!("nightly");
    });
    refused("a failure without its reason", notice("scan_failed"), |l| {
        l.as_object_mut().expect("object").remove("reason");
    });
    refused(
        "a recovery after no failure",
        notice("scan_recovered"),
        |l| {
            l["failed_scans"] = json!(0);
        },
    );
}

#[test]
fn the_schema_refuses_what_the_writer_never_writes() {
    refused("no time", kind("bind"), |l| {
        l.as_object_mut().expect("object").remove("time");
    });
    refused("a time with microseconds", kind("bind"), |l| {
        l["time"] = json!("2026-12-02T17:20:01.123456Z");
    });
    refused("another schema", kind("bind"), |l| l["schema"] = json!(2));
    refused("an unknown field", kind("bind"), |l| l["extra"] = json!(1));
    refused("a backlog on a bind", kind("bind"), |l| {
        l["backlog"] = json!(1);
    });
    refused("a listen without backlog", kind("listen"), |l| {
        l.as_object_mut().expect("object").remove("backlog");
    });
    refused("a flag written false", kind("unlink"), |l| {
        l["live"] = json!(false);
    });
    refused("an unknown kind", kind("exit"), |l| {
        l["kind"] = json!("open");
    });
    refused("a negative inode", kind("release"), |l| {
        l["ino"] = json!(-1);
    });
    refused("an unknown verdict", verdict("takeover"), |l| {
        l["verdict"] = json!("hijack");
    });
    refused(
        "a verdict without its actor",
        verdict("foreign_unlink"),
        |l| {
            l.as_object_mut().expect("object").remove("actor");
        },
    );
    refused(
        "an event field on a verdict",
        verdict("orphan_closed"),
        |l| {
            l["tier"] = json!("fentry");
        },
    );
    refused("an unknown stale kind", verdict("stale_connect"), |l| {
        l["kind"] = json!("bind");
    });
}
