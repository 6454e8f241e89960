//! The host's side of the engine's [claims](crate::engine::claims): each looked up under the
//! lookup deadline, in the agent's view, for `run` to hand back as a fact.
use std::{
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use super::observer::Observer;
use crate::{
    engine::{Claim, FileId, Verdict},
    host::{
        lookup::{self, Lookup},
        procfd, procfs,
    },
};

/// The host's answer to `claim`; `None` when it was not asked or gave no answer in time (the
/// claim then stands). Whether a socket is still open is asked only on a kernel without a
/// release hook (`releases_unseen`): elsewhere its release would have been seen.
pub fn check(claim: &Claim, releases_unseen: bool) -> Option<bool> {
    match claim {
        Claim::FileOnDisk { path, file } => file_on_disk(path, *file),
        Claim::SocketOpen { tgid, sock_ino } if releases_unseen => {
            let (tgid, sock_ino) = (*tgid, *sock_ino);
            let holds =
                move || procfd::holds_socket(Path::new(procfs::DEFAULT_PROC_ROOT), tgid, sock_ino);
            lookup::with_deadline(Lookup::StillOpen, holds).ok()
        }
        Claim::SocketOpen { .. } => None,
    }
}

/// Whether `path` still leads to `file`, in the agent's view. A file on a FUSE or network
/// filesystem is not looked at.
fn file_on_disk(path: &str, file: FileId) -> Option<bool> {
    let same = move |p: &Path| {
        std::fs::symlink_metadata(p).map(|m| m.dev() == file.dev && m.ino() == file.ino)
    };
    let own = PathBuf::from("/proc/self");
    lookup::in_view(Lookup::StillOnDisk, own, path, same)
        .ok()
        .map(|same| same.unwrap_or(false))
}

/// Accounts for a verdict a false claim withheld.
pub fn withheld(v: &Verdict, observer: &dyn Observer) {
    if let Some(Claim::SocketOpen { .. }) = Claim::of(v) {
        log::info!(
            "{} about {} withheld: its socket is closed (no release hook on this kernel; the \
             next sweep settles it)",
            v.name(),
            v.path().unwrap_or("an unnamed socket")
        );
        observer.withheld(v);
    }
}
