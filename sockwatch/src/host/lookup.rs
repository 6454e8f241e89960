//! Filesystem and `/proc` lookups made for an event or a scan, off the caller's thread and
//! under a deadline: a path can lead into a filesystem that never answers (a FUSE server
//! that ignores the agent, a dead NFS server), and the thread stuck in that lookup sleeps
//! uninterruptibly. Such a thread must not be the one that drains the ring buffer.
//!
//! - [`with_deadline`] runs a lookup on a small pool of worker threads and waits at most
//!   [`DEADLINE`]; a lookup that takes longer is abandoned (its worker stays busy until the
//!   kernel lets it go) and counted as a timeout. When every worker is busy, a lookup fails at
//!   once (counted as refused): stuck workers never queue up lookups behind them.
//! - [`in_view`] resolves a path the way a process sees it (`/proc/PID/root/...`), and first
//!   reads that process's mount table (text the kernel writes, no filesystem call): a path on
//!   a FUSE or network filesystem is not looked up at all (counted as skipped) unless
//!   [`allow_network_filesystems`] said so. Symbolic links and relative paths are not
//!   resolved by that check; the deadline still holds for them.
//!
//! The pool and its counters are the process's own: `sockwatch_lookup_*` read them.
use std::{
    collections::HashMap,
    ffi::OsStr,
    io,
    os::unix::ffi::OsStrExt as _,
    panic::{AssertUnwindSafe, catch_unwind, resume_unwind},
    path::{Component, Path, PathBuf},
    sync::{
        Arc, LazyLock, Mutex, OnceLock, PoisonError,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use super::{
    mounts::{MountInfo, parse_mountinfo},
    procfs,
};

/// How long a caller waits for one lookup.
pub const DEADLINE: Duration = Duration::from_millis(300);

/// Lookups in flight at most: each may be a thread stuck in a filesystem for good.
pub const WORKERS: usize = 4;

/// What a lookup was for: the `lookup` label of its counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The file a refused connect reached, in the client's view.
    ConnectTarget,
    /// The socket file a rename put in place.
    RenamedFile,
    /// Whether a stale socket file is still there.
    StillOnDisk,
    /// Whether a socket called open is still held (`/proc/PID/fd`).
    StillOpen,
    /// Who else holds the sockets of an owner that exits (`/proc/*/fd`), on tiers that do not
    /// see a descriptor received.
    Holders,
    /// A process's cgroup (`/proc/PID/cgroup`).
    Cgroup,
    /// A process's executable (`/proc/PID/exe`).
    Exe,
    /// A scan's `stat` of a socket path in a holder's view.
    ScanStat,
    /// A scan's walk of a watched directory.
    ScanWalk,
}

impl Lookup {
    pub const ALL: [Lookup; 9] = [
        Lookup::ConnectTarget,
        Lookup::RenamedFile,
        Lookup::StillOnDisk,
        Lookup::StillOpen,
        Lookup::Holders,
        Lookup::Cgroup,
        Lookup::Exe,
        Lookup::ScanStat,
        Lookup::ScanWalk,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Lookup::ConnectTarget => "connect_target",
            Lookup::RenamedFile => "renamed_file",
            Lookup::StillOnDisk => "still_on_disk",
            Lookup::StillOpen => "still_open",
            Lookup::Holders => "holders",
            Lookup::Cgroup => "cgroup",
            Lookup::Exe => "exe",
            Lookup::ScanStat => "scan_stat",
            Lookup::ScanWalk => "scan_walk",
        }
    }
}

/// Why a lookup gave no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// It took longer than [`DEADLINE`].
    TimedOut,
    /// Every worker was busy (stuck lookups, most likely).
    Refused,
    /// The path is on a FUSE or network filesystem of this type, not looked into.
    Skipped { fstype: String },
}

/// How many lookups of one kind failed, by why.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub timeouts: u64,
    pub refused: u64,
    pub skipped: u64,
}

/// Lets lookups go into FUSE and network filesystems (off by default).
pub fn allow_network_filesystems(allow: bool) {
    NETWORK_FS_ALLOWED.store(allow, Ordering::Relaxed);
}

impl Tally {
    /// Lookups that gave no answer, for any reason.
    pub fn failed(&self) -> u64 {
        self.timeouts + self.refused + self.skipped
    }
}

/// The counts of one kind so far.
pub fn tally_of(kind: Lookup) -> Tally {
    tally()[kind as usize].1
}

/// The counts so far, per kind.
pub fn tally() -> Vec<(Lookup, Tally)> {
    Lookup::ALL
        .iter()
        .zip(&COUNTS)
        .map(|(&kind, c)| {
            let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
            let tally = Tally {
                timeouts: get(&c[0]),
                refused: get(&c[1]),
                skipped: get(&c[2]),
            };
            (kind, tally)
        })
        .collect()
}

