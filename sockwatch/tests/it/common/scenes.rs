//! Scenes actors play from documented behaviour: a kubelet restart with device plugins
//! re-registering (S24: kubelet cannot run here) and seed 001, the Multus incident (S1).
use std::path::{Path, PathBuf};

use super::{actor::Actor, s};

/// A device plugin: its actor, its socket and the handle of its listener.
pub struct Plugin {
    pub actor: Actor,
    pub path: PathBuf,
    handle: String,
}

/// kubelet's device manager in `dir` (`kubelet.sock`) and two plugins (`gpu.sock`,
/// `nic.sock`), each listening.
pub struct Kubelet {
    dir: PathBuf,
    pub kubelet: Actor,
    pub plugins: Vec<Plugin>,
}

impl Kubelet {
    pub fn start(dir: &Path) -> Kubelet {
        let mut kubelet = Actor::spawn();
        kubelet.must(&format!("listen-on {}", s(&dir.join("kubelet.sock"))));
        let plugins = ["gpu.sock", "nic.sock"]
            .into_iter()
            .map(|name| {
                let mut actor = Actor::spawn();
                let path = dir.join(name);
                let handle = actor.must(&format!("listen-on {}", s(&path)));
                Plugin {
                    actor,
                    path,
                    handle,
                }
            })
            .collect();
        Kubelet {
            dir: dir.to_path_buf(),
            kubelet,
            plugins,
        }
    }

    /// kubelet stops (its gRPC server's Close unlinks its own socket) and a new kubelet
    /// starts: it removes every file in the directory (`removeContents`) and listens on
    /// `kubelet.sock` anew. Each plugin sees that, stops its server (its Close's unlink finds
    /// the path gone) and serves its path again: the device-plugin API's re-registration.
    pub fn restart(&mut self) {
        let sock = self.dir.join("kubelet.sock");
        self.kubelet.must(&format!("unlink {}", s(&sock)));
        self.kubelet = Actor::spawn();
        for entry in std::fs::read_dir(&self.dir).expect("read_dir") {
            let path = entry.expect("entry").path();
            self.kubelet.must(&format!("unlink {}", s(&path)));
        }
        self.kubelet.must(&format!("listen-on {}", s(&sock)));
        for p in &mut self.plugins {
            p.actor.must(&format!("close {}", p.handle));
            assert_eq!(
                p.actor.try_do(&format!("unlink {}", s(&p.path))),
                Err(libc::ENOENT),
                "kubelet removed it already"
            );
            p.handle = p.actor.must(&format!("listen-on {}", s(&p.path)));
        }
    }
}

/// Seed 001 at `dir/multus.sock`: A listens; its successor B removes the directory,
/// re-creates it and listens there (a takeover); A closes its listener and unlinks the path,
/// by then B's socket (the incident). Returns (A, B).
pub fn seed_001(dir: &Path) -> (Actor, Actor) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let sock = dir.join("multus.sock");
    let (mut a, mut b) = (Actor::spawn(), Actor::spawn());
    let a_handle = a.must(&format!("listen-on {}", s(&sock)));
    b.must(&format!("rmtree {}", s(dir)));
    b.must(&format!("mkdir {}", s(dir)));
    b.must(&format!("listen-on {}", s(&sock)));
    a.must(&format!("close {a_handle}"));
    a.must(&format!("unlink {}", s(&sock)));
    (a, b)
}
