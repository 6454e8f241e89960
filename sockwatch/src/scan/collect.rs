//! Gathering a [`Snapshot`] from the real system: sock_diag in every network namespace,
//! `/proc` for holders and mount tables, the walk of the watched paths.
use std::{
    cell::RefCell,
    collections::HashMap,
    ffi::OsStr,
    fs, io,
    os::unix::{ffi::OsStrExt as _, fs::FileTypeExt as _},
    path::{Path, PathBuf},
};

use crate::attribution::{Attributor, DEFAULT_CAPACITY, DEFAULT_PODS_LOG_ROOT};

use super::{
    analyze::{Analysis, analyze},
    model::{Counts, MountTable, ScanError, ScanOptions, ScanReport, Snapshot, System, Watched},
    walk,
};
use crate::host::{
    caps::{
        self, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_SYS_ADMIN, CAP_SYS_PTRACE, Cap, CapSet,
    },
    diag::{self, DiagSocket, NetNs, NsDump},
    lookup::{self, Lookup, NetworkMounts},
    mounts::{self, MountInfo},
    procfd::{self, Holder, ProcStats, ProcTable},
    procfs,
    stat::Stat,
};

/// The real system, through `/proc`.
#[derive(Debug)]
pub struct ProcSystem {
    proc_root: PathBuf,
    cgroup2: Option<PathBuf>,
    holders: RefCell<HashMap<u32, Option<Holder>>>,
}

impl ProcSystem {
    pub fn new(proc_root: PathBuf, cgroup2: Option<PathBuf>) -> Self {
        Self {
            proc_root,
            cgroup2,
            holders: RefCell::default(),
        }
    }

    /// The path that reaches `path` as process `view` sees it; a path through its own
    /// descriptor ([`procfs::FdPath`]) through that process's descriptor.
    pub fn view_path(&self, view: u32, path: &Path) -> PathBuf {
        let bytes = path.as_os_str().as_bytes();
        if let Some(f) = procfs::fd_path(bytes) {
            return procfs::pid_path(&self.proc_root, view, &format!("fd/{}", f.fd))
                .join(OsStr::from_bytes(f.rest));
        }
        match bytes.strip_prefix(b"/") {
            Some(rel) => {
                procfs::pid_path(&self.proc_root, view, "root").join(OsStr::from_bytes(rel))
            }
            None => procfs::pid_path(&self.proc_root, view, "cwd").join(path),
        }
    }
}

impl System for ProcSystem {
    /// Under the lookup deadline, and never into a FUSE or network filesystem: such a file
    /// is an error other than "not found" (its state unknown).
    fn stat(&self, view: Option<u32>, path: &Path) -> io::Result<Stat> {
        let stat = |p: &Path| fs::metadata(p).map(|m| Stat::from_metadata(&m));
        let through_fd = procfs::fd_path(path.as_os_str().as_bytes()).is_some();
        let looked = match view {
            // The holder's descriptor leads there, whatever its mounts say.
            Some(pid) if through_fd => {
                let path = self.view_path(pid, path);
                lookup::with_deadline(Lookup::ScanStat, move || stat(&path))
            }
            _ => {
                let pid = view.map_or_else(|| "self".to_owned(), |v| v.to_string());
                let dir = self.proc_root.join(pid);
                lookup::in_view(Lookup::ScanStat, dir, &path.to_string_lossy(), stat)
            }
        };
        looked.unwrap_or_else(|f| Err(io::Error::other(format!("not looked up: {f:?}"))))
    }

    fn holder(&self, tgid: u32) -> Option<Holder> {
        self.holders
            .borrow_mut()
            .entry(tgid)
            .or_insert_with(|| procfd::read_holder(&self.proc_root, tgid, self.cgroup2.as_deref()))
            .clone()
    }

    fn fd_target(&self, tgid: u32, fd: u32) -> Option<Vec<u8>> {
        procfs::read_link_bytes(&procfs::pid_path(
            &self.proc_root,
            tgid,
            &format!("fd/{fd}"),
        ))
        .ok()
    }
}

