//! The scan's logic: a [`Snapshot`] in, an [`Analysis`] out. The system is seen only through
//! [`System`] (stat in a process's view, holder names), so every case is a unit test.
use std::{
    cell::RefCell,
    collections::{BTreeMap, HashMap},
    ffi::OsStr,
    io,
    os::unix::ffi::OsStrExt as _,
    path::Path,
};

use sockwatch_common::FileId;

use super::{
    findings::{
        Findings, OrphanCause, OrphanedListener, SOCKET_FILE_MOUNT_FIX, SocketFileMount,
        StaleBindMount, StaleCause, StaleSocketFile,
    },
    model::{MountTable, ScannedSocket, Snapshot, System},
};
use crate::host::{
    diag::{DiagSocket, VfsId},
    mounts::{self, MountInfo},
    procfd::Holder,
    procfs,
    stat::Stat,
};

/// How many distinct mount namespaces of a socket's holders are asked where its path leads.
const MAX_VIEWS: usize = 4;
/// Processes named per stale bind mount (the count is always given).
const MAX_LISTED_PROCESSES: usize = 16;

/// What [`analyze`] concludes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Analysis {
    pub sockets: Vec<ScannedSocket>,
    pub findings: Findings,
    /// Findings left out because they lie outside the watched paths.
    pub outside_watch: usize,
    /// Path-bound sockets whose file could not be checked.
    pub unresolved: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resolved {
    Found(Stat),
    Missing,
    Unknown,
}

fn os_path(bytes: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(bytes))
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

struct Ctx<'a> {
    snap: &'a Snapshot,
    sys: &'a dyn System,
    mntns_of: HashMap<u32, Option<u64>>,
    holders_of: HashMap<u32, Vec<u32>>,
    /// Sockets carrying each file, by (dev, low 32 inode bits).
    by_file: HashMap<(u64, u32), Vec<&'a DiagSocket>>,
    resolved: RefCell<HashMap<(u64, Vec<u8>), Resolved>>,
}

impl<'a> Ctx<'a> {
    fn new(snap: &'a Snapshot, sys: &'a dyn System) -> Self {
        let mut holders_of: HashMap<u32, Vec<u32>> = HashMap::new();
        for p in &snap.processes {
            for s in &p.sockets {
                holders_of.entry(*s).or_default().push(p.tgid);
            }
        }
        let mut by_file: HashMap<(u64, u32), Vec<&DiagSocket>> = HashMap::new();
        for s in &snap.sockets {
            if let Some(v) = s.vfs {
                by_file.entry((v.dev, v.ino32)).or_default().push(s);
            }
        }
        Self {
            snap,
            sys,
            mntns_of: snap.processes.iter().map(|p| (p.tgid, p.mntns)).collect(),
            holders_of,
            by_file,
            resolved: RefCell::default(),
        }
    }

    fn sockets_on(&self, st: &Stat) -> &[&'a DiagSocket] {
        self.by_file
            .get(&(st.dev, st.ino as u32))
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// One process per distinct mount namespace among `tgids`.
    fn views(&self, tgids: &[u32]) -> Vec<u32> {
        let mut seen = Vec::new();
        let mut views = Vec::new();
        for &t in tgids {
            let ns = self.mntns_of.get(&t).copied().flatten();
            if ns.is_none() || !seen.contains(&ns) {
                seen.push(ns);
                views.push(t);
                if views.len() == MAX_VIEWS {
                    break;
                }
            }
        }
        views
    }

    fn resolve(&self, view: u32, path: &[u8]) -> Resolved {
        self.looked(Some(view), path)
    }

    /// `path` looked up in `view` (the agent's own for `None`), once per scan: a watched
    /// directory and its ancestors are asked about for every socket below them.
    fn looked(&self, view: Option<u32>, path: &[u8]) -> Resolved {
        // Absolute paths resolve the same for every process of a mount namespace (unless
        // chrooted: rare for socket daemons); relative ones depend on each cwd.
        // A path through a descriptor is the process's own, like a relative one.
        let ns = match view {
            Some(v) => self.mntns_of.get(&v).copied().flatten(),
            None => self.snap.own_mntns,
        };
        let key = match (view, path.first(), ns) {
            (_, Some(b'/'), Some(ns)) if procfs::fd_path(path).is_none() => ns,
            (None, ..) => u64::MAX,
            (Some(v), ..) => u64::from(v) | 1 << 63,
        };
        let key = (key, path.to_vec());
        if let Some(r) = self.resolved.borrow().get(&key) {
            return *r;
        }
        let r = match self.sys.stat(view, os_path(path)) {
            Ok(st) => Resolved::Found(st),
            Err(e)
                if e.kind() == io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::ENOTDIR) =>
            {
                Resolved::Missing
            }
            Err(_) => Resolved::Unknown,
        };
        self.resolved.borrow_mut().insert(key, r);
        r
    }

