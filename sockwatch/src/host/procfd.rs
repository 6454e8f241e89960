//! Who holds which socket: the `socket:[N]` links in `/proc/PID/fd`, plus each process's mount
//! and network namespace. Processes that vanish mid-walk are normal: skipped and counted.
//!
//! Only thread-group leaders are listed (what `readdir(/proc)` returns); a thread that
//! unshared its fd table (`CLONE_FILES` not set) is not seen.
use std::{
    fs, io,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
};

use serde::Serialize;

pub use super::procfs::{parse_bracket_link, parse_cgroup};
use super::{
    mounts::MountInfo,
    procfs::{is_gone, is_refused, ns_id, pid_path, read_link_bytes, read_pid_file},
};

/// A process holding a socket, for display and for the correlation engine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Holder {
    pub tgid: u32,
    pub comm: String,
    /// Cgroup path: the cgroup v2 path, or on a v1-only or hybrid host the first non-root v1
    /// path (containers are told apart there). Relative to the agent's cgroup namespace.
    pub cgroup: String,
    /// Inode of the cgroup v2 directory: what `bpf_get_current_cgroup_id()` returns in kernel
    /// events. None when there is no v2 path or cgroup2 is not mounted where the agent looks.
    pub cgroup_id: Option<u64>,
}

/// One process as the walk saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Process {
    pub tgid: u32,
    /// Mount namespace id (nsfs inode of `/proc/PID/ns/mnt`).
    pub mntns: Option<u64>,
    /// Network namespace id (nsfs inode of `/proc/PID/ns/net`).
    pub netns: Option<u64>,
    /// Socket inodes it holds, sorted, each once.
    pub sockets: Vec<u32>,
}

/// Bounds on the walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcLimits {
    pub max_processes: usize,
    pub max_fds_per_process: usize,
    pub max_fds_total: usize,
}

impl Default for ProcLimits {
    fn default() -> Self {
        Self {
            max_processes: 1 << 20,
            max_fds_per_process: 1 << 18,
            max_fds_total: 1 << 22,
        }
    }
}

/// What the walk could not see.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProcStats {
    pub processes: usize,
    /// Gone between `readdir(/proc)` and reading their fds.
    pub vanished: usize,
    /// `/proc/PID/fd` not readable (permissions): their sockets have no known holder.
    pub fds_unreadable: usize,
    /// Processes whose namespace links are not readable (permissions): namespaces only they
    /// are in are not scanned.
    pub ns_unreadable: usize,
    pub fds_seen: usize,
    /// Processes whose fd list was cut by a limit.
    pub fds_cut: usize,
    /// The process limit was reached: later processes were not walked.
    pub processes_cut: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcTable {
    pub processes: Vec<Process>,
    pub stats: ProcStats,
    /// Processes whose namespaces or descriptors could not be read (and that did not vanish).
    pub unreadable: Vec<u32>,
}

/// `socket:[12345]` → 12345.
pub fn parse_socket_link(target: &[u8]) -> Option<u32> {
    parse_bracket_link(target, b"socket").and_then(|n| u32::try_from(n).ok())
}

/// Does process `tgid` hold a descriptor of socket `sock_ino` (its `socket:[N]` link)? False
/// when the process or its fd table cannot be read.
pub fn holds_socket(proc_root: &Path, tgid: u32, sock_ino: u64) -> bool {
    let Ok(fds) = fs::read_dir(pid_path(proc_root, tgid, "fd")) else {
        return false;
    };
    fds.filter_map(Result::ok)
        .filter_map(|fd| read_link_bytes(&fd.path()).ok())
        .any(|target| parse_socket_link(&target).map(u64::from) == Some(sock_ino))
}

/// The first process other than `except` found holding each of `sock_inos`: who has come to
/// hold a socket its known owner is leaving (a descriptor passed by SCM_RIGHTS, which the
/// tracepoint tier does not see). Stops once each socket has a holder.
pub fn holders_of(proc_root: &Path, sock_inos: &[u64], except: u32) -> Vec<(u64, u32)> {
    let Ok(dir) = fs::read_dir(proc_root) else {
        return Vec::new();
    };
    let mut found: Vec<(u64, u32)> = Vec::new();
    let tgids = dir.filter_map(Result::ok).filter_map(|e| {
        std::str::from_utf8(e.file_name().as_bytes())
            .ok()?
            .parse::<u32>()
            .ok()
    });
    for tgid in tgids.filter(|&t| t != except) {
        let Ok(fds) = fs::read_dir(pid_path(proc_root, tgid, "fd")) else {
            continue;
        };
        for target in fds
            .filter_map(Result::ok)
            .filter_map(|fd| read_link_bytes(&fd.path()).ok())
        {
            let Some(ino) = parse_socket_link(&target).map(u64::from) else {
                continue;
            };
            if sock_inos.contains(&ino) && !found.iter().any(|&(s, _)| s == ino) {
                found.push((ino, tgid));
            }
        }
        if found.len() == sock_inos.len() {
            break;
        }
    }
    found
}

