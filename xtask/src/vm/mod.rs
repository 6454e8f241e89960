//! `cargo xtask vm-test`: the agent's integration tests, as root, inside QEMU on Debian's stock
//! kernels, 5.10 (Debian 11), 6.1 and 6.12 (Debian 12), where fentry/fexit, kprobes and the BPF
//! LSM are all available.
use std::{
    fs,
    io::{Read as _, Write},
    path::{Path, PathBuf},
    process::{Child, ExitStatus},
    sync::{
        Mutex, OnceLock,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};

use crate::{
    arch::Arch,
    cmd,
    initramfs::Image,
    kernels::{Kernel, version_cmp},
    setup::Ready,
    testrun::{self, Counts},
};

mod console;
mod init;
mod payload;
mod plan;
mod qemu;
pub mod resume;

use console::{Console, LIMITS, Stop, read_lines};
use init::init_script;
pub use init::{EXIT_MARK, INIT_PREAMBLE, RUN_MARK, Tiers, run_lines};
pub use payload::INTEGRATION_TESTS;
use payload::{GO_LISTENER_GUEST, Payload};
pub use plan::{Plan, agent_integration_tests};
use resume::Resumed;

/// Boots of one kernel that may hang before `/init` runs before the guest counts as failed.
const BOOT_ATTEMPTS: u32 = 3;
/// What starts each boot after the first in a guest's console log.
pub const BOOT_SEPARATOR: &str = "\n----- boot ";

/// Writes the guest's initramfs (busybox, sockwatch, the tests, their libraries, each kernel's
/// [`modules`](Kernel::modules) under `/lib/modules/<release>/`, `/init`).
pub fn build_initramfs(
    payload: &Payload,
    modules: &[String],
    one_guest: &[(&str, &str)],
    kernels: &[Kernel],
    busybox: &Path,
    tiers: Tiers,
    out: &Path,
) -> anyhow::Result<()> {
    let mut img = base_image(kernels, busybox)?;
    img.executable("bin/sockwatch", &payload.sockwatch)?;
    if let Some(go) = &payload.go_listener {
        img.executable(GO_LISTENER_GUEST, go)?;
    }
    img.executable(&format!("tests/{INTEGRATION_TESTS}"), &payload.tests)?;
    let init = init_script(modules, one_guest, payload.go_listener.is_some(), tiers);
    img.bytes("init", init, 0o755);
    write_image(&img, out)
}

/// What every guest's initramfs holds: its directories, `/dev/console`, `busybox` (built for
/// the kernels' architecture) and each kernel's [`modules`](Kernel::modules) under
/// `/lib/modules/<release>/`.
pub fn base_image(kernels: &[Kernel], busybox: &Path) -> anyhow::Result<Image> {
    let mut img = Image::default();
    for d in [
        "proc", "sys", "dev", "tmp", "run", "root", "sbin", "usr/bin", "usr/sbin",
    ] {
        img.dir(d);
    }
    // The kernel opens /dev/console for /init before anything is mounted.
    img.char_dev("dev/console", 5, 1);
    img.executable("bin/busybox", busybox)
        .with_context(|| format!("busybox ({})", busybox.display()))?;
    img.symlink("bin/sh", "busybox");
    for k in kernels {
        for m in &k.modules {
            let name = m.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            img.copy(&format!("lib/modules/{}/{name}", k.release()), m, 0o644);
        }
    }
    Ok(img)
}

/// Writes `img`, gzipped, to `out`, creating its directory.
pub fn write_image(img: &Image, out: &Path) -> anyhow::Result<()> {
    if let Some(dir) = out.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    img.write_gz(out)
}

/// What one guest boot showed.
pub struct Outcome {
    pub label: String,
    pub kernel: Kernel,
    /// `uname -r` as the guest printed it.
    pub release: Option<String>,
    pub counts: Counts,
    /// From QEMU's start to the guest's first line from `/init`.
    pub boot_time: Option<Duration>,
    /// `None` when the run passed; otherwise why it failed.
    pub failure: Option<String>,
    /// The guest's own verdict line, if it printed one.
    pub verdict: Option<bool>,
    pub elapsed: Duration,
    pub log: PathBuf,
    /// The runs a [resumed](resume) boot started again from, after an emulation fault.
    pub resumed: Vec<Resumed>,
}

/// The guest's name in labels and paths: the kernel's upstream version, after its architecture
/// where that is not x86-64 (the arm64 guests boot the same versions).
pub fn guest_name(kernel: &Kernel) -> String {
    match kernel.arch {
        Arch::X86_64 => kernel.upstream().to_owned(),
        other => format!("{other} {}", kernel.upstream()),
    }
}

/// Boots `kernel` with `initrd` under TCG, streams the serial console to
/// `target/vm/<kernel>/console.log` and reads the verdict from it. A boot that hangs before
/// `/init` runs is tried again, up to [`BOOT_ATTEMPTS`] boots within `timeout`; a guest an
/// emulation fault ended inside a run is [resumed](resume) from that run, at most `resumes`
/// times.
pub fn boot(
    kernel: &Kernel,
    initrd: &Path,
    timeout: Duration,
    resumes: u32,
) -> anyhow::Result<Outcome> {
    let label = format!("vm {}", guest_name(kernel));
    let dir = cmd::target_dir()
        .join("vm")
        .join(guest_name(kernel).replace(' ', "-"));
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let log_path = dir.join("console.log");
    let mut log =
        fs::File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let started = Instant::now();
    let deadline = started + timeout;
    let mut attempt = 1;
    // Results of the boots an emulation fault ended, and the runs each was resumed from.
    let mut earlier = Counts::default();
    let mut resumed: Vec<Resumed> = Vec::new();
    loop {
        let from = resumed.last().map(|r| r.run.as_str());
        let (console, stop) = boot_once(kernel, initrd, from, &label, &mut log, deadline)?;
        let panicked_at_boot = console.boot_time.is_none() && console.panic.is_some();
        if (stop == Stop::BootStalled || panicked_at_boot) && attempt < BOOT_ATTEMPTS {
            // Nothing of ours has run yet: a hang or an emulation fault of the guest kernel.
            let why = match &console.panic {
                Some(p) if panicked_at_boot => format!("the kernel panicked before /init ({p})"),
                _ => format!("/init did not start within {:?}", LIMITS.boot),
            };
            println!("xtask: {label}: {why} (boot {attempt} of {BOOT_ATTEMPTS}); booting again");
            writeln!(log, "{BOOT_SEPARATOR}{} -----", attempt + 1)?;
            attempt += 1;
            continue;
        }
        let mut counts = testrun::sum_results(&console.text);
        if let (Some(fault), Some(run)) = (console.emulation_fault(stop), &console.running)
            && resumed.len() < resumes as usize
        {
            println!(
                "xtask: {label}: a guest-kernel {} in {run} ({}); booting again from {run} \
                 (resume {} of {})",
                fault.kind,
                fault.report,
                resumed.len() + 1,
                resumes
            );
            writeln!(
                log,
                "{BOOT_SEPARATOR}{}: resumed from {run} -----",
                attempt + 1
            )?;
            earlier += counts;
            resumed.push(Resumed {
                run: run.clone(),
                fault: fault.kind,
            });
            attempt += 1;
            continue;
        }
        counts += earlier;
        return Ok(Outcome {
            failure: stop.failure(&console, &counts, timeout, attempt),
            verdict: console.verdict,
            label: console.label,
            kernel: kernel.clone(),
            release: console.release,
            counts,
            boot_time: console.boot_time,
            elapsed: started.elapsed(),
            log: log_path,
            resumed,
        });
    }
}

/// One QEMU run, its console appended to `log`, until it exits or a limit ends it.
fn boot_once(
    kernel: &Kernel,
    initrd: &Path,
    resume_from: Option<&str>,
    label: &str,
    log: &mut fs::File,
    deadline: Instant,
) -> anyhow::Result<(Console, Stop)> {
    let started = Instant::now();
    let mut child = qemu::command(kernel, initrd, resume_from.map(resume::kernel_arg))
        .spawn()
        .with_context(|| qemu::missing(kernel.arch))?;
    let (lines, reader) = read_lines(child.stdout.take().expect("piped"));
    let mut stderr = child.stderr.take().expect("piped");
    let stderr_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });

    let mut console = Console::new(label.to_owned(), started);
    let mut stop = console.follow(&lines, log, deadline, LIMITS)?;
    let status = reap(&mut child, stop)?;
    let _ = reader.join();
    let qemu_stderr = stderr_reader.join().unwrap_or_default();
    if !qemu_stderr.is_empty() {
        writeln!(log, "--- qemu stderr ---\n{qemu_stderr}")?;
    }
    if stop == Stop::Exited && console.verdict.is_none() {
        console.exit_status = Some(status.to_string());
    }
    if stop == Stop::PoweredOff {
        stop = Stop::Exited;
    }
    Ok((console, stop))
}

