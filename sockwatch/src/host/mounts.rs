//! `/proc/PID/mountinfo`: parsed as a pure function, used to find bind mounts of socket files
//! whose source was deleted (S3) and to place watched directories inside their filesystem.
//!
//! Format (proc(5)): `id parent major:minor root mount_point options [optional...] - fstype
//! source super_options`, with space, tab, newline and backslash in paths escaped as `\NNN`
//! octal. A bind mount's `root` is the path of the mounted file or directory inside its
//! filesystem; the kernel appends `//deleted` when that dentry has been unlinked.
use std::{os::unix::ffi::OsStrExt as _, path::Path};

/// One mount as one mount namespace sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountInfo {
    pub mount_id: u32,
    pub parent_id: u32,
    pub major: u32,
    pub minor: u32,
    /// Path of the mount's root inside its filesystem, unescaped, without `//deleted`.
    pub root: Vec<u8>,
    /// The root dentry was unlinked (`//deleted`): the bind mount pins a deleted file.
    pub root_deleted: bool,
    /// Where it is mounted, unescaped, in this namespace's view.
    pub mount_point: Vec<u8>,
    pub fs_type: String,
    pub source: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("mountinfo line {line}: {why}")]
pub struct MountinfoError {
    pub line: usize,
    pub why: &'static str,
}

const DELETED: &[u8] = b"//deleted";

/// Undo the kernel's `\NNN` octal escapes (`\040` space, `\011` tab, `\012` newline,
/// `\134` backslash). A backslash not followed by three octal digits is kept as is.
pub fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'\\'
            && i + 3 < field.len()
            && field[i + 1..i + 4]
                .iter()
                .all(|c| (b'0'..=b'7').contains(c))
        {
            let v = field[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
            if v <= 0xff {
                out.push(v as u8);
                i += 4;
                continue;
            }
        }
        out.push(field[i]);
        i += 1;
    }
    out
}

/// Parse a whole mountinfo file. Fields are separated by single spaces; the optional fields
/// end at a lone `-`.
pub fn parse_mountinfo(text: &[u8]) -> Result<Vec<MountInfo>, MountinfoError> {
    let mut out = Vec::new();
    for (n, line) in text.split(|&b| b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        let line_no = n + 1;
        let err = |why| MountinfoError { line: line_no, why };
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        if fields.len() < 10 {
            return Err(err("fewer than 10 fields"));
        }
        let num = |f: &[u8], why| -> Result<u32, MountinfoError> {
            std::str::from_utf8(f)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or(err(why))
        };
        let mount_id = num(fields[0], "bad mount id")?;
        let parent_id = num(fields[1], "bad parent id")?;
        let mut dev = fields[2].splitn(2, |&b| b == b':');
        let major = num(dev.next().unwrap_or_default(), "bad major:minor")?;
        let minor = num(dev.next().ok_or(err("bad major:minor"))?, "bad major:minor")?;
        let sep = fields[6..]
            .iter()
            .position(|f| *f == b"-")
            .map(|p| p + 6)
            .ok_or(err("no ' - ' separator"))?;
        if fields.len() < sep + 3 {
            return Err(err("missing fstype or source after ' - '"));
        }
        let mut root = unescape(fields[3]);
        let root_deleted = root.ends_with(DELETED);
        if root_deleted {
            root.truncate(root.len() - DELETED.len());
            if root.is_empty() {
                root.push(b'/');
            }
        }
        out.push(MountInfo {
            mount_id,
            parent_id,
            major,
            minor,
            root,
            root_deleted,
            mount_point: unescape(fields[4]),
            fs_type: String::from_utf8_lossy(&unescape(fields[sep + 1])).into_owned(),
            source: String::from_utf8_lossy(&unescape(fields[sep + 2])).into_owned(),
        });
    }
    Ok(out)
}

/// Is `path` equal to `dir` or below it, component-wise (`/a/bc` is not below `/a/b`)?
pub fn is_under(path: &[u8], dir: &[u8]) -> bool {
    let dir = if dir.len() > 1 {
        dir.strip_suffix(b"/").unwrap_or(dir)
    } else {
        dir
    };
    if dir == b"/" {
        return path.starts_with(b"/");
    }
    match path.strip_prefix(dir) {
        Some(rest) => rest.is_empty() || rest.starts_with(b"/"),
        None => false,
    }
}