/// Walk `proc_root` (normally `/proc`): every process's socket fds and namespaces.
pub fn scan_processes(proc_root: &Path, limits: &ProcLimits) -> io::Result<ProcTable> {
    let mut table = ProcTable::default();
    let mut fds_left = limits.max_fds_total;
    let mut tgids: Vec<u32> = fs::read_dir(proc_root)?
        .filter_map(std::result::Result::ok)
        .filter_map(|e| {
            std::str::from_utf8(e.file_name().as_bytes())
                .ok()?
                .parse()
                .ok()
        })
        .collect();
    tgids.sort_unstable();
    if tgids.len() > limits.max_processes {
        tgids.truncate(limits.max_processes);
        table.stats.processes_cut = true;
    }
    for tgid in tgids {
        let mut p = Process {
            tgid,
            ..Default::default()
        };
        let mut vanished = false;
        let mut ns_unreadable = false;
        for (kind, slot) in [("mnt", &mut p.mntns), ("net", &mut p.netns)] {
            match ns_id(proc_root, tgid, kind) {
                Ok(id) => *slot = id,
                Err(e) if is_gone(&e) => vanished = true,
                Err(_) => ns_unreadable = true,
            }
        }
        table.stats.ns_unreadable += usize::from(ns_unreadable && !vanished);
        let mut fds_unreadable = false;
        match fs::read_dir(pid_path(proc_root, tgid, "fd")) {
            Ok(dir) => {
                let mut n = 0usize;
                let mut links_refused = false;
                for entry in dir {
                    let Ok(entry) = entry else { continue };
                    if n >= limits.max_fds_per_process || fds_left == 0 {
                        table.stats.fds_cut += 1;
                        break;
                    }
                    n += 1;
                    fds_left -= 1;
                    // A closed fd (ENOENT) between readdir and readlink is normal; a refused
                    // link (no ptrace access) hides a holder.
                    match read_link_bytes(&entry.path()) {
                        Ok(t) => p.sockets.extend(parse_socket_link(&t)),
                        Err(e) => links_refused |= is_refused(&e),
                    }
                }
                table.stats.fds_seen += n;
                // Refused namespace links are reported already: the same check refused both.
                if links_refused && !ns_unreadable {
                    table.stats.fds_unreadable += 1;
                    fds_unreadable = true;
                }
            }
            Err(e) if is_gone(&e) => vanished = true,
            Err(_) => {
                table.stats.fds_unreadable += 1;
                fds_unreadable = true;
            }
        }
        if (ns_unreadable || fds_unreadable) && !vanished {
            table.unreadable.push(tgid);
        }
        if vanished && p.mntns.is_none() && p.sockets.is_empty() {
            table.stats.vanished += 1;
            continue;
        }
        p.sockets.sort_unstable();
        p.sockets.dedup();
        table.stats.processes += 1;
        table.processes.push(p);
    }
    Ok(table)
}

/// Read a holder's name and cgroup. None if the process is gone.
pub fn read_holder(proc_root: &Path, tgid: u32, cgroup2_root: Option<&Path>) -> Option<Holder> {
    let comm = read_pid_file(proc_root, tgid, "comm").ok()?;
    let (cgroup, is_v2) = read_pid_file(proc_root, tgid, "cgroup")
        .map_or_else(|_| (String::new(), false), |t| parse_cgroup(&t));
    let cgroup_id = match (is_v2, cgroup2_root) {
        (true, Some(root)) => {
            use std::os::unix::fs::MetadataExt as _;
            fs::metadata(root.join(cgroup.trim_start_matches('/')))
                .ok()
                .map(|m| m.ino())
        }
        _ => None,
    };
    Some(Holder {
        tgid,
        comm: comm.trim_end_matches('\n').to_string(),
        cgroup,
        cgroup_id,
    })
}

