//! What the running kernel offers beyond the oldest kernel sockwatch supports (5.10), read from
//! its BTF: `enum bpf_func_id` names every helper the kernel implements, so the presence of
//! an enumerator's name in the BTF string table is the presence of the helper.
use std::{fs, io};

use agent_common::Flavor;

const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";
/// Test-only switch: `bounded` forces the bounded program variants on any kernel.
const FORCE_FLAVOR: &str = "SOCKWATCH_TEST_FLAVOR";

/// The helpers the [`Flavor::Helpers`] programs call beyond 5.10's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelFeatures {
    /// `bpf_loop` (5.17): whole fd-table walks in a callback the verifier checks once.
    pub bpf_loop: bool,
    /// `bpf_task_pt_regs` (5.15): the syscall's registers, for the path an unlink named.
    pub task_pt_regs: bool,
    /// `bpf_get_current_task_btf` (5.11).
    pub current_task_btf: bool,
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
        format!(
            "bpf_loop {}, bpf_task_pt_regs {}, bpf_get_current_task_btf {}: {} programs",
            yes(self.bpf_loop),
            yes(self.task_pt_regs),
            yes(self.current_task_btf),
            self.flavor().name()
        )
    }
}

/// Is `name` one of the NUL-terminated strings of the BTF string table?
fn has_name(raw: &[u8], name: &str) -> bool {
    let needle = [b"\0", name.as_bytes(), b"\0"].concat();
    raw.windows(needle.len()).any(|w| w == needle)
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
}
