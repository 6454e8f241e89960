//! Checks and preparations before loading: privileges, BTF, tracefs, memlock.
use std::{fs, path::Path};

use crate::kernel::features::KERNEL_BTF;

#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error(
        "not privileged: loading eBPF needs root, or CAP_BPF and CAP_PERFMON with CAP_SYS_ADMIN \
         for tracefs (effective capabilities: {0:#x})"
    )]
    NotPrivileged(u64),
    #[error("cannot read /proc/self/status: {0}")]
    Status(#[source] std::io::Error),
    #[error("missing BTF: {0} not found; the kernel needs CONFIG_DEBUG_INFO_BTF=y")]
    NoBtf(&'static str),
    #[error("tracefs is not mounted and mounting it on {0} failed: {1}")]
    Tracefs(&'static str, #[source] std::io::Error),
}

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;
const TRACEFS: &str = "/sys/kernel/tracing";
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

/// Everything `run` and `check` need before touching the kernel.
pub fn prepare() -> Result<(), PreflightError> {
    check_privileges(effective_caps()?)?;
    if !Path::new(KERNEL_BTF).exists() {
        return Err(PreflightError::NoBtf(KERNEL_BTF));
    }
    ensure_tracefs()?;
    raise_memlock();
    Ok(())
}

fn effective_caps() -> Result<u64, PreflightError> {
    let status = fs::read_to_string("/proc/self/status").map_err(PreflightError::Status)?;
    Ok(parse_cap_eff(&status).unwrap_or(0))
}

/// `CapEff:` of /proc/PID/status, a hex mask.
fn parse_cap_eff(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
}

fn check_privileges(caps: u64) -> Result<(), PreflightError> {
    let has = |c: u32| caps & (1 << c) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        Ok(())
    } else {
        Err(PreflightError::NotPrivileged(caps))
    }
}

/// Tracepoints are attached by id, read from tracefs: mount it if nobody has.
fn ensure_tracefs() -> Result<(), PreflightError> {
    if Path::new(TRACEFS).join("events").exists()
        || Path::new(DEBUGFS_TRACING).join("events").exists()
    {
        return Ok(());
    }
    // SAFETY: every pointer is a NUL-terminated C string literal or null (no mount data),
    // all valid for the call.
    let rc = unsafe {
        libc::mount(
            c"tracefs".as_ptr(),
            c"/sys/kernel/tracing".as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(PreflightError::Tracefs(
            TRACEFS,
            std::io::Error::last_os_error(),
        ));
    }
    log::info!("mounted tracefs on {TRACEFS}");
    Ok(())
}

/// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; later ones use memcg, and a
/// container without CAP_SYS_RESOURCE cannot raise the limit anyway.
fn raise_memlock() {
    let lim = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: `lim` is a valid, initialised rlimit that outlives the call.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) } != 0 {
        log::debug!(
            "cannot raise RLIMIT_MEMLOCK: {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cap_eff() {
        let status = "Name:\tx\nCapPrm:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(parse_cap_eff(status), Some(0x1ff_ffff_ffff));
        assert_eq!(parse_cap_eff("Name:\tx\n"), None);
    }

    #[test]
    fn privilege_rules() {
        assert!(check_privileges(1 << CAP_SYS_ADMIN).is_ok());
        assert!(check_privileges((1 << CAP_BPF) | (1 << CAP_PERFMON)).is_ok());
        let err = check_privileges(1 << CAP_BPF).unwrap_err().to_string();
        assert!(err.starts_with("not privileged"), "{err}");
        assert!(check_privileges(0).is_err());
    }
}