/// Runs `lookup` on the pool and waits for it at most [`DEADLINE`]. A panic in it is the
/// caller's, as if it ran here.
pub fn with_deadline<T, F>(kind: Lookup, lookup: F) -> Result<T, Failure>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    POOL.get_or_init(|| Pool::start(WORKERS)).run(kind, lookup)
}

impl Pool {
    fn start(workers: usize) -> Self {
        let (jobs, queue) = mpsc::channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        for n in 0..workers {
            let queue = queue.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("lookup-{n}"))
                .spawn(move || work(&queue));
            if let Err(e) = spawned {
                log::warn!("lookup worker {n} not started: {e}");
            }
        }
        Self {
            jobs,
            workers,
            busy: Arc::default(),
        }
    }

    /// Hands `lookup` to an idle worker and waits for it; refused at once when none is idle.
    fn run<T, F>(&self, kind: Lookup, lookup: F) -> Result<T, Failure>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        if self.busy.fetch_add(1, Ordering::AcqRel) >= self.workers {
            self.busy.fetch_sub(1, Ordering::AcqRel);
            return Err(count(kind, Failure::Refused));
        }
        let (reply, answer) = mpsc::sync_channel(1);
        let busy = self.busy.clone();
        let job: Job = Box::new(move || {
            let _ = reply.send(catch_unwind(AssertUnwindSafe(lookup)));
            busy.fetch_sub(1, Ordering::AcqRel);
        });
        if self.jobs.send(job).is_err() {
            return Err(count(kind, Failure::Refused));
        }
        match answer.recv_timeout(DEADLINE) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(panic)) => resume_unwind(panic),
            Err(_) => Err(count(kind, Failure::TimedOut)),
        }
    }
}

/// `look` at `path` as the process whose `/proc` directory is `proc_dir` (`/proc/PID` or
/// `/proc/PID/task/TID`) sees it, through its `root` (its `cwd` for a relative path): what
/// `look` said, or a failure (counted) when the lookup did not answer or the path is on a
/// FUSE or network filesystem there.
pub fn in_view<T, F>(
    kind: Lookup,
    proc_dir: PathBuf,
    path: &str,
    look: F,
) -> Result<io::Result<T>, Failure>
where
    T: Send + 'static,
    F: FnOnce(&Path) -> io::Result<T> + Send + 'static,
{
    look_in_view(kind, proc_dir, None, path, look)
}

/// As [`in_view`], for a process known to be in mount namespace `mntns` (the inode number
/// the kernel gave): its mount table is read at most once a second, not for every lookup (a
/// storm of refused connects must not read it thousands of times a second). A FUSE mount
/// made within that second is left to the deadline.
pub fn in_namespace_view<T, F>(
    kind: Lookup,
    proc_dir: PathBuf,
    mntns: u32,
    path: &str,
    look: F,
) -> Result<io::Result<T>, Failure>
where
    T: Send + 'static,
    F: FnOnce(&Path) -> io::Result<T> + Send + 'static,
{
    look_in_view(kind, proc_dir, Some(mntns), path, look)
}

fn look_in_view<T, F>(
    kind: Lookup,
    proc_dir: PathBuf,
    mntns: Option<u32>,
    path: &str,
    look: F,
) -> Result<io::Result<T>, Failure>
where
    T: Send + 'static,
    F: FnOnce(&Path) -> io::Result<T> + Send + 'static,
{
    let path = path.to_owned();
    let looked = with_deadline(kind, move || {
        if let Some(fstype) = network_fs_in(&proc_dir, mntns, &path) {
            return Err(Failure::Skipped { fstype });
        }
        let base = if path.starts_with('/') { "root" } else { "cwd" };
        let view = proc_dir.join(base).join(path.trim_start_matches('/'));
        Ok(look(&view))
    });
    match looked.and_then(|r| r) {
        Err(skipped @ Failure::Skipped { .. }) => Err(count(kind, skipped)),
        other => other,
    }
}

/// The FUSE or network filesystem type an absolute `path` is on (or crosses), in the mount
/// table of `proc_dir`; `None` for a local one, a relative path, or when they are allowed.
/// The table is kept per mount namespace (named by the caller, or else by the process's
/// `ns/mnt` link, one readlink): a scan's thousands of lookups in one view read it once a
/// second, not once each.
fn network_fs_in(proc_dir: &Path, mntns: Option<u32>, path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let read = || {
        let text = std::fs::read(proc_dir.join("mountinfo")).ok()?;
        parse_mountinfo(&text).ok().map(|m| NetworkMounts::new(&m))
    };
    let mntns = mntns.or_else(|| namespace_of(proc_dir));
    let network = match mntns {
        Some(ns) => NAMESPACES.get(ns, read)?,
        None => read()?,
    };
    network.of(Path::new(path))
}

