//! What the running kernel offers beyond the oldest kernel sockwatch supports (5.10), read from
//! its BTF: `enum bpf_func_id` names every helper the kernel implements, so the presence of
//! an enumerator's name in the BTF string table is the presence of the helper.
use std::{fs, io};

use agent_common::Flavor;

pub const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";
/// The active LSMs, in securityfs.
pub const LSM_LIST: &str = "/sys/kernel/security/lsm";
const SECURITYFS: &str = "/sys/kernel/security";
/// Test-only switch: `bounded` forces the bounded program variants on any kernel.
const FORCE_FLAVOR: &str = "SOCKWATCH_TEST_FLAVOR";

/// The helpers the [`Flavor::Helpers`] programs call beyond 5.10's, and the prototypes of the
/// functions whose arguments changed across kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelFeatures {
    /// `bpf_loop` (5.17): whole fd-table walks in a callback the verifier checks once.
    pub bpf_loop: bool,
    /// `bpf_task_pt_regs` (5.15): the syscall's registers, for the path an unlink named.
    pub task_pt_regs: bool,
    /// `bpf_get_current_task_btf` (5.11).
    pub current_task_btf: bool,
    /// Parameters of `vfs_unlink`: 4 with the idmap argument in front (5.12), 3 before.
    pub vfs_unlink_args: Option<u16>,
    /// Parameters of `vfs_rename`: 1 (`struct renamedata *`, 5.12, and some stable
    /// backports), 6 before.
    pub vfs_rename_args: Option<u16>,
}

impl KernelFeatures {
    pub fn read() -> io::Result<Self> {
        fs::read(KERNEL_BTF).map(|raw| Self::from_btf(&raw))
    }

    /// From the raw BTF of a kernel (`/sys/kernel/btf/vmlinux`).
    pub fn from_btf(raw: &[u8]) -> Self {
        Self {
            bpf_loop: has_name(raw, "BPF_FUNC_loop"),
            task_pt_regs: has_name(raw, "BPF_FUNC_task_pt_regs"),
            current_task_btf: has_name(raw, "BPF_FUNC_get_current_task_btf"),
            vfs_unlink_args: btf::param_count(raw, "vfs_unlink"),
            vfs_rename_args: btf::param_count(raw, "vfs_rename"),
        }
    }

    /// The program variants this kernel takes (`SOCKWATCH_TEST_FLAVOR=bounded` forces the
    /// bounded ones, so tests run them on new kernels too).
    pub fn flavor(&self) -> Flavor {
        let forced = std::env::var(FORCE_FLAVOR).is_ok_and(|v| v == Flavor::Bounded.name());
        if !forced && self.bpf_loop && self.task_pt_regs && self.current_task_btf {
            Flavor::Helpers
        } else {
            Flavor::Bounded
        }
    }

    /// One line for logs and `check`.
    pub fn summary(&self) -> String {
        let yes = |b: bool| if b { "yes" } else { "no" };
        let n = |a: Option<u16>| a.map_or("?".to_owned(), |n| n.to_string());
        format!(
            "bpf_loop {}, bpf_task_pt_regs {}, bpf_get_current_task_btf {}: {} programs; \
             vfs_unlink takes {}, vfs_rename {} arguments",
            yes(self.bpf_loop),
            yes(self.task_pt_regs),
            yes(self.current_task_btf),
            self.flavor().name(),
            n(self.vfs_unlink_args),
            n(self.vfs_rename_args)
        )
    }
}

/// Whether BPF LSM programs run here, or why not: `bpf` must be among the active LSMs. A
/// kernel built with `CONFIG_BPF_LSM` loads and attaches LSM programs even when `bpf` is not
/// in its `lsm=` list, and then never calls them. securityfs is mounted when nobody has.
pub fn bpf_lsm() -> Result<(), String> {
    let list = std::fs::read_to_string(LSM_LIST)
        .or_else(|_| mount_securityfs().and_then(|()| std::fs::read_to_string(LSM_LIST)))
        .map_err(|e| format!("BPF LSM is unknown: cannot read {LSM_LIST}: {e}"))?;
    bpf_in_lsm_list(&list)
}

fn bpf_in_lsm_list(list: &str) -> Result<(), String> {
    let list = list.trim();
    if list.split(',').any(|lsm| lsm == "bpf") {
        return Ok(());
    }
    Err(format!(
        "BPF LSM is not active: {LSM_LIST} lists `{list}`; boot the kernel with bpf added to \
         its lsm= parameter"
    ))
}

