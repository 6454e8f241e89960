//! What the running kernel offers beyond the oldest kernel sockwatch supports (5.10), read from
//! its BTF: `enum bpf_func_id` names every helper the kernel implements, so the presence of
//! an enumerator's name in the BTF string table is the presence of the helper.
use std::{fs, io};

use super::{attach::StandIns, btf};

use sockwatch_common::Flavor;

pub const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";
/// The active LSMs, in securityfs.
pub const LSM_LIST: &str = "/sys/kernel/security/lsm";
const SECURITYFS: &str = "/sys/kernel/security";

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
    /// A test's stand-in for an older kernel: the bounded programs whatever the helpers.
    pub bounded_only: bool,
}

impl KernelFeatures {
    pub fn read() -> io::Result<Self> {
        fs::read(KERNEL_BTF).map(|raw| Self::from_btf(&raw))
    }

    /// From the raw BTF of a kernel (`/sys/kernel/btf/vmlinux`).
    pub fn from_btf(raw: &[u8]) -> Self {
        Self::from_types(raw, btf::Types::parse(raw).as_ref())
    }

    /// As [`KernelFeatures::from_btf`], with `raw`'s type records already listed (`None`
    /// when they could not be).
    pub fn from_types(raw: &[u8], types: Option<&btf::Types>) -> Self {
        let param_count = |name| types.and_then(|t| t.param_count(name));
        Self {
            bpf_loop: has_name(raw, "BPF_FUNC_loop"),
            task_pt_regs: has_name(raw, "BPF_FUNC_task_pt_regs"),
            current_task_btf: has_name(raw, "BPF_FUNC_get_current_task_btf"),
            vfs_unlink_args: param_count("vfs_unlink"),
            vfs_rename_args: param_count("vfs_rename"),
            bounded_only: false,
        }
    }

    /// These features as the tests' `stand_ins` would have them.
    pub fn standing_in(self, stand_ins: &StandIns) -> Self {
        Self {
            bounded_only: stand_ins.bounded_programs,
            ..self
        }
    }

    /// The program variants this kernel takes.
    pub fn flavor(&self) -> Flavor {
        if !self.bounded_only && self.bpf_loop && self.task_pt_regs && self.current_task_btf {
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