/// The mount namespace the `ns/mnt` link of `proc_dir` names.
fn namespace_of(proc_dir: &Path) -> Option<u32> {
    let target = procfs::read_link_bytes(&proc_dir.join("ns/mnt")).ok()?;
    u32::try_from(procfs::parse_bracket_link(&target, b"mnt")?).ok()
}

/// The network mounts of each mount namespace, as read less than a second ago.
struct NamespaceMounts(Mutex<HashMap<u32, (Instant, NetworkMounts)>>);

impl NamespaceMounts {
    /// Namespaces remembered at most (all forgotten at once past it).
    const CAPACITY: usize = 4_096;
    const FRESH: Duration = Duration::from_secs(1);

    fn get(&self, ns: u32, read: impl FnOnce() -> Option<NetworkMounts>) -> Option<NetworkMounts> {
        let fresh = |(at, _): &(Instant, NetworkMounts)| at.elapsed() < Self::FRESH;
        let known = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, network)) = known.get(&ns).filter(|e| fresh(e)) {
            return Some(network.clone());
        }
        drop(known);
        let network = read()?;
        let mut known = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if known.len() >= Self::CAPACITY {
            known.clear();
        }
        known.insert(ns, (Instant::now(), network.clone()));
        Some(network)
    }
}

/// The mount points of a mount table where a FUSE or network filesystem is visible (not
/// hidden by a later mount at the same point); empty when lookups there are allowed.
#[derive(Clone, Debug, Default)]
pub struct NetworkMounts(Vec<(PathBuf, String)>);

impl NetworkMounts {
    pub fn new(mounts: &[MountInfo]) -> Self {
        if NETWORK_FS_ALLOWED.load(Ordering::Relaxed) {
            return Self::default();
        }
        let mut visible: Vec<(PathBuf, &str)> = Vec::new();
        for m in mounts {
            let point = PathBuf::from(OsStr::from_bytes(&m.mount_point));
            visible.retain(|(p, _)| *p != point);
            visible.push((point, &m.fs_type));
        }
        let network = visible
            .into_iter()
            .filter(|(_, fs_type)| is_network_fs(fs_type))
            .map(|(p, fs_type)| (p, fs_type.to_owned()));
        Self(network.collect())
    }

    /// The type of the FUSE or network filesystem a lookup of `path` would enter: one is
    /// mounted at `path` or above it (the path taken as written, `.` and `..` folded).
    pub fn of(&self, path: &Path) -> Option<String> {
        let path = lexical(path);
        self.0
            .iter()
            .find(|(point, _)| path.starts_with(point))
            .map(|(_, fs_type)| fs_type.clone())
    }

    /// Like [`Self::of`], and counts the lookup of `kind` it skips.
    pub fn skip(&self, kind: Lookup, path: &Path) -> Option<String> {
        let fstype = self.of(path)?;
        count(
            kind,
            Failure::Skipped {
                fstype: fstype.clone(),
            },
        );
        Some(fstype)
    }
}

/// Filesystems whose lookups a process elsewhere answers, or does not.
pub fn is_network_fs(fs_type: &str) -> bool {
    const NETWORK: [&str; 12] = [
        "fuse",
        "fuseblk",
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "ceph",
        "9p",
        "afs",
        "glusterfs",
        "lustre",
    ];
    fs_type.starts_with("fuse.") || NETWORK.contains(&fs_type)
}

/// `path` with `.` and `..` folded as written (a `..` at the root stays at the root).
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

type Job = Box<dyn FnOnce() + Send>;

struct Pool {
    jobs: mpsc::Sender<Job>,
    workers: usize,
    /// Lookups handed to the workers and not finished (stuck ones included).
    busy: Arc<AtomicUsize>,
}