    fn holders(&self, tgids: &[u32]) -> Vec<Holder> {
        tgids.iter().filter_map(|&t| self.sys.holder(t)).collect()
    }

    /// Is `path`, as `view` sees it, at or below a watched path (or is nothing watched)?
    fn in_scope(&self, view: Option<u32>, path: &[u8]) -> bool {
        self.snap.watched.is_empty() || self.watch_index(view, path).is_some()
    }

    /// Which watched path `path`, as `view` sees it, is at or below: by identity of its
    /// ancestors (so a pod's `/run/x` matches the host's `/var/lib/x`), else by string when
    /// the view is the agent's own.
    fn watch_index(&self, view: Option<u32>, path: &[u8]) -> Option<usize> {
        let w = &self.snap.watched;
        if w.is_empty() {
            return None;
        }
        for anc in os_path(path).ancestors() {
            if let Resolved::Found(st) = self.looked(view, anc.as_os_str().as_bytes())
                && let Some(i) = w.iter().position(|w| w.id == st.id())
            {
                return Some(i);
            }
        }
        let own = match view {
            None => true,
            Some(v) => {
                self.snap.own_mntns.is_some()
                    && self.mntns_of.get(&v).copied().flatten() == self.snap.own_mntns
            }
        };
        w.iter()
            .position(|w| mounts::is_under(path, w.path.as_os_str().as_bytes()))
            .filter(|_| own)
    }
}

/// Decide, from a snapshot, what every path-bound socket's state is and what is wrong.
pub fn analyze(snap: &Snapshot, sys: &dyn System) -> Analysis {
    let cx = Ctx::new(snap, sys);
    let mut out = Analysis::default();
    let path_socks = path_sockets(&cx);
    let seen = seen_files(&path_socks, snap);
    for p in &path_socks {
        check_socket(&cx, p, &seen, &mut out);
    }
    stale_socket_files(&cx, &path_socks, &mut out);
    bind_mounts(&cx, &mut out);
    sort(&mut out);
    out
}

/// A path-bound socket, its holders, and where its path leads in each holder's view.
struct PathSock<'s> {
    s: &'s DiagSocket,
    path: &'s [u8],
    holders: Vec<u32>,
    views: Vec<(u32, Resolved)>,
}

impl PathSock<'_> {
    /// The views in which the path leads to a file, with that file.
    fn found(&self) -> impl Iterator<Item = (u32, Stat)> + '_ {
        self.views.iter().filter_map(|(v, r)| match r {
            Resolved::Found(st) => Some((*v, *st)),
            _ => None,
        })
    }
}

/// Pass 1: where does each path-bound socket's path lead, in each holder's view?
fn path_sockets<'a>(cx: &Ctx<'a>) -> Vec<PathSock<'a>> {
    let mut path_socks = Vec::new();
    for s in &cx.snap.sockets {
        let Some(path) = s.path() else { continue };
        let holders = cx.holders_of.get(&s.sock_ino).cloned().unwrap_or_default();
        let views = if s.vfs.is_some() {
            cx.views(&holders)
                .into_iter()
                .map(|v| (v, cx.resolve(v, path)))
                .collect()
        } else {
            Vec::new()
        };
        path_socks.push(PathSock {
            s,
            path,
            holders,
            views,
        });
    }
    path_socks
}

