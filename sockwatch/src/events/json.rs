//! The event line's JSON, written by hand: one line per kernel event is the agent's hottest
//! output, and serde's derive (`flatten` twice) went through a generic map serializer that
//! escaped every key, a third of the agent's CPU per event. The derive stays the reference
//! (and what `replay` reads): a property test holds the two equal byte for byte, stamped
//! ([`stamp`], as `Stamped` serializes) or not.
use std::io;

use sockwatch_common::{FileId, Owner};

use crate::events::{EventLine, SeenIn, decode::EventFlags, line::SCHEMA};
use crate::host::wall;

/// Writes `line` as serde would (`serde_json::to_writer`), without the newline. Never
/// inlined: one call per event costs nothing, and a profile of the agent (`cargo xtask
/// bench`) can then name this stage.
#[inline(never)]
pub fn write_line(out: &mut Vec<u8>, line: &EventLine) -> io::Result<()> {
    let e = &line.event;
    out.extend_from_slice(b"{\"kind\":");
    string(out, e.kind.name())?;
    out.extend_from_slice(b",\"tier\":");
    string(out, e.tier.name())?;
    out.extend_from_slice(b",\"fidelity\":");
    string(out, e.fidelity.name())?;
    number(out, b",\"ts_ns\":", e.ts_ns);
    number(out, b",\"tgid\":", e.tgid);
    number(out, b",\"pid\":", e.pid);
    out.extend_from_slice(b",\"comm\":");
    string(out, &e.comm)?;
    number(out, b",\"cgroup_id\":", e.cgroup_id);
    number(out, b",\"dev\":", e.dev);
    number(out, b",\"ino\":", e.ino);
    number(out, b",\"sock_ino\":", e.sock_ino);
    number(out, b",\"nlink\":", e.nlink);
    out.extend_from_slice(b",\"path\":");
    string(out, &e.path)?;
    number(out, b",\"ret\":", e.ret);
    if let Some(o) = &e.owner {
        owner(out, o);
    }
    if let Some(n) = e.backlog {
        number(out, b",\"backlog\":", n);
    }
    if let Some(n) = e.child_tgid {
        number(out, b",\"child_tgid\":", n);
    }
    file(out, b",\"dir\":", e.dir);
    if let Some(n) = e.mntns {
        number(out, b",\"mntns\":", n);
    }
    file(out, b",\"from\":", e.from);
    if let Some(p) = &e.from_path {
        out.extend_from_slice(b",\"from_path\":");
        string(out, p)?;
    }
    file(out, b",\"from_dir\":", e.from_dir);
    if let Some(p) = e.guard_policy {
        out.extend_from_slice(b",\"guard_policy\":\"");
        out.extend_from_slice(p.name().as_bytes());
        out.extend_from_slice(b"\"");
    }
    event_flags(out, &e.flags);
    if let Some(w) = &line.workload {
        out.extend_from_slice(b",\"workload\":");
        serde_json::to_writer(&mut *out, w)?;
    }
    file(out, b",\"moved\":", line.moved);
    if let Some(exe) = &line.exe {
        out.extend_from_slice(b",\"exe\":");
        string(out, exe)?;
    }
    if let Some(r) = line.runtime {
        out.extend_from_slice(b",\"runtime\":\"");
        out.extend_from_slice(r.name().as_bytes());
        out.extend_from_slice(b"\"");
    }
    if let Some(SeenIn::Proc) = line.seen_in {
        out.extend_from_slice(b",\"seen_in\":\"proc\"");
    }
    out.extend_from_slice(b"}");
    Ok(())
}

