//! Reading `/proc/PID/...`: where a process's files are, how its links and its cgroup file
//! read, and which errors mean that it is gone. Shared by the scan and by attribution (whose
//! cgroup layouts are read from the same [`cgroup_lines`]).
use std::{
    fmt::Display,
    fs, io,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
};

/// Where the processes are, unless told otherwise.
pub const DEFAULT_PROC_ROOT: &str = "/proc";

/// `<proc_root>/<pid>/<name>`; `pid` is a tgid or `self`.
pub fn pid_path(proc_root: &Path, pid: impl Display, name: &str) -> PathBuf {
    proc_root.join(pid.to_string()).join(name)
}

/// The contents of `<proc_root>/<pid>/<name>`.
pub fn read_pid_file(proc_root: &Path, pid: impl Display, name: &str) -> io::Result<String> {
    fs::read_to_string(pid_path(proc_root, pid, name))
}

/// Did the process exit before or while its file was read?
pub fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH)
}

/// Permission to read it was refused (EACCES, EPERM).
pub fn is_refused(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied || e.raw_os_error() == Some(libc::EPERM)
}

/// The target of a symbolic link, as bytes.
pub fn read_link_bytes(p: &Path) -> io::Result<Vec<u8>> {
    fs::read_link(p).map(|t| t.as_os_str().as_bytes().to_vec())
}

/// `<kind>:[N]` → N, e.g. `mnt:[4026531832]`.
pub fn parse_bracket_link(target: &[u8], kind: &[u8]) -> Option<u64> {
    let rest = target.strip_prefix(kind)?.strip_prefix(b":[")?;
    let digits = rest.strip_suffix(b"]")?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The id (nsfs inode) of a process's namespace of `kind` (`mnt`, `net`), from
/// `/proc/<pid>/ns/<kind>`. `Ok(None)`: the link does not name a namespace of that kind.
pub fn ns_id(proc_root: &Path, pid: impl Display, kind: &str) -> io::Result<Option<u64>> {
    let target = read_link_bytes(&pid_path(proc_root, pid, &format!("ns/{kind}")))?;
    Ok(parse_bracket_link(&target, kind.as_bytes()))
}

/// One line of `/proc/<pid>/cgroup`: `<hierarchy id>:<controllers>:<path>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupLine<'a> {
    pub hierarchy: &'a str,
    pub controllers: &'a str,
    /// May itself contain `:`.
    pub path: &'a str,
}

impl CgroupLine<'_> {
    /// The cgroup v2 line: `0::<path>`.
    pub fn is_unified(&self) -> bool {
        self.hierarchy == "0" && self.controllers.is_empty()
    }
}

/// The lines of a `/proc/<pid>/cgroup` file, in file order; lines with fewer than three
/// fields are skipped.
pub fn cgroup_lines(text: &str) -> impl Iterator<Item = CgroupLine<'_>> {
    text.lines().filter_map(|line| {
        let mut fields = line.splitn(3, ':');
        Some(CgroupLine {
            hierarchy: fields.next()?,
            controllers: fields.next()?,
            path: fields.next()?,
        })
    })
}

/// Which cgroup path names a process, from `/proc/PID/cgroup`. Returns (path, is_v2).
pub fn parse_cgroup(text: &str) -> (String, bool) {
    let (mut v2, mut v1) = (None, None);
    for line in cgroup_lines(text) {
        if line.is_unified() {
            v2 = Some(line.path);
        } else if v1.is_none() && line.path != "/" {
            v1 = Some(line.path);
        }
    }
    match (v2, v1) {
        // The unified path wins unless it is the root and a v1 path says more.
        (Some(p), _) if p != "/" => (p.to_string(), true),
        (_, Some(p)) => (p.to_string(), false),
        (Some(p), None) => (p.to_string(), true),
        (None, None) => ("/".to_string(), false),
    }
}

/// A path that starts at one of the caller's own descriptors: `/proc/self/fd/N/REST`,
/// `/proc/thread-self/fd/N/REST` or `/dev/fd/N/REST` (how conmon binds: `bind` has no `at`
/// form). The string names a file only in its caller's descriptor table, at that moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdPath<'a> {
    pub fd: u32,
    /// Below the descriptor's directory; never empty.
    pub rest: &'a [u8],
}