/// Scan the node: gather a [`Snapshot`], [`analyze`] it, confirm the findings with a second
/// dump. Fails only when a watched path cannot be read, `/proc` cannot be listed or the
/// agent's own network namespace cannot be dumped; everything else it cannot read (another
/// user's fds without root, other namespaces without CAP_SYS_ADMIN) becomes a warning.
pub fn scan(opts: &ScanOptions) -> Result<ScanReport, ScanError> {
    let proc_root = &opts.proc_root;
    let mut tally = Tally::new(CapSet::effective().ok());

    let watch = opts
        .watch
        .iter()
        .map(|w| check_watch(w))
        .collect::<Result<Vec<_>, _>>()?;
    let own_mounts = read_mountinfo(proc_root, "self").unwrap_or_default();
    let watched = watched(watch, &own_mounts);

    let table =
        procfd::scan_processes(proc_root, &opts.limits.proc).map_err(|error| ScanError::Proc {
            path: proc_root.clone(),
            error,
        })?;
    tally.process_walk(&table.stats);

    let own_net = own_ns(proc_root, "net");
    let others = other_net_namespaces(proc_root, &table, own_net);
    let others = tally.cut_net_namespaces(others, opts.limits.max_net_namespaces);
    let results = dump_all(own_net, &others)?;
    tally.counts.net_namespaces = results.len();
    let net_what = tally.net_namespaces_what();
    tally.counts.net_namespaces_unreadable = tally.errors(&results, &net_what);
    let sockets = merged(&results);

    let mount_results = mount_tables(proc_root, &table, opts.limits.max_mount_namespaces);
    tally.counts.mount_namespaces = mount_results.len();
    tally.counts.mount_namespaces_unreadable =
        tally.errors(&mount_results, "mount namespaces' mountinfo");
    let mount_tables = mount_results
        .into_iter()
        .filter_map(|(_, r)| r.ok())
        .collect();

    let watched_paths: Vec<PathBuf> = watched.iter().map(|w| w.path.clone()).collect();
    let network = NetworkMounts::new(&own_mounts);
    let walked = walk::walk_sockets(&watched_paths, &opts.limits.walk, &network);
    tally.walk(&walked, &opts.limits.walk);

    let unreadable = table.unreadable;
    let snap = Snapshot {
        sockets,
        processes: table.processes,
        mount_tables,
        watch_files: walked.sockets,
        watched,
        own_mntns: own_ns(proc_root, "mnt"),
    };
    let sys = ProcSystem::new(proc_root.clone(), procfd::cgroup2_root(&own_mounts));
    let stats_failed = lookup::tally_of(Lookup::ScanStat).failed();
    let mut analysis = analyze(&snap, &sys);
    tally.unanswered_stats(lookup::tally_of(Lookup::ScanStat).failed() - stats_failed);
    if !analysis.findings.is_empty() {
        let again = dump_all(own_net, &others)?;
        analysis.findings.confirm(&merged(&again));
    }
    let mut attributor = Attributor::new(
        proc_root.clone(),
        DEFAULT_PODS_LOG_ROOT.into(),
        DEFAULT_CAPACITY,
    );
    for m in &mut analysis.findings.socket_file_mounts {
        m.workload = attributor.workload(m.pid);
    }
    tally.analysis(&snap, &analysis);
    Ok(tally.report(analysis, &table.stats, unreadable))
}

/// A watched path: canonical, and a directory that can be listed or a socket file.
fn check_watch(path: &Path) -> Result<(PathBuf, fs::Metadata), ScanError> {
    let err = |error| ScanError::Watch {
        path: path.to_path_buf(),
        error,
    };
    let canonical = fs::canonicalize(path).map_err(err)?;
    let m = fs::metadata(&canonical).map_err(err)?;
    if m.is_dir() {
        fs::read_dir(&canonical).map_err(err)?;
    } else if !m.file_type().is_socket() {
        return Err(ScanError::WatchKind {
            path: path.to_path_buf(),
        });
    }
    Ok((canonical, m))
}

