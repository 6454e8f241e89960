//! The boot clock: the kernel events' timestamps (`bpf_ktime_get_boot_ns`) run on it.

/// Now on the boot clock, the kernel events' clock.
pub fn boot_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_clock_moves_forward() {
        let a = boot_ns();
        assert!(boot_ns() >= a && a > 0);
    }
}
