//! S19: a socket in an overlayfs merged directory (a container's rootfs), removed by a foreign
//! process. Overlayfs runs a nested unlink on the upper layer inside the outer one: the verdict
//! must still be one foreign unlink naming the merged file's identity, as `stat` shows it.
use crate::common;

use std::{
    ffi::CString,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use common::{actor::Actor, agent::Agent, *};
use serde_json::Value;

fn cstr(p: &Path) -> CString {
    CString::new(p.to_str().expect("utf-8")).expect("no NUL")
}

/// A tmpfs with lower, upper and work directories, and the overlay of them mounted on
/// `merged`; both are unmounted when dropped.
struct Overlay {
    base: PathBuf,
    merged: PathBuf,
}

impl Overlay {
    fn mount(base: &Path) -> Result<Overlay, String> {
        mount(c"tmpfs", base, c"tmpfs", "")?;
        for d in ["lower", "upper", "work", "merged"] {
            std::fs::create_dir(base.join(d)).map_err(|e| format!("mkdir {d}: {e}"))?;
        }
        let merged = base.join("merged");
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            base.join("lower").display(),
            base.join("upper").display(),
            base.join("work").display()
        );
        let overlay = Overlay {
            base: base.to_owned(),
            merged,
        };
        mount(c"overlay", &overlay.merged, c"overlay", &opts)?;
        Ok(overlay)
    }
}

fn mount(
    source: &std::ffi::CStr,
    target: &Path,
    fstype: &std::ffi::CStr,
    opts: &str,
) -> Result<(), String> {
    let (t, o) = (cstr(target), CString::new(opts).expect("no NUL"));
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            t.as_ptr(),
            fstype.as_ptr(),
            0,
            o.as_ptr().cast(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "mount {fstype:?} on {}: {}",
            target.display(),
            std::io::Error::last_os_error()
        ))
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        for p in [&self.merged, &self.base] {
            // SAFETY: a NUL-terminated path that outlives the call.
            unsafe { libc::umount2(cstr(p).as_ptr(), libc::MNT_DETACH) };
        }
    }
}

fn tgid(v: &Value, who: &str) -> u64 {
    v[who]["tgid"]
        .as_u64()
        .unwrap_or_else(|| panic!("no {who}.tgid in {v}"))
}

/// A listens in the merged directory; C removes the socket file; one foreign unlink with the
/// file as `stat` saw it in the merged directory.
fn foreign_unlink_in_merged_dir(test: &str, node_wide: bool) {
    if !is_root() {
        assert!(
            std::env::var_os("SOCKWATCH_REQUIRE_TIERS").is_none(),
            "{test}: tiers are required but not running as root"
        );
        skip(test, "needs root to mount and to load eBPF programs");
        return;
    }
    let tmp = tempdir();
    let base = tmp.path().join("ovl");
    std::fs::create_dir(&base).expect("mkdir");
    let overlay = Overlay::mount(&base).unwrap_or_else(|e| panic!("{test}: {e}"));
    let agent_dir = tmp.path().join("agent");
    std::fs::create_dir(&agent_dir).expect("mkdir");
    let agent = if node_wide {
        Agent::start_node_wide(&agent_dir, &[])
    } else {
        Agent::start(&agent_dir, &overlay.merged, &[])
    };
    let sock = overlay.merged.join("app.sock");
    let path = sock.to_str().expect("utf-8");
    let (mut a, mut c) = (Actor::spawn(), Actor::spawn());
    a.must(&format!("listen-on {path}"));
    let st = std::fs::metadata(&sock).expect("stat the merged socket file");
    c.must(&format!("unlink {path}"));
    let v = agent.expect_verdict("C's foreign unlink", |v| {
        v["verdict"] == "foreign_unlink" && tgid(v, "actor") == u64::from(c.pid)
    });
    assert_eq!(tgid(&v, "victim"), u64::from(a.pid), "{v}");
    assert_eq!(v["file"]["ino"], st.ino(), "{v}");
    assert_eq!(v["file"]["dev"], st.dev(), "{v}");
    assert_eq!(v["path"], path, "{v}");
    drop((a, c));
    let verdicts = agent.stop();
    let foreign: Vec<&Value> = verdicts
        .iter()
        .filter(|v| v["verdict"] == "foreign_unlink")
        .collect();
    assert_eq!(foreign.len(), 1, "exactly one foreign unlink: {foreign:#?}");
    drop(overlay);
}

#[test]
fn s19_foreign_unlink_in_an_overlay_merged_dir() {
    foreign_unlink_in_merged_dir("s19", false);
}

#[test]
fn s19_node_wide_foreign_unlink_in_an_overlay_merged_dir() {
    foreign_unlink_in_merged_dir("s19_node_wide", true);
}

/// A listens in the merged directory; B renames its own socket file over A's there (overlayfs
/// runs a nested `vfs_rename` on the upper layer): one `replaced`, naming A's file as `stat`
/// saw it in the merged directory.
fn rename_over_in_merged_dir(test: &str, node_wide: bool) {
    if !root(test) {
        return;
    }
    let tmp = tempdir();
    let base = tmp.path().join("ovl");
    std::fs::create_dir(&base).expect("mkdir");
    let overlay = Overlay::mount(&base).unwrap_or_else(|e| panic!("{test}: {e}"));
    let agent_dir = tmp.path().join("agent");
    std::fs::create_dir(&agent_dir).expect("mkdir");
    let agent = if node_wide {
        Agent::start_node_wide(&agent_dir, &[])
    } else {
        Agent::start(&agent_dir, &overlay.merged, &[])
    };
    let (sock, new) = (
        overlay.merged.join("svc.sock"),
        overlay.merged.join("svc.sock.new"),
    );
    let (path, new_path) = (sock.to_str().expect("utf-8"), new.to_str().expect("utf-8"));
    let (mut a, mut b) = (Actor::spawn(), Actor::spawn());
    a.must(&format!("listen-on {path}"));
    b.must(&format!("listen-on {new_path}"));
    let st = std::fs::metadata(&sock).expect("stat the merged socket file");
    b.must(&format!("rename {new_path} {path}"));
    // B runs the same program as A: a rename hand-over, the path served throughout.
    let v = agent.expect_verdict("B's rename over A's socket", |v| {
        v["verdict"] == "takeover" && tgid(v, "remover") == u64::from(b.pid)
    });
    assert_eq!(v["how"], "rename", "{v}");
    assert_eq!(tgid(&v, "predecessor"), u64::from(a.pid), "{v}");
    assert_eq!(v["old_file"]["ino"], st.ino(), "{v}");
    assert_eq!(v["old_file"]["dev"], st.dev(), "{v}");
    assert_eq!(v["path"], path, "{v}");
    drop((a, b));
    let verdicts = agent.stop();
    let handovers = verdicts
        .iter()
        .filter(|v| v["verdict"] == "takeover" || v["verdict"] == "replaced")
        .count();
    assert_eq!(handovers, 1, "exactly one hand-over: {verdicts:#?}");
    drop(overlay);
}

#[test]
fn s19_rename_over_in_an_overlay_merged_dir() {
    rename_over_in_merged_dir("s19_rename", false);
}

#[test]
fn s19_node_wide_rename_over_in_an_overlay_merged_dir() {
    rename_over_in_merged_dir("s19_node_wide_rename", true);
}