/// A socket file found by path: in which view (None: the agent's walk), and at which path.
#[derive(Clone, Debug)]
struct Found {
    st: Stat,
    view: Option<u32>,
    path: Vec<u8>,
}

/// Every socket file seen by path, by (dev, low 32 inode bits): finds renamed files, and the
/// files of binds through a descriptor. A descriptor path is no place to find a file by.
fn seen_files(path_socks: &[PathSock], snap: &Snapshot) -> HashMap<(u64, u32), Found> {
    let mut seen = HashMap::new();
    let by_path = path_socks
        .iter()
        .filter(|p| procfs::fd_path(p.path).is_none())
        .flat_map(|p| {
            p.found().map(|(v, st)| Found {
                st,
                view: Some(v),
                path: p.path.to_vec(),
            })
        })
        .filter(|f| f.st.is_socket());
    let walked = snap.watch_files.iter().map(|(path, st)| Found {
        st: *st,
        view: None,
        path: path.as_os_str().as_bytes().to_vec(),
    });
    for f in by_path.chain(walked) {
        seen.insert((f.st.dev, f.st.ino as u32), f);
    }
    seen
}

/// Pass 2: is the socket's file linked, moved, replaced or unlinked? An orphaned listener in
/// scope is a finding.
fn check_socket(cx: &Ctx, p: &PathSock, seen: &HashMap<(u64, u32), Found>, out: &mut Analysis) {
    let s = p.s;
    let mut scanned = ScannedSocket {
        sock_ino: s.sock_ino.into(),
        file: None,
        ino_low32: false,
        path: lossy(p.path),
        listening: s.listening(),
        sock_type: s.sock_type,
        state: s.state,
        holders: cx.holders(&p.holders),
        file_linked: None,
        dir: None,
        outside_watch: false,
    };
    let holder_view = p.holders.first().copied();
    let Some(vfs) = s.vfs else {
        scanned.outside_watch = !cx.in_scope(holder_view, p.path);
        out.unresolved += 1;
        out.sockets.push(scanned);
        return;
    };
    let state = link_state(cx, p, vfs, seen);
    scanned.outside_watch = match &state {
        LinkState::Linked(found) => !cx.in_scope(found.view, &found.path),
        // A bind through a descriptor not resolved: where it lies is unknown, keep it.
        _ if procfs::fd_path(p.path).is_some() => false,
        LinkState::Orphaned(view, _) => !cx.in_scope(Some(*view), p.path),
        LinkState::Unknown => !cx.in_scope(holder_view, p.path),
    };
    let (linked, cause) = match state {
        LinkState::Linked(found) => {
            scanned.file = Some(found.st.id());
            if procfs::fd_path(p.path).is_some() {
                scanned.path = lossy(&found.path);
            }
            scanned.dir = dir_of(cx, &found);
            (Some(true), None)
        }
        LinkState::Orphaned(view, cause) => (Some(false), Some((view, cause))),
        LinkState::Unknown => (None, None),
    };
    if scanned.file.is_none() {
        scanned.file = Some(FileId {
            dev: vfs.dev,
            ino: vfs.ino32.into(),
        });
        scanned.ino_low32 = true;
    }
    scanned.file_linked = linked;
    if linked.is_none() {
        out.unresolved += 1;
    }
    if let (true, Some((view, cause))) = (s.listening(), cause) {
        if cx.in_scope(Some(view), p.path) {
            out.findings
                .orphaned_listeners
                .push(orphaned_listener(&scanned, s, cause));
        } else {
            out.outside_watch += 1;
        }
    }
    out.sockets.push(scanned);
}

enum LinkState {
    /// The path (or another scanned path, after a rename) leads to the socket's file.
    Linked(Found),
    /// In this view the path leads elsewhere, or nowhere.
    Orphaned(u32, OrphanCause),
    /// No view could tell.
    Unknown,
}

