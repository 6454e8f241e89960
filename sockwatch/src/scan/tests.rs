//! [`analyze`] against a fake system: every finding and every non-finding, without root.
use std::{
    collections::HashMap,
    ffi::OsStr,
    io,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
};

use super::*;
use crate::host::{
    diag::{self, DiagSocket, SockName, VfsId},
    mounts::MountInfo,
    procfd::Process,
    procfs,
};

const DEV: u64 = 0xfe00;
const S_IFSOCK: u32 = 0o140777;
const S_IFDIR: u32 = 0o040755;

/// Files by (view, path); a view maps to a mount namespace name so that processes of one
/// namespace share a view.
#[derive(Default)]
struct Fake {
    ns_of: HashMap<Option<u32>, &'static str>,
    files: HashMap<(&'static str, PathBuf), Stat>,
    denied: Vec<u32>,
    /// (tgid, fd) -> link target.
    fds: HashMap<(u32, u32), &'static str>,
    /// How often each path was looked up.
    asked: std::cell::RefCell<HashMap<PathBuf, usize>>,
}

impl Fake {
    fn ns(mut self, view: Option<u32>, ns: &'static str) -> Self {
        self.ns_of.insert(view, ns);
        self
    }
    fn file(mut self, ns: &'static str, path: &str, st: Stat) -> Self {
        self.files.insert((ns, PathBuf::from(path)), st);
        self
    }
    fn dir(self, ns: &'static str, path: &str, ino: u64) -> Self {
        self.file(ns, path, stat(S_IFDIR, ino, 2))
    }
}

impl System for Fake {
    fn stat(&self, view: Option<u32>, path: &Path) -> io::Result<Stat> {
        *self.asked.borrow_mut().entry(path.into()).or_default() += 1;
        if view.is_some_and(|v| self.denied.contains(&v)) {
            return Err(io::Error::from_raw_os_error(libc::EACCES));
        }
        if let (Some(v), Some(f)) = (view, procfs::fd_path(path.as_os_str().as_bytes())) {
            let dir = self.fds.get(&(v, f.fd)).ok_or(io::ErrorKind::NotFound)?;
            return self.stat(view, &Path::new(dir).join(OsStr::from_bytes(f.rest)));
        }
        let ns = self.ns_of.get(&view).copied().unwrap_or("host");
        self.files
            .get(&(ns, path.to_path_buf()))
            .copied()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    fn holder(&self, tgid: u32) -> Option<Holder> {
        Some(holder(tgid))
    }

    fn fd_target(&self, tgid: u32, fd: u32) -> Option<Vec<u8>> {
        self.fds.get(&(tgid, fd)).map(|t| t.as_bytes().to_vec())
    }
}

fn holder(tgid: u32) -> Holder {
    Holder {
        tgid,
        comm: format!("p{tgid}"),
        cgroup: "/".into(),
        cgroup_id: None,
    }
}

fn stat(mode: u32, ino: u64, nlink: u64) -> Stat {
    Stat {
        dev: DEV,
        ino,
        mode,
        nlink,
    }
}

fn sock(ino: u64) -> Stat {
    stat(S_IFSOCK, ino, 1)
}

fn listener(sock_ino: u32, path: &str, file_ino: u64) -> DiagSocket {
    DiagSocket {
        sock_ino,
        sock_type: 1,
        state: diag::STATE_LISTEN,
        name: Some(SockName::Path(path.as_bytes().to_vec())),
        vfs: Some(VfsId {
            dev: DEV,
            ino32: file_ino as u32,
        }),
        peer: None,
        rqlen: Some((0, 128)),
    }
}

fn proc_(tgid: u32, mntns: u64, sockets: &[u32]) -> Process {
    Process {
        tgid,
        mntns: Some(mntns),
        netns: Some(1),
        sockets: sockets.to_vec(),
    }
}

fn snap(sockets: Vec<DiagSocket>, processes: Vec<Process>) -> Snapshot {
    Snapshot {
        sockets,
        processes,
        own_mntns: Some(100),
        ..Default::default()
    }
}

#[test]
fn linked_listener_on_inode64_is_clean_and_keeps_64_bits() {
    // tmpfs inode64: the file is 0x1_0000_0042, sock_diag says 0x42.
    let fake = Fake::default()
        .file("host", "/run/a.sock", sock(0x1_0000_0042))
        .dir("host", "/run", 7);
    let a = analyze(
        &snap(
            vec![listener(500, "/run/a.sock", 0x42)],
            vec![proc_(10, 100, &[500])],
        ),
        &fake,
    );
    assert!(a.findings.is_empty(), "{:?}", a.findings);
    assert_eq!(
        a.sockets,
        vec![ScannedSocket {
            sock_ino: 500,
            file: Some(FileId {
                dev: DEV,
                ino: 0x1_0000_0042
            }),
            ino_low32: false,
            path: "/run/a.sock".into(),
            listening: true,
            sock_type: 1,
            state: 10,
            holders: vec![holder(10)],
            file_linked: Some(true),
            dir: Some((FileId { dev: DEV, ino: 7 }, "/run".into())),
            outside_watch: false,
        }]
    );
    assert!(a.sockets[0].same_file(FileId {
        dev: DEV,
        ino: 0x1_0000_0042
    }));
    assert!(!a.sockets[0].same_file(FileId {
        dev: DEV,
        ino: 0x42
    }));
}

#[test]
fn unlinked_listener_is_orphaned() {
    let fake = Fake::default();
    let a = analyze(
        &snap(
            vec![listener(500, "/run/a.sock", 0x42)],
            vec![proc_(10, 100, &[500]), proc_(11, 100, &[500])],
        ),
        &fake,
    );
    assert_eq!(
        a.findings.orphaned_listeners,
        vec![OrphanedListener {
            path: "/run/a.sock".into(),
            sock_ino: 500,
            file: FileId {
                dev: DEV,
                ino: 0x42
            },
            ino_low32: true,
            cause: OrphanCause::Unlinked,
            pending: Some(0),
            backlog: Some(128),
            holders: vec![holder(10), holder(11)],
        }]
    );
    assert_eq!(a.sockets[0].file_linked, Some(false));
    assert!(a.sockets[0].same_file(FileId {
        dev: DEV,
        ino: 0x5_0000_0042
    }));
}

#[test]
fn replaced_listener_and_renamed_successor() {
    // S5: A listens on P (file 7); B bound P.new (file 8), renamed over P.
    let fake = Fake::default().file("host", "/run/p", sock(8));
    let a = analyze(
        &snap(
            vec![listener(500, "/run/p", 7), listener(501, "/run/p.new", 8)],
            vec![proc_(10, 100, &[500]), proc_(20, 100, &[501])],
        ),
        &fake,
    );
    assert_eq!(a.findings.orphaned_listeners.len(), 1);
    let o = &a.findings.orphaned_listeners[0];
    assert_eq!((o.sock_ino, o.path.as_str()), (500, "/run/p"));
    assert_eq!(
        o.cause,
        OrphanCause::Replaced {
            now: FileId { dev: DEV, ino: 8 }
        }
    );
    assert_eq!(o.holders, vec![holder(10)]);
    // B's bound name is gone, but its file lives on at P: linked, not orphaned.
    let b = a.sockets.iter().find(|s| s.sock_ino == 501).unwrap();
    assert_eq!(b.file_linked, Some(true));
    assert_eq!(b.file, Some(FileId { dev: DEV, ino: 8 }));
    assert!(a.findings.stale_socket_files.is_empty());
}

#[test]
fn any_holder_namespace_that_still_reaches_the_file_wins() {
    // Holder 10 (host) sees nothing at the path; holder 30 (pod) sees the file.
    let fake = Fake::default()
        .ns(Some(30), "pod")
        .file("pod", "/run/a.sock", sock(7));
    let a = analyze(
        &snap(
            vec![listener(500, "/run/a.sock", 7)],
            vec![proc_(10, 100, &[500]), proc_(30, 200, &[500])],
        ),
        &fake,
    );
    assert!(a.findings.is_empty());
    assert_eq!(a.sockets[0].file_linked, Some(true));
}

#[test]
fn unknown_without_readable_holder() {
    let mut fake = Fake::default();
    fake.denied.push(10);
    let a = analyze(
        &snap(
            vec![
                listener(500, "/run/a.sock", 7),
                listener(501, "/run/b.sock", 8),
            ],
            vec![proc_(10, 100, &[500])],
        ),
        &fake,
    );
    assert!(a.findings.is_empty());
    assert_eq!(a.unresolved, 2);
    assert!(a.sockets.iter().all(|s| s.file_linked.is_none()));
    assert!(a.sockets[1].holders.is_empty());
}

#[test]
fn stale_socket_files() {
    let watch = |p: &str, ino| (PathBuf::from(p), sock(ino));
    let accepted = DiagSocket {
        state: 1,
        rqlen: None,
        peer: Some(999),
        ..listener(600, "/w/served-by-accepted-only", 2)
    };
    let dgram = DiagSocket {
        sock_type: diag::SOCK_DGRAM,
        state: 7,
        ..listener(601, "/w/dgram", 3)
    };
    let mut s = snap(
        vec![accepted, dgram, listener(602, "/w/ok", 4)],
        vec![proc_(10, 100, &[600, 601, 602])],
    );
    s.watch_files = vec![
        watch("/w/dead", 1),
        watch("/w/served-by-accepted-only", 2),
        watch("/w/dgram", 3),
        watch("/w/ok", 4),
    ];
    let fake = Fake::default()
        .file("host", "/w/served-by-accepted-only", sock(2))
        .file("host", "/w/dgram", sock(3))
        .file("host", "/w/ok", sock(4));
    let a = analyze(&s, &fake);
    assert_eq!(
        a.findings.stale_socket_files,
        vec![
            StaleSocketFile {
                path: "/w/dead".into(),
                file: FileId { dev: DEV, ino: 1 },
                cause: StaleCause::NoSocket,
                holders: vec![],
            },
            StaleSocketFile {
                path: "/w/served-by-accepted-only".into(),
                file: FileId { dev: DEV, ino: 2 },
                cause: StaleCause::NotListening {
                    sock_inos: vec![600]
                },
                holders: vec![holder(10)],
            },
        ]
    );
    assert!(a.findings.orphaned_listeners.is_empty());
}

#[test]
fn a_listener_path_now_leading_to_a_dead_file_is_stale_too() {
    // A's path leads to a socket file nobody serves (its replacer died): A is orphaned and
    // the file is stale, found without any watched path.
    let fake = Fake::default().file("host", "/run/p", sock(9));
    let a = analyze(
        &snap(
            vec![listener(500, "/run/p", 7)],
            vec![proc_(10, 100, &[500])],
        ),
        &fake,
    );
    assert_eq!(a.findings.orphaned_listeners.len(), 1);
    assert_eq!(
        a.findings.stale_socket_files,
        vec![StaleSocketFile {
            path: "/run/p".into(),
            file: FileId { dev: DEV, ino: 9 },
            cause: StaleCause::NoSocket,
            holders: vec![],
        }]
    );
}

fn bind_mount(root: &str, deleted: bool, mount_point: &str) -> MountInfo {
    MountInfo {
        mount_id: 900,
        parent_id: 1,
        major: 254,
        minor: 0,
        root: root.as_bytes().to_vec(),
        root_deleted: deleted,
        mount_point: mount_point.as_bytes().to_vec(),
        fs_type: "ext4".into(),
        source: "/dev/vda".into(),
    }
}

#[test]
fn stale_bind_mounts() {
    let fake = Fake::default()
        .ns(Some(30), "pod")
        .file("pod", "/var/run/m.sock", stat(S_IFSOCK, 7, 0))
        .file("pod", "/etc/hosts", stat(0o100644, 5, 0))
        .file("pod", "/var/run/live.sock", sock(8))
        .dir("pod", "/var/run/dir", 9);
    let mut s = snap(vec![], vec![proc_(30, 200, &[]), proc_(31, 200, &[])]);
    s.mount_tables = vec![MountTable {
        mntns: 200,
        pid: 30,
        mounts: vec![
            bind_mount("/", false, "/"),
            bind_mount("/run/m.sock", true, "/var/run/m.sock"),
            // A deleted regular file: not ours.
            bind_mount("/etc/hosts", true, "/etc/hosts"),
            // A live socket file: a risk, not a stale mount.
            bind_mount("/run/live.sock", false, "/var/run/live.sock"),
            // A directory: what the fix says to mount instead.
            bind_mount("/run/dir", false, "/var/run/dir"),
        ],
    }];
    let expected = StaleBindMount {
        mount_point: "/var/run/m.sock".into(),
        source: "/run/m.sock".into(),
        source_dev: "254:0".into(),
        file: FileId { dev: DEV, ino: 7 },
        nlink: 0,
        mntns: 200,
        served_by: None,
        processes: vec![holder(30), holder(31)],
        process_count: 2,
    };
    let a = analyze(&s, &fake);
    assert_eq!(a.findings.stale_bind_mounts, vec![expected.clone()]);
    assert_eq!(
        a.findings.socket_file_mounts,
        vec![SocketFileMount {
            mount_point: "/var/run/live.sock".into(),
            source: "/run/live.sock".into(),
            source_dev: "254:0".into(),
            file: FileId { dev: DEV, ino: 8 },
            mntns: 200,
            pid: 30,
            served_by: None,
            workload: None,
            processes: vec![holder(30), holder(31)],
            process_count: 2,
            fix: SOCKET_FILE_MOUNT_FIX,
            watch: None,
        }]
    );
    assert_eq!(a.findings.len(), 1, "a risk is not counted as wrong");
    // The old listener still runs (orphaned on the host): the mount still works, for now.
    s.sockets = vec![listener(500, "/run/m.sock", 7)];
    s.processes.push(proc_(10, 100, &[500]));
    let a = analyze(&s, &fake);
    assert_eq!(
        a.findings.stale_bind_mounts,
        vec![StaleBindMount {
            served_by: Some(500),
            ..expected
        }]
    );
    assert_eq!(a.findings.orphaned_listeners.len(), 1);
}

#[test]
fn a_scan_looks_up_a_watched_directory_and_its_ancestors_once_not_once_per_socket() {
    let mut fake = Fake::default()
        .dir("host", "/run/w", 50)
        .dir("host", "/run", 5);
    let mut sockets = Vec::new();
    for n in 0..100u32 {
        let path: &'static str = format!("/run/w/s{n}.sock").leak();
        fake = fake.file("host", path, sock(1000 + u64::from(n)));
        sockets.push(listener(500 + n, path, 1000 + u64::from(n)));
    }
    let held: Vec<u32> = (500..600).collect();
    let mut s = snap(sockets, vec![proc_(10, 100, &held), proc_(11, 100, &[])]);
    s.watched = vec![Watched {
        path: PathBuf::from("/run/w"),
        id: FileId { dev: DEV, ino: 50 },
        fs: None,
    }];
    let a = analyze(&s, &fake);
    assert!(a.findings.is_empty(), "{:?}", a.findings);
    assert_eq!(a.outside_watch, 0);
    let asked = fake.asked.borrow();
    for dir in ["/run/w", "/run", "/"] {
        assert!(
            asked.get(Path::new(dir)).copied().unwrap_or(0) <= 2,
            "{dir}: {asked:?}"
        );
    }
    let sockets_asked = asked
        .iter()
        .filter(|(p, _)| p.parent() == Some(Path::new("/run/w")));
    assert!(sockets_asked.clone().all(|(_, &n)| n == 1), "{asked:?}");
    assert_eq!(sockets_asked.count(), 100);
}

#[test]
fn watched_scope_by_identity_and_by_filesystem_place() {
    // Watched: host /run/multus (dir ino 50), which lives at /multus inside tmpfs 0:45.
    // Pod 30 sees the same directory as /host/run/multus.
    let fake = Fake::default()
        .ns(Some(30), "pod")
        .dir("host", "/run/multus", 50)
        .dir("pod", "/host/run/multus", 50)
        .dir("host", "/run/other", 60)
        .file("pod", "/var/run/c.sock", stat(S_IFSOCK, 7, 0));
    let mut s = snap(
        vec![
            listener(500, "/host/run/multus/m.sock", 1),
            listener(501, "/run/other/o.sock", 2),
        ],
        vec![proc_(30, 200, &[500]), proc_(10, 100, &[501])],
    );
    s.watched = vec![Watched {
        path: PathBuf::from("/run/multus"),
        id: FileId { dev: DEV, ino: 50 },
        fs: Some((0, 45, b"/multus".to_vec())),
    }];
    s.mount_tables = vec![MountTable {
        mntns: 200,
        pid: 30,
        mounts: vec![
            MountInfo {
                major: 0,
                minor: 45,
                ..bind_mount("/multus/m.sock", true, "/var/run/c.sock")
            },
            MountInfo {
                major: 0,
                minor: 45,
                ..bind_mount("/multus/live.sock", false, "/var/run/l.sock")
            },
        ],
    }];
    let fake = fake.file("pod", "/var/run/l.sock", sock(11));
    let a = analyze(&s, &fake);
    let watches: Vec<_> = a
        .findings
        .socket_file_mounts
        .iter()
        .map(|m| m.watch)
        .collect();
    assert_eq!(
        watches,
        vec![Some(0)],
        "a live file mount from the watched directory"
    );
    let paths: Vec<&str> = a
        .findings
        .orphaned_listeners
        .iter()
        .map(|o| o.path.as_str())
        .collect();
    assert_eq!(paths, vec!["/host/run/multus/m.sock"]);
    assert_eq!(
        a.findings.stale_bind_mounts.len(),
        1,
        "source under the watch"
    );
    assert_eq!(a.outside_watch, 1, "/run/other/o.sock");
    let unwatched: Vec<(&str, bool)> = a
        .sockets
        .iter()
        .map(|s| (s.path.as_str(), s.outside_watch))
        .collect();
    assert_eq!(
        unwatched,
        vec![
            ("/host/run/multus/m.sock", false),
            ("/run/other/o.sock", true)
        ],
        "the pod's view of the watch is in scope"
    );

    // A bind mount from elsewhere is out of scope.
    s.mount_tables[0].mounts[0].root = b"/elsewhere/m.sock".to_vec();
    let a = analyze(&s, &fake);
    assert!(a.findings.stale_bind_mounts.is_empty());
    assert_eq!(a.outside_watch, 2);
}

#[test]
fn confirm_drops_races() {
    let mut f = Findings {
        socket_file_mounts: vec![],
        orphaned_listeners: vec![OrphanedListener {
            path: "/a".into(),
            sock_ino: 500,
            file: FileId { dev: DEV, ino: 1 },
            ino_low32: true,
            cause: OrphanCause::Unlinked,
            pending: None,
            backlog: None,
            holders: vec![],
        }],
        stale_socket_files: vec![StaleSocketFile {
            path: "/b".into(),
            file: FileId {
                dev: DEV,
                ino: 0x1_0000_0002,
            },
            cause: StaleCause::NoSocket,
            holders: vec![],
        }],
        stale_bind_mounts: vec![],
    };
    let mut kept = f.clone();
    kept.confirm(&[listener(500, "/a", 1)]);
    assert_eq!(kept, f, "still listening, still unserved");
    f.confirm(&[listener(501, "/b", 2)]);
    assert!(f.is_empty(), "{f:?}");
}

/// S18: conmon binds `/proc/self/fd/N/attach`. The string names a file only through the
/// binder's descriptor N, which conmon closes at once: never evidence of an orphan.
fn conmon(fds: &[((u32, u32), &'static str)]) -> Fake {
    let mut fake = Fake::default()
        .file("host", "/var/run/ctr/userdata/attach", sock(0x1_0000_0042))
        .dir("host", "/var/run/ctr/userdata", 9)
        .file("host", "/other/attach", sock(0x77));
    fake.fds = fds.iter().copied().collect();
    fake
}

fn conmon_snap() -> Snapshot {
    snap(
        vec![listener(500, "/proc/self/fd/13/attach", 0x42)],
        vec![proc_(10, 100, &[500])],
    )
}

#[test]
fn bind_through_an_open_descriptor_is_linked_at_its_real_path() {
    let a = analyze(
        &conmon_snap(),
        &conmon(&[((10, 13), "/var/run/ctr/userdata")]),
    );
    assert!(a.findings.is_empty(), "{:?}", a.findings);
    let s = &a.sockets[0];
    assert_eq!(s.path, "/var/run/ctr/userdata/attach");
    assert_eq!(s.file_linked, Some(true));
    assert_eq!(
        (s.file, s.ino_low32),
        (
            Some(FileId {
                dev: DEV,
                ino: 0x1_0000_0042
            }),
            false
        )
    );
    assert_eq!(
        s.dir,
        Some((FileId { dev: DEV, ino: 9 }, "/var/run/ctr/userdata".into()))
    );
}

#[test]
fn bind_through_a_closed_or_reused_descriptor_is_no_orphan() {
    // Closed, or reused for a directory holding another socket of that name.
    for fds in [&[][..], &[((10, 13), "/other")]] {
        let a = analyze(&conmon_snap(), &conmon(fds));
        assert!(a.findings.is_empty(), "{fds:?}: {:?}", a.findings);
        assert_eq!(a.sockets[0].file_linked, None, "{fds:?}");
        assert_eq!(a.unresolved, 1);
        assert_eq!(a.sockets[0].path, "/proc/self/fd/13/attach");
    }
}

#[test]
fn bind_through_a_closed_descriptor_is_found_by_the_walk() {
    let mut snap = conmon_snap();
    snap.watch_files = vec![(
        PathBuf::from("/var/run/ctr/userdata/attach"),
        sock(0x1_0000_0042),
    )];
    let a = analyze(&snap, &conmon(&[]));
    assert!(a.findings.is_empty(), "{:?}", a.findings);
    let s = &a.sockets[0];
    assert_eq!(
        (s.path.as_str(), s.file_linked),
        ("/var/run/ctr/userdata/attach", Some(true))
    );
    assert_eq!(s.dir.as_ref().map(|d| d.0.ino), Some(9));
}

#[test]
fn findings_about_a_path_are_its_listeners_files_and_mounts_of_it_or_onto_it() {
    let fake = Fake::default()
        .ns(Some(30), "pod")
        .file("pod", "/var/run/m.sock", stat(S_IFSOCK, 7, 0))
        .file("pod", "/var/run/live.sock", sock(8));
    let mut s = snap(
        vec![listener(500, "/run/a.sock", 0x42)],
        vec![proc_(10, 100, &[500]), proc_(30, 200, &[])],
    );
    s.mount_tables = vec![MountTable {
        mntns: 200,
        pid: 30,
        mounts: vec![
            bind_mount("/run/m.sock", true, "/var/run/m.sock"),
            bind_mount("/run/live.sock", false, "/var/run/live.sock"),
        ],
    }];
    let f = analyze(&s, &fake).findings;
    let counts = |f: &Findings| {
        (
            f.orphaned_listeners.len(),
            f.stale_socket_files.len(),
            f.stale_bind_mounts.len(),
            f.socket_file_mounts.len(),
        )
    };
    assert_eq!(counts(&f), (1, 0, 1, 1), "{f:#?}");
    assert_eq!(counts(&f.about("/run/a.sock")), (1, 0, 0, 0));
    assert_eq!(counts(&f.about("/run/m.sock")), (0, 0, 1, 0));
    assert_eq!(counts(&f.about("/var/run/live.sock")), (0, 0, 0, 1));
    assert_eq!(counts(&f.about("/run/other.sock")), (0, 0, 0, 0));
}
