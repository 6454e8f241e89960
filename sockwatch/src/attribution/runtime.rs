//! Which runtime a process runs, from its executable: the file name for Node.js, socat and
//! CPython; the build-info section the Go linker writes into every Go binary otherwise.
//!
//! Only the ELF header, the section headers and the start of two sections are read, each
//! bounded: a 100 MB executable costs a few kilobytes.
#![deny(clippy::indexing_slicing)]
use std::io::{self, Read, Seek, SeekFrom};

use crate::engine::Runtime;

/// What `.go.buildinfo` starts with (Go's `debug/buildinfo`).
const GO_BUILDINFO_MAGIC: &[u8] = b"\xff Go buildinf:";
const GO_BUILDINFO_SECTION: &[u8] = b".go.buildinfo\0";
/// More section headers than this and the file is not looked into (a Go binary has ~25).
const MAX_SECTIONS: u64 = 256;
/// The most read of the section-name table (a Go binary's is a few hundred bytes).
const MAX_SECTION_NAMES: u64 = 4096;

/// The runtime an executable is, by the base name of `exe` (its path) first, else by its
/// contents, opened by `open` only then. `None` when neither tells, or it cannot be read.
pub fn recognise<R: Read + Seek>(
    exe: &str,
    open: impl FnOnce() -> io::Result<R>,
) -> Option<Runtime> {
    by_name(exe).or_else(|| {
        let mut file = open().ok()?;
        is_go_binary(&mut file).ok()?.then_some(Runtime::Go)
    })
}

/// The runtime an executable's base name says: `node`/`nodejs`, `socat`, `python3[.N]`.
pub fn by_name(exe: &str) -> Option<Runtime> {
    let name = exe.rsplit('/').next().unwrap_or(exe);
    match name {
        "node" | "nodejs" => Some(Runtime::Node),
        "socat" => Some(Runtime::Socat),
        _ => name
            .strip_prefix("python3")
            .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.'))
            .then_some(Runtime::Python),
    }
}

/// Whether `file` is an ELF executable with a `.go.buildinfo` section holding Go's magic.
pub fn is_go_binary<R: Read + Seek>(file: &mut R) -> io::Result<bool> {
    let mut header = [0u8; 64];
    file.read_exact(&mut header)?;
    let Some(elf) = Elf::of(&header) else {
        return Ok(false);
    };
    let (shoff, entsize, count, names_index) = elf.section_table(&header);
    if shoff == 0 || entsize != elf.section_header_size() || count > MAX_SECTIONS {
        return Ok(false);
    }
    let table = read_at(file, shoff, entsize * count)?;
    let headers: Vec<&[u8]> = table.chunks_exact(entsize as usize).collect();
    let Some(names) = headers.get(names_index as usize) else {
        return Ok(false);
    };
    let (names_offset, names_size) = elf.section_extent(names);
    let names = read_at(file, names_offset, names_size.min(MAX_SECTION_NAMES))?;
    let buildinfo = headers.iter().find(|h| {
        let name = names.get(elf.u32(h, 0) as usize..).unwrap_or_default();
        name.starts_with(GO_BUILDINFO_SECTION)
    });
    let Some(section) = buildinfo else {
        return Ok(false);
    };
    let (offset, size) = elf.section_extent(section);
    if size < GO_BUILDINFO_MAGIC.len() as u64 {
        return Ok(false);
    }
    Ok(read_at(file, offset, GO_BUILDINFO_MAGIC.len() as u64)? == GO_BUILDINFO_MAGIC)
}

/// `len` bytes at `offset`, or an error if the file is shorter.
fn read_at<R: Read + Seek>(file: &mut R, offset: u64, len: u64) -> io::Result<Vec<u8>> {
    file.seek(SeekFrom::Start(offset))?;
    let mut buf = vec![0u8; len as usize];
    file.read_exact(&mut buf)?;
    Ok(buf)
}

/// An ELF file's class and byte order: how its headers' fields read.
#[derive(Clone, Copy)]
struct Elf {
    wide: bool,
    big_endian: bool,
}

impl Elf {
    fn of(header: &[u8; 64]) -> Option<Self> {
        let (magic, class, data) = (header.get(..4)?, header[4], header[5]);
        if magic != b"\x7fELF" || !(1..=2).contains(&class) || !(1..=2).contains(&data) {
            return None;
        }
        Some(Self {
            wide: class == 2,
            big_endian: data == 2,
        })
    }

    fn section_header_size(self) -> u64 {
        if self.wide { 64 } else { 40 }
    }

    /// `(e_shoff, e_shentsize, e_shnum, e_shstrndx)`.
    fn section_table(self, h: &[u8]) -> (u64, u64, u64, u64) {
        let (shoff, rest) = match self.wide {
            true => (self.u64(h, 0x28), 0x3a),
            false => (u64::from(self.u32(h, 0x20)), 0x2e),
        };
        let field = |i: usize| u64::from(self.u16(h, rest + 2 * i));
        (shoff, field(0), field(1), field(2))
    }

    /// A section header's `(sh_offset, sh_size)`.
    fn section_extent(self, sh: &[u8]) -> (u64, u64) {
        match self.wide {
            true => (self.u64(sh, 24), self.u64(sh, 32)),
            false => (u64::from(self.u32(sh, 16)), u64::from(self.u32(sh, 20))),
        }
    }

    fn bytes<const N: usize>(buf: &[u8], at: usize) -> [u8; N] {
        buf.get(at..at + N)
            .and_then(|b| b.try_into().ok())
            .unwrap_or([0; N])
    }

    fn u16(self, buf: &[u8], at: usize) -> u16 {
        let b = Self::bytes(buf, at);
        if self.big_endian {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        }
    }

