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

use super::{
    Counts, Holder, MountTable, ScanError, ScanOptions, ScanReport, Snapshot, Stat, System,
    Watched,
    analyze::analyze,
    diag::{self, DiagSocket, NetNs, NsDump},
    mounts, procfd, walk,
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

    /// The path that reaches `path` as process `view` sees it.
    pub fn view_path(&self, view: u32, path: &Path) -> PathBuf {
        let bytes = path.as_os_str().as_bytes();
        match bytes.strip_prefix(b"/") {
            Some(rel) => self
                .proc_root
                .join(format!("{view}/root"))
                .join(OsStr::from_bytes(rel)),
            None => self.proc_root.join(format!("{view}/cwd")).join(path),
        }
    }
}

impl System for ProcSystem {
    fn stat(&self, view: Option<u32>, path: &Path) -> io::Result<Stat> {
        let m = match view {
            None => fs::metadata(path)?,
            Some(pid) => fs::metadata(self.view_path(pid, path))?,
        };
        Ok(Stat::from_metadata(&m))
    }

    fn holder(&self, tgid: u32) -> Option<Holder> {
        self.holders
            .borrow_mut()
            .entry(tgid)
            .or_insert_with(|| procfd::read_holder(&self.proc_root, tgid, self.cgroup2.as_deref()))
            .clone()
    }
}

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

fn own_ns(proc_root: &Path, kind: &str) -> Option<u64> {
    let t = fs::read_link(proc_root.join("self/ns").join(kind)).ok()?;
    procfd::parse_bracket_link(t.as_os_str().as_bytes(), kind.as_bytes())
}

