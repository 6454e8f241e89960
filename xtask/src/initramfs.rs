//! A gzip-compressed newc cpio archive for the guest, written directly (so device nodes need
//! no root and no staging tree), with the shared libraries of every executable per `ldd`.
use std::{
    collections::BTreeMap,
    fs,
    io::{BufWriter, Write},
    path::{Path, PathBuf},
    process::Stdio,
};

use anyhow::{Context as _, bail};

use crate::cmd;

const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFLNK: u32 = 0o120_000;
const S_IFCHR: u32 = 0o020_000;

enum Node {
    Dir,
    /// Regular file copied from the host (symlinks followed).
    Copy {
        from: PathBuf,
        perm: u32,
    },
    Bytes {
        data: Vec<u8>,
        perm: u32,
    },
    Symlink(String),
    CharDev {
        major: u32,
        minor: u32,
    },
}

/// The guest's file tree, keyed by path without the leading `/`. A `BTreeMap` lists every
/// directory before what it contains, as the kernel's unpacker wants.
#[derive(Default)]
pub struct Image {
    nodes: BTreeMap<String, Node>,
}

impl Image {
    fn insert(&mut self, path: &str, node: Node) {
        let path = path.trim_start_matches('/');
        let mut parent = Path::new(path).parent();
        while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
            self.nodes
                .entry(p.to_str().expect("UTF-8 path").to_owned())
                .or_insert(Node::Dir);
            parent = p.parent();
        }
        self.nodes.insert(path.to_owned(), node);
    }

    pub fn dir(&mut self, path: &str) {
        self.insert(path, Node::Dir);
    }

    pub fn bytes(&mut self, path: &str, data: impl Into<Vec<u8>>, perm: u32) {
        let data = data.into();
        self.insert(path, Node::Bytes { data, perm });
    }

    pub fn symlink(&mut self, path: &str, target: &str) {
        self.insert(path, Node::Symlink(target.to_owned()));
    }

    pub fn char_dev(&mut self, path: &str, major: u32, minor: u32) {
        self.insert(path, Node::CharDev { major, minor });
    }

    /// Copies the host file `from` to `path`.
    pub fn copy(&mut self, path: &str, from: &Path, perm: u32) {
        let from = from.to_owned();
        self.insert(path, Node::Copy { from, perm });
    }

    /// Copies the host executable `from` to `path`, with the libraries `ldd` lists for it
    /// (the dynamic loader included) at the same paths as on the host.
    pub fn executable(&mut self, path: &str, from: &Path) -> anyhow::Result<()> {
        for lib in shared_libraries(from)? {
            let lib = lib.to_str().context("non-UTF-8 library path")?.to_owned();
            self.insert(
                &lib,
                Node::Copy {
                    from: PathBuf::from(&lib),
                    perm: 0o755,
                },
            );
        }
        self.insert(
            path,
            Node::Copy {
                from: from.to_owned(),
                perm: 0o755,
            },
        );
        Ok(())
    }

    /// Writes the archive through `gzip -1` to `out`.
    pub fn write_gz(&self, out: &Path) -> anyhow::Result<()> {
        let file = fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
        let mut gzip = cmd::command("gzip")
            .args(["-1", "-n", "-c"])
            .stdin(Stdio::piped())
            .stdout(file)
            .spawn()
            .context("cannot start gzip")?;
        let stdin = gzip.stdin.take().expect("piped");
        let mut w = Cpio::new(BufWriter::with_capacity(1 << 20, stdin));
        self.write_to(&mut w)?;
        w.finish()?
            .into_inner()
            .map_err(std::io::IntoInnerError::into_error)?;
        let status = gzip.wait()?;
        if !status.success() {
            bail!("gzip failed ({status}) writing {}", out.display());
        }
        Ok(())
    }

    fn write_to<W: Write>(&self, w: &mut Cpio<W>) -> anyhow::Result<()> {
        for (path, node) in &self.nodes {
            match node {
                Node::Dir => w.entry(path, S_IFDIR | 0o755, (0, 0), &[])?,
                Node::Copy { from, perm } => {
                    let data =
                        fs::read(from).with_context(|| format!("reading {}", from.display()))?;
                    w.entry(path, S_IFREG | perm, (0, 0), &data)?;
                }
                Node::Bytes { data, perm } => w.entry(path, S_IFREG | perm, (0, 0), data)?,
                Node::Symlink(target) => {
                    w.entry(path, S_IFLNK | 0o777, (0, 0), target.as_bytes())?;
                }
                Node::CharDev { major, minor } => {
                    w.entry(path, S_IFCHR | 0o600, (*major, *minor), &[])?;
                }
            }
        }
        Ok(())
    }
}

/// The libraries (and loader) `ldd` resolves for `exe`; none for a static executable.
fn shared_libraries(exe: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let out = cmd::command("ldd")
        .arg(exe)
        .output()
        .with_context(|| format!("cannot run ldd on {}", exe.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if text.contains("not a dynamic executable") || err.contains("not a dynamic executable") {
            return Ok(Vec::new());
        }
        bail!("ldd {} failed: {}", exe.display(), err.trim());
    }
    parse_ldd(&text).with_context(|| format!("libraries of {}", exe.display()))
}

fn parse_ldd(text: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut libs = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.contains("=> not found") {
            bail!("missing shared library: {line}");
        }
        // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)`, or the loader alone:
        // `/lib64/ld-linux-x86-64.so.2 (0x...)`; the vDSO has no file.
        let path = match line.split_once(" => ") {
            Some((_, rest)) => rest,
            None => line,
        };
        let path = path.split(" (").next().unwrap_or_default().trim();
        if path.starts_with('/') {
            libs.push(PathBuf::from(path));
        }
    }
    Ok(libs)
}