/// Adds the fields every line of `run` carries to the JSON object `line` ends with, as
/// `Stamped` serializes them: `schema`, `time` (the wall-clock time, as [`wall::rfc3339`]
/// formats it) and `node`. The object's closing brace moves past them. Never inlined, as
/// [`write_line`].
#[inline(never)]
pub fn stamp(line: &mut Vec<u8>, time: &[u8; wall::RFC3339_LEN], node: &str) -> io::Result<()> {
    let closing = line.pop();
    debug_assert_eq!(closing, Some(b'}'), "a line is a JSON object");
    number(line, b",\"schema\":", SCHEMA);
    line.extend_from_slice(b",\"time\":\"");
    line.extend_from_slice(time);
    line.extend_from_slice(b"\",\"node\":");
    string(line, node)?;
    line.push(b'}');
    Ok(())
}

/// A JSON string: written as is unless it holds a byte JSON escapes (`"`, `\`, a control
/// character), which serde escapes.
fn string(out: &mut Vec<u8>, s: &str) -> io::Result<()> {
    if s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        return Ok(serde_json::to_writer(out, s)?);
    }
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
    Ok(())
}

/// `key` (with its comma, quotes and colon) and an integer. Inlined, so that each key's copy
/// has its length known.
#[inline(always)]
fn number(out: &mut Vec<u8>, key: &[u8], n: impl itoa::Integer) {
    out.extend_from_slice(key);
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

#[inline(always)]
fn file(out: &mut Vec<u8>, key: &[u8], f: Option<FileId>) {
    let Some(f) = f else {
        return;
    };
    out.extend_from_slice(key);
    number(out, b"{\"dev\":", f.dev);
    number(out, b",\"ino\":", f.ino);
    out.push(b'}');
}

fn owner(out: &mut Vec<u8>, o: &Owner) {
    number(out, b",\"owner\":{\"tgid\":", o.tgid);
    number(out, b",\"cgroup_id\":", o.cgroup_id);
    number(out, b",\"bind_ns\":", o.bind_ns);
    out.push(b'}');
}

fn event_flags(out: &mut Vec<u8>, f: &EventFlags) {
    let set = [
        (f.path_truncated, "path_truncated"),
        (f.live, "live"),
        (f.listening, "listening"),
        (f.holds_fd, "holds_fd"),
        (f.target_bound, "target_bound"),
        (f.dgram, "dgram"),
        (f.sendto, "sendto"),
        (f.path_relative, "path_relative"),
        (f.result_unknown, "result_unknown"),
        (f.exchange, "exchange"),
        (f.denied, "denied"),
        (f.would_deny, "would_deny"),
        (f.owners_partial, "owners_partial"),
        (f.from_live, "from_live"),
        (f.target_seen, "target_seen"),
        (f.resolved_in_userspace, "resolved_in_userspace"),
        (f.lookup_failed, "lookup_failed"),
    ];
    for (_, name) in set.iter().filter(|(on, _)| *on) {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\":true");
    }
}

#[cfg(test)]
mod tests {
    use proptest::{option::of, prelude::*, sample::select};
    use sockwatch_common::{EventKind, Fidelity, GuardPolicy, Tier};

    use super::*;
    use crate::{
        engine::{Runtime, Workload},
        events::{KernelEvent, line::Stamped},
    };

    fn runtime() -> impl Strategy<Value = Runtime> {
        select(vec![
            Runtime::Go,
            Runtime::Node,
            Runtime::Socat,
            Runtime::Python,
        ])
    }

    fn file_id() -> impl Strategy<Value = FileId> {
        (any::<u64>(), any::<u64>()).prop_map(|(dev, ino)| FileId { dev, ino })
    }

    /// Paths as they come, and any text at all (quotes, control characters, non-ASCII).
    fn text() -> impl Strategy<Value = String> {
        prop_oneof!["[a-z0-9/._-]{0,40}", any::<String>()]
    }

    fn owner() -> impl Strategy<Value = Owner> {
        (any::<u32>(), any::<u64>(), any::<u64>()).prop_map(|(tgid, cgroup_id, bind_ns)| Owner {
            tgid,
            cgroup_id,
            bind_ns,
            ..Owner::default()
        })
    }