fn count_errors<T, E: std::fmt::Display>(
    results: &[(u64, Result<T, E>)],
    what: &str,
    warnings: &mut Vec<String>,
) -> usize {
    let failed: Vec<_> = results.iter().filter(|(_, r)| r.is_err()).collect();
    if let Some((id, Err(e))) = failed.first() {
        warnings.push(format!(
            "could not read {} {what} (first: {id}: {e})",
            failed.len()
        ));
    }
    failed.len()
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

/// Scan the node: gather a [`Snapshot`], [`analyze`] it, confirm the findings with a second
/// dump. Fails only when a watched path cannot be read, `/proc` cannot be listed or the
/// agent's own network namespace cannot be dumped; everything else it cannot read (another
/// user's fds without root, other namespaces without CAP_SYS_ADMIN) becomes a warning.
pub fn scan(opts: &ScanOptions) -> Result<ScanReport, ScanError> {
    let proc_root = &opts.proc_root;
    let mut warnings = Vec::new();
    let mut counts = Counts::default();

    let mut watched_paths = Vec::new();
    let mut watched_meta = Vec::new();
    for w in &opts.watch {
        let (canonical, m) = check_watch(w)?;
        watched_paths.push(canonical);
        watched_meta.push(m);
    }
    let own_mounts = fs::read(proc_root.join("self/mountinfo"))
        .ok()
        .and_then(|t| mounts::parse_mountinfo(&t).ok())
        .unwrap_or_default();
    let watched: Vec<Watched> = watched_paths
        .iter()
        .zip(&watched_meta)
        .map(|(p, m)| Watched {
            path: p.clone(),
            id: Stat::from_metadata(m).id(),
            fs: mounts::fs_location(&own_mounts, p),
        })
        .collect();

    let table =
        procfd::scan_processes(proc_root, &opts.limits.proc).map_err(|error| ScanError::Proc {
            path: proc_root.clone(),
            error,
        })?;
    let ps = table.stats;
    counts.processes = ps.processes;
    counts.processes_vanished = ps.vanished;
    counts.processes_fds_unreadable = ps.fds_unreadable;
    counts.processes_ns_unreadable = ps.ns_unreadable;
    if ps.fds_unreadable > 0 {
        warnings.push(format!(
            "could not read the open files of {} processes (not root?): their sockets have no \
             known holder",
            ps.fds_unreadable
        ));
    }
    if ps.ns_unreadable > 0 {
        warnings.push(format!(
            "could not read the namespaces of {} processes (not root?): network and mount \
             namespaces only they are in are not scanned",
            ps.ns_unreadable
        ));
    }
    if ps.fds_cut > 0 || ps.processes_cut {
        warnings.push(format!(
            "limits cut the process walk: {} processes with fds cut, process limit reached: {}",
            ps.fds_cut, ps.processes_cut
        ));
    }

    // Network namespaces: the agent's own first, then one process per other namespace.
    let own_net = own_ns(proc_root, "net");
    let mut others: Vec<NetNs> = Vec::new();
    for p in &table.processes {
        if let Some(id) = p.netns
            && Some(id) != own_net
            && !others.iter().any(|n| n.id == id)
        {
            others.push(NetNs {
                id,
                file: proc_root.join(format!("{}/ns/net", p.tgid)),
            });
        }
    }
    if others.len() + 1 > opts.limits.max_net_namespaces {
        warnings.push(format!(
            "{} network namespaces: only the first {} are read",
            others.len() + 1,
            opts.limits.max_net_namespaces
        ));
        others.truncate(opts.limits.max_net_namespaces.saturating_sub(1));
    }
    let results = dump_all(own_net, &others)?;
    counts.net_namespaces = results.len();
    counts.net_namespaces_unreadable = count_errors(
        &results,
        "network namespaces (needs CAP_SYS_ADMIN)",
        &mut warnings,
    );
    let sockets = merged(&results);

    // Mount namespaces: one mountinfo each, through its first readable process.
    let own_mntns = own_ns(proc_root, "mnt");
    let mut mount_results: Vec<(u64, Result<MountTable, String>)> = Vec::new();
    for p in &table.processes {
        let Some(ns) = p.mntns else { continue };
        if let Some((_, r)) = mount_results.iter_mut().find(|(id, _)| *id == ns) {
            if r.is_ok() {
                continue;
            }
        } else if mount_results.len() >= opts.limits.max_mount_namespaces {
            continue;
        } else {
            mount_results.push((ns, Err(String::new())));
        }
        let read = fs::read(proc_root.join(format!("{}/mountinfo", p.tgid)))
            .map_err(|e| e.to_string())
            .and_then(|t| mounts::parse_mountinfo(&t).map_err(|e| e.to_string()));
        let slot = &mut mount_results
            .iter_mut()
            .find(|(id, _)| *id == ns)
            .expect("pushed above")
            .1;
        *slot = read.map(|mounts| MountTable {
            mntns: ns,
            pid: p.tgid,
            mounts,
        });
    }
    counts.mount_namespaces = mount_results.len();
    counts.mount_namespaces_unreadable =
        count_errors(&mount_results, "mount namespaces' mountinfo", &mut warnings);
    let mount_tables = mount_results
        .into_iter()
        .filter_map(|(_, r)| r.ok())
        .collect();

    let walked = walk::walk_sockets(&watched_paths, &opts.limits.walk);
    counts.watch_entries = walked.entries;
    counts.watch_socket_files = walked.sockets.len();
    if walked.cut {
        warnings.push(format!(
            "the walk of the watched paths was cut at {} entries or {} levels",
            opts.limits.walk.max_entries, opts.limits.walk.max_depth
        ));
    }
    if walked.unreadable > 0 {
        warnings.push(format!(
            "could not list {} directories below the watched paths",
            walked.unreadable
        ));
    }

    let snap = Snapshot {
        sockets,
        processes: table.processes,
        mount_tables,
        watch_files: walked.sockets,
        watched,
        own_mntns,
    };
    let sys = ProcSystem::new(proc_root.clone(), procfd::cgroup2_root(&own_mounts));
    let mut analysis = analyze(&snap, &sys);
    if !analysis.findings.is_empty() {
        let again = dump_all(own_net, &others)?;
        analysis.findings.confirm(&merged(&again));
    }

    counts.sockets = snap.sockets.len();
    counts.path_sockets = analysis.sockets.len();
    counts.listeners = analysis.sockets.iter().filter(|s| s.listening).count();
    counts.unresolved = analysis.unresolved;
    counts.outside_watch = analysis.outside_watch;
    counts.orphaned_listeners = analysis.findings.orphaned_listeners.len();
    counts.stale_socket_files = analysis.findings.stale_socket_files.len();
    counts.stale_bind_mounts = analysis.findings.stale_bind_mounts.len();
    let complete = counts.net_namespaces_unreadable == 0
        && counts.processes_fds_unreadable == 0
        && ps.ns_unreadable == 0
        && !ps.processes_cut
        && ps.fds_cut == 0;
    Ok(ScanReport {
        sockets: analysis.sockets,
        findings: analysis.findings,
        counts,
        warnings,
        complete,
    })
}
