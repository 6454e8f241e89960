//! Loads the eBPF object and attaches, per hook, the best tier the kernel accepts.
//!
//! Driven entirely by [`crate::kernel::probes::PROBES`]: one generic loop tries each hook's candidate
//! tiers in order, keeps the first whose programs all load and attach, and records why the
//! others were refused, so `run` and `check` can say exactly what this kernel offers.
use aya::{
    Btf, Ebpf, EbpfLoader, Endianness,
    maps::{Array, HashMap, MapData, PerCpuArray, RingBuf},
};
use sockwatch_common::{Counter, Event, EventKind, Flavor, Tier, globals, maps, slots};

use std::time::{Duration, Instant};

pub use crate::kernel::attach::ProgramLoad;
use crate::{
    events::{DecodeError, KernelEvent, decode},
    kernel::{
        attach::{
            StandIns, Trial, attach_verifier_counter, measure_program, other_flavor, try_tier,
            unload_tier,
        },
        btf,
        counters::KernelCounters,
        features::{KERNEL_BTF, KernelFeatures},
        live::LiveTable,
        probes::{Hook, PROBES, ProbeMode, TierSpec},
        slot_filter::SlotFilter,
        watch::{UnwatchedCache, WatchedDir},
    },
};

/// The kernel programs, built by build.rs for the BPF target.
pub static EBPF_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sockwatch-ebpf"));

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(
        "missing BTF: cannot read /sys/kernel/btf/vmlinux ({0}); the kernel needs CONFIG_DEBUG_INFO_BTF"
    )]
    Btf(#[source] aya::BtfError),
    #[error("loading the eBPF object: {0}")]
    Object(#[source] aya::EbpfError),
    /// Too few hooks attached to run (or any missing, with `require_all_hooks`).
    #[error("{0}")]
    Coverage(String),
    #[error("eBPF object has no map {0}")]
    Map(&'static str),
    #[error("updating map {0}: {1}")]
    MapUpdate(&'static str, #[source] aya::maps::MapError),
    #[error("mapping map {0} into memory: {1}")]
    MapMemory(&'static str, #[source] std::io::Error),
}

#[derive(Clone, Debug)]
pub struct LoadOptions {
    pub mode: ProbeMode,
    /// Activity of this tgid is ignored in the kernel (the agent's own); 0 ignores nothing.
    pub ignore_tgid: u32,
    /// Unconsumed ring-buffer bytes at which the kernel wakes the reader, once as the backlog
    /// crosses them (at least one record: below that, the first record after a drain).
    pub wakeup_bytes: u64,
    /// Directories to watch; empty watches every directory.
    pub watch: Vec<WatchedDir>,
    /// Refuse to run when any hook gets no tier (otherwise only bind and a removal hook must).
    pub require_all_hooks: bool,
    /// Entries of the live-socket table and its name index.
    pub live_capacity: u32,
    /// A guard policy is set: the removal hooks try BPF LSM first where the mode chooses
    /// (see [`ProbeMode::guard_candidates`]).
    pub guard: bool,
    /// The tests' stand-ins for other kernels; none in production.
    pub stand_ins: StandIns,
}

/// What happened to one hook: the tier that attached, and why better ones did not.
#[derive(Clone, Debug)]
pub struct HookReport {
    pub hook: Hook,
    pub attached: Option<Tier>,
    pub refused: Vec<(Tier, String)>,
    /// Optional programs of the attached tier that this kernel refused.
    pub degraded: Vec<String>,
    /// Every program loaded for this hook, attached or not.
    pub programs: Vec<ProgramLoad>,
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

/// Which hooks a load left without a tier, and whether the agent can run so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Coverage {
    Complete,
    /// Runs without these hooks.
    Degraded(Vec<Hook>),
    /// Cannot run: bind, or both removal hooks, are missing.
    Insufficient(Vec<Hook>),
}

impl Coverage {
    /// The agent needs bind (to learn sockets) and one removal hook (to see them go).
    pub fn of(attached: impl Fn(Hook) -> bool) -> Coverage {
        let missing: Vec<Hook> = PROBES
            .iter()
            .map(|h| h.hook)
            .filter(|h| !attached(*h))
            .collect();
        if missing.is_empty() {
            Coverage::Complete
        } else if attached(Hook::Bind) && (attached(Hook::Unlink) || attached(Hook::Rename)) {
            Coverage::Degraded(missing)
        } else {
            Coverage::Insufficient(missing)
        }
    }

    pub fn missing(&self) -> &[Hook] {
        match self {
            Coverage::Complete => &[],
            Coverage::Degraded(m) | Coverage::Insufficient(m) => m,
        }
    }
}

/// Loaded and attached programs. Dropping it detaches everything.
pub struct Probes {
    ebpf: Ebpf,
    pub report: Vec<HookReport>,
    pub features: KernelFeatures,
    pub coverage: Coverage,
    pub timings: LoadTimings,
    /// The probe mode the hooks were attached under.
    pub mode: ProbeMode,
    live_capacity: u32,
    /// Whether a removal hook runs on the tracepoint tier, whose filters read the name index.
    names_read: bool,
    /// Whether binds and connects outside the watches remember their directory.
    pub unwatched_cache: UnwatchedCache,
}

/// Where a load's time went: start-up latency matters to a DaemonSet's rollout, and under
/// emulation (the VM tests) it dominates.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadTimings {
    /// Parsing the kernel's BTF and probing its helpers.
    pub btf: Duration,
    /// CO-RE relocation of every program and creation of the maps.
    pub object: Duration,
    /// The verifier and the attachments, every tier tried.
    pub attach: Duration,
}

impl LoadTimings {
    /// One log line: `412 ms (kernel BTF 50 ms, ...)`.
    pub fn summary(&self) -> String {
        let ms = |d: Duration| d.as_millis();
        format!(
            "{} ms (kernel BTF {} ms, relocation and maps {} ms, verifier and attach {} ms)",
            ms(self.btf + self.object + self.attach),
            ms(self.btf),
            ms(self.object),
            ms(self.attach)
        )
    }
}

impl Probes {
    /// Loads the object and attaches every hook it can; fails when too few attach to run
    /// (see [`Coverage::of`]), or any is missing under `require_all_hooks`.
    pub fn load(opts: &LoadOptions) -> Result<Self, LoadError> {
        let clock = Instant::now();
        let kernel = kernel_btf()?;
        let btf = &kernel.whole;
        let features = kernel.features.standing_in(&opts.stand_ins);
        let btf_done = clock.elapsed();
        let mut ebpf = open_object(kernel.for_relocation(), opts, &features)?;
        for w in &opts.watch {
            add_watch(&mut ebpf, w)?;
        }
        let object_done = clock.elapsed();
        let flavor = features.flavor();
        let report: Vec<HookReport> = PROBES
            .iter()
            .map(|hook| {
                let tiers = match opts.guard {
                    true => opts.mode.guard_candidates(hook),
                    false => opts.mode.candidates(hook),
                };
                attach_hook(&mut ebpf, hook.hook, &tiers, flavor, btf, &opts.stand_ins)
            })
            .collect();
        let timings = LoadTimings {
            btf: btf_done,
            object: object_done - btf_done,
            attach: clock.elapsed() - object_done,
        };
        let coverage = Coverage::of(|h| report.iter().any(|r| r.hook == h && r.attached.is_some()));
        let fatal = match &coverage {
            Coverage::Insufficient(_) => true,
            Coverage::Degraded(_) => opts.require_all_hooks,
            Coverage::Complete => false,
        };
        if fatal {
            return Err(LoadError::Coverage(coverage_error(
                &coverage, &report, opts,
            )));
        }
        let names_read = report.iter().any(|r| {
            matches!(r.hook, Hook::Unlink | Hook::Rename) && r.attached == Some(Tier::Tracepoint)
        });
        if !names_read {
            set_flag::<u32>(&mut ebpf, maps::NAMES_UNREAD)?;
        }
        let rename_tier = report
            .iter()
            .find(|r| r.hook == Hook::Rename)
            .and_then(|r| r.attached);
        let unwatched_cache = UnwatchedCache::of(rename_tier, opts.watch.is_empty());
        if unwatched_cache == UnwatchedCache::On {
            set_flag::<u64>(&mut ebpf, maps::UNWATCHED_EPOCH)?;
        }
        Ok(Self {
            ebpf,
            report,
            features,
            coverage,
            timings,
            mode: opts.mode,
            live_capacity: opts.live_capacity,
            names_read,
            unwatched_cache,
        })
    }

    /// One of the object's maps, for the modules that keep it (the guard's).
    pub(crate) fn map_mut(&mut self, name: &'static str) -> Result<&mut aya::maps::Map, LoadError> {
        self.ebpf.map_mut(name).ok_or(LoadError::Map(name))
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

    /// The kernel's live-socket table, its name index, the tracked processes and the pending
    /// records, for userspace lookups, seeding and the sweeps' pruning. Can be taken once.
    pub fn live_table(&mut self) -> Result<LiveTable, LoadError> {
        let live = self.take_map(maps::LIVE)?;
        let names = self.take_map(maps::LIVE_NAMES)?;
        let tracked = self.take_map(maps::TRACKED)?;
        let pending = self.take_map(maps::PENDING)?;
        let names = HashMap::try_from(names).map_err(|_| LoadError::Map(maps::LIVE_NAMES))?;
        let (released, name_filter) = if self.names_read {
            let released = self.take_map(maps::RELEASED_NAMES)?;
            let released =
                HashMap::try_from(released).map_err(|_| LoadError::Map(maps::RELEASED_NAMES))?;
            (Some(released), Some(self.slot_filter(maps::NAME_FILTER)?))
        } else {
            (None, None)
        };
        Ok(LiveTable {
            capacity: self.live_capacity,
            live: HashMap::try_from(live).map_err(|_| LoadError::Map(maps::LIVE))?,
            names: self.names_read.then_some(names),
            released,
            name_filter,
            tracked: HashMap::try_from(tracked).map_err(|_| LoadError::Map(maps::TRACKED))?,
            tracked_filter: self.slot_filter(maps::TRACKED_FILTER)?,
            pending: HashMap::try_from(pending).map_err(|_| LoadError::Map(maps::PENDING))?,
            counted: None,
        })
    }

    fn take_map(&mut self, name: &'static str) -> Result<aya::maps::Map, LoadError> {
        self.ebpf.take_map(name).ok_or(LoadError::Map(name))
    }

    /// Slot filter `name`, mapped into this process.
    fn slot_filter(&mut self, name: &'static str) -> Result<SlotFilter, LoadError> {
        let aya::maps::Map::Array(map) = self.take_map(name)? else {
            return Err(LoadError::Map(name));
        };
        SlotFilter::open(&map).map_err(|e| LoadError::MapMemory(name, e))
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

/// One tier of one hook as this kernel takes it.
#[derive(Clone, Debug)]
pub struct TierSupport {
    pub tier: Tier,
    /// Attached (with any refused optional programs), or refused with the reason.
    pub result: Result<Vec<String>, String>,
    /// Every program loaded for it, the kernel's own flavor first, then the other's where
    /// [`Flavors::Both`] asked for them.
    pub programs: Vec<ProgramLoad>,
}

/// Whose programs [`probe_support`] loads besides the kernel's own flavor's, which decide
/// what `run` attaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavors {
    /// Those alone: `check`.
    Own,
    /// The other flavor's too, for their cost (`check --verbose`, the headroom test): twice
    /// the loads, seconds more on a kernel under emulation.
    Both,
}

/// Per hook, every tier as this kernel takes it.
pub type SupportTable = Vec<(Hook, Vec<TierSupport>)>;

/// Per hook, every tier and whether this kernel accepts it: each program is loaded, attached,
/// measured and unloaded again, in one object. `on_hook` sees each hook as it is done.
pub fn probe_support(
    stand_ins: &StandIns,
    flavors: Flavors,
    mut on_hook: impl FnMut(Hook, &[TierSupport]),
) -> Result<(KernelFeatures, SupportTable), LoadError> {
    let kernel = kernel_btf()?;
    let btf = &kernel.whole;
    let features = kernel.features.standing_in(stand_ins);
    let opts = LoadOptions {
        mode: ProbeMode::Auto,
        ignore_tgid: std::process::id(),
        wakeup_bytes: 0,
        watch: Vec::new(),
        require_all_hooks: false,
        live_capacity: maps::LIVE_CAPACITY,
        guard: false,
        stand_ins: stand_ins.clone(),
    };
    let mut ebpf = open_object(kernel.for_relocation(), &opts, &features)?;
    let own = features.flavor();
    let counting = attach_verifier_counter(&mut ebpf, btf);
    let mut table = Vec::new();
    for hook in PROBES {
        let mut tiers = Vec::new();
        for tier in hook.tiers {
            let trial = Trial {
                every_program: true,
                verifier_counter: counting,
            };
            let (result, mut programs) =
                try_tier(&mut ebpf, hook.hook, tier, own, btf, stand_ins, trial);
            unload_tier(&mut ebpf, tier, own);
            // The other flavor's own programs too, where their cost is asked for.
            let other = other_flavor(own);
            let others = tier
                .programs_in(other)
                .filter(|p| p.per_flavor() && flavors == Flavors::Both);
            for spec in others {
                programs.push(measure_program(
                    &mut ebpf, spec, hook.hook, tier.tier, other, btf, trial,
                ));
                unload_tier(&mut ebpf, tier, other);
            }
            tiers.push(TierSupport {
                tier: tier.tier,
                result,
                programs,
            });
        }
        on_hook(hook.hook, &tiers);
        table.push((hook.hook, tiers));
    }
    Ok((features, table))
}

/// The kernel's BTF, read once.
pub struct KernelBtf {
    /// All of it: fentry, LSM and BTF tracepoint programs name their kernel function by id.
    pub whole: Btf,
    /// What relocating [`EBPF_OBJECT`] reads ([`btf::Types::relocation_subset`]), when it could
    /// be cut.
    subset: Option<Btf>,
    pub features: KernelFeatures,
}

impl KernelBtf {
    /// What aya relocates the object against.
    pub fn for_relocation(&self) -> &Btf {
        self.subset.as_ref().unwrap_or(&self.whole)
    }
}

/// Reads the kernel's BTF, parses it for aya and cuts the relocation subset from it.
pub fn kernel_btf() -> Result<KernelBtf, LoadError> {
    let raw = std::fs::read(KERNEL_BTF).map_err(|error| {
        LoadError::Btf(aya::BtfError::FileError {
            path: KERNEL_BTF.into(),
            error,
        })
    })?;
    let whole = Btf::parse(&raw, Endianness::default()).map_err(LoadError::Btf)?;
    let types = btf::Types::parse(&raw);
    let subset = types
        .as_ref()
        .zip(object_btf(EBPF_OBJECT))
        .and_then(|(types, local)| types.relocation_subset(local))
        .and_then(|cut| Btf::parse(&cut, Endianness::default()).ok());
    if subset.is_none() {
        log::warn!("kernel BTF: no relocation subset could be cut; relocating against all of it");
    }
    Ok(KernelBtf {
        whole,
        subset,
        features: KernelFeatures::from_types(&raw, types.as_ref()),
    })
}

/// The `.BTF` section of an ELF object.
pub fn object_btf(elf: &[u8]) -> Option<&[u8]> {
    use object::{Object as _, ObjectSection as _};
    object::File::parse(elf)
        .ok()?
        .section_by_name(".BTF")?
        .data()
        .ok()
}

/// Tries `tiers` in order; the first whose required programs all attach wins.
fn attach_hook(
    ebpf: &mut Ebpf,
    hook: Hook,
    tiers: &[&'static TierSpec],
    flavor: Flavor,
    btf: &Btf,
    stand_ins: &StandIns,
) -> HookReport {
    let mut report = HookReport {
        hook,
        attached: None,
        refused: Vec::new(),
        degraded: Vec::new(),
        programs: Vec::new(),
    };
    for tier in tiers {
        let trial = Trial {
            every_program: false,
            verifier_counter: false,
        };
        let (result, programs) = try_tier(ebpf, hook, tier, flavor, btf, stand_ins, trial);
        report.programs.extend(programs);
        match result {
            Ok(degraded) => {
                report.attached = Some(tier.tier);
                report.degraded = degraded;
                break;
            }
            Err(why) => {
                unload_tier(ebpf, tier, flavor);
                report.refused.push((tier.tier, why));
            }
        }
    }
    report
}

fn coverage_error(coverage: &Coverage, report: &[HookReport], opts: &LoadOptions) -> String {
    let why: Vec<String> = coverage
        .missing()
        .iter()
        .filter_map(|h| report.iter().find(|r| r.hook == *h))
        .map(|r| format!("{} ({})", r.hook.name(), reasons(r)))
        .collect();
    let rule = match coverage {
        Coverage::Insufficient(_) => "bind and unlink or rename must attach",
        _ => "--require-all-hooks is set",
    };
    format!(
        "cannot run under --probe-mode {}: {rule}; no tier for {}",
        opts.mode.name(),
        why.join(", ")
    )
}

fn open_object(btf: &Btf, opts: &LoadOptions, f: &KernelFeatures) -> Result<Ebpf, LoadError> {
    // Where BTF does not say, the layout of current kernels.
    let unlink_args = u32::from(f.vfs_unlink_args.unwrap_or(4));
    let rename_args = u32::from(f.vfs_rename_args.unwrap_or(1));
    let wakeup_bytes = opts.wakeup_bytes.max(Event::SIZE as u64);
    EbpfLoader::new()
        .btf(Some(btf))
        .override_global(globals::VFS_UNLINK_ARGS, &unlink_args, true)
        .override_global(globals::VFS_RENAME_ARGS, &rename_args, true)
        .override_global(globals::AGENT_TGID, &opts.ignore_tgid, true)
        .override_global(globals::WAKEUP_BYTES, &wakeup_bytes, true)
        .override_global(globals::WATCH_ALL, &u8::from(opts.watch.is_empty()), true)
        .map_max_entries(maps::LIVE, opts.live_capacity)
        .map_max_entries(maps::LIVE_NAMES, opts.live_capacity)
        .load(EBPF_OBJECT)
        .map_err(LoadError::Object)
}

/// Sets the one element of array map `name` to 1: the cache's first epoch
/// ([`maps::UNWATCHED_EPOCH`], zero is off), or the name index unread
/// ([`maps::NAMES_UNREAD`]: no program attached reads it).
fn set_flag<V: aya::Pod + From<u8>>(ebpf: &mut Ebpf, name: &'static str) -> Result<(), LoadError> {
    let map = ebpf.map_mut(name).ok_or(LoadError::Map(name))?;
    let mut flag = Array::<_, V>::try_from(map).map_err(|_| LoadError::Map(name))?;
    flag.set(0, V::from(1), 0)
        .map_err(|e| LoadError::MapUpdate(name, e))
}

fn add_watch(ebpf: &mut Ebpf, w: &WatchedDir) -> Result<(), LoadError> {
    if let Some(dir) = w.dir {
        insert(ebpf, maps::WATCHED_DIRS, dir, w.slot)?;
    }
    if let Some(by_name) = w.by_name {
        insert(ebpf, maps::WATCHED_NAMES, by_name, w.slot)?;
        insert(ebpf, maps::WATCHED_PARENTS, by_name.parent, 1u8)?;
    }
    Ok(())
}

/// `key` -> `value` in hash map `name`.
fn insert<K: aya::Pod, V: aya::Pod>(
    ebpf: &mut Ebpf,
    name: &'static str,
    key: K,
    value: V,
) -> Result<(), LoadError> {
    let map = ebpf.map_mut(name).ok_or(LoadError::Map(name))?;
    let mut map = HashMap::<_, K, V>::try_from(map).map_err(|_| LoadError::Map(name))?;
    map.insert(key, value, 0)
        .map_err(|e| LoadError::MapUpdate(name, e))
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

/// The kernel's ring buffer of events.
pub struct EventReader {
    ring: RingBuf<MapData>,
}

impl EventReader {
    /// Hands every record currently in the ring buffer to `f`; returns how many.
    pub fn drain(&mut self, mut f: impl FnMut(Result<KernelEvent, DecodeError>)) -> usize {
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
