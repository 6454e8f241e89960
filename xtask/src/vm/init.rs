//! What a guest runs: its `/init`, which runs each test module (once per tier for the
//! end-to-end ones) under the tiers its kernel must attach, and ends with a verdict line.
use super::{GO_LISTENER_GUEST, payload::INTEGRATION_TESTS, resume};

pub(super) const VERDICT: &str = "SOCKWATCH-VM-VERDICT: ";

/// What each guest kernel's tests must be able to attach (`SOCKWATCH_REQUIRE_TIERS`; a tier
/// not required that fails to load skips its tests, with the reason printed): every tier,
/// except on arm64 before 6.4, where BPF trampolines cannot attach to kernel functions (ftrace
/// direct calls came to arm64 in 6.4), so fentry, fexit and LSM programs fail to attach with
/// ENOTSUPP and the kprobe tier is the precise one. (`uname -r` pattern, tiers.)
const REQUIRED: [(&str, &str); 2] = [
    ("6.1.*-arm64", "kprobe,tracepoint"),
    ("*", "lsm,fentry,kprobe,tracepoint"),
];

/// The end-to-end verdict tests that start the agent under `auto`, run once per tier
/// (`SOCKWATCH_PROBE_MODE`), so that every verdict is proven on every tier the guest loads,
/// not only on the one `auto` picks. (`handover`, `late_start` and `stale_connect` loop over
/// the modes themselves.)
const PER_TIER_TESTS: &[&str] = &["verdicts", "overlay", "patterns", "renames"];

/// Every tier, as `vm-test --all-tiers` runs them on every kernel.
const ALL_MODES: &str = "lsm fentry kprobe tracepoint";

/// The tiers each kernel runs the agent's end-to-end tests under in the whole suite (`cargo
/// xtask test`, CI): every precise tier on every kernel. `tracepoint` runs natively on the
/// host (x86-64, 6.18) and in arm64's 6.1 guest (its own register accessors, an older kernel);
/// the other guests leave it to `--all-tiers`, to keep the suite within CI's time: it was a
/// fifth of each x86-64 guest's runs, the programs the host runs. (5.10's tracepoint runs also
/// locked up once under TCG, soft lockups on both vCPUs at the first test of that tier.)
/// arm64's 6.1 runs the tiers it gives (see [`REQUIRED`]). (`uname -r` pattern, modes.)
const ROTATION: [(&str, &str); 2] = [
    ("6.1.*-arm64", "kprobe tracepoint"),
    ("*", "lsm fentry kprobe"),
];

/// Which tiers the guests run the end-to-end tests under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tiers {
    /// Every tier on every kernel.
    All,
    /// [`ROTATION`].
    Rotation,
}