/// QEMU's exit status. After it closed its console it is exiting: it gets a few seconds to do
/// so (killing it at once made every such exit read "signal 9"); otherwise it is killed.
fn reap(child: &mut Child, stop: Stop) -> anyhow::Result<ExitStatus> {
    if stop == Stop::Exited {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Some(status) = child.try_wait().context("waiting for qemu")? {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let _ = child.kill();
    child.wait().context("waiting for qemu")
}

/// Builds each architecture's payload and initramfs once and boots the kernels, `jobs` guests
/// at a time (each guest's tests run one thread, which leaves a core idle while a lone guest
/// runs). A failed boot prints its whole console log.
///
/// The first plan's guests boot as soon as its initramfs is written (then `first_built` runs,
/// in this thread), and the other plans' initramfs compile beside them: their guests come
/// last in the queue.
pub fn test(
    ready: &Ready,
    plans: &[Plan],
    tiers: Tiers,
    timeout: Duration,
    jobs: usize,
    first_built: impl FnOnce(),
) -> anyhow::Result<Vec<Outcome>> {
    let (first, rest) = plans.split_at(plans.len().min(1));
    let built = initramfs_per_arch(ready, first, tiers)?;
    first_built();
    std::thread::scope(|s| {
        let building =
            s.spawn(|| initramfs_per_arch(ready, rest, tiers).map_err(|e| format!("{e:#}")));
        let building = Mutex::new(Some(building));
        let later = OnceLock::new();
        let initrd_of = |arch| {
            if let Ok(initrd) = built_for(&built, arch) {
                return Ok(initrd);
            }
            let later = later.get_or_init(|| {
                let handle = building.lock().expect("build lock").take();
                handle.map_or(Err("built once already".to_owned()), |h| {
                    h.join()
                        .unwrap_or_else(|_| Err("the initramfs build panicked".to_owned()))
                })
            });
            match later {
                Ok(b) => built_for(b, arch),
                Err(why) => Err(anyhow::anyhow!("building the initramfs: {why}")),
            }
        };
        boot_all(ready, initrd_of, timeout, jobs)
    })
}

/// `arch`'s initramfs among `built`.
pub fn built_for(built: &[(Arch, PathBuf)], arch: Arch) -> anyhow::Result<PathBuf> {
    built
        .iter()
        .find(|(a, _)| *a == arch)
        .map(|(_, p)| p.clone())
        .with_context(|| format!("no initramfs for {arch}"))
}

/// Each plan's initramfs, built: the test executables compiled, the image written.
fn initramfs_per_arch(
    ready: &Ready,
    plans: &[Plan],
    tiers: Tiers,
) -> anyhow::Result<Vec<(Arch, PathBuf)>> {
    plans
        .iter()
        .map(|plan| {
            let busybox = ready
                .busybox
                .iter()
                .find(|(a, _)| *a == plan.arch)
                .map(|(_, b)| b.as_path())
                .with_context(|| format!("setup fetched no busybox for {}", plan.arch))?;
            Ok((plan.arch, prepare(plan, busybox, &ready.kernels, tiers)?))
        })
        .collect()
}

/// Boots every kernel `ready` holds on its architecture's initramfs, `jobs` guests at a time,
/// and reports each guest's outcome.
///
/// `initrd_of` gives an architecture's initramfs, and may wait for it to be built. The queue
/// is ordered by the initramfs on disk when it is made: one not written yet goes last.
pub fn boot_all(
    ready: &Ready,
    initrd_of: impl Fn(Arch) -> anyhow::Result<PathBuf> + Sync,
    timeout: Duration,
    jobs: usize,
) -> anyhow::Result<Vec<Outcome>> {
    let kernels = &ready.kernels;
    let initrd_of = |k: &Kernel| {
        initrd_of(k.arch)
            .with_context(|| format!("no initramfs for {}'s architecture {}", k.package, k.arch))
    };
    let queue = longest_first(kernels, |k| {
        fs::metadata(initrd_path(k.arch)).map_or(0, |m| m.len())
    });
    // A queue of kernels: each of `jobs` threads boots the next one when its guest is done.
    let next = AtomicUsize::new(0);
    let booted = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, kernels.len().max(1)) {
            s.spawn(|| {
                while let Some(kernel) = queue.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let o = initrd_of(kernel)
                        .and_then(|initrd| boot_and_report(kernel, &initrd, timeout));
                    booted.lock().expect("outcomes lock").push(o);
                }
            });
        }
    });
    let mut outcomes = booted
        .into_inner()
        .expect("outcomes lock")
        .into_iter()
        .collect::<anyhow::Result<Vec<Outcome>>>()?;
    // In the order asked for, whichever guest finished first.
    outcomes.sort_by_key(|o| kernels.iter().position(|k| k.package == o.kernel.package));
    Ok(outcomes)
}

