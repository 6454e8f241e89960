//! How a hook is attached, and which helpers its program may call.

named_enum! {
    serde;
    /// How a hook is attached. Ids are never reused; the preference order is the probe table's.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum Tier: u8 {
        /// BPF LSM hooks.
        Lsm = 1 => "lsm",
        /// fentry/fexit on kernel functions.
        Fentry = 2 => "fentry",
        /// kprobes/kretprobes.
        Kprobe = 3 => "kprobe",
        /// Syscall tracepoints.
        Tracepoint = 4 => "tracepoint",
        /// BTF-typed tracepoints (`tp_btf`): tracepoint stability with typed arguments.
        TpBtf = 5 => "tp_btf",
    }
}

named_enum! {
    /// Which helpers a kernel program may call. Every program that needs `bpf_loop` (5.17) or
    /// `bpf_task_pt_regs` (5.15) has a `Bounded` twin named `<name>_b` for older kernels; the
    /// loader attaches the one this kernel's helpers allow.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Flavor: u8 {
        /// `bpf_loop` walks of whole fd tables; the syscall's path from its registers.
        Helpers = 0 => "helpers",
        /// Constant-bounded walks of the first [`crate::FD_SCAN_BOUNDED`] descriptors; no
        /// syscall path.
        Bounded = 1 => "bounded",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_round_trip() {
        for t in Tier::ALL {
            assert_eq!(Tier::from_repr(t as u8), Some(t));
        }
        assert_eq!(Tier::from_repr(0), None);
    }
}