    fn flags() -> impl Strategy<Value = EventFlags> {
        (any::<u16>(), any::<bool>(), any::<bool>()).prop_map(|(bits, resolved, failed)| {
            EventFlags {
                resolved_in_userspace: resolved,
                lookup_failed: failed,
                ..EventFlags::from_bits(bits)
            }
        })
    }

    fn workload() -> impl Strategy<Value = Workload> {
        (of(text()), of(text()), of(text()), of(text()), of(text())).prop_map(
            |(container_id, pod_uid, pod_name, namespace, workload)| Workload {
                container_id,
                pod_uid,
                pod_name,
                namespace,
                workload,
            },
        )
    }

    fn event() -> impl Strategy<Value = KernelEvent> {
        let head = (
            select(EventKind::ALL.to_vec()),
            select(Tier::ALL.to_vec()),
            select(Fidelity::ALL.to_vec()),
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            text(),
            any::<u64>(),
            (any::<u64>(), any::<u64>(), any::<u64>(), any::<u32>()),
            text(),
            any::<i32>(),
        );
        let tail = (
            of(owner()),
            of(any::<u32>()),
            of(any::<u32>()),
            of(file_id()),
            of(any::<u32>()),
            of(file_id()),
            of(text()),
            of(file_id()),
            flags(),
        );
        let guard = of(select(GuardPolicy::ALL.to_vec()));
        (head, tail, guard).prop_map(
            |(
                (kind, tier, fidelity, ts_ns, tgid, pid, comm, cgroup_id, ids, path, ret),
                (owner, backlog, child_tgid, dir, mntns, from, from_path, from_dir, flags),
                guard_policy,
            )| KernelEvent {
                kind,
                tier,
                fidelity,
                ts_ns,
                tgid,
                pid,
                comm,
                cgroup_id,
                dev: ids.0,
                ino: ids.1,
                sock_ino: ids.2,
                nlink: ids.3,
                path,
                ret,
                owner,
                backlog,
                child_tgid,
                dir,
                mntns,
                from,
                from_path,
                from_dir,
                guard_policy,
                flags,
            },
        )
    }

    proptest! {
        #[test]
        fn the_hand_written_line_is_serdes_byte_for_byte(
            event in event(),
            workload in of(workload()),
            moved in of(file_id()),
            exe in of(text()),
            runtime in of(runtime()),
            seen_in in of(Just(SeenIn::Proc)),
        ) {
            let line = EventLine { event, workload, moved, exe, runtime, seen_in };
            let mut ours = Vec::new();
            write_line(&mut ours, &line).expect("write to a Vec");
            let reference = serde_json::to_vec(&line).expect("serde");
            prop_assert_eq!(String::from_utf8_lossy(&ours), String::from_utf8_lossy(&reference));
        }

        #[test]
        fn the_stamped_line_is_serdes_too_and_reads_back(
            event in event(),
            workload in of(workload()),
            moved in of(file_id()),
            exe in of(text()),
            runtime in of(runtime()),
            seen_in in of(Just(SeenIn::Proc)),
            wall_ns in any::<u64>(),
            node in text(),
        ) {
            let line = EventLine { event, workload, moved, exe, runtime, seen_in };
            let mut ours = Vec::new();
            write_line(&mut ours, &line).expect("write to a Vec");
            stamp(&mut ours, &wall::rfc3339(wall_ns), &node).expect("write to a Vec");
            let time = String::from_utf8(wall::rfc3339(wall_ns).to_vec()).expect("ASCII");
            let stamped = Stamped { line, schema: SCHEMA, time, node };
            let reference = serde_json::to_vec(&stamped).expect("serde");
            prop_assert_eq!(String::from_utf8_lossy(&ours), String::from_utf8_lossy(&reference));
            let back: Stamped<EventLine> = serde_json::from_slice(&ours).expect("reads back");
            prop_assert_eq!(&back, &stamped);
            let replayed: EventLine = serde_json::from_slice(&ours).expect("replay reads it");
            prop_assert_eq!(&replayed, &stamped.line);
        }
    }
}
