//! Loads the eBPF object and attaches, per hook, the best tier the kernel accepts.
//!
//! Driven entirely by [`crate::probes::PROBES`]: one generic loop tries each hook's candidate
//! tiers in order, keeps the first whose programs all load and attach, and records why the
//! others were refused, so `run` and `check` can say exactly what this kernel offers.
use agent_common::{Counter, EventKind, FileId, Tier, WatchedName, globals, maps, slots};
use aya::{
    Btf, Ebpf, EbpfLoader,
    maps::{HashMap, MapData, PerCpuArray, RingBuf},
    programs::{BtfTracePoint, FEntry, FExit, KProbe, Lsm, Program, ProgramError, TracePoint},
};

use crate::{
    event::{DecodeError, SockEvent, decode},
    probes::{Attach, Hook, PROBES, ProbeMode, ProgramSpec, TierSpec},
    watch::WatchedDir,
};

/// The kernel programs, built by build.rs for the BPF target.
static EBPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sockwatch-ebpf"));

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(
        "missing BTF: cannot read /sys/kernel/btf/vmlinux ({0}); the kernel needs CONFIG_DEBUG_INFO_BTF"
    )]
    Btf(#[source] aya::BtfError),
    #[error("loading the eBPF object: {0}")]
    Object(#[source] aya::EbpfError),
    #[error("{hook}: no {mode} tier attached ({reasons})")]
    NoTier {
        hook: &'static str,
        mode: &'static str,
        reasons: String,
    },
    #[error("eBPF object has no map {0}")]
    Map(&'static str),
    #[error("updating map {0}: {1}")]
    MapUpdate(&'static str, #[source] aya::maps::MapError),
}

#[derive(Clone, Debug)]
pub struct LoadOptions {
    pub mode: ProbeMode,
    /// Activity of this tgid is ignored in the kernel (the agent's own); 0 ignores nothing.
    pub ignore_tgid: u32,
    /// Unconsumed ring-buffer bytes past which the kernel wakes the reader.
    pub wakeup_bytes: u64,
    /// Directories to watch; empty watches every directory.
    pub watch: Vec<WatchedDir>,
}

/// What happened to one hook: the tier that attached, and why better ones did not.
#[derive(Clone, Debug)]
pub struct HookReport {
    pub hook: Hook,
    pub attached: Option<Tier>,
    pub refused: Vec<(Tier, String)>,
    /// Optional programs of the attached tier that this kernel refused.
    pub degraded: Vec<String>,
}

impl HookReport {
    /// One log line: `bind: fentry (refused: ...)`.
    pub fn summary(&self) -> String {
        let chosen = self.attached.map_or("none", Tier::name);
        let refused: Vec<String> = self
            .refused
            .iter()
            .map(|(t, why)| format!("{} refused: {why}", t.name()))
            .collect();
        let mut notes = refused;
        notes.extend(self.degraded.iter().map(|d| format!("degraded: {d}")));
        if notes.is_empty() {
            format!("{}: {chosen}", self.hook.name())
        } else {
            format!("{}: {chosen} ({})", self.hook.name(), notes.join("; "))
        }
    }
}

/// Loaded and attached programs. Dropping it detaches everything.
pub struct Probes {
    ebpf: Ebpf,
    pub report: Vec<HookReport>,
}

impl Probes {
    /// Loads the object and attaches every hook; fails if a hook gets no tier under `mode`.
    pub fn load(opts: &LoadOptions) -> Result<Self, LoadError> {
        let btf = Btf::from_sys_fs().map_err(LoadError::Btf)?;
        let mut ebpf = open_object(&btf, opts)?;
        for w in &opts.watch {
            add_watch(&mut ebpf, w)?;
        }
        let mut report = Vec::new();
        for hook in PROBES {
            let mut refused = Vec::new();
            let mut attached = None;
            let mut degraded = Vec::new();
            for tier in opts.mode.candidates(hook) {
                match attach_tier(&mut ebpf, tier, &btf) {
                    Ok(d) => {
                        attached = Some(tier.tier);
                        degraded = d;
                        break;
                    }
                    Err(why) => refused.push((tier.tier, why)),
                }
            }
            let r = HookReport {
                hook: hook.hook,
                attached,
                refused,
                degraded,
            };
            if attached.is_none() {
                return Err(LoadError::NoTier {
                    hook: hook.hook.name(),
                    mode: opts.mode.name(),
                    reasons: reasons(&r),
                });
            }
            report.push(r);
        }
        Ok(Self { ebpf, report })
    }

    /// Adds a watched directory's identities (again, after it was re-created).
    pub fn watch(&mut self, w: &WatchedDir) -> Result<(), LoadError> {
        add_watch(&mut self.ebpf, w)
    }

    /// The event stream. Can be taken once.
    pub fn events(&mut self) -> Result<EventReader, LoadError> {
        let map = self
            .ebpf
            .take_map(maps::EVENTS)
            .ok_or(LoadError::Map(maps::EVENTS))?;
        let ring = RingBuf::try_from(map).map_err(|_| LoadError::Map(maps::EVENTS))?;
        Ok(EventReader { ring })
    }

    /// The kernel's live-socket table and its name index, for userspace lookups and
    /// seeding. Can be taken once.
    pub fn live_table(&mut self) -> Result<crate::enrich::LiveTable, LoadError> {
        let live = self
            .ebpf
            .take_map(maps::LIVE)
            .ok_or(LoadError::Map(maps::LIVE))?;
        let names = self
            .ebpf
            .take_map(maps::LIVE_NAMES)
            .ok_or(LoadError::Map(maps::LIVE_NAMES))?;
        Ok(crate::enrich::LiveTable {
            live: HashMap::try_from(live).map_err(|_| LoadError::Map(maps::LIVE))?,
            names: HashMap::try_from(names).map_err(|_| LoadError::Map(maps::LIVE_NAMES))?,
        })
    }

    /// Kernel-side counters, summed over CPUs.
    pub fn counters(&self) -> Result<KernelCounters, LoadError> {
        let map = self
            .ebpf
            .map(maps::COUNTERS)
            .ok_or(LoadError::Map(maps::COUNTERS))?;
        let arr =
            PerCpuArray::<_, u64>::try_from(map).map_err(|_| LoadError::Map(maps::COUNTERS))?;
        let read = |i: u32| arr.get(&i, 0).map_or(0, |v| v.iter().sum());
        Ok(KernelCounters {
            other: Counter::ALL.iter().map(|&c| (c, read(c as u32))).collect(),
            emitted: EventKind::ALL
                .iter()
                .map(|&k| (k, read(slots::emitted(k))))
                .collect(),
            lost: EventKind::ALL
                .iter()
                .map(|&k| (k, read(slots::lost(k))))
                .collect(),
        })
    }
}

/// The kernel side's counters at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelCounters {
    pub other: Vec<(Counter, u64)>,
    /// Records submitted to the ring buffer, per kind.
    pub emitted: Vec<(EventKind, u64)>,
    /// Records lost to a full ring buffer, per kind.
    pub lost: Vec<(EventKind, u64)>,
}

impl KernelCounters {
    pub fn get(&self, c: Counter) -> u64 {
        self.other
            .iter()
            .find(|(k, _)| *k == c)
            .map_or(0, |(_, n)| *n)
    }

    pub fn emitted_total(&self) -> u64 {
        self.emitted.iter().map(|(_, n)| n).sum()
    }

    pub fn lost_total(&self) -> u64 {
        self.lost.iter().map(|(_, n)| n).sum()
    }

    /// One log line.
    pub fn summary(&self) -> String {
        let mut parts = vec![
            format!("emitted={}", self.emitted_total()),
            format!("lost={}", self.lost_total()),
        ];
        parts.extend(self.other.iter().map(|(c, n)| format!("{}={n}", c.name())));
        parts.join(" ")
    }
}

/// Per hook: every tier and what this kernel says to it (attached, with any degraded
/// optional programs; or refused, with the reason).
pub type SupportTable = Vec<(Hook, Vec<(Tier, Result<Vec<String>, String>)>)>;

/// Per hook, every tier and whether this kernel accepts it (each is attached, then detached).
pub fn probe_support() -> Result<SupportTable, LoadError> {
    let btf = Btf::from_sys_fs().map_err(LoadError::Btf)?;
    let opts = LoadOptions {
        mode: ProbeMode::Auto,
        ignore_tgid: std::process::id(),
        wakeup_bytes: 0,
        watch: Vec::new(),
    };
    let mut table = Vec::new();
    for hook in PROBES {
        let mut tiers = Vec::new();
        for tier in hook.tiers {
            // A fresh object per try: a program loaded for one attach target stays bound to it.
            let mut ebpf = open_object(&btf, &opts)?;
            tiers.push((tier.tier, attach_tier(&mut ebpf, tier, &btf)));
        }
        table.push((hook.hook, tiers));
    }
    Ok(table)
}

fn open_object(btf: &Btf, opts: &LoadOptions) -> Result<Ebpf, LoadError> {
    EbpfLoader::new()
        .btf(Some(btf))
        .override_global(globals::AGENT_TGID, &opts.ignore_tgid, true)
        .override_global(globals::WAKEUP_BYTES, &opts.wakeup_bytes, true)
        .override_global(globals::WATCH_ALL, &u8::from(opts.watch.is_empty()), true)
        .load(EBPF_OBJECT)
        .map_err(LoadError::Object)
}

fn add_watch(ebpf: &mut Ebpf, w: &WatchedDir) -> Result<(), LoadError> {
    let map = ebpf
        .map_mut(maps::WATCHED_DIRS)
        .ok_or(LoadError::Map(maps::WATCHED_DIRS))?;
    let mut dirs =
        HashMap::<_, FileId, u32>::try_from(map).map_err(|_| LoadError::Map(maps::WATCHED_DIRS))?;
    dirs.insert(w.dir, 1, 0)
        .map_err(|e| LoadError::MapUpdate(maps::WATCHED_DIRS, e))?;
    if let Some(by_name) = w.by_name {
        let map = ebpf
            .map_mut(maps::WATCHED_NAMES)
            .ok_or(LoadError::Map(maps::WATCHED_NAMES))?;
        let mut names = HashMap::<_, WatchedName, u32>::try_from(map)
            .map_err(|_| LoadError::Map(maps::WATCHED_NAMES))?;
        names
            .insert(by_name, 1, 0)
            .map_err(|e| LoadError::MapUpdate(maps::WATCHED_NAMES, e))?;
    }
    Ok(())
}

fn reasons(r: &HookReport) -> String {
    if r.refused.is_empty() {
        return "this hook has no such tier".into();
    }
    r.refused
        .iter()
        .map(|(t, why)| format!("{} refused by this kernel: {why}", t.name()))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Attaches all required programs of one tier, or none: on failure the ones attached are
/// unloaded. Returns the optional programs that were refused.
fn attach_tier(ebpf: &mut Ebpf, tier: &TierSpec, btf: &Btf) -> Result<Vec<String>, String> {
    let mut degraded = Vec::new();
    for (i, spec) in tier.programs.iter().enumerate() {
        match attach_program(ebpf, spec, btf) {
            Ok(()) => {}
            Err(e) if spec.optional => degraded.push(format!("{}: {e}", spec.program)),
            Err(e) => {
                for done in &tier.programs[..i] {
                    if let Some(p) = ebpf.program_mut(done.program) {
                        let _ = unload(p);
                    }
                }
                return Err(format!("{}: {e}", spec.program));
            }
        }
    }
    Ok(degraded)
}

fn attach_program(ebpf: &mut Ebpf, spec: &ProgramSpec, btf: &Btf) -> Result<(), String> {
    let prog = ebpf
        .program_mut(spec.program)
        .ok_or_else(|| "not in the eBPF object".to_string())?;
    let r: Result<(), ProgramError> = match spec.attach {
        Attach::Fentry { function } => (|| {
            let p: &mut FEntry = prog.try_into()?;
            p.load(function, btf)?;
            p.attach().map(drop)
        })(),
        Attach::Fexit { function } => (|| {
            let p: &mut FExit = prog.try_into()?;
            p.load(function, btf)?;
            p.attach().map(drop)
        })(),
        Attach::Lsm { hook } => (|| {
            let p: &mut Lsm = prog.try_into()?;
            p.load(hook, btf)?;
            p.attach().map(drop)
        })(),
        Attach::Kprobe { function } | Attach::Kretprobe { function } => (|| {
            let p: &mut KProbe = prog.try_into()?;
            p.load()?;
            p.attach(function, 0).map(drop)
        })(),
        Attach::Tracepoint { category, name } => (|| {
            let p: &mut TracePoint = prog.try_into()?;
            p.load()?;
            p.attach(category, name).map(drop)
        })(),
        Attach::BtfTracepoint { name } => (|| {
            let p: &mut BtfTracePoint = prog.try_into()?;
            p.load(name, btf)?;
            p.attach().map(drop)
        })(),
    };
    r.map_err(|e| describe(&e))
}

fn unload(p: &mut Program) -> Result<(), ProgramError> {
    match p {
        Program::FEntry(p) => p.unload(),
        Program::FExit(p) => p.unload(),
        Program::Lsm(p) => p.unload(),
        Program::KProbe(p) => p.unload(),
        Program::TracePoint(p) => p.unload(),
        Program::BtfTracePoint(p) => p.unload(),
        _ => Ok(()),
    }
}

const KPROBE_PMU: &str = "/sys/bus/event_source/devices/kprobe";

/// One line for a program error; the verifier log goes to the debug log, not the message.
fn describe(e: &ProgramError) -> String {
    match e {
        ProgramError::LoadError {
            io_error,
            verifier_log,
        } => {
            log::debug!("verifier log:\n{verifier_log}");
            format!("BPF_PROG_LOAD failed: {io_error}")
        }
        ProgramError::SyscallError(s) => format!("{} failed: {}", s.call, s.io_error),
        ProgramError::KProbeError(_) if !std::path::Path::new(KPROBE_PMU).exists() => {
            format!("kprobes not supported by this kernel (no {KPROBE_PMU})")
        }
        other => {
            let mut s = other.to_string();
            let mut src = std::error::Error::source(other);
            while let Some(e) = src {
                s.push_str(": ");
                s.push_str(&e.to_string());
                src = e.source();
            }
            s.lines().next().unwrap_or_default().to_string()
        }
    }
}

/// The kernel's ring buffer of events.
pub struct EventReader {
    ring: RingBuf<MapData>,
}

impl EventReader {
    /// Hands every record currently in the ring buffer to `f`; returns how many.
    pub fn drain(&mut self, mut f: impl FnMut(Result<SockEvent, DecodeError>)) -> usize {
        let mut n = 0;
        while let Some(item) = self.ring.next() {
            f(decode(&item));
            n += 1;
        }
        n
    }
}

impl std::os::fd::AsRawFd for EventReader {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.ring.as_raw_fd()
    }
}