fn watched(watch: Vec<(PathBuf, fs::Metadata)>, own_mounts: &[MountInfo]) -> Vec<Watched> {
    watch
        .into_iter()
        .map(|(path, m)| Watched {
            id: Stat::from_metadata(&m).id(),
            fs: mounts::fs_location(own_mounts, &path),
            path,
        })
        .collect()
}

fn own_ns(proc_root: &Path, kind: &str) -> Option<u64> {
    procfs::ns_id(proc_root, "self", kind).ok().flatten()
}

fn read_mountinfo(proc_root: &Path, pid: impl std::fmt::Display) -> Result<Vec<MountInfo>, String> {
    fs::read(procfs::pid_path(proc_root, pid, "mountinfo"))
        .map_err(|e| e.to_string())
        .and_then(|t| mounts::parse_mountinfo(&t).map_err(|e| e.to_string()))
}

/// One process per network namespace other than the agent's own, in process order.
fn other_net_namespaces(proc_root: &Path, table: &ProcTable, own: Option<u64>) -> Vec<NetNs> {
    let mut others: Vec<NetNs> = Vec::new();
    for p in &table.processes {
        if let Some(id) = p.netns
            && Some(id) != own
            && !others.iter().any(|n| n.id == id)
        {
            others.push(NetNs {
                id,
                file: procfs::pid_path(proc_root, p.tgid, "ns/net"),
            });
        }
    }
    others
}

fn dump_all(own: Option<u64>, others: &[NetNs]) -> Result<Vec<NsDump>, ScanError> {
    let mut results = diag::dump_namespaces(own, others);
    if own.is_none() {
        // Own namespace unknown (no /proc/self/ns): dump it anyway.
        results.insert(0, (0, diag::dump_current()));
    }
    if results.first().is_some_and(|(_, r)| r.is_err())
        && let (_, Err(e)) = results.remove(0)
    {
        return Err(e.into());
    }
    Ok(results)
}

fn merged(results: &[NsDump]) -> Vec<DiagSocket> {
    results
        .iter()
        .filter_map(|(_, r)| r.as_ref().ok())
        .flatten()
        .cloned()
        .collect()
}

/// One mountinfo per mount namespace (at most `max` namespaces), read through its first
/// process whose mountinfo is readable.
fn mount_tables(
    proc_root: &Path,
    table: &ProcTable,
    max: usize,
) -> Vec<(u64, Result<MountTable, String>)> {
    let mut results: Vec<(u64, Result<MountTable, String>)> = Vec::new();
    for p in &table.processes {
        let Some(ns) = p.mntns else { continue };
        let slot = match results.iter().position(|(id, _)| *id == ns) {
            Some(i) if results[i].1.is_ok() => continue,
            Some(i) => i,
            None if results.len() >= max => continue,
            None => {
                results.push((ns, Err(String::new())));
                results.len() - 1
            }
        };
        results[slot].1 = read_mountinfo(proc_root, p.tgid).map(|mounts| MountTable {
            mntns: ns,
            pid: p.tgid,
            mounts,
        });
    }
    results
}

/// The report's counts and warnings, gathered step by step.
#[derive(Default)]
struct Tally {
    counts: Counts,
    warnings: Vec<String>,
    /// The agent's effective capabilities, to name the one a refusal lacked; `None` when
    /// unknown.
    caps: Option<CapSet>,
}

/// The capabilities `/proc/PID/fd` of any process needs: ptrace access, and for another
/// user's (mode 0500) a DAC override; either DAC capability does, the one held is named.
fn fd_capabilities(caps: Option<CapSet>) -> [Cap; 2] {
    let dac = match caps {
        Some(c) if c.has(CAP_DAC_OVERRIDE) => CAP_DAC_OVERRIDE,
        _ => CAP_DAC_READ_SEARCH,
    };
    [CAP_SYS_PTRACE, dac]
}