/// One worker: takes a job at a time (a job never panics: see [`with_deadline`]).
fn work(queue: &Mutex<mpsc::Receiver<Job>>) {
    block_signals();
    loop {
        let next = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
        match next {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

/// A worker takes no signal: one delivered to a thread stuck in a filesystem would never be
/// handled (SIGTERM lost), so the process's signals go to the threads that can act on them.
fn block_signals() {
    // SAFETY: sigfillset and pthread_sigmask write only to the set they are given, a local.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

static POOL: OnceLock<Pool> = OnceLock::new();
static NAMESPACES: LazyLock<NamespaceMounts> = LazyLock::new(|| NamespaceMounts(Mutex::default()));
static NETWORK_FS_ALLOWED: AtomicBool = AtomicBool::new(false);
/// Per kind (in [`Lookup::ALL`] order): timeouts, refused, skipped.
static COUNTS: [[AtomicU64; 3]; Lookup::ALL.len()] =
    [const { [const { AtomicU64::new(0) }; 3] }; Lookup::ALL.len()];

/// Counts `failure` of `kind`, saying so in the log the first time for each kind.
fn count(kind: Lookup, failure: Failure) -> Failure {
    let (slot, what) = match &failure {
        Failure::TimedOut => (0, "timed out".to_owned()),
        Failure::Refused => (1, "refused: every lookup worker is busy".to_owned()),
        Failure::Skipped { fstype } => (2, format!("skipped: a path on a {fstype:?} filesystem")),
    };
    let counter = &COUNTS[kind as usize][slot];
    if counter.fetch_add(1, Ordering::Relaxed) == 0 {
        log::warn!(
            "{} lookup {what}; going on with what is known (counted in sockwatch_lookup_*)",
            kind.name()
        );
    }
    failure
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(point: &str, fs_type: &str) -> MountInfo {
        MountInfo {
            mount_id: 1,
            parent_id: 0,
            major: 0,
            minor: 1,
            root: b"/".to_vec(),
            root_deleted: false,
            mount_point: point.as_bytes().to_vec(),
            fs_type: fs_type.into(),
            source: "x".into(),
        }
    }

    #[test]
    fn a_network_mount_above_the_path_decides_unless_mounted_over() {
        let mounts = [
            mount("/", "ext4"),
            mount("/mnt/fuse", "fuse.sshfs"),
            mount("/mnt/fuse/local", "tmpfs"),
            mount("/srv/nfs", "nfs4"),
        ];
        let network = NetworkMounts::new(&mounts);
        let fs = |p: &str| network.of(Path::new(p));
        assert_eq!(fs("/mnt/fuse/s.sock").as_deref(), Some("fuse.sshfs"));
        assert_eq!(fs("/tmp/../mnt/fuse/s.sock").as_deref(), Some("fuse.sshfs"));
        assert_eq!(
            fs("/mnt/fuse/local/s.sock").as_deref(),
            Some("fuse.sshfs"),
            "reached through the FUSE mount"
        );
        assert_eq!(
            fs("/mnt/fusex/s.sock"),
            None,
            "a prefix of a name is not a parent"
        );
        assert_eq!(fs("/srv/nfs").as_deref(), Some("nfs4"));
        assert_eq!(fs("/run/x.sock"), None);
        let hidden = NetworkMounts::new(&[mount("/srv/nfs", "nfs4"), mount("/srv/nfs", "tmpfs")]);
        assert_eq!(hidden.of(Path::new("/srv/nfs/x.sock")), None);
    }

    #[test]
    fn a_stuck_lookup_times_out_and_a_full_pool_refuses_at_once() {
        let before = tally_of(Lookup::ScanWalk);
        let (release, stuck) = mpsc::channel::<()>();
        let stuck = Arc::new(Mutex::new(stuck));
        let clock = Instant::now();
        let pool = Pool::start(WORKERS);
        for _ in 0..WORKERS {
            let stuck = stuck.clone();
            let r = pool.run(Lookup::ScanWalk, move || {
                let _ = stuck.lock().map(|s| s.recv());
            });
            assert_eq!(r, Err(Failure::TimedOut));
        }
        let waited = clock.elapsed();
        assert!(waited >= DEADLINE * WORKERS as u32, "{waited:?}");
        let clock = Instant::now();
        assert_eq!(pool.run(Lookup::ScanWalk, || 1), Err(Failure::Refused));
        assert!(clock.elapsed() < Duration::from_millis(50));
        let after = tally_of(Lookup::ScanWalk);
        assert_eq!(after.timeouts - before.timeouts, WORKERS as u64);
        assert_eq!(after.refused - before.refused, 1);
        // Released, the workers serve again.
        for _ in 0..WORKERS {
            release.send(()).expect("a stuck worker");
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while pool.run(Lookup::ScanWalk, || 7) != Ok(7) {
            assert!(Instant::now() < deadline, "the pool never recovered");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_namespaces_mounts_are_read_once_a_second() {
        let cache = NamespaceMounts(Mutex::default());
        let reads = std::cell::Cell::new(0);
        let read = || {
            reads.set(reads.get() + 1);
            Some(NetworkMounts::new(&[mount("/mnt/fuse", "fuse")]))
        };
        for _ in 0..3 {
            let network = cache.get(7, read).expect("read");
            assert_eq!(
                network.of(Path::new("/mnt/fuse/s.sock")).as_deref(),
                Some("fuse")
            );
        }
        assert_eq!(reads.get(), 1);
        cache.get(8, read).expect("another namespace");
        assert_eq!(reads.get(), 2);
    }
}
