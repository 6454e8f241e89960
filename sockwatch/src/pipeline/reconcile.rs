//! Reconciliation: the kernel's current view (a scan) into the engine and the kernel's live
//! table, so a late start or lost events are repaired.
use sockwatch_common::{LiveSock, Owner, flags, name_hash};

use crate::{
    engine::{self, Proc},
    scan::{ScanReport, ScannedSocket},
};

fn holder_proc(h: &crate::host::procfd::Holder) -> Proc {
    Proc {
        tgid: h.tgid,
        pid: h.tgid,
        comm: h.comm.clone(),
        cgroup_id: h.cgroup_id.unwrap_or(0),
        workload: None,
        exe: None,
        runtime: None,
    }
}

/// The engine's input for a scan taken at `ts_ns`.
pub fn snapshot(report: &ScanReport, ts_ns: u64) -> engine::ScanSnapshot {
    engine::ScanSnapshot {
        ts_ns,
        complete: report.complete,
        unreadable: report.unreadable.clone(),
        sockets: report
            .sockets
            .iter()
            .map(|s| engine::ScannedSocket {
                sock_ino: s.sock_ino,
                file: s.file,
                path: s.path.clone(),
                listening: s.listening,
                holders: s.holders.iter().map(holder_proc).collect(),
                file_linked: s.file_linked,
                outside_watch: s.outside_watch,
            })
            .collect(),
    }
}

/// The kernel live-table entry a scanned socket stands for: inside the watched paths, bound
/// to a file whose full identity is known, held by someone. The first holder stands for the
/// owner. (A socket outside them that the kernel tracks has its entry since its bind.)
pub fn live_entry(s: &ScannedSocket, ts_ns: u64) -> Option<(sockwatch_common::FileId, LiveSock)> {
    let file = s.file.filter(|_| !s.ino_low32 && !s.outside_watch)?;
    let owner = s.holders.first()?;
    let base = s.path.rsplit('/').next().unwrap_or(&s.path);
    Some((
        file,
        LiveSock {
            sock_ino: s.sock_ino,
            owner: Owner {
                tgid: owner.tgid,
                _pad: 0,
                cgroup_id: owner.cgroup_id.unwrap_or(0),
                bind_ns: ts_ns,
            },
            name_hash: name_hash(base.as_bytes()),
            flags: if s.listening { flags::LISTENING } else { 0 },
            _pad: [0; 3],
        },
    ))
}

/// Each socket directory the scan found: identity and absolute path, so relative removals
/// resolve after a late start.
pub fn dirs(report: &ScanReport) -> impl Iterator<Item = (sockwatch_common::FileId, &str)> {
    report
        .sockets
        .iter()
        .filter_map(|s| s.dir.as_ref())
        .map(|(id, path)| (*id, path.as_str()))
}

#[cfg(test)]
mod tests {
    use sockwatch_common::FileId;

    use super::*;
    use crate::host::procfd::Holder;

    fn scanned() -> ScannedSocket {
        ScannedSocket {
            sock_ino: 77,
            file: Some(FileId {
                dev: 5,
                ino: 1 << 33,
            }),
            ino_low32: false,
            path: "/run/multus/multus.sock".into(),
            listening: true,
            sock_type: 1,
            state: 10,
            holders: vec![Holder {
                tgid: 977,
                comm: "multus".into(),
                cgroup: "/x".into(),
                cgroup_id: Some(42),
            }],
            file_linked: Some(false),
            dir: None,
            outside_watch: false,
        }
    }

    #[test]
    fn a_scanned_listener_becomes_a_live_entry_and_an_engine_socket() {
        let (file, live) = live_entry(&scanned(), 9).expect("entry");
        assert_eq!(
            file,
            FileId {
                dev: 5,
                ino: 1 << 33
            }
        );
        assert_eq!(
            (
                live.sock_ino,
                live.owner.tgid,
                live.owner.cgroup_id,
                live.flags
            ),
            (77, 977, 42, flags::LISTENING)
        );
        assert_eq!(live.name_hash, name_hash(b"multus.sock"));
        let report = ScanReport {
            sockets: vec![scanned()],
            findings: Default::default(),
            counts: Default::default(),
            warnings: vec![],
            complete: true,
            unreadable: None,
        };
        let snap = snapshot(&report, 9);
        assert!(snap.complete);
        assert_eq!(snap.sockets[0].holders[0].tgid, 977);
        assert_eq!(
            snap.sockets[0].file,
            Some(engine::FileId {
                dev: 5,
                ino: 1 << 33
            })
        );
        assert_eq!(snap.sockets[0].file_linked, Some(false));
        assert_eq!(dirs(&report).count(), 0);
        let mut linked = scanned();
        linked.dir = Some((FileId { dev: 5, ino: 3 }, "/run/multus".into()));
        let report = ScanReport {
            sockets: vec![scanned(), linked],
            ..report
        };
        assert_eq!(
            dirs(&report).collect::<Vec<_>>(),
            vec![(FileId { dev: 5, ino: 3 }, "/run/multus")]
        );
    }

    #[test]
    fn truncated_unheld_or_unwatched_sockets_are_not_seeded() {
        let mut s = scanned();
        s.ino_low32 = true;
        assert!(live_entry(&s, 1).is_none());
        let mut s = scanned();
        s.holders.clear();
        assert!(live_entry(&s, 1).is_none());
        let mut s = scanned();
        s.outside_watch = true;
        assert!(live_entry(&s, 1).is_none());
    }
}