/// Why the kernel refused what `needed` allows: the capabilities missing from the agent's
/// effective set or, holding them all, what else refuses them.
fn refused_because(caps: Option<CapSet>, needed: &[Cap]) -> String {
    let Some(caps) = caps else {
        return "permission denied".into();
    };
    caps::lacking_clause(caps, needed).unwrap_or_else(|| {
        format!(
            "refused although the agent holds {} (a security module, or another user namespace?)",
            caps::names(needed)
        )
    })
}

impl Tally {
    fn new(caps: Option<CapSet>) -> Self {
        Self {
            caps,
            ..Self::default()
        }
    }

    fn process_walk(&mut self, ps: &ProcStats) {
        self.counts.processes = ps.processes;
        self.counts.processes_vanished = ps.vanished;
        self.counts.processes_fds_unreadable = ps.fds_unreadable;
        self.counts.processes_ns_unreadable = ps.ns_unreadable;
        if ps.fds_unreadable > 0 {
            self.warnings.push(format!(
                "could not read the open files of {} processes: {}; their sockets have no known \
                 holder",
                ps.fds_unreadable,
                refused_because(self.caps, &fd_capabilities(self.caps))
            ));
        }
        if ps.ns_unreadable > 0 {
            // The links in /proc/PID/ns and /proc/PID/fd pass the same ptrace check; the fd
            // directory itself only DAC's, so its links fail one by one, uncounted.
            self.warnings.push(format!(
                "could not read the namespaces of {} processes: {}; network and mount namespaces \
                 only they are in are not scanned, and their sockets have no known holder (their \
                 descriptors need the same ptrace access)",
                ps.ns_unreadable,
                refused_because(self.caps, &[CAP_SYS_PTRACE])
            ));
        }
        if ps.fds_cut > 0 || ps.processes_cut {
            self.warnings.push(format!(
                "limits cut the process walk: {} processes with fds cut, process limit reached: {}",
                ps.fds_cut, ps.processes_cut
            ));
        }
    }

    /// What the warning about undumpable network namespaces calls them: entering one
    /// (setns) needs CAP_SYS_ADMIN.
    fn net_namespaces_what(&self) -> String {
        match self
            .caps
            .and_then(|c| caps::lacking_clause(c, &[CAP_SYS_ADMIN]))
        {
            Some(lacking) => format!("network namespaces ({lacking})"),
            None => "network namespaces".into(),
        }
    }

    /// Keeps the first namespaces within `max`, counting the agent's own.
    fn cut_net_namespaces(&mut self, mut others: Vec<NetNs>, max: usize) -> Vec<NetNs> {
        if others.len() + 1 > max {
            self.warnings.push(format!(
                "{} network namespaces: only the first {max} are read",
                others.len() + 1,
            ));
            others.truncate(max.saturating_sub(1));
        }
        others
    }

    /// How many of `results` failed; one warning names the first.
    fn errors<T, E: std::fmt::Display>(
        &mut self,
        results: &[(u64, Result<T, E>)],
        what: &str,
    ) -> usize {
        let failed: Vec<_> = results.iter().filter(|(_, r)| r.is_err()).collect();
        if let Some((id, Err(e))) = failed.first() {
            self.warnings.push(format!(
                "could not read {} {what} (first: {id}: {e})",
                failed.len()
            ));
        }
        failed.len()
    }

    fn walk(&mut self, walked: &walk::Walk, limits: &walk::WalkLimits) {
        self.counts.watch_entries = walked.entries;
        self.counts.watch_socket_files = walked.sockets.len();
        if walked.cut {
            self.warnings.push(format!(
                "the walk of the watched paths was cut at {} entries or {} levels",
                limits.max_entries, limits.max_depth
            ));
        }
        for (point, fstype) in &walked.skipped {
            self.warnings.push(format!(
                "{} is on a {} filesystem: not looked into (FUSE and network filesystems may \
                 never answer; --lookup-network-filesystems allows it)",
                crate::quote::quote_bytes(point.as_os_str().as_bytes()),
                crate::quote::quote(fstype)
            ));
        }
        if walked.unreadable > 0 {
            self.warnings.push(format!(
                "could not list {} directories below the watched paths",
                walked.unreadable
            ));
        }
    }