/// Where cgroup2 is mounted, from mountinfo (`/sys/fs/cgroup` or `/sys/fs/cgroup/unified`).
pub fn cgroup2_root(mounts: &[MountInfo]) -> Option<PathBuf> {
    mounts
        .iter()
        .filter(|m| m.fs_type == "cgroup2" && m.root == b"/")
        .map(|m| PathBuf::from(std::ffi::OsStr::from_bytes(&m.mount_point)))
        .next()
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn holders_of_skips_the_leaving_owner_and_stops_at_the_first_holder() {
        let root = tempfile::tempdir().expect("tempdir");
        for (tgid, target) in [
            (10, "socket:[77]"),
            (20, "socket:[77]"),
            (30, "socket:[88]"),
        ] {
            let fd = root.path().join(format!("{tgid}/fd"));
            std::fs::create_dir_all(&fd).expect("fd dir");
            symlink(target, fd.join("3")).expect("link");
        }
        std::fs::create_dir_all(root.path().join("self")).expect("not a pid");
        let mut found = holders_of(root.path(), &[77, 88, 99], 10);
        found.sort_unstable();
        assert_eq!(found, [(77, 20), (88, 30)]);
        assert_eq!(holders_of(root.path(), &[88], 30), []);
    }

    #[test]
    fn socket_and_ns_links() {
        assert_eq!(parse_socket_link(b"socket:[12345]"), Some(12345));
        let root = tempfile::tempdir().expect("tempdir");
        let fd = root.path().join("42/fd");
        std::fs::create_dir_all(&fd).expect("fd dir");
        std::os::unix::fs::symlink("socket:[77]", fd.join("3")).expect("link");
        std::os::unix::fs::symlink("/dev/null", fd.join("4")).expect("link");
        assert!(holds_socket(root.path(), 42, 77));
        assert!(!holds_socket(root.path(), 42, 78));
        assert!(!holds_socket(root.path(), 43, 77), "no such process");
        assert_eq!(parse_socket_link(b"socket:[4294967295]"), Some(u32::MAX));
        assert_eq!(parse_socket_link(b"socket:[4294967296]"), None);
        assert_eq!(parse_socket_link(b"socket:[]"), None);
        assert_eq!(parse_socket_link(b"socket:[12a]"), None);
        assert_eq!(parse_socket_link(b"socket:[1"), None);
        assert_eq!(parse_socket_link(b"pipe:[12]"), None);
        assert_eq!(parse_socket_link(b"/tmp/socket:[1]"), None);
        assert_eq!(parse_socket_link(b"anon_inode:[eventfd]"), None);
        assert_eq!(
            parse_bracket_link(b"mnt:[4026531832]", b"mnt"),
            Some(4026531832)
        );
        assert_eq!(parse_bracket_link(b"net:[4026531833]", b"mnt"), None);
    }

    #[test]
    fn walks_a_fake_proc() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        let mk = |tgid: u32, fds: &[&str], mnt: Option<&str>| {
            let p = root.join(tgid.to_string());
            fs::create_dir_all(p.join("fd")).unwrap();
            fs::create_dir_all(p.join("ns")).unwrap();
            for (i, t) in fds.iter().enumerate() {
                symlink(t, p.join(format!("fd/{i}"))).unwrap();
            }
            if let Some(m) = mnt {
                symlink(m, p.join("ns/mnt")).unwrap();
                symlink("net:[4026531833]", p.join("ns/net")).unwrap();
            }
        };
        mk(
            1,
            &["socket:[10]", "/dev/null", "socket:[11]", "socket:[10]"],
            Some("mnt:[7]"),
        );
        mk(20, &["pipe:[3]"], Some("mnt:[8]"));
        // A process that vanished: directory listed, nothing inside.
        fs::create_dir(root.join("300")).unwrap();
        fs::create_dir(root.join("self-not-a-pid")).unwrap();
        let t = scan_processes(root, &ProcLimits::default()).unwrap();
        assert_eq!(
            t.processes,
            vec![
                Process {
                    tgid: 1,
                    mntns: Some(7),
                    netns: Some(4026531833),
                    sockets: vec![10, 11]
                },
                Process {
                    tgid: 20,
                    mntns: Some(8),
                    netns: Some(4026531833),
                    sockets: vec![]
                },
            ]
        );
        assert_eq!(t.stats.processes, 2);
        assert_eq!(t.stats.vanished, 1);
        assert_eq!(t.stats.fds_seen, 5);
        assert_eq!(t.stats.fds_cut, 0);

        let t = scan_processes(
            root,
            &ProcLimits {
                max_processes: 1,
                max_fds_per_process: 2,
                max_fds_total: 100,
            },
        )
        .unwrap();
        assert!(t.stats.processes_cut);
        assert_eq!(t.processes.len(), 1);
        assert_eq!(t.stats.fds_cut, 1);
        assert_eq!(t.stats.fds_seen, 2);
    }
}