/// Where an absolute, canonical path lives inside its filesystem: (major, minor, path from
/// the filesystem's root), through the mount that covers it (the deepest mount point above
/// it; of mounts stacked on one point, the last listed).
pub fn fs_location(mounts: &[MountInfo], path: &Path) -> Option<(u32, u32, Vec<u8>)> {
    let path = path.as_os_str().as_bytes();
    let (_, m) = mounts
        .iter()
        .enumerate()
        .filter(|(_, m)| is_under(path, &m.mount_point))
        .max_by_key(|(i, m)| (m.mount_point.len(), *i))?;
    let rel = if m.mount_point == b"/" {
        &path[1..]
    } else {
        path[m.mount_point.len()..]
            .strip_prefix(b"/")
            .unwrap_or(&[])
    };
    let mut inside = m.root.clone();
    if !rel.is_empty() {
        if !inside.ends_with(b"/") {
            inside.push(b'/');
        }
        inside.extend_from_slice(rel);
    }
    Some((m.major, m.minor, inside))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &[u8] = b"\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 master:2 - cgroup2 cgroup2 rw
50 27 0:45 / /run rw,nosuid,nodev shared:5 - tmpfs tmpfs rw,size=812k,mode=755,inode64
51 50 0:45 /multus /host/run/multus rw - tmpfs tmpfs rw
";

    #[test]
    fn parses_fields_and_optional_tags() {
        let m = parse_mountinfo(HOST).unwrap();
        assert_eq!(m.len(), 5);
        assert_eq!(
            m[2],
            MountInfo {
                mount_id: 41,
                parent_id: 31,
                major: 0,
                minor: 38,
                root: b"/".to_vec(),
                root_deleted: false,
                mount_point: b"/sys/fs/cgroup/unified".to_vec(),
                fs_type: "cgroup2".into(),
                source: "cgroup2".into(),
            }
        );
        assert_eq!(m[1].major, 254);
        assert_eq!(m[4].root, b"/multus");
    }

    #[test]
    fn deleted_socket_bind_mount_with_escapes() {
        let line = b"812 790 254:0 /tmp/my\\040dir/a.sock//deleted /var/run/multus\\011x.sock rw,relatime - ext4 /dev/vda rw\n";
        let m = parse_mountinfo(line).unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].root, b"/tmp/my dir/a.sock");
        assert!(m[0].root_deleted);
        assert_eq!(m[0].mount_point, b"/var/run/multus\tx.sock");
        assert_eq!(m[0].fs_type, "ext4");
        assert_eq!(m[0].source, "/dev/vda");
        // A whole deleted filesystem root is just "/".
        let m = parse_mountinfo(b"1 0 0:5 //deleted /x rw - tmpfs none rw").unwrap();
        assert_eq!((m[0].root.as_slice(), m[0].root_deleted), (&b"/"[..], true));
    }

    #[test]
    fn unescape_cases() {
        assert_eq!(unescape(b"a\\040b"), b"a b");
        assert_eq!(unescape(b"\\134\\012"), b"\\\n");
        assert_eq!(unescape(b"end\\04"), b"end\\04");
        assert_eq!(unescape(b"\\"), b"\\");
        assert_eq!(unescape(b"\\999"), b"\\999");
        assert_eq!(unescape(b"\\777"), b"\\777", "above 0xff: kept");
        assert_eq!(unescape(b"\\0401"), b" 1");
    }

    #[test]
    fn malformed_lines_are_errors_naming_the_line() {
        let e = parse_mountinfo(b"1 0 0:5 / / rw - tmpfs none rw\nshort line\n").unwrap_err();
        assert_eq!(
            e,
            MountinfoError {
                line: 2,
                why: "fewer than 10 fields"
            }
        );
        let e = parse_mountinfo(b"1 0 0:5 / / rw a b c d").unwrap_err();
        assert_eq!(e.why, "no ' - ' separator");
        let e = parse_mountinfo(b"x 0 0:5 / / rw - tmpfs none rw").unwrap_err();
        assert_eq!(e.why, "bad mount id");
        let e = parse_mountinfo(b"1 0 05 / / rw - tmpfs none rw").unwrap_err();
        assert_eq!(e.why, "bad major:minor");
        let e = parse_mountinfo(b"1 0 0:5 / / rw x y - tmpfs").unwrap_err();
        assert_eq!(e.why, "missing fstype or source after ' - '");
        // Garbage never panics.
        for g in [
            &b"\\\\\\ - - - - - - - - -"[..],
            b"- - - - - - - - - - -",
            b"1 2 3:4 \\ \\ \\ - \\ \\",
        ] {
            let _ = parse_mountinfo(g);
        }
    }

    #[test]
    fn is_under_is_component_wise() {
        assert!(is_under(b"/a/b/c.sock", b"/a/b"));
        assert!(is_under(b"/a/b", b"/a/b/"));
        assert!(is_under(b"/a/b", b"/a/b"));
        assert!(!is_under(b"/a/bc", b"/a/b"));
        assert!(is_under(b"/x", b"/"));
        assert!(!is_under(b"rel", b"/"));
    }

    #[test]
    fn watched_dir_inside_its_filesystem() {
        let m = parse_mountinfo(HOST).unwrap();
        assert_eq!(
            fs_location(&m, Path::new("/run/multus")),
            Some((0, 45, b"/multus".to_vec()))
        );
        assert_eq!(
            fs_location(&m, Path::new("/host/run/multus/sub")),
            Some((0, 45, b"/multus/sub".to_vec()))
        );
        assert_eq!(
            fs_location(&m, Path::new("/tmp/x")),
            Some((254, 0, b"/tmp/x".to_vec()))
        );
        assert_eq!(
            fs_location(&m, Path::new("/run")),
            Some((0, 45, b"/".to_vec()))
        );
        // Stacked on one mount point: the last one listed is on top.
        let stacked = parse_mountinfo(
            b"1 0 254:0 / / rw - ext4 /dev/vda rw\n2 1 0:50 / /m rw - tmpfs a rw\n3 2 0:51 / /m rw - tmpfs b rw\n",
        )
        .unwrap();
        assert_eq!(
            fs_location(&stacked, Path::new("/m/s")),
            Some((0, 51, b"/s".to_vec()))
        );
    }
}