fn link_state(cx: &Ctx, p: &PathSock, vfs: VfsId, seen: &HashMap<(u64, u32), Found>) -> LinkState {
    let fd = procfs::fd_path(p.path);
    let same = p
        .found()
        .find(|(_, st)| vfs.matches(st.dev, st.ino))
        .and_then(|(v, st)| {
            let path = match fd {
                Some(f) => procfs::fd_path_target(&cx.sys.fd_target(v, f.fd)?, f.rest)?,
                None => p.path.to_vec(),
            };
            Some(Found {
                st,
                view: Some(v),
                path,
            })
        });
    let moved = || seen.get(&(vfs.dev, vfs.ino32)).cloned();
    if let Some(found) = same.or_else(moved) {
        return LinkState::Linked(found);
    }
    if fd.is_some() {
        // The binder's descriptor is closed or reused since: its path proves nothing.
        return LinkState::Unknown;
    }
    if let Some((v, now)) = p.found().next() {
        return LinkState::Orphaned(v, OrphanCause::Replaced { now: now.id() });
    }
    match p.views.iter().find(|(_, r)| *r == Resolved::Missing) {
        Some((v, _)) => LinkState::Orphaned(*v, OrphanCause::Unlinked),
        None => LinkState::Unknown,
    }
}

/// The directory a found file is in, as the kernel identifies an event's `dir`.
fn dir_of(cx: &Ctx, found: &Found) -> Option<(FileId, String)> {
    if !found.path.starts_with(b"/") {
        return None;
    }
    let parent = os_path(&found.path).parent()?;
    let Resolved::Found(st) = cx.looked(found.view, parent.as_os_str().as_bytes()) else {
        return None;
    };
    st.is_dir()
        .then(|| (st.id(), parent.to_string_lossy().into_owned()))
}

fn orphaned_listener(
    scanned: &ScannedSocket,
    s: &DiagSocket,
    cause: OrphanCause,
) -> OrphanedListener {
    OrphanedListener {
        path: scanned.path.clone(),
        sock_ino: scanned.sock_ino,
        file: scanned.file.expect("set by check_socket"),
        ino_low32: scanned.ino_low32,
        cause,
        pending: s.rqlen.map(|r| r.0),
        backlog: s.rqlen.map(|r| r.1),
        holders: scanned.holders.clone(),
    }
}

/// A socket file that may be stale: its path, the view it was seen in (None: the agent's
/// walk), its stat.
type Candidate = (Vec<u8>, Option<u32>, Stat);

/// Stale socket files: under the watched paths, and wherever a socket's path leads.
fn stale_socket_files(cx: &Ctx, path_socks: &[PathSock], out: &mut Analysis) {
    for (path, view, st) in stale_candidates(cx.snap, path_socks).values() {
        let on = cx.sockets_on(st);
        if on.iter().any(|s| s.serves_file()) {
            continue;
        }
        if view.is_some() && !cx.in_scope(*view, path) {
            out.outside_watch += 1;
            continue;
        }
        let (cause, holders) = if on.is_empty() {
            (StaleCause::NoSocket, Vec::new())
        } else {
            not_listening(cx, on)
        };
        out.findings.stale_socket_files.push(StaleSocketFile {
            path: lossy(path),
            file: st.id(),
            cause,
            holders,
        });
    }
}

/// Socket files by identity, the watched ones first.
fn stale_candidates(snap: &Snapshot, path_socks: &[PathSock]) -> BTreeMap<(u64, u64), Candidate> {
    let mut candidates = BTreeMap::new();
    for (path, st) in &snap.watch_files {
        candidates.entry((st.dev, st.ino)).or_insert((
            path.as_os_str().as_bytes().to_vec(),
            None,
            *st,
        ));
    }
    // A descriptor path leads wherever that descriptor number points now: no candidate.
    for p in path_socks
        .iter()
        .filter(|p| procfs::fd_path(p.path).is_none())
    {
        for (v, st) in p.found().filter(|(_, st)| st.is_socket()) {
            candidates
                .entry((st.dev, st.ino))
                .or_insert((p.path.to_vec(), Some(v), st));
        }
    }
    candidates
}