    fn unanswered_stats(&mut self, n: u64) {
        if n > 0 {
            self.warnings.push(format!(
                "{n} paths not looked up (on a FUSE or network filesystem, or no answer within \
                 {} ms): their sockets' state is unknown",
                lookup::DEADLINE.as_millis()
            ));
        }
    }

    fn analysis(&mut self, snap: &Snapshot, analysis: &Analysis) {
        let c = &mut self.counts;
        c.sockets = snap.sockets.len();
        c.path_sockets = analysis.sockets.len();
        c.listeners = analysis.sockets.iter().filter(|s| s.listening).count();
        c.unresolved = analysis.unresolved;
        c.outside_watch = analysis.outside_watch;
        c.orphaned_listeners = analysis.findings.orphaned_listeners.len();
        c.stale_socket_files = analysis.findings.stale_socket_files.len();
        c.stale_bind_mounts = analysis.findings.stale_bind_mounts.len();
        c.socket_file_mounts = analysis.findings.socket_file_mounts.len();
    }

    fn report(self, analysis: Analysis, ps: &ProcStats, unreadable: Vec<u32>) -> ScanReport {
        // Every namespace found was dumped and nothing was cut: what is missing is at most
        // what only the unreadable processes could show.
        let walked =
            self.counts.net_namespaces_unreadable == 0 && !ps.processes_cut && ps.fds_cut == 0;
        let complete = walked && unreadable.is_empty();
        ScanReport {
            sockets: analysis.sockets,
            findings: analysis.findings,
            counts: self.counts,
            warnings: self.warnings,
            complete,
            unreadable: (walked && !complete).then_some(unreadable),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk_warnings(caps: Option<CapSet>) -> Vec<String> {
        let mut tally = Tally::new(caps);
        tally.process_walk(&ProcStats {
            processes: 9,
            fds_unreadable: 3,
            ns_unreadable: 2,
            ..ProcStats::default()
        });
        tally.warnings
    }

    #[test]
    fn warnings_name_the_missing_capability() {
        let admin = CapSet(1 << CAP_SYS_ADMIN.bit);
        assert_eq!(
            walk_warnings(Some(admin)),
            [
                "could not read the open files of 3 processes: CAP_SYS_PTRACE and \
                 CAP_DAC_READ_SEARCH are not in the agent's effective set; their sockets have no \
                 known holder",
                "could not read the namespaces of 2 processes: CAP_SYS_PTRACE is not in the \
                 agent's effective set; network and mount namespaces only they are in are not \
                 scanned, and their sockets have no known holder (their descriptors need the \
                 same ptrace access)",
            ]
        );
        let tally = Tally::new(Some(admin));
        assert_eq!(tally.net_namespaces_what(), "network namespaces");
        let tally = Tally::new(Some(CapSet(0)));
        assert_eq!(
            tally.net_namespaces_what(),
            "network namespaces (CAP_SYS_ADMIN is not in the agent's effective set)"
        );
    }

    #[test]
    fn warnings_without_a_missing_capability_say_so() {
        let full = CapSet((1 << 41) - 1);
        let w = walk_warnings(Some(full));
        assert!(
            w[0].contains(
                "refused although the agent holds CAP_SYS_PTRACE and CAP_DAC_OVERRIDE (a \
                 security module"
            ),
            "{w:?}"
        );
        assert!(
            w[1].contains("refused although the agent holds CAP_SYS_PTRACE ("),
            "{w:?}"
        );
        assert!(walk_warnings(None)[0].contains("processes: permission denied;"));
    }
}
