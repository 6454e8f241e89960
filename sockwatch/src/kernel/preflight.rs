//! Checks and preparations before loading: privileges, BTF, tracefs, memlock.
use std::path::Path;

use crate::{
    host::caps::{self, CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, CapSet},
    kernel::features::KERNEL_BTF,
};

#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error(
        "not privileged: loading eBPF needs CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON; {0} \
         (effective capabilities: {1:#x})"
    )]
    NotPrivileged(String, CapSet),
    #[error("cannot read /proc/self/status: {0}")]
    Status(#[source] std::io::Error),
    #[error("missing BTF: {0} not found; the kernel needs CONFIG_DEBUG_INFO_BTF=y")]
    NoBtf(&'static str),
    // Not a #[source]: the message names the error already, and `{e:#}` would repeat it.
    #[error("tracefs is not mounted and mounting it on {0} failed: {1}{2}")]
    Tracefs(&'static str, std::io::Error, String),
}

const TRACEFS: &str = "/sys/kernel/tracing";
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

/// Everything `run` and `check` need before touching the kernel.
pub fn prepare() -> Result<(), PreflightError> {
    let caps = CapSet::effective().map_err(PreflightError::Status)?;
    check_privileges(caps)?;
    if !Path::new(KERNEL_BTF).exists() {
        return Err(PreflightError::NoBtf(KERNEL_BTF));
    }
    ensure_tracefs(caps)?;
    raise_memlock();
    Ok(())
}

/// CAP_SYS_ADMIN implies CAP_BPF and CAP_PERFMON for bpf() and perf_event_open().
fn check_privileges(caps: CapSet) -> Result<(), PreflightError> {
    if caps.has(CAP_SYS_ADMIN) || (caps.has(CAP_BPF) && caps.has(CAP_PERFMON)) {
        return Ok(());
    }
    let lacking =
        caps::lacking_clause(caps, &[CAP_SYS_ADMIN, CAP_BPF, CAP_PERFMON]).unwrap_or_default();
    Err(PreflightError::NotPrivileged(lacking, caps))
}

/// Tracepoints are attached by id, read from tracefs: mount it if nobody has.
fn ensure_tracefs(caps: CapSet) -> Result<(), PreflightError> {
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
        let error = std::io::Error::last_os_error();
        let lacking = caps::lacking_clause(caps, &[CAP_SYS_ADMIN])
            .map(|l| format!(" ({l}: mount tracefs into the agent's container)"))
            .unwrap_or_default();
        return Err(PreflightError::Tracefs(TRACEFS, error, lacking));
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

    fn set(caps: &[caps::Cap]) -> CapSet {
        CapSet(caps.iter().fold(0, |m, c| m | (1 << c.bit)))
    }

    #[test]
    fn privilege_rules() {
        assert!(check_privileges(set(&[CAP_SYS_ADMIN])).is_ok());
        assert!(check_privileges(set(&[CAP_BPF, CAP_PERFMON])).is_ok());
        let err = check_privileges(set(&[CAP_BPF])).unwrap_err().to_string();
        assert_eq!(
            err,
            "not privileged: loading eBPF needs CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON; \
             CAP_SYS_ADMIN and CAP_PERFMON are not in the agent's effective set (effective \
             capabilities: 0x8000000000)"
        );
        let err = check_privileges(CapSet(0)).unwrap_err().to_string();
        assert!(
            err.contains("CAP_SYS_ADMIN, CAP_BPF and CAP_PERFMON are not in"),
            "{err}"
        );
    }
}