/// Sockets carry the file but none serves it: their inodes and holders.
fn not_listening(cx: &Ctx, on: &[&DiagSocket]) -> (StaleCause, Vec<Holder>) {
    let mut tgids: Vec<u32> = on
        .iter()
        .flat_map(|s| {
            cx.holders_of
                .get(&s.sock_ino)
                .into_iter()
                .flatten()
                .copied()
        })
        .collect();
    tgids.sort_unstable();
    tgids.dedup();
    let mut sock_inos: Vec<u64> = on.iter().map(|s| s.sock_ino.into()).collect();
    sock_inos.sort_unstable();
    (StaleCause::NotListening { sock_inos }, cx.holders(&tgids))
}

/// Bind mounts of socket files: stale when the source is deleted (S3), a risk while it is
/// live (the next restart of its daemon makes it stale).
fn bind_mounts(cx: &Ctx, out: &mut Analysis) {
    let snap = cx.snap;
    for t in &snap.mount_tables {
        for m in &t.mounts {
            if m.root == b"/" {
                continue; // a whole filesystem, not a file
            }
            let Ok(st) = cx.sys.stat(Some(t.pid), os_path(&m.mount_point)) else {
                continue;
            };
            if !st.is_socket() {
                continue;
            }
            let from_watched = snap.watched.iter().position(|w| {
                w.fs.as_ref().is_some_and(|(maj, min, inside)| {
                    (*maj, *min) == (m.major, m.minor) && mounts::is_under(&m.root, inside)
                })
            });
            let watch = from_watched.or_else(|| cx.watch_index(Some(t.pid), &m.mount_point));
            if watch.is_none() && !snap.watched.is_empty() {
                out.outside_watch += 1;
                continue;
            }
            let mount = mount_of(cx, t, m, &st);
            if m.root_deleted || st.nlink == 0 {
                out.findings.stale_bind_mounts.push(mount);
            } else {
                out.findings
                    .socket_file_mounts
                    .push(socket_file_mount(mount, t.pid, watch));
            }
        }
    }
}

fn mount_of(cx: &Ctx, t: &MountTable, m: &MountInfo, st: &Stat) -> StaleBindMount {
    let pids: Vec<u32> = cx
        .snap
        .processes
        .iter()
        .filter(|p| p.mntns == Some(t.mntns))
        .map(|p| p.tgid)
        .collect();
    let listed: Vec<u32> = pids.iter().copied().take(MAX_LISTED_PROCESSES).collect();
    StaleBindMount {
        mount_point: lossy(&m.mount_point),
        source: lossy(&m.root),
        source_dev: format!("{}:{}", m.major, m.minor),
        file: st.id(),
        nlink: st.nlink,
        mntns: t.mntns,
        served_by: cx
            .sockets_on(st)
            .iter()
            .find(|s| s.serves_file())
            .map(|s| s.sock_ino.into()),
        processes: cx.holders(&listed),
        process_count: pids.len(),
    }
}

/// The same mount, live: the workload of `pid` is filled in by the caller (it reads /proc).
fn socket_file_mount(m: StaleBindMount, pid: u32, watch: Option<usize>) -> SocketFileMount {
    SocketFileMount {
        mount_point: m.mount_point,
        source: m.source,
        source_dev: m.source_dev,
        file: m.file,
        mntns: m.mntns,
        pid,
        served_by: m.served_by,
        workload: None,
        processes: m.processes,
        process_count: m.process_count,
        fix: SOCKET_FILE_MOUNT_FIX,
        watch,
    }
}

/// Findings and sockets in a stable order.
fn sort(out: &mut Analysis) {
    let f = &mut out.findings;
    f.orphaned_listeners
        .sort_by(|a, b| (&a.path, a.sock_ino).cmp(&(&b.path, b.sock_ino)));
    f.stale_socket_files.sort_by(|a, b| a.path.cmp(&b.path));
    f.stale_bind_mounts
        .sort_by(|a, b| (a.mntns, &a.mount_point).cmp(&(b.mntns, &b.mount_point)));
    f.socket_file_mounts
        .sort_by(|a, b| (a.mntns, &a.mount_point).cmp(&(b.mntns, &b.mount_point)));
    out.sockets.sort_by_key(|s| s.sock_ino);
}
