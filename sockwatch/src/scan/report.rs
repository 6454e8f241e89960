//! How `sockwatch scan` prints a [`ScanReport`]: a table (one line per finding, for people)
//! or one JSON object (findings, counts, warnings, for machines). In the table, every name a
//! process or a mount chose (a path, a command, a cgroup, a pod) is quoted
//! ([`crate::quote`]): a finding stays one line.
#![deny(clippy::string_slice, clippy::indexing_slicing)]
use std::io::{self, Write};

use serde::Serialize;

use sockwatch_common::FileId;

use crate::quote::quote;

use super::{
    findings::{
        Findings, OrphanCause, OrphanedListener, SocketFileMount, StaleBindMount, StaleCause,
        StaleSocketFile,
    },
    model::{Counts, ScanReport},
};
use crate::host::procfd::Holder;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One line per finding; a summary and warnings on stderr.
    Table,
    /// One JSON object: `findings`, `counts`, `warnings`, `complete`.
    Json,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    findings: &'a Findings,
    counts: &'a Counts,
    warnings: &'a [String],
    complete: bool,
    /// The processes an otherwise complete scan could not read.
    #[serde(skip_serializing_if = "Option::is_none")]
    unreadable: Option<&'a [u32]>,
}

impl<'a> JsonReport<'a> {
    fn of(r: &'a ScanReport) -> Self {
        Self {
            findings: &r.findings,
            counts: &r.counts,
            warnings: &r.warnings,
            complete: r.complete,
            unreadable: r.unreadable.as_deref(),
        }
    }
}

/// The JSON form of a report.
pub fn to_json(r: &ScanReport) -> serde_json::Value {
    serde_json::to_value(JsonReport::of(r)).expect("plain data serializes")
}

/// Write the JSON form as one line, keys in the order findings, counts, warnings, complete.
pub fn write_json(r: &ScanReport, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer(&mut *out, &JsonReport::of(r))?;
    writeln!(out)
}

/// `major:minor ino N`, as `ls -i` and `/proc/PID/mountinfo` name a file.
fn file(f: &FileId, low32: bool) -> String {
    let (maj, min) = (libc::major(f.dev), libc::minor(f.dev));
    let suffix = if low32 { " (low 32 bits)" } else { "" };
    format!("dev {maj}:{min} ino {}{suffix}", f.ino)
}

fn holders(h: &[Holder]) -> String {
    if h.is_empty() {
        return "no known holder".into();
    }
    let list: Vec<String> = h
        .iter()
        .map(|h| format!("{} {} ({})", h.tgid, quote(&h.comm), quote(&h.cgroup)))
        .collect();
    list.join(", ")
}

fn bind_mount_line(m: &StaleBindMount) -> String {
    let serving = match m.served_by {
        Some(s) => format!("still served by socket:[{s}] until it closes"),
        None => "nothing listens: connects are refused".into(),
    };
    let more = if m.process_count > m.processes.len() {
        format!(" and {} more", m.process_count - m.processes.len())
    } else {
        String::new()
    };
    format!(
        "stale-bind-mount   {}  source {} on {} was deleted; {}; {serving}; mount ns {} \
         ({} processes: {}{more})",
        quote(&m.mount_point),
        quote(&m.source),
        quote(&m.source_dev),
        file(&m.file, false),
        m.mntns,
        m.process_count,
        holders(&m.processes),
    )
}

fn socket_file_mount_line(m: &SocketFileMount) -> String {
    let pod = m
        .workload
        .as_ref()
        .and_then(|w| {
            Some(format!(
                " pod {}/{}",
                quote(w.namespace.as_deref()?),
                quote(w.pod_name.as_deref()?)
            ))
        })
        .unwrap_or_default();
    let serving = match m.served_by {
        Some(s) => format!("served by socket:[{s}] now"),
        None => "not served now".into(),
    };
    format!(
        "socket-file-mount  {}  live socket file {} on {} is bind-mounted here; {}; {serving}; \
         mount ns {} (pid {}{pod}); at the daemon's next restart connects here are refused: {}",
        quote(&m.mount_point),
        quote(&m.source),
        quote(&m.source_dev),
        file(&m.file, false),
        m.mntns,
        m.pid,
        m.fix,
    )
}