/// The guests in the order to boot them, the longest first, so that the last ones to start
/// are short and no lone guest leaves a core idle at the end: a larger initramfs carries more
/// test executables, and a newer kernel loads more tiers (each tier runs its tests again).
fn longest_first(kernels: &[Kernel], initrd_size: impl Fn(&Kernel) -> u64) -> Vec<&Kernel> {
    let mut sized: Vec<(u64, &Kernel)> = kernels.iter().map(|k| (initrd_size(k), k)).collect();
    sized.sort_by(|(sa, a), (sb, b)| {
        sb.cmp(sa)
            .then_with(|| version_cmp(b.upstream(), a.upstream()))
    });
    sized.into_iter().map(|(_, k)| k).collect()
}

fn initrd_path(arch: Arch) -> PathBuf {
    cmd::target_dir()
        .join("vm")
        .join(arch.to_string())
        .join("initrd.gz")
}

/// Builds `plan`'s payload and writes its initramfs, `target/vm/<arch>/initrd.gz`.
fn prepare(
    plan: &Plan,
    busybox: &Path,
    kernels: &[Kernel],
    tiers: Tiers,
) -> anyhow::Result<PathBuf> {
    let started = Instant::now();
    let modules = test_modules(&plan.only)?;
    let payload = payload::build_payload(plan.arch)?;
    let initrd = initrd_path(plan.arch);
    let kernels: Vec<Kernel> = kernels
        .iter()
        .filter(|k| k.arch == plan.arch)
        .cloned()
        .collect();
    build_initramfs(
        &payload,
        &modules,
        plan.one_guest,
        &kernels,
        busybox,
        tiers,
        &initrd,
    )?;
    let size = fs::metadata(&initrd).map_or(0, |m| m.len());
    println!(
        "xtask: {} initramfs {} ({:.1} MiB, tests: {}) ready in {:.1?}",
        plan.arch,
        initrd.display(),
        size as f64 / f64::from(1 << 20),
        modules.join(", "),
        started.elapsed()
    );
    Ok(initrd)
}

