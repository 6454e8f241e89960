//! Pods as kubelet's log directories name them, the index of those directories, and the
//! owner a pod's name suggests.
use std::{
    collections::HashMap,
    fs,
    ops::RangeInclusive,
    path::PathBuf,
    time::{Duration, Instant},
};

/// Where kubelet keeps one directory per pod.
pub const DEFAULT_PODS_LOG_ROOT: &str = "/var/log/pods";
/// Shortest time between two scans of the pod log root.
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(5);
/// Pod log directories read per scan, at most: a bound, not an expected size.
pub const MAX_POD_DIRS: usize = 65_536;

/// A UUID (`8-4-4-4-12` hex) or a static pod's 32-hex hash.
pub(super) fn pod_uid(s: &str) -> Option<String> {
    (is_uuid(s) || is_static_pod_uid(s)).then(|| s.to_owned())
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Kubelet names a pod from a manifest file or URL by the MD5 of its content.
pub(super) fn is_static_pod_uid(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|c| c.is_ascii_hexdigit())
}

/// A pod as its kubelet log directory names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    pub namespace: String,
    pub pod_name: String,
    pub pod_uid: String,
}

/// Parses a directory name under `/var/log/pods`: `<namespace>_<pod-name>_<pod-uid>`.
///
/// Neither names nor uids contain `_` (DNS labels and subdomains), so the split is exact. The
/// pre-1.14 layout (`/var/log/pods/<uid>/`) has no names and gives `None`.
pub fn parse_pod_log_dir(name: &str) -> Option<PodRef> {
    let mut parts = name.split('_');
    let (namespace, pod_name, uid) = (parts.next()?, parts.next()?, parts.next()?);
    let dns = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.')
    };
    if parts.next().is_some() || !dns(namespace) || !dns(pod_name) {
        return None;
    }
    Some(PodRef {
        namespace: namespace.to_owned(),
        pod_name: pod_name.to_owned(),
        pod_uid: pod_uid(uid)?,
    })
}

/// The characters Kubernetes draws generated name suffixes and pod-template hashes from
/// (`k8s.io/apimachinery/pkg/util/rand`: no vowels, no `0`, `1`, `3`).
const GENERATED_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn generated(s: &str, len: RangeInclusive<usize>) -> bool {
    len.contains(&s.len()) && s.bytes().all(|c| GENERATED_ALPHABET.contains(&c))
}

fn ordinal(s: &str) -> bool {
    (1..=9).contains(&s.len())
        && s.bytes().all(|c| c.is_ascii_digit())
        && (s == "0" || !s.starts_with('0'))
}

/// A heuristic: the name of the controller that most likely created a pod, from the pod's
/// name alone, with no API server to ask.
///
/// - Deployment: `<name>-<pod-template-hash, 8 to 10>-<5>` gives `<name>`;
/// - DaemonSet (and Job): `<name>-<5>` gives `<name>`;
/// - StatefulSet: `<name>-<ordinal>` gives `<name>`.
///
/// Generated parts must use Kubernetes' generated-name alphabet, so `multus-abcde` (vowels)
/// is not taken for a generated name. Known misses: a hash shorter than 8 characters (about
/// 0.2% of Deployments) yields the ReplicaSet's name; a pod name Kubernetes truncated (owner
/// names longer than 57 characters) yields the truncated name; a hand-named pod that happens
/// to look generated yields a wrong owner. `None` when nothing looks generated.
pub fn workload_name(pod_name: &str) -> Option<&str> {
    let (rest, last) = pod_name.rsplit_once('-')?;
    let owner = if generated(last, 5..=5) {
        match rest.rsplit_once('-') {
            Some((base, hash)) if generated(hash, 8..=10) && !base.is_empty() => base,
            _ => rest,
        }
    } else if ordinal(last) {
        rest
    } else {
        return None;
    };
    (!owner.is_empty()).then_some(owner)
}

/// Pods by uid, from the directory names under the pod log root.
///
/// Scanned lazily: on the first uid looked up, then again on a uid not in the index at most
/// once per refresh interval.
pub(super) struct PodIndex {
    root: PathBuf,
    pub(super) refresh_interval: Duration,
    pods: HashMap<String, PodRef>,
    indexed_at: Option<Instant>,
}

impl PodIndex {
    pub(super) fn new(root: PathBuf) -> Self {
        Self {
            root,
            refresh_interval: DEFAULT_REFRESH_INTERVAL,
            pods: HashMap::new(),
            indexed_at: None,
        }
    }

    /// The pod with uid `uid`, rescanning the root first when the uid is unknown and a scan
    /// is due.
    pub(super) fn get(&mut self, uid: &str) -> Option<&PodRef> {
        let due = self
            .indexed_at
            .is_none_or(|t| t.elapsed() >= self.refresh_interval);
        if due && !self.pods.contains_key(uid) {
            self.reindex();
        }
        self.pods.get(uid)
    }

    fn reindex(&mut self) {
        self.indexed_at = Some(Instant::now());
        self.pods.clear();
        // Absent on a host that is not a Kubernetes node: an empty index, not an error.
        let Ok(dir) = fs::read_dir(&self.root) else {
            return;
        };
        for entry in dir.flatten().take(MAX_POD_DIRS) {
            if let Some(pod) = entry.file_name().to_str().and_then(parse_pod_log_dir) {
                self.pods.insert(pod.pod_uid.clone(), pod);
            }
        }
    }
}