/// One line per finding, then one per risk.
pub fn write_table(r: &ScanReport, out: &mut dyn Write) -> io::Result<()> {
    for line in finding_lines(&r.findings) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// The table's lines: one per finding, then one per risk.
pub fn finding_lines(f: &Findings) -> Vec<String> {
    let mut lines: Vec<String> = f.orphaned_listeners.iter().map(orphan_line).collect();
    lines.extend(f.stale_socket_files.iter().map(stale_file_line));
    lines.extend(f.stale_bind_mounts.iter().map(bind_mount_line));
    lines.extend(f.socket_file_mounts.iter().map(socket_file_mount_line));
    lines
}

fn orphan_line(o: &OrphanedListener) -> String {
    let how = match o.cause {
        OrphanCause::Unlinked => "unlinked".to_string(),
        OrphanCause::Replaced { now } => format!("replaced by {}", file(&now, false)),
    };
    let queue = match (o.pending, o.backlog) {
        (Some(p), Some(b)) => format!("; {p}/{b} connections pending"),
        _ => String::new(),
    };
    format!(
        "orphaned-listener  {}  {how}; socket:[{}] on {}{queue}; held by {}",
        quote(&o.path),
        o.sock_ino,
        file(&o.file, o.ino_low32),
        holders(&o.holders),
    )
}

fn stale_file_line(s: &StaleSocketFile) -> String {
    let why = match &s.cause {
        StaleCause::NoSocket => "no socket is bound to it".to_string(),
        StaleCause::NotListening { sock_inos } => {
            let socks: Vec<String> = sock_inos.iter().map(|i| format!("socket:[{i}]")).collect();
            format!(
                "bound but nothing listens ({}; held by {})",
                socks.join(", "),
                holders(&s.holders)
            )
        }
    };
    format!(
        "stale-socket-file  {}  {why}; {}",
        quote(&s.path),
        file(&s.file, false)
    )
}

/// A one-line summary for people (stderr in table mode).
pub fn summary(r: &ScanReport) -> String {
    let c = &r.counts;
    let mut s = format!(
        "{} findings ({} orphaned listeners, {} stale socket files, {} stale bind mounts)",
        r.findings.len(),
        c.orphaned_listeners,
        c.stale_socket_files,
        c.stale_bind_mounts
    );
    if c.socket_file_mounts > 0 {
        s += &format!(
            "; risks: {} live socket files bind-mounted (stale after their daemon restarts)",
            c.socket_file_mounts
        );
    }
    if c.outside_watch > 0 {
        s += &format!(
            "; {} more outside the watched paths not shown",
            c.outside_watch
        );
    }
    s += &format!(
        "; scanned {} UNIX sockets ({} path-bound, {} listening) in {} network namespaces, \
         {} mount namespaces, {} processes",
        c.sockets, c.path_sockets, c.listeners, c.net_namespaces, c.mount_namespaces, c.processes
    );
    if !r.complete {
        s += "; incomplete (see warnings)";
    }
    s
}

#[cfg(test)]
#[expect(
    clippy::indexing_slicing,
    reason = "the tests index the JSON they built; a panic fails the test"
)]
mod tests {
    use super::*;
    use crate::scan::{OrphanedListener, SocketFileMount, StaleSocketFile};

    fn holder() -> Holder {
        Holder {
            tgid: 42,
            comm: "multus".into(),
            cgroup: "/kubepods/pod1".into(),
            cgroup_id: Some(7),
        }
    }

    fn report() -> ScanReport {
        let findings = Findings {
            orphaned_listeners: vec![OrphanedListener {
                path: "/run/multus/multus.sock".into(),
                sock_ino: 1234,
                file: FileId {
                    dev: 0xfe00,
                    ino: 77,
                },
                ino_low32: true,
                cause: OrphanCause::Replaced {
                    now: FileId {
                        dev: 0xfe00,
                        ino: 78,
                    },
                },
                pending: Some(0),
                backlog: Some(4096),
                holders: vec![holder()],
            }],
            stale_socket_files: vec![StaleSocketFile {
                path: "/run/x.sock".into(),
                file: FileId { dev: 45, ino: 9 },
                cause: StaleCause::NoSocket,
                holders: vec![],
            }],
            stale_bind_mounts: vec![StaleBindMount {
                mount_point: "/var/run/multus.sock".into(),
                source: "/run/multus/multus.sock".into(),
                source_dev: "0:45".into(),
                file: FileId { dev: 45, ino: 10 },
                nlink: 0,
                mntns: 4026532000,
                served_by: None,
                processes: vec![holder()],
                process_count: 3,
            }],
            socket_file_mounts: vec![SocketFileMount {
                mount_point: "/var/run/x.sock".into(),
                source: "/run/x/x.sock".into(),
                source_dev: "0:45".into(),
                file: FileId { dev: 45, ino: 11 },
                mntns: 4026532001,
                pid: 42,
                served_by: Some(1235),
                workload: Some(crate::engine::Workload {
                    namespace: Some("kube-system".into()),
                    pod_name: Some("client-1".into()),
                    ..Default::default()
                }),
                processes: vec![holder()],
                process_count: 1,
                fix: crate::scan::SOCKET_FILE_MOUNT_FIX,
                watch: Some(0),
            }],
        };
        ScanReport {
            sockets: vec![],
            counts: Counts {
                orphaned_listeners: 1,
                stale_socket_files: 1,
                stale_bind_mounts: 1,
                socket_file_mounts: 1,
                ..Default::default()
            },
            findings,
            warnings: vec!["could not read 1 network namespaces".into()],
            complete: false,
            unreadable: None,
        }
    }