/// The integration tests' modules named in `only` (all when it is empty), each of which must
/// exist.
fn test_modules(only: &[String]) -> anyhow::Result<Vec<String>> {
    let modules = agent_integration_tests()?;
    if let Some(unknown) = only.iter().find(|n| !modules.contains(n)) {
        bail!("no test module `{unknown}` in sockwatch/tests/it (there are: {modules:?})");
    }
    Ok(if only.is_empty() {
        modules
    } else {
        only.to_vec()
    })
}

/// [`boot`], then the summary line, and the whole console log when the guest failed.
fn boot_and_report(kernel: &Kernel, initrd: &Path, timeout: Duration) -> anyhow::Result<Outcome> {
    println!(
        "xtask: booting {} ({}) under QEMU/TCG",
        kernel.package, kernel.version
    );
    let o = boot(kernel, initrd, timeout, resume::RESUMES)?;
    if o.failure.is_some() {
        let log = fs::read_to_string(&o.log).unwrap_or_default();
        // One print: another guest's lines must not land inside this log.
        print!(
            "----- {label} console ({path}) -----\n{log}----- end of {label} console -----\n",
            label = o.label,
            path = o.log.display()
        );
    }
    println!("{}", o.summary());
    Ok(o)
}

impl Outcome {
    pub fn summary(&self) -> String {
        format!(
            "xtask: {} ({}, kernel {}): {} passed, {} failed, {} ignored; boot {}, total {:.1?}{}: {}",
            self.label,
            self.kernel.package,
            self.release.as_deref().unwrap_or("?"),
            self.counts.passed,
            self.counts.failed,
            self.counts.ignored,
            self.boot_time
                .map_or("?".to_owned(), |b| format!("{b:.1?}")),
            self.elapsed,
            if self.resumed.is_empty() {
                String::new()
            } else {
                let each: Vec<String> = self
                    .resumed
                    .iter()
                    .map(|r| format!("{} in {}", r.fault, r.run))
                    .collect();
                format!("; resumed after a guest-kernel {}", each.join(", "))
            },
            match &self.failure {
                None => "PASS".to_owned(),
                Some(why) => format!("FAIL ({why}; log {})", self.log.display()),
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guests_boot_longest_first() {
        let kernel = |arch, version: &str| Kernel {
            package: format!("linux-image-{version}-{arch}"),
            version: format!("{version}-1"),
            arch,
            vmlinuz: PathBuf::new(),
            modules: Vec::new(),
        };
        // The order setup lists them in: by architecture, oldest kernel first.
        let kernels = [
            kernel(Arch::X86_64, "5.10.251"),
            kernel(Arch::X86_64, "6.1.192"),
            kernel(Arch::X86_64, "6.12.118"),
            kernel(Arch::Aarch64, "6.1.192"),
            kernel(Arch::Aarch64, "6.12.118"),
            kernel(Arch::Aarch64, "6.9.1"),
        ];
        let initrd_size = |k: &Kernel| if k.arch == Arch::X86_64 { 90 } else { 40 };
        let order: Vec<_> = longest_first(&kernels, initrd_size)
            .iter()
            .map(|k| format!("{} {}", k.arch, k.upstream()))
            .collect();
        assert_eq!(
            order,
            [
                "x86_64 6.12.118",
                "x86_64 6.1.192",
                "x86_64 5.10.251",
                "aarch64 6.12.118",
                "aarch64 6.9.1",
                "aarch64 6.1.192",
            ]
        );
    }
}
