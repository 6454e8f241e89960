//! The words every sentence shares: processes, files, relations, times.
use crate::{
    engine::{FileId, Proc, Relation, Workload},
    host::wall,
    quote::quote,
};

/// `comm (pid N, pod ns/name)`: the process as a person finds it in `ps` and `kubectl`;
/// `pid N` alone when only its tgid is known. Every name quoted ([`quote`]).
pub fn who(p: &Proc) -> String {
    let place = p.workload.as_ref().and_then(place).unwrap_or_default();
    match p.comm.as_str() {
        "" => format!("pid {}{place}", p.tgid),
        comm => format!("{} (pid {}{place})", quote(comm), p.tgid),
    }
}

/// How many characters of a container id name it, as `docker ps` and `crictl ps` show it.
const SHORT_ID: usize = 12;

/// `, pod ns/name`, else `, workload ns/name`, else `, container ID` (its first 12
/// characters: 12 hex digits for a runtime's id, but nothing checked that it is one).
fn place(w: &Workload) -> Option<String> {
    let in_ns = |name: &str| match &w.namespace {
        Some(ns) => format!("{}/{}", quote(ns), quote(name)),
        None => quote(name).to_string(),
    };
    if let Some(pod) = &w.pod_name {
        return Some(format!(", pod {}", in_ns(pod)));
    }
    if let Some(workload) = &w.workload {
        return Some(format!(", workload {}", in_ns(workload)));
    }
    let id = w.container_id.as_deref()?;
    let short: String = id.chars().take(SHORT_ID).collect();
    Some(format!(", container {}", quote(&short)))
}

/// `dev:ino`, as the JSON lines' `file` and `stat -c %d:%i` give it.
pub fn inode(f: FileId) -> String {
    format!("{}:{}", f.dev, f.ino)
}

/// `inode dev:ino`, or `an unknown inode`.
pub fn inode_or_unknown(f: Option<FileId>) -> String {
    f.map_or_else(
        || "an unknown inode".into(),
        |f| format!("inode {}", inode(f)),
    )
}

/// How the actor relates to the owner, in the words of a parenthesis.
pub fn relation(r: Relation) -> &'static str {
    match r {
        Relation::SameProcess => "same process",
        Relation::SameCgroup => "same cgroup",
        Relation::SamePod => "same pod, another container",
        Relation::SameWorkloadOtherPod => "same workload, another pod",
        Relation::HostProcess => "one on the host, one in a container",
        Relation::Other => "unrelated processes",
        Relation::Unknown => "relation unknown",
    }
}

/// A span as people say it: `850 µs`, `12 ms`, `3.2 s`, `4 min 5 s`, `2 h 3 min`.
pub fn duration(ns: u64) -> String {
    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;
    match ns {
        n if n < US => format!("{n} ns"),
        n if n < MS => format!("{} µs", n / US),
        n if n < S => format!("{} ms", n / MS),
        n if n < 60 * S => format!("{:.1} s", n as f64 / S as f64),
        n if n < 3600 * S => format!("{} min {} s", n / (60 * S), n / S % 60),
        n => format!("{} h {} min", n / (3600 * S), n / (60 * S) % 60),
    }
}

/// RFC 3339 in UTC to the millisecond: `2026-12-02T17:20:01.123Z`.
pub fn wall_ms(wall_ns: u64) -> String {
    let full = wall::rfc3339(wall_ns);
    // `YYYY-MM-DDTHH:MM:SS.mmm` is the first 23 bytes; all of them ASCII.
    format!("{}Z", String::from_utf8_lossy(&full[..23]))
}

/// A boot-clock time on the wall clock, given the boot-to-wall offset.
pub fn wall_of(ts_ns: u64, boot_to_wall_ns: i64) -> String {
    wall_ms(ts_ns.saturating_add_signed(boot_to_wall_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(comm: &str, workload: Option<Workload>) -> Proc {
        Proc {
            tgid: 42,
            pid: 43,
            comm: comm.into(),
            cgroup_id: 7,
            workload,
            exe: None,
            runtime: None,
        }
    }

    #[test]
    fn a_process_is_named_by_comm_and_tgid_and_where_it_runs() {
        assert_eq!(who(&proc("multus", None)), "multus (pid 42)");
        assert_eq!(who(&Proc::unknown(42)), "pid 42");
        let pod = Workload {
            pod_name: Some("multus-x1".into()),
            namespace: Some("kube-system".into()),
            workload: Some("multus".into()),
            ..Workload::default()
        };
        assert_eq!(
            who(&proc("multus", Some(pod.clone()))),
            "multus (pid 42, pod kube-system/multus-x1)"
        );
        let workload = Workload {
            pod_name: None,
            ..pod
        };
        assert_eq!(
            who(&proc("multus", Some(workload))),
            "multus (pid 42, workload kube-system/multus)"
        );
        let container = Workload {
            container_id: Some("0123456789abcdef0123".into()),
            ..Workload::default()
        };
        assert_eq!(
            who(&proc("sh", Some(container))),
            "sh (pid 42, container 0123456789ab)"
        );
    }

    #[test]
    fn a_name_is_quoted_and_a_container_id_cut_by_characters() {
        // Byte 12 falls inside the sixth `é`: slicing by byte index panicked here.
        let container = |id: &str| Workload {
            container_id: Some(id.into()),
            ..Workload::default()
        };
        assert_eq!(
            who(&proc("sh", Some(container("aéééééééééééé")))),
            "sh (pid 42, container aééééééééééé)"
        );
        assert_eq!(
            who(&proc("sh", Some(container("0123456789a\n\x1b[2J")))),
            r"sh (pid 42, container $'0123456789a\n')"
        );
        let pod = Workload {
            pod_name: Some("web\n0".into()),
            namespace: Some("ns\x1b]0;t\x07".into()),
            ..Workload::default()
        };
        assert_eq!(
            who(&proc("evil\ncomm", Some(pod))),
            r"$'evil\ncomm' (pid 42, pod $'ns\e]0;t\a'/$'web\n0')"
        );
    }

    #[test]
    fn spans_read_in_the_unit_that_fits() {
        let cases = [
            (999, "999 ns"),
            (850_000, "850 µs"),
            (12_300_000, "12 ms"),
            (3_240_000_000, "3.2 s"),
            (245_000_000_000, "4 min 5 s"),
            (7_380_000_000_000, "2 h 3 min"),
        ];
        for (ns, text) in cases {
            assert_eq!(duration(ns), text, "{ns} ns");
        }
    }

    #[test]
    fn times_are_rfc3339_to_the_millisecond() {
        assert_eq!(
            wall_ms(1_796_232_001_123_456_789),
            "2026-12-02T17:20:01.123Z"
        );
        assert_eq!(
            wall_of(1_123_456_789, 1_796_232_000_000_000_000),
            "2026-12-02T17:20:01.123Z"
        );
        assert_eq!(inode_or_unknown(None), "an unknown inode");
        assert_eq!(
            inode_or_unknown(Some(FileId { dev: 2049, ino: 7 })),
            "inode 2049:7"
        );
    }
}