/// `path` as an [`FdPath`], if it is one.
pub fn fd_path(path: &[u8]) -> Option<FdPath<'_>> {
    let after = [
        &b"/proc/self/fd/"[..],
        b"/proc/thread-self/fd/",
        b"/dev/fd/",
    ]
    .iter()
    .find_map(|p| path.strip_prefix(*p))?;
    let (digits, rest) = after.split_at(after.iter().position(|&b| b == b'/')?);
    let rest = &rest[rest.iter().take_while(|&&b| b == b'/').count()..];
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) || rest.is_empty() {
        return None;
    }
    let fd = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(FdPath { fd, rest })
}

/// The absolute path an [`FdPath`] stands for, from the descriptor's link target (as its
/// process sees it): `None` when the target is no path (a socket, a deleted directory).
pub fn fd_path_target(target: &[u8], rest: &[u8]) -> Option<Vec<u8>> {
    if !target.starts_with(b"/") || target.ends_with(b" (deleted)") {
        return None;
    }
    let mut out = target.to_vec();
    if !out.ends_with(b"/") {
        out.push(b'/');
    }
    out.extend_from_slice(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fd_paths_are_recognised_and_made_absolute() {
        assert_eq!(
            fd_path(b"/proc/self/fd/13/attach"),
            Some(FdPath {
                fd: 13,
                rest: b"attach"
            })
        );
        assert_eq!(
            fd_path(b"/proc/thread-self/fd/4/notify/notify.sock"),
            Some(FdPath {
                fd: 4,
                rest: b"notify/notify.sock"
            })
        );
        assert_eq!(fd_path(b"/dev/fd/7//x").map(|f| f.rest), Some(&b"x"[..]));
        for not in [
            &b"/proc/self/fd/13"[..],
            b"/proc/self/fd/13/",
            b"/proc/self/fd/x/a",
            b"/proc/self/fd//a",
            b"/proc/42/fd/3/a",
            b"/run/proc/self/fd/3/a",
            b"attach",
        ] {
            assert_eq!(fd_path(not), None, "{}", String::from_utf8_lossy(not));
        }
        assert_eq!(
            fd_path_target(b"/var/run/ctr/userdata", b"attach"),
            Some(b"/var/run/ctr/userdata/attach".to_vec())
        );
        assert_eq!(fd_path_target(b"/", b"a"), Some(b"/a".to_vec()));
        assert_eq!(fd_path_target(b"/gone (deleted)", b"a"), None);
        assert_eq!(fd_path_target(b"socket:[5]", b"a"), None);
    }

    #[test]
    fn cgroup_lines_keep_colons_in_paths_and_skip_short_lines() {
        let lines: Vec<_> = cgroup_lines("4:memory:/a:b\n0::/x\nshort\n0:\n").collect();
        assert_eq!(
            lines,
            vec![
                CgroupLine {
                    hierarchy: "4",
                    controllers: "memory",
                    path: "/a:b"
                },
                CgroupLine {
                    hierarchy: "0",
                    controllers: "",
                    path: "/x"
                },
            ]
        );
        assert!(!lines[0].is_unified() && lines[1].is_unified());
    }

    #[test]
    fn cgroup_paths() {
        // Pure v2.
        assert_eq!(
            parse_cgroup("0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope\n"),
            (
                "/kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope".to_string(),
                true
            )
        );
        // Hybrid with an empty unified hierarchy: the v1 path says which container.
        let hybrid = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/2df3\n0::/\n";
        assert_eq!(
            parse_cgroup(hybrid),
            ("/process_api/2df3".to_string(), false)
        );
        // Everything at the root.
        assert_eq!(parse_cgroup("1:cpu:/\n0::/\n"), ("/".to_string(), true));
        assert_eq!(parse_cgroup("1:cpu:/\n"), ("/".to_string(), false));
        assert_eq!(parse_cgroup(""), ("/".to_string(), false));
        // Paths may contain ':'.
        assert_eq!(parse_cgroup("0::/a:b\n"), ("/a:b".to_string(), true));
    }

    #[test]
    fn pid_paths() {
        let root = Path::new("/proc");
        assert_eq!(pid_path(root, 42, "fd"), Path::new("/proc/42/fd"));
        assert_eq!(
            pid_path(root, "self", "ns/net"),
            Path::new("/proc/self/ns/net")
        );
    }
}