    #[test]
    fn table_lines() {
        let mut out = Vec::new();
        write_table(&report(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            vec![
                "orphaned-listener  /run/multus/multus.sock  replaced by dev 254:0 ino 78; \
                 socket:[1234] on dev 254:0 ino 77 (low 32 bits); 0/4096 connections pending; \
                 held by 42 multus (/kubepods/pod1)",
                "stale-socket-file  /run/x.sock  no socket is bound to it; dev 0:45 ino 9",
                "stale-bind-mount   /var/run/multus.sock  source /run/multus/multus.sock on 0:45 \
                 was deleted; dev 0:45 ino 10; nothing listens: connects are refused; mount ns \
                 4026532000 (3 processes: 42 multus (/kubepods/pod1) and 2 more)",
                "socket-file-mount  /var/run/x.sock  live socket file /run/x/x.sock on 0:45 is \
                 bind-mounted here; dev 0:45 ino 11; served by socket:[1235] now; mount ns \
                 4026532001 (pid 42 pod kube-system/client-1); at the daemon's next restart \
                 connects here are refused: mount the socket's directory (a hostPath of type \
                 Directory, --volume /run/dir:...), not the socket file: a file mount keeps \
                 this inode, and the daemon's next restart binds a new one",
            ]
        );
        assert!(summary(&report()).contains("; risks: 1 live socket files bind-mounted"));
        assert!(summary(&report()).starts_with("3 findings (1 orphaned listeners"));
        assert!(summary(&report()).ends_with("incomplete (see warnings)"));
    }

    #[test]
    fn a_name_with_a_newline_or_an_escape_stays_quoted_on_its_line() {
        let mut r = report();
        r.findings.stale_socket_files[0].path = "/run/x\nforged line\x1b[2J.sock".into();
        r.findings.orphaned_listeners[0].holders[0].comm = "evil\rcomm".into();
        let lines = finding_lines(&r.findings);
        assert_eq!(
            lines[1],
            r"stale-socket-file  $'/run/x\nforged line\e[2J.sock'  no socket is bound to it; dev 0:45 ino 9"
        );
        assert!(
            lines[0].ends_with(r"held by 42 $'evil\rcomm' (/kubepods/pod1)"),
            "{}",
            lines[0]
        );
    }

    #[test]
    fn json_shape() {
        let j = to_json(&report());
        let o = &j["findings"]["orphaned_listeners"][0];
        assert_eq!(o["cause"]["how"], "replaced");
        assert_eq!(o["cause"]["now"]["ino"], 78);
        assert_eq!(o["file"]["dev"], 0xfe00);
        assert_eq!(o["holders"][0]["tgid"], 42);
        assert_eq!(o["holders"][0]["cgroup_id"], 7);
        assert_eq!(
            j["findings"]["stale_socket_files"][0]["cause"]["why"],
            "no_socket"
        );
        assert_eq!(
            j["findings"]["stale_bind_mounts"][0]["served_by"],
            serde_json::Value::Null
        );
        assert_eq!(j["counts"]["stale_bind_mounts"], 1);
        let m = &j["findings"]["socket_file_mounts"][0];
        assert_eq!(
            (&m["mntns"], &m["pid"]),
            (&4026532001u64.into(), &42.into())
        );
        assert_eq!(m["workload"]["pod_name"], "client-1");
        assert!(
            m["fix"]
                .as_str()
                .unwrap()
                .starts_with("mount the socket's directory")
        );
        assert!(m.get("watch").is_none(), "internal");
        assert_eq!(j["complete"], false);
        assert_eq!(j["warnings"].as_array().unwrap().len(), 1);
        let mut line = Vec::new();
        write_json(&report(), &mut line).unwrap();
        let text = String::from_utf8(line).unwrap();
        assert!(
            text.starts_with("{\"findings\":{\"orphaned_listeners\":[{"),
            "{text}"
        );
        assert!(text.ends_with("\"complete\":false}\n"), "{text}");
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, j);
    }
}