/// The start of every guest's `/init`: busybox's applets, the filesystems the probes and tests
/// need, loopback, each kernel's modules, and the kernel line the host waits for.
pub const INIT_PREAMBLE: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root TMPDIR=/tmp
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing
mount -t securityfs securityfs /sys/kernel/security
mount -t cgroup2 cgroup2 /sys/fs/cgroup
ip link set lo up
for m in /lib/modules/$(uname -r)/*.ko; do
  [ -e "$m" ] && { insmod "$m" || echo "SOCKWATCH-VM-WARNING: insmod $m failed"; }
done
echo "SOCKWATCH-VM-KERNEL: $(uname -r) lsm=$(cat /sys/kernel/security/lsm)"
"#;

/// The guest's `/init`: mounts what the probes and tests need, runs every test binary with one
/// thread (those of `one_guest` only where `uname -r` matches their pattern), and ends with a
/// verdict line the host looks for.
pub(super) fn init_script(
    tests: &[String],
    one_guest: &[(&str, &str)],
    go_listener: bool,
    tiers: Tiers,
) -> String {
    let mut s = format!("{INIT_PREAMBLE}verdict=PASS\n");
    if go_listener {
        s.push_str(&format!(
            "export SOCKWATCH_GO_LISTENER={GO_LISTENER_GUEST}\n"
        ));
    }
    s.push_str(&modes_script(tiers));
    s.push_str(&resume::read_script());
    // What this kernel lets the agent attach, tier by tier, in the console log.
    s.push_str("/bin/sockwatch check 2>&1 | sed 's/^/SOCKWATCH-VM-CHECK: /'\n");
    for t in tests {
        if PER_TIER_TESTS.contains(&t.as_str()) {
            let label = format!("{t}@$mode");
            s.push_str("for mode in $MODES; do\n");
            s.push_str(&resume::guard(
                &label,
                &test_run(t, &label, "SOCKWATCH_PROBE_MODE=$mode "),
            ));
            s.push_str("done\n");
        } else if let Some((_, release)) = one_guest.iter().find(|(m, _)| m == t) {
            s.push_str(&only_on(release, t, &resume::guard(t, &test_run(t, t, ""))));
        } else {
            s.push_str(&resume::guard(t, &test_run(t, t, "")));
        }
    }
    s.push_str(resume::check_script());
    s.push_str(&format!("echo \"{VERDICT}$verdict\"\npoweroff -f\n"));
    s
}

/// `run` where `uname -r` matches `release`; elsewhere a line that says where `test` runs.
fn only_on(release: &str, test: &str, run: &str) -> String {
    format!(
        "case \"$(uname -r)\" in\n  {release})\n{run}  ;;\n  \
         *) echo \"{ELSEWHERE}{test} runs in the {release} guest\" ;;\nesac\n"
    )
}

/// Sets `MODES` (space-separated) for this guest's kernel, `SOCKWATCH_TEST_MODES` (the same,
/// comma-separated) for the tests that loop over the modes themselves, and `REQUIRE`.
fn modes_script(tiers: Tiers) -> String {
    let mut s = match tiers {
        Tiers::All => format!("MODES=\"{ALL_MODES}\"\n"),
        Tiers::Rotation => by_release("MODES", &ROTATION),
    };
    s.push_str(&by_release("REQUIRE", &REQUIRED));
    s.push_str(
        "export SOCKWATCH_TEST_MODES=$(echo $MODES | tr ' ' ,)\n\
         echo \"SOCKWATCH-VM-MODES: $MODES (required: $REQUIRE)\"\n",
    );
    s
}

/// A `case` on `uname -r` that sets `var` to the value of the first matching pattern.
fn by_release(var: &str, table: &[(&str, &str)]) -> String {
    let mut c = String::from("case \"$(uname -r)\" in\n");
    for (pattern, value) in table {
        c.push_str(&format!("  {pattern}) {var}=\"{value}\" ;;\n"));
    }
    c + "esac\n"
}

/// One test binary's run in the guest, labelled `label`, with `env` (`VAR=value `) before it.
fn test_run(test: &str, label: &str, env: &str) -> String {
    run_lines(
        label,
        &format!(
            "{env}SOCKWATCH_REQUIRE_TIERS=$REQUIRE SOCKWATCH_BIN=/bin/sockwatch SOCKWATCH_IN_VM=1 \
             RUST_BACKTRACE=1 /tests/{INTEGRATION_TESTS} {test}:: --test-threads=1"
        ),
    )
}

/// `/init`'s lines for `command` as a run labelled `label`: its start and end on the console
/// (where a [resume](resume) finds the run a fault ended), a failure failing the guest.
pub fn run_lines(label: &str, command: &str) -> String {
    format!(
        "echo \"{RUN_MARK}{label}\"\n\
         {command}\n\
         rc=$?\n\
         echo \"{EXIT_MARK}{label} $rc\"\n\
         [ $rc -eq 0 ] || verdict=FAIL\n"
    )
}

/// The console line a run starts with, before its label.
pub const RUN_MARK: &str = "SOCKWATCH-VM-RUN: ";

/// The console line that says a module runs in another guest of the suite.
pub const ELSEWHERE: &str = "SOCKWATCH-VM-ELSEWHERE: ";

/// The console line a run ends with, before its label and exit status.
pub const EXIT_MARK: &str = "SOCKWATCH-VM-EXIT: ";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_runs_each_test_and_ends_with_a_verdict() {
        let s = init_script(&["kernel".into(), "cli".into()], &[], true, Tiers::Rotation);
        assert!(s.starts_with("#!/bin/busybox sh\n"));
        for m in [
            "bpf /sys/fs/bpf",
            "tracefs /sys/kernel/tracing",
            "cgroup2 /sys/fs/cgroup",
        ] {
            assert!(s.contains(m), "{m}");
        }
        assert!(
            s.contains("SOCKWATCH_IN_VM=1 RUST_BACKTRACE=1 /tests/it kernel:: --test-threads=1")
        );
        assert!(s.contains("/tests/it cli:: --test-threads=1"));
        let v = init_script(&["verdicts".into()], &[], false, Tiers::Rotation);
        assert!(
            v.contains(
                "for mode in $MODES; do\n\
                 if [ -n \"$resume\" ] && [ \"$resume\" != \"verdicts@$mode\" ]; then\n"
            ),
            "{v}"
        );
        assert!(
            v.contains(
                "resume=\necho \"SOCKWATCH-VM-RUN: verdicts@$mode\"\n\
                 SOCKWATCH_PROBE_MODE=$mode SOCKWATCH_REQUIRE_TIERS="
            ),
            "{v}"
        );
        assert!(v.contains("/proc/cmdline"), "{v}");
        assert!(s.contains("for m in /lib/modules/$(uname -r)/*.ko"));
        assert!(s.contains("export SOCKWATCH_GO_LISTENER=/bin/golistener\n"));
        assert!(!init_script(&[], &[], false, Tiers::All).contains("SOCKWATCH_GO_LISTENER"));
        assert!(
            s.trim_end()
                .ends_with("echo \"SOCKWATCH-VM-VERDICT: $verdict\"\npoweroff -f")
        );
    }

    #[test]
    fn a_module_placed_on_one_kernel_runs_there_and_says_so_elsewhere() {
        let s = init_script(
            &["faults".into()],
            &[("faults", "6.12.*")],
            false,
            Tiers::Rotation,
        );
        assert!(s.contains("/tests/it faults:: --test-threads=1"), "{s}");
        assert!(s.contains("case \"$(uname -r)\" in\n  6.12.*)\n"), "{s}");
        let run = only_on("6.12.*", "faults", "echo RAN\n");
        let elsewhere = "SOCKWATCH-VM-ELSEWHERE: faults runs in the 6.12.* guest";
        assert_eq!(sh_in("6.12.118+deb12-cloud-amd64", &run), "RAN");
        assert_eq!(sh_in("6.1.0-57-cloud-amd64", &run), elsewhere);
        assert_eq!(sh_in("5.10.0-43-cloud-amd64", &run), elsewhere);
        // 6.1's pattern is not 6.12's.
        let run = only_on("6.1.*", "privilege", "echo RAN\n");
        assert_eq!(sh_in("6.1.0-57-cloud-amd64", &run), "RAN");
        assert_eq!(
            sh_in("6.12.118+deb12-cloud-amd64", &run),
            "SOCKWATCH-VM-ELSEWHERE: privilege runs in the 6.1.* guest"
        );
    }

    /// `script`'s output in a shell whose `uname` says `release`.
    fn sh_in(release: &str, script: &str) -> String {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("uname() {{ echo {release}; }}\n{script}"))
            .output()
            .expect("sh");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The guest's shell picks the modes by `uname -r`: run the same script with a stand-in.
    fn modes_in(release: &str, tiers: Tiers) -> String {
        let script = format!(
            "uname() {{ echo {release}; }}\n{}echo \"$MODES|$SOCKWATCH_TEST_MODES|$REQUIRE\"",
            modes_script(tiers)
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .output()
            .expect("sh");
        let text = String::from_utf8(out.stdout).expect("utf-8");
        text.lines().last().unwrap_or_default().to_owned()
    }

    #[test]
    fn each_kernel_runs_its_rotation_of_tiers_or_all_of_them() {
        let all = "lsm,fentry,kprobe,tracepoint";
        for (release, want) in [
            (
                "5.10.0-43-cloud-amd64",
                format!("lsm fentry kprobe|lsm,fentry,kprobe|{all}"),
            ),
            (
                "6.1.0-57-cloud-amd64",
                format!("lsm fentry kprobe|lsm,fentry,kprobe|{all}"),
            ),
            (
                "6.12.117+deb12-cloud-amd64",
                format!("lsm fentry kprobe|lsm,fentry,kprobe|{all}"),
            ),
            // No trampolines on arm64 before 6.4: kprobes are its precise tier.
            (
                "6.1.0-57-cloud-arm64",
                "kprobe tracepoint|kprobe,tracepoint|kprobe,tracepoint".to_owned(),
            ),
            (
                "6.12.118+deb12-cloud-arm64",
                format!("lsm fentry kprobe|lsm,fentry,kprobe|{all}"),
            ),
        ] {
            assert_eq!(modes_in(release, Tiers::Rotation), want, "{release}");
        }
        assert_eq!(
            modes_in("5.10.0-43-cloud-amd64", Tiers::All),
            format!("lsm fentry kprobe tracepoint|{all}|{all}")
        );
        assert_eq!(
            modes_in("6.1.0-57-cloud-arm64", Tiers::All),
            "lsm fentry kprobe tracepoint|lsm,fentry,kprobe,tracepoint|kprobe,tracepoint"
        );
    }
}