    fn u32(self, buf: &[u8], at: usize) -> u32 {
        let b = Self::bytes(buf, at);
        if self.big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    }

    fn u64(self, buf: &[u8], at: usize) -> u64 {
        let b = Self::bytes(buf, at);
        if self.big_endian {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        }
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)] // the fixtures write a file of known layout
mod tests {
    use std::io::Cursor;

    use super::*;

    /// A minimal ELF file: a null section, the name table, and `section` holding `content`.
    fn elf(wide: bool, big_endian: bool, section: &str, content: &[u8]) -> Vec<u8> {
        let put = |out: &mut Vec<u8>, at: usize, v: u64, n: usize| {
            let b = if big_endian {
                v.to_be_bytes()
            } else {
                v.to_le_bytes()
            };
            let b = if big_endian { &b[8 - n..] } else { &b[..n] };
            out[at..at + n].copy_from_slice(b);
        };
        let names = format!("\0.shstrtab\0{section}\0");
        let (names_at, content_at) = (64, 64 + names.len());
        let shoff = content_at + content.len();
        let entsize = if wide { 64 } else { 40 };
        let mut out = vec![0u8; shoff + 3 * entsize];
        out[..4].copy_from_slice(b"\x7fELF");
        out[4] = if wide { 2 } else { 1 };
        out[5] = if big_endian { 2 } else { 1 };
        out[names_at..content_at].copy_from_slice(names.as_bytes());
        out[content_at..shoff].copy_from_slice(content);
        let (shoff_at, rest) = if wide { (0x28, 0x3a) } else { (0x20, 0x2e) };
        put(&mut out, shoff_at, shoff as u64, if wide { 8 } else { 4 });
        for (i, v) in [entsize, 3, 1].into_iter().enumerate() {
            put(&mut out, rest + 2 * i, v as u64, 2);
        }
        let sections = [(1, names_at, names.len()), (11, content_at, content.len())];
        for (i, (name, at, size)) in sections.into_iter().enumerate() {
            let sh = shoff + (i + 1) * entsize;
            put(&mut out, sh, name, 4);
            let (off_at, size_at, n) = if wide { (24, 32, 8) } else { (16, 20, 4) };
            put(&mut out, sh + off_at, at as u64, n);
            put(&mut out, sh + size_at, size as u64, n);
        }
        out
    }

    fn go(bytes: Vec<u8>) -> bool {
        is_go_binary(&mut Cursor::new(bytes)).expect("reads")
    }

    #[test]
    fn a_buildinfo_section_with_gos_magic_is_a_go_binary_in_every_elf_flavour() {
        for (wide, big_endian) in [(true, false), (true, true), (false, false), (false, true)] {
            let file = elf(
                wide,
                big_endian,
                ".go.buildinfo",
                b"\xff Go buildinf:\x08\x02",
            );
            assert!(go(file), "wide {wide}, big-endian {big_endian}");
        }
    }

    #[test]
    fn another_section_or_another_magic_is_not_go() {
        assert!(!go(elf(
            true,
            false,
            ".rodata",
            b"\xff Go buildinf:\x08\x02"
        )));
        assert!(!go(elf(
            true,
            false,
            ".go.buildinfo",
            b"\xff Go buildinx:\x08\x02"
        )));
        assert!(!go(elf(
            true,
            false,
            ".go.buildinfo.x",
            b"\xff Go buildinf:"
        )));
        assert!(!go(elf(true, false, ".go.buildinfo", b"\xff Go")));
    }

    #[test]
    fn a_script_or_a_truncated_file_is_not_go_and_is_not_read_past_its_end() {
        let script = b"#!/bin/sh\nexec node server.js\n".repeat(4);
        assert!(!go(script));
        let mut truncated = elf(true, false, ".go.buildinfo", b"\xff Go buildinf:\x08\x02");
        truncated.truncate(100);
        assert!(is_go_binary(&mut Cursor::new(truncated)).is_err());
    }

    #[test]
    fn a_section_count_past_the_bound_is_not_read() {
        let mut file = elf(true, false, ".go.buildinfo", b"\xff Go buildinf:\x08\x02");
        file[0x3c..0x3e].copy_from_slice(&(MAX_SECTIONS as u16 + 1).to_le_bytes());
        assert!(!go(file));
    }

    #[test]
    fn interpreters_and_socat_are_told_by_name_without_opening_the_file() {
        let cases = [
            ("/usr/bin/node", Some(Runtime::Node)),
            ("/usr/bin/nodejs", Some(Runtime::Node)),
            ("/usr/bin/socat", Some(Runtime::Socat)),
            ("/usr/bin/python3", Some(Runtime::Python)),
            ("/usr/local/bin/python3.13", Some(Runtime::Python)),
            ("/usr/bin/python3-config", None),
            ("/usr/bin/python2.7", None),
            ("/usr/sbin/haproxy", None),
            ("/opt/node/bin/nodeserver", None),
        ];
        for (exe, want) in cases {
            let got = recognise(exe, || -> io::Result<Cursor<Vec<u8>>> {
                assert_eq!(want, None, "{exe}: opened though its name tells");
                Ok(Cursor::new(Vec::new()))
            });
            assert_eq!(got, want, "{exe}");
        }
    }

    #[test]
    fn another_name_is_go_by_its_contents_and_unknown_when_unreadable() {
        let file = elf(true, false, ".go.buildinfo", b"\xff Go buildinf:\x08\x02");
        assert_eq!(
            recognise("/usr/bin/multus-daemon", || Ok(Cursor::new(file))),
            Some(Runtime::Go)
        );
        let gone = || -> io::Result<Cursor<Vec<u8>>> { Err(io::ErrorKind::NotFound.into()) };
        assert_eq!(recognise("/usr/bin/multus-daemon", gone), None);
    }
}