fn mount_securityfs() -> io::Result<()> {
    // SAFETY: every pointer is a NUL-terminated C string literal or null (no mount data),
    // all valid for the call.
    let rc = unsafe {
        libc::mount(
            c"securityfs".as_ptr(),
            c"/sys/kernel/security".as_ptr(),
            c"securityfs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    log::info!("mounted securityfs on {SECURITYFS}");
    Ok(())
}

/// Just enough of the BTF format to read a function's parameter count.
mod btf {
    const MAGIC: u16 = 0xeb9f;
    const KIND_FUNC: u32 = 12;
    const KIND_FUNC_PROTO: u32 = 13;

    fn u32_at(b: &[u8], at: usize) -> Option<u32> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
    }

    /// Bytes that follow a type's 12-byte header, by kind.
    fn extra(kind: u32, vlen: usize) -> Option<usize> {
        Some(match kind {
            1 | 14 | 17 => 4,             // int, var, decl tag
            3 => 12,                      // array
            4 | 5 | 15 | 19 => 12 * vlen, // struct, union, datasec, enum64
            6 | 13 => 8 * vlen,           // enum, func proto
            2 | 7..=12 | 16 | 18 => 0,    // ptr, fwd, typedef, modifiers, func, float, tag
            _ => return None,
        })
    }

    /// The parameter count of function `name` in the kernel's BTF (little-endian, as every
    /// kernel sockwatch runs on); `None` when the BTF has no such function.
    pub fn param_count(raw: &[u8], name: &str) -> Option<u16> {
        if raw.get(..2)? != MAGIC.to_le_bytes() {
            return None;
        }
        let hdr = u32_at(raw, 4)? as usize;
        let types = hdr + u32_at(raw, 8)? as usize;
        let types_end = types + u32_at(raw, 12)? as usize;
        let strings = hdr + u32_at(raw, 16)? as usize;
        let name_at = |off: u32| -> Option<&[u8]> {
            let start = strings + off as usize;
            let len = raw.get(start..)?.iter().position(|&c| c == 0)?;
            raw.get(start..start + len)
        };
        // Per type id (from 1): kind, vlen and its type/size field.
        let mut table = vec![(0u32, 0usize, 0u32)];
        let mut func_type = None;
        let mut at = types;
        while at + 12 <= types_end {
            let (name_off, info, ty) =
                (u32_at(raw, at)?, u32_at(raw, at + 4)?, u32_at(raw, at + 8)?);
            let (kind, vlen) = ((info >> 24) & 0x1f, (info & 0xffff) as usize);
            if kind == KIND_FUNC && func_type.is_none() && name_at(name_off)? == name.as_bytes() {
                func_type = Some(ty);
            }
            table.push((kind, vlen, ty));
            at += 12 + extra(kind, vlen)?;
        }
        let &(kind, vlen, _) = table.get(func_type? as usize)?;
        (kind == KIND_FUNC_PROTO).then_some(vlen as u16)
    }
}

/// Is `name` one of the NUL-terminated strings of the BTF string table?
fn has_name(raw: &[u8], name: &str) -> bool {
    let needle = [b"\0", name.as_bytes(), b"\0"].concat();
    // A vectorised search: a byte-by-byte window compare over 5 MB of BTF took about a second
    // under emulation.
    memchr::memmem::find(raw, &needle).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_are_found_by_their_whole_enumerator_name() {
        let raw = b"\0\0task_struct\0BPF_FUNC_loop\0BPF_FUNC_task_pt_regs_x\0";
        let f = KernelFeatures::from_btf(raw);
        assert!(f.bpf_loop);
        assert!(!f.task_pt_regs, "a longer name is another name");
        assert!(!f.current_task_btf);
        assert_eq!(f.flavor(), Flavor::Bounded);
        let all = b"\0BPF_FUNC_loop\0BPF_FUNC_task_pt_regs\0BPF_FUNC_get_current_task_btf\0";
        assert_eq!(KernelFeatures::from_btf(all).flavor(), Flavor::Helpers);
    }

    /// A BTF blob: types (kind, vlen, type, extra bytes), then strings.
    fn blob(types: &[(u32, u32, u32, u32, usize)], strings: &[u8]) -> Vec<u8> {
        let mut t = Vec::new();
        for &(name, kind, vlen, ty, extra) in types {
            t.extend(name.to_le_bytes());
            t.extend(((kind << 24) | vlen).to_le_bytes());
            t.extend(ty.to_le_bytes());
            t.extend(vec![0u8; extra]);
        }
        let mut b = vec![0x9f, 0xeb, 1, 0];
        for v in [
            24u32,
            0,
            t.len() as u32,
            t.len() as u32,
            strings.len() as u32,
        ] {
            b.extend(v.to_le_bytes());
        }
        b.extend(t);
        b.extend(strings);
        b
    }

    #[test]
    fn function_prototypes_are_read_from_btf() {
        // 1: int; 2: proto(3 params); 3: func "vfs_unlink" -> 2; 4: proto(1); 5: "vfs_rename" -> 4
        let strings = b"\0int\0vfs_unlink\0vfs_rename\0";
        let raw = blob(
            &[
                (1, 1, 0, 4, 4),
                (0, 13, 3, 1, 24),
                (5, 12, 0, 2, 0),
                (0, 13, 1, 1, 8),
                (16, 12, 0, 4, 0),
            ],
            strings,
        );
        assert_eq!(btf::param_count(&raw, "vfs_unlink"), Some(3));
        assert_eq!(btf::param_count(&raw, "vfs_rename"), Some(1));
        assert_eq!(btf::param_count(&raw, "vfs_link"), None);
        assert_eq!(btf::param_count(b"junk", "vfs_unlink"), None);
    }

    #[test]
    fn bpf_lsm_must_be_in_the_active_list() {
        assert_eq!(
            bpf_in_lsm_list("lockdown,capability,landlock,bpf\n"),
            Ok(())
        );
        assert_eq!(
            bpf_in_lsm_list("lockdown,capability,landlock,yama,apparmor\n"),
            Err("BPF LSM is not active: /sys/kernel/security/lsm lists \
                 `lockdown,capability,landlock,yama,apparmor`; boot the kernel with bpf added to \
                 its lsm= parameter"
                .into())
        );
        assert!(
            bpf_in_lsm_list("bpfilter").is_err(),
            "a longer name is another LSM"
        );
    }

    #[test]
    fn this_kernels_prototypes() {
        let Ok(f) = KernelFeatures::read() else {
            eprintln!("SKIP this_kernels_prototypes: no /sys/kernel/btf/vmlinux");
            return;
        };
        // The host and every guest in CI run 5.10 or later: both functions are in BTF.
        assert!(matches!(f.vfs_unlink_args, Some(3 | 4)), "{f:?}");
        assert!(matches!(f.vfs_rename_args, Some(1 | 6)), "{f:?}");
    }
}