/// newc ("070701") cpio writer.
struct Cpio<W: Write> {
    out: W,
    offset: u64,
    ino: u32,
}

impl<W: Write> Cpio<W> {
    fn new(out: W) -> Self {
        Self {
            out,
            offset: 0,
            ino: 1,
        }
    }

    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.out.write_all(bytes)?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    fn pad4(&mut self) -> std::io::Result<()> {
        let pad = (4 - self.offset % 4) % 4;
        self.put(&[0; 3][..pad as usize])
    }

    fn entry(
        &mut self,
        name: &str,
        mode: u32,
        (rmajor, rminor): (u32, u32),
        data: &[u8],
    ) -> anyhow::Result<()> {
        let size = u32::try_from(data.len()).with_context(|| format!("{name} is over 4 GiB"))?;
        let nlink = if mode & S_IFDIR == S_IFDIR { 2 } else { 1 };
        let fields = [
            self.ino,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime
            size,
            0, // dev major
            0, // dev minor
            rmajor,
            rminor,
            name.len() as u32 + 1,
            0, // check
        ];
        self.ino += 1;
        let mut header = String::from("070701");
        for f in fields {
            header.push_str(&format!("{f:08x}"));
        }
        self.put(header.as_bytes())?;
        self.put(name.as_bytes())?;
        self.put(&[0])?;
        self.pad4()?;
        self.put(data)?;
        self.pad4()?;
        Ok(())
    }

    fn finish(mut self) -> anyhow::Result<W> {
        self.entry("TRAILER!!!", 0, (0, 0), &[])?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd6b1f0000)\n\
                    \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f0c1c000000)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0c1be00000)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f0c1c1b0000)\n";
        assert_eq!(
            parse_ldd(text).expect("parses"),
            [
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
            .map(PathBuf::from)
        );
        assert!(parse_ldd("\tlibfoo.so.1 => not found\n").is_err());
    }

    #[test]
    fn parents_come_first() {
        let mut img = Image::default();
        img.bytes("/usr/lib/x/libc.so", "x", 0o755);
        img.symlink("/bin/sh", "busybox");
        img.char_dev("/dev/console", 5, 1);
        let keys: Vec<_> = img.nodes.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "bin",
                "bin/sh",
                "dev",
                "dev/console",
                "usr",
                "usr/lib",
                "usr/lib/x",
                "usr/lib/x/libc.so"
            ]
        );
    }

    #[test]
    fn newc_layout() {
        let mut img = Image::default();
        img.bytes("init", "#!/bin/sh\n", 0o755);
        img.char_dev("dev/console", 5, 1);
        let mut w = Cpio::new(Vec::new());
        img.write_to(&mut w).expect("writes");
        let out = w.finish().expect("finishes");

        assert_eq!(out.len() % 4, 0, "archive is 4-byte aligned");
        // First entry: the `dev` directory, inode 1, mode 040755, nlink 2, name size 4.
        let h = std::str::from_utf8(&out[..110]).expect("ASCII header");
        assert_eq!(&h[..6], "070701");
        assert_eq!(&h[6..14], "00000001");
        assert_eq!(&h[14..22], "000041ed");
        assert_eq!(&h[38..46], "00000002");
        assert_eq!(&h[94..102], "00000004");
        assert_eq!(&out[110..114], b"dev\0");
        // dev/console carries its device numbers in rdev.
        let at = find(&out, b"dev/console\0") - 110;
        let h = std::str::from_utf8(&out[at..at + 110]).expect("ASCII header");
        assert_eq!(&h[14..22], "00002180");
        assert_eq!((&h[78..86], &h[86..94]), ("00000005", "00000001"));
        // init's data follows its name, padded to 4 bytes.
        let name = find(&out, b"init\0");
        let data = name + 5 + (4 - (name + 5) % 4) % 4;
        assert_eq!(&out[data..data + 10], b"#!/bin/sh\n");
        assert!(find(&out, b"TRAILER!!!\0") > data);
    }

    fn find(hay: &[u8], needle: &[u8]) -> usize {
        hay.windows(needle.len())
            .position(|w| w == needle)
            .expect("present")
    }

    /// The archive round-trips through the system's cpio, when it is installed.
    #[test]
    fn cpio_lists_it() {
        if cmd::output(cmd::command("cpio").arg("--version")).is_err() {
            eprintln!("skipped: no cpio on this machine");
            return;
        }
        let mut img = Image::default();
        img.bytes("init", "#!/bin/sh\n", 0o755);
        img.symlink("bin/sh", "busybox");
        let mut w = Cpio::new(Vec::new());
        img.write_to(&mut w).expect("writes");
        let archive = w.finish().expect("finishes");
        let mut child = cmd::command("cpio")
            .args(["-it", "--quiet"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("cpio starts");
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(&archive)
            .expect("writes");
        let out = child.wait_with_output().expect("cpio ends");
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stdout), "bin\nbin/sh\ninit\n");
    }
}
