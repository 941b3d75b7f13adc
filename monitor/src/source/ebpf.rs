//! Loading the kernel programs and reading their ring buffer.
//!
//! The object built from `monitor-ebpf` is embedded in the binary. Loading resolves the stat
//! item numbers from the kernel's BTF, writes the configuration map, and attaches every program
//! whose tracepoint this kernel has (see [`super::programs`]); the others are reported as
//! skipped. Records are read through tokio's `AsyncFd`, so the agent sleeps until the kernel
//! has something to say.
//!
//! [`KernelSource::load_with_incidents`] also attaches the incident programs (reclaim stalls,
//! kswapd, OOM kills) that `monitor trace` reports.
//!
//! Minimum kernel: 5.8 (BPF ring buffer) with BTF; the memcg stat programs need 6.8.
mod stat_links;
mod task_memcg;
mod without_kernel_btf;

use std::{io, path::Path, time::Duration};

use aya::{
    Btf, Ebpf,
    maps::{Array, HashMap, MapData, PerCpuArray, RingBuf},
    programs::{FEntry, RawTracePoint, TracePoint, fentry::FEntryLinkId},
};
use monitor_common::{
    CgroupCounters, Config, DropReason, FieldOffsets, IncidentConfig, MemcgOffsets, NO_ITEM,
    NPENDING, NSTATS, PendingPages, Stat, WakeSlot,
};
use tokio::io::{Interest, unix::AsyncFd};

use crate::{cgroupfs::CgroupPaths, node::read::page_size};

pub use stat_links::StatLinkError;
use stat_links::StatLinks;

use super::{
    btf::{self, BtfError, Types},
    btf_bytes::BtfBytes,
    event::{DecodeError, KernelEvent, decode},
    fentry::{self as fentry_targets, FentryTarget},
    hook_plan,
    probe::{self, MemcgMethod, TracefsError, VMLINUX_BTF},
    programs::{FentrySpec, INCIDENT_PROGRAMS, PROGRAMS, ProgramSpec},
    run_stats::ProgramRuns,
    struct_members::OffsetError,
    tracepoint_format,
};

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/monitor"));

/// Settings for the kernel programs.
#[derive(Clone, Copy, Debug)]
pub struct LoadOptions {
    /// A stat event is sent when a cgroup's stat moved by at least this many bytes.
    pub step_bytes: u64,
    /// Hierarchy whose cgroup mkdir/rmdir events matter (see `MemoryHierarchy::hierarchy_id`).
    pub hierarchy_id: i32,
    /// How the per-cgroup memory programs hook the kernel.
    pub memcg_hook: MemcgHook,
    /// Pages a CPU may hold back per cgroup and stat before adding them to the cgroup's
    /// total (`Config::budget_pages`); `None`: [`default_budget_pages`].
    pub budget_pages: Option<u32>,
    /// Entries of the per-cgroup map (see [`cgroup_map_entries`]).
    pub cgroup_map_entries: u32,
}

/// Bounds of the per-cgroup map's size. The map is preallocated (tracing programs on kernels
/// before 6.1 may only use preallocated hash maps), about 140 bytes an entry, charged to the
/// agent's memory cgroup: 65,536 entries are 9 MiB, 4,096 are 0.6 MiB.
pub const CGROUP_MAP_MIN_ENTRIES: u32 = 4096;
/// Kernel memory an entry of the per-cgroup map takes, measured (memory cgroup kmem charge of
/// the largest map against the smallest, 6.18).
pub const CGROUP_MAP_ENTRY_BYTES: u64 = 144;
pub const CGROUP_MAP_MAX_ENTRIES: u32 = 65536;

/// Entries of the per-cgroup map for a node whose memory hierarchy holds `cgroups` now: four
/// times as many, for the pods yet to come, within the bounds. A cgroup that finds the map
/// full gets no records and is counted (`monitor_cgroup_map_full_total`).
pub fn cgroup_map_entries(cgroups: usize) -> u32 {
    let wanted = u32::try_from(cgroups.saturating_mul(4)).unwrap_or(u32::MAX);
    wanted
        .checked_next_power_of_two()
        .unwrap_or(CGROUP_MAP_MAX_ENTRIES)
        .clamp(CGROUP_MAP_MIN_ENTRIES, CGROUP_MAP_MAX_ENTRIES)
}

/// [`cgroup_map_entries`] for the memory hierarchy mounted at `mount`, as it is now; the
/// largest map when it cannot be walked.
pub fn cgroup_map_entries_at(mount: &Path) -> u32 {
    CgroupPaths::scan(mount).map_or(CGROUP_MAP_MAX_ENTRIES, |paths| {
        cgroup_map_entries(paths.len())
    })
}

/// The per-CPU budget for a step: all CPUs together hold back less than a quarter of the step
/// of any cgroup's stat (at least 1 page: every update added at once).
pub fn default_budget_pages(step_bytes: u64, page_size: u64, ncpus: usize) -> u32 {
    let per_cpu = step_bytes / page_size.max(1) / (4 * ncpus.max(1) as u64);
    u32::try_from(per_cpu).unwrap_or(u32::MAX).max(1)
}

/// Which hook the per-cgroup memory programs use (see [`super::programs`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum MemcgHook {
    /// Raw tracepoints on the `memcg` tracepoints (6.13+): their arguments without the record
    /// the classic tracepoints fill, so the cheapest per page fault; else the classic
    /// tracepoints; else fentry on the functions they were placed in.
    #[default]
    Auto,
    /// The classic `memcg` tracepoints (the kernel fills their record, cgroup id included,
    /// before the program runs); fentry where the kernel lacks them.
    Tracepoint,
    /// fentry even where the tracepoints exist: the path of 5.11-6.12 kernels, tested on a
    /// newer one.
    Fentry,
}

/// Settings for the incident programs (reclaim stalls, kswapd, OOM kills).
#[derive(Clone, Copy, Debug)]
pub struct IncidentOptions {
    /// Reclaim stalls shorter than this are not sent (rounded up to at least 1 ns).
    pub min_stall: Duration,
}

/// Why the kernel programs could not be loaded. Each message says what is needed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Not running with the privileges BPF needs.
    #[error(
        "loading the kernel programs needs root (or CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE): \
         they are attached to kernel tracepoints. Run this command as root"
    )]
    NotRoot,
    /// The kernel has no BTF, so the stat item numbers cannot be resolved.
    #[error(
        "this kernel exposes no BTF at {VMLINUX_BTF}; the kernel programs need a kernel built \
         with CONFIG_DEBUG_INFO_BTF=y to find the memory statistics they count. `monitor doctor` \
         shows what this kernel offers instead"
    )]
    NoBtf,
    /// Tracepoints cannot be attached without tracefs.
    #[error(transparent)]
    Tracefs(#[from] TracefsError),
    /// The BTF did not describe the stat items.
    #[error("reading stat item numbers from the kernel's BTF: {0}")]
    Btf(#[from] BtfError),
    /// The object or its maps failed to load.
    #[error("loading the kernel object: {0}")]
    Object(#[from] aya::EbpfError),
    /// On cgroup v1 the incident programs need struct offsets to find a task's memory cgroup.
    #[error(
        "finding where this kernel keeps a task's memory cgroup (needed on cgroup v1 to \
         attribute stalls and OOM kills): {0}"
    )]
    TaskMemcg(#[from] OffsetError),
    /// A map is missing or has another type than expected.
    #[error("kernel map {name}: {source}")]
    Map {
        name: &'static str,
        source: aya::maps::MapError,
    },
    /// The verifier or the kernel rejected a program.
    #[error("kernel program {name}: {source}")]
    Program {
        name: &'static str,
        source: aya::programs::ProgramError,
    },
    /// The ring buffer could not be registered with the runtime's poller.
    #[error("watching the kernel ring buffer: {0}")]
    Poll(io::Error),
    /// None of the programs could be attached.
    #[error("no kernel program could be attached: {0}")]
    NothingAttached(String),
}

/// Why stale kernel aggregates could not be swept.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// `CGROUP_STATS` could not be read or an entry not deleted.
    #[error("kernel map CGROUP_STATS: {0}")]
    Map(#[from] aya::maps::MapError),
    /// The memory hierarchy could not be walked.
    #[error("walking the memory hierarchy: {0}")]
    Scan(io::Error),
}

/// A program that was not attached, and why.
#[derive(Clone, Debug)]
pub struct Skipped {
    pub program: &'static ProgramSpec,
    pub reason: String,
}

/// Counts of records that did not reach the agent as events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drops {
    /// Records the kernel could not send because the ring buffer was full. Any of them may
    /// have been a cgroup creation or removal: the reader should rescan the hierarchy.
    pub ring_full: u64,
    /// Stat updates not counted because `CGROUP_STATS` was full (the cgroup gets no records).
    pub map_full: u64,
    /// Records read from the ring that failed to decode (returned as errors in place; a
    /// kernel object and agent out of step, never a reason to stop).
    pub undecodable: u64,
}

impl Drops {
    /// What was added since `earlier` (counters only rise).
    fn since(self, earlier: Drops) -> Drops {
        Drops {
            ring_full: self.ring_full.saturating_sub(earlier.ring_full),
            map_full: self.map_full.saturating_sub(earlier.map_full),
            undecodable: self.undecodable.saturating_sub(earlier.undecodable),
        }
    }
}

/// The loaded, attached kernel programs and their ring buffer.
pub struct KernelSource {
    ebpf: Ebpf,
    ring: AsyncFd<RingBuf<MapData>>,
    attached: Vec<&'static ProgramSpec>,
    skipped: Vec<Skipped>,
    /// The memcg programs attached with fentry instead of tracepoints, and their functions.
    fentry: Vec<(&'static FentrySpec, &'static str)>,
    /// The memcg stat programs' links, which the agent may take off while no threshold is near.
    stat_links: StatLinks,
    page_size: u64,
    /// Pages each CPU may hold back per cgroup and stat (`Config::budget_pages`).
    budget_pages: u32,
    /// Highest working-set growth sum carried by a stat record read so far.
    growth_seen: i64,
    /// Wake-up level last written to the kernel.
    wake_at: Option<i64>,
    /// Records read that failed to decode.
    undecodable: u64,
    /// [`Self::drops`] when [`Self::new_drops`] last asked.
    drops_reported: Drops,
}

impl KernelSource {
    /// Loads and attaches the stat and cgroup lifecycle programs. Must be called inside a tokio
    /// runtime.
    pub fn load(options: LoadOptions) -> Result<Self, LoadError> {
        Self::load_inner(options, None)
    }

    /// As [`Self::load`], and also attaches the incident programs, which then send
    /// [`KernelEvent::Stall`], [`KernelEvent::Kswapd`] and [`KernelEvent::OomKill`].
    pub fn load_with_incidents(
        options: LoadOptions,
        incidents: IncidentOptions,
    ) -> Result<Self, LoadError> {
        Self::load_inner(options, Some(incidents))
    }

    fn load_inner(
        options: LoadOptions,
        incidents: Option<IncidentOptions>,
    ) -> Result<Self, LoadError> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(LoadError::NotRoot);
        }
        let btf = BtfBytes::open(Path::new(VMLINUX_BTF)).map_err(|_| LoadError::NoBtf)?;
        tracing::debug!("kernel BTF mapped, not copied: {}", btf.is_mapped());
        // Parsed once for every lookup, and freed before the programs are loaded.
        let types = Types::parse(&btf)?;
        let config = config_for(&types, options)?;
        let incident_config = incidents
            .map(|i| incident_config_for(&types, options, i))
            .transpose()?;
        let fentry_plan = FentryPlan::resolve(&types);
        let candidates = hook_plan::candidates(options.memcg_hook);
        let raw_check = if candidates.contains(&MemcgMethod::RawTracepoint) {
            raw_tracepoints_usable(&types)
        } else {
            Err("not asked for".to_string())
        };
        let victim_check = victim_prototype(&types);
        drop(types);
        drop(btf);
        // The programs read tracepoint offsets (from tracefs) and struct offsets (from BTF) from
        // their maps and need no CO-RE relocation, so aya gets no copy of the kernel's BTF.
        let mut ebpf = without_kernel_btf::load(OBJECT, options.cgroup_map_entries)?;
        super::kernel_log::forward(&mut ebpf);
        Array::<_, Config>::try_from(map(&mut ebpf, "CONFIG")?)
            .and_then(|mut array| array.set(0, config, 0))
            .map_err(|source| LoadError::Map {
                name: "CONFIG",
                source,
            })?;
        if let Some(config) = incident_config {
            Array::<_, IncidentConfig>::try_from(map(&mut ebpf, "INCIDENT_CONFIG")?)
                .and_then(|mut array| array.set(0, config, 0))
                .map_err(|source| LoadError::Map {
                    name: "INCIDENT_CONFIG",
                    source,
                })?;
        }
        let incident_programs = if incidents.is_some() {
            INCIDENT_PROGRAMS
        } else {
            &[]
        };
        let mut stat_links = StatLinks::default();
        // Raw tracepoints first: the classic memcg programs are attached only without them.
        let raw = raw_check
            .and_then(|()| fentry_plan.as_ref().map_err(Clone::clone))
            .and_then(|plan| attach_raw(&mut ebpf, plan.offsets, &mut stat_links));
        let wants_classic = candidates.contains(&MemcgMethod::Tracepoint);
        if let Err(reason) = &raw
            && candidates.contains(&MemcgMethod::RawTracepoint)
        {
            tracing::info!(
                "raw memcg tracepoints not attached ({reason}): trying the classic ones"
            );
        }
        let classic = wants_classic && raw.is_err();
        let tracepoints = PROGRAMS
            .iter()
            .filter(|p| classic || p.category != MEMCG_CATEGORY);
        let (mut attached, mut skipped) = attach_all(
            &mut ebpf,
            tracepoints.chain(incident_programs),
            &mut stat_links,
        )?;
        if attached.iter().any(|p| p.name == VICTIM_PROGRAM.1)
            && let Err(reason) = attach_victim_cgroups(&mut ebpf, victim_check)
        {
            tracing::info!("OOM victims' cgroups read from /proc only: {reason}");
        }
        if raw.is_ok() {
            tracing::info!("memory stats come from raw tracepoints on the memcg tracepoints");
            attached.extend(PROGRAMS.iter().filter(|p| p.category == MEMCG_CATEGORY));
        }
        let mut fentry = Vec::new();
        if !attached.iter().any(|p| p.category == MEMCG_CATEGORY) {
            match fentry_plan.and_then(|plan| attach_fentry(&mut ebpf, plan, &mut stat_links)) {
                Ok(hooked) => {
                    let functions: Vec<&str> = hooked.iter().map(|(_, f)| *f).collect();
                    tracing::info!(
                        "no memcg tracepoints here: memory stats come from fentry on {}",
                        functions.join(", ")
                    );
                    for (program, _) in &hooked {
                        skipped.retain(|s| s.program.name != program.replaces);
                        attached.extend(PROGRAMS.iter().filter(|p| p.name == program.replaces));
                    }
                    fentry = hooked;
                }
                Err(reason) => note_fentry_failure(&mut skipped, &reason),
            }
        }
        if LIFECYCLE_PROGRAMS
            .iter()
            .all(|name| attached.iter().any(|p| p.name == *name))
        {
            // Creation and removal are seen from now on: the fentry id cache may start.
            Array::<_, i64>::try_from(map(&mut ebpf, "LIFECYCLE_GENERATION")?)
                .and_then(|mut array| array.set(0, 1, 0))
                .map_err(|source| LoadError::Map {
                    name: "LIFECYCLE_GENERATION",
                    source,
                })?;
        }
        if attached.is_empty() {
            let reasons: Vec<String> = skipped
                .iter()
                .map(|s| format!("{}: {}", s.program.hook(), s.reason))
                .collect();
            return Err(LoadError::NothingAttached(reasons.join("; ")));
        }
        let events = ebpf.take_map("EVENTS").ok_or_else(|| LoadError::Map {
            name: "EVENTS",
            source: missing_map(),
        })?;
        let ring = RingBuf::try_from(events).map_err(|source| LoadError::Map {
            name: "EVENTS",
            source,
        })?;
        // SAFETY: the ring buffer owns its map fd and keeps it open for as long as the AsyncFd
        // holds it.
        let ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
            .map_err(|e| LoadError::Poll(e.into()))?;
        // Loading parsed the kernel's BTF (ours, and aya's where it could not be hidden); glibc
        // keeps such freed heap mapped unless told, and an agent on every node should stay small.
        // musl (the container image's libc) has no malloc_trim.
        // SAFETY: malloc_trim only returns free memory to the kernel.
        #[cfg(target_env = "gnu")]
        unsafe {
            libc::malloc_trim(0)
        };
        Ok(Self {
            ebpf,
            ring,
            attached,
            skipped,
            page_size: config.page_size,
            budget_pages: config.budget_pages,
            fentry,
            stat_links,
            growth_seen: 0,
            wake_at: None,
            undecodable: 0,
            drops_reported: Drops::default(),
        })
    }

    /// Page size of the running kernel, the unit of `nr_reclaimed` in stall events.
    pub fn page_size(&self) -> u64 {
        self.page_size
    }

    /// Pages each CPU may hold back per cgroup and stat before the kernel adds them to the
    /// cgroup's total: that total lags the true sum by less than this times the CPUs.
    pub fn budget_pages(&self) -> u32 {
        self.budget_pages
    }

    /// Programs that are attached.
    pub fn attached(&self) -> &[&'static ProgramSpec] {
        &self.attached
    }

    /// Programs this kernel could not attach, with the reason.
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }

    /// The memcg programs attached with fentry (on kernels without the memcg tracepoints),
    /// each with the kernel function it hooks; empty when the tracepoints are used.
    pub fn fentry_functions(&self) -> &[(&'static FentrySpec, &'static str)] {
        &self.fentry
    }

    /// Accumulated run time and runs of each loaded program (counted only while a
    /// [`RunStatsWindow`](super::run_stats::RunStatsWindow) is open somewhere).
    pub fn program_runs(&self) -> Vec<ProgramRuns> {
        self.ebpf
            .programs()
            .filter_map(|(name, program)| {
                let info = program.info().ok()?;
                Some(ProgramRuns {
                    program: name.to_string(),
                    run_time_ns: u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX),
                    runs: info.run_count(),
                })
            })
            .collect()
    }

    /// True when per-cgroup memory stats come from the kernel (the memcg programs attached).
    pub fn tracks_memory(&self) -> bool {
        self.attached.iter().any(|p| p.category == MEMCG_CATEGORY)
    }

    /// True while the memcg stat programs run on their hooks (they do from load on).
    pub fn stats_attached(&self) -> bool {
        self.stat_links.attached()
    }

    /// Takes the memcg stat programs off their hooks: page faults run none of our code and
    /// no stat records come until [`Self::attach_stats`]. The records already sent stay in
    /// the ring. Changes summed on a CPU below its budget stay there and are sent after the
    /// next attach, so a cgroupfs read taken then may count them once more (less than a
    /// quarter step in all).
    pub fn detach_stats(&mut self) -> Result<(), StatLinkError> {
        self.stat_links.detach(&mut self.ebpf)
    }

    /// Puts the memcg stat programs back on their hooks, all or none. What changed while
    /// they were off is not counted: read cgroupfs after this.
    pub fn attach_stats(&mut self) -> Result<(), StatLinkError> {
        self.stat_links.attach(&mut self.ebpf)
    }

    /// Waits until the kernel has records, then appends all available ones to `out`.
    /// Records that fail to decode are returned as errors in place, so nothing is dropped
    /// silently.
    pub async fn next_batch(
        &mut self,
        out: &mut Vec<Result<KernelEvent, DecodeError>>,
    ) -> io::Result<()> {
        loop {
            let mut guard = self.ring.readable_mut().await?;
            let read = Self::drain(
                guard.get_inner_mut(),
                &mut self.growth_seen,
                &mut self.undecodable,
                out,
                usize::MAX,
            );
            guard.clear_ready();
            if read > 0 {
                return Ok(());
            }
        }
    }

    /// Appends the records waiting in the ring without waiting for a wake-up (records sent
    /// below the wake-up level wait there until read); returns how many.
    pub fn read_pending(&mut self, out: &mut Vec<Result<KernelEvent, DecodeError>>) -> usize {
        Self::drain(
            self.ring.get_mut(),
            &mut self.growth_seen,
            &mut self.undecodable,
            out,
            usize::MAX,
        )
    }

    /// Moves the records waiting in the ring to `out` while `out` holds fewer than `limit`
    /// and has room or can get it, so a long cgroupfs read does not leave the ring to fill;
    /// returns how many. Without memory to grow `out`, the rest stay in the ring.
    pub fn hold_pending(
        &mut self,
        out: &mut Vec<Result<KernelEvent, DecodeError>>,
        limit: usize,
    ) -> usize {
        let before = out.len();
        while out.len() < limit {
            if out.len() == out.capacity() && out.try_reserve(out.len().max(1024)).is_err() {
                break;
            }
            let read = Self::drain(
                self.ring.get_mut(),
                &mut self.growth_seen,
                &mut self.undecodable,
                out,
                out.capacity().min(limit),
            );
            if read == 0 {
                break;
            }
        }
        out.len() - before
    }

    /// Decodes records into `out` until the ring is empty or `out` holds `limit`.
    fn drain(
        ring: &mut RingBuf<MapData>,
        growth_seen: &mut i64,
        undecodable: &mut u64,
        out: &mut Vec<Result<KernelEvent, DecodeError>>,
        limit: usize,
    ) -> usize {
        let before = out.len();
        while out.len() < limit
            && let Some(record) = ring.next()
        {
            let event = decode(&record);
            match event {
                Ok(KernelEvent::Stat { growth_bytes, .. }) => {
                    *growth_seen = (*growth_seen).max(growth_bytes);
                }
                Err(_) => *undecodable += 1,
                Ok(_) => {}
            }
            out.push(event);
        }
        out.len() - before
    }

    /// Lets stat records wake the reader only once working sets may have grown by `headroom`
    /// bytes beyond what the records read so far carried (`None`: never for that reason;
    /// the caller reads on its own timer). Returns true when the level was lowered to growth
    /// the kernel has already counted, whose records sent no wake-up: read the ring now.
    pub fn wake_after_growth(
        &mut self,
        headroom: Option<u64>,
    ) -> Result<bool, aya::maps::MapError> {
        let wake_at = match headroom {
            // At least 1: 0 would mean "every record wakes", which is the safe reading anyway.
            Some(bytes) => self
                .growth_seen
                .saturating_add(i64::try_from(bytes).unwrap_or(i64::MAX))
                .max(1),
            None => i64::MAX,
        };
        let previous = self.wake_at.replace(wake_at);
        if previous == Some(wake_at) {
            return Ok(false);
        }
        let mut wake =
            Array::<_, i64>::try_from(self.ebpf.map_mut("WAKE").ok_or_else(missing_map)?)?;
        wake.set(WakeSlot::WakeAt as u32, wake_at, 0)?;
        // Records at or above the previous level were sent with a wake-up; only a lower level
        // can leave some that reached it waiting.
        let lowered = previous.is_some_and(|p| wake_at < p);
        Ok(lowered && wake.get(&(WakeSlot::Growth as u32), 0)? >= wake_at)
    }

    /// Bytes of `stat` the kernel has counted for a cgroup since attaching, read from the maps
    /// now: its total plus what the CPUs hold back for it ([`Self::held_back`]).
    pub fn running_total(&self, cgroup_id: u64, stat: Stat) -> Option<i64> {
        let map = self.ebpf.map("CGROUP_STATS")?;
        let stats = HashMap::<_, u64, CgroupCounters>::try_from(map).ok()?;
        let counters = stats.get(&cgroup_id, 0).ok()?;
        let held = self.held_back(cgroup_id, stat).unwrap_or(0);
        Some(counters.pages[stat as usize] * self.page_size as i64 + held)
    }

    /// The memory cgroup id the kernel recorded for OOM victim `pid` as it was chosen, while
    /// the victim was still in its cgroup (`None` without the record, e.g. before 6.8).
    pub fn oom_victim_cgroup(&self, pid: u32) -> Option<u64> {
        let map = self.ebpf.map("VICTIM_CGROUPS")?;
        HashMap::<_, u32, u64>::try_from(map)
            .ok()?
            .get(&pid, 0)
            .ok()
    }

    /// Bytes of `stat` the CPUs hold back for a cgroup, not yet in its total (see
    /// `Config::budget_pages`), read from `PENDING` now.
    pub fn held_back(&self, cgroup_id: u64, stat: Stat) -> Result<i64, aya::maps::MapError> {
        let map = self.ebpf.map("PENDING").ok_or_else(missing_map)?;
        let pending = PerCpuArray::<_, PendingPages>::try_from(map)?;
        let mut pages = 0;
        for slot in 0..NPENDING {
            for cpu in pending.get(&slot, 0)?.iter() {
                if cpu.cgroup_id == cgroup_id {
                    pages += cpu.pages[stat as usize];
                }
            }
        }
        Ok(pages * self.page_size as i64)
    }

    /// Ids of the cgroups the kernel keeps aggregates for, read from `CGROUP_STATS` now.
    pub fn tracked_cgroups(&self) -> Result<Vec<u64>, aya::maps::MapError> {
        let map = self.ebpf.map("CGROUP_STATS").ok_or_else(missing_map)?;
        HashMap::<_, u64, CgroupCounters>::try_from(map)?
            .keys()
            .collect()
    }

    /// Deletes the kernel's aggregates of cgroups that no longer exist under `mount` (the
    /// memory hierarchy). The kernel already keeps removed cgroups out of `CGROUP_STATS`
    /// for as long as its list of removed ids holds them; this catches the rest: cgroups
    /// removed before the programs attached whose leftover pages are uncharged later, and
    /// dying cgroups that outlived their slot in that list. The keys are listed before the
    /// hierarchy is walked, so a cgroup created meanwhile is never taken for a dead one.
    /// Returns the walk (for the caller's own use) and how many entries were deleted.
    pub fn sweep_stale(&mut self, mount: &Path) -> Result<(CgroupPaths, usize), SweepError> {
        let tracked = self.tracked_cgroups()?;
        let live = CgroupPaths::scan(mount).map_err(SweepError::Scan)?;
        let map = self.ebpf.map_mut("CGROUP_STATS").ok_or_else(missing_map)?;
        let mut stats = HashMap::<_, u64, CgroupCounters>::try_from(map)?;
        let mut deleted = 0;
        for id in tracked.into_iter().filter(|id| live.get(*id).is_none()) {
            match stats.remove(&id) {
                Ok(()) => deleted += 1,
                // Removed by the kernel's rmdir program in the meantime.
                Err(aya::maps::MapError::KeyNotFound) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok((live, deleted))
    }

    /// What was lost since the previous call (see [`Self::drops`] for the totals): the
    /// agent's cue to rescan cgroups when `ring_full` is not 0, and the increments of its
    /// loss metrics.
    pub fn new_drops(&mut self) -> Drops {
        let now = self.drops();
        let new = now.since(self.drops_reported);
        self.drops_reported = now;
        new
    }

    /// Records lost so far: dropped by the kernel (summed over CPUs) or undecodable.
    pub fn drops(&self) -> Drops {
        let kernel = self.kernel_drops();
        Drops {
            undecodable: self.undecodable,
            ..kernel
        }
    }

    fn kernel_drops(&self) -> Drops {
        let Some(map) = self.ebpf.map("DROPS") else {
            return Drops::default();
        };
        let Ok(counters) = PerCpuArray::<_, u64>::try_from(map) else {
            return Drops::default();
        };
        let sum = |reason: DropReason| {
            counters
                .get(&(reason as u32), 0)
                .map_or(0, |per_cpu| per_cpu.iter().sum())
        };
        Drops {
            ring_full: sum(DropReason::RingFull),
            map_full: sum(DropReason::MapFull),
            undecodable: 0,
        }
    }
}

/// Tracepoint category of the per-cgroup memory programs.
const MEMCG_CATEGORY: &str = "memcg";
/// The programs whose records end the fentry programs' cached ids (`LIFECYCLE_GENERATION`).
const LIFECYCLE_PROGRAMS: [&str; 2] = ["cgroup_mkdir", "cgroup_rmdir"];

/// What the fentry programs attach to and the offsets they read, resolved from BTF before
/// it is freed; an error says why fentry cannot be used.
struct FentryPlan {
    hooks: Vec<(&'static FentrySpec, &'static str)>,
    offsets: MemcgOffsets,
}

impl FentryPlan {
    fn resolve(types: &Types<'_>) -> Result<Self, String> {
        let targets = fentry_targets::targets(types).map_err(|e| e.to_string())?;
        let hooks = targets
            .into_iter()
            .map(|FentryTarget { program, function }| function.map(|f| (program, f)))
            .collect::<Result<_, _>>()?;
        let offsets = fentry_targets::memcg_offsets(types).map_err(|e| e.to_string())?;
        Ok(Self { hooks, offsets })
    }
}

/// Loads and attaches every fentry program of the plan, or none: a lone one would count
/// part of the memory. aya needs the kernel's BTF in its own form to name the function to
/// the kernel; it is parsed here only, and freed before returning.
fn attach_fentry(
    ebpf: &mut Ebpf,
    plan: FentryPlan,
    stat_links: &mut StatLinks,
) -> Result<Vec<(&'static FentrySpec, &'static str)>, String> {
    Array::<_, MemcgOffsets>::try_from(
        ebpf.map_mut("MEMCG_OFFSETS")
            .ok_or("kernel map MEMCG_OFFSETS missing")?,
    )
    .and_then(|mut array| array.set(0, plan.offsets, 0))
    .map_err(|e| format!("writing MEMCG_OFFSETS: {e}"))?;
    let btf = Btf::from_sys_fs().map_err(|e| format!("reading the kernel's BTF: {e}"))?;
    let mut loaded = Vec::new();
    let mut result = Ok(());
    for (program, function) in &plan.hooks {
        match load_fentry(ebpf, program.name, function, &btf) {
            Ok(link) => loaded.push((program.name, link)),
            Err(reason) => {
                result = Err(reason);
                break;
            }
        }
    }
    if let Err(reason) = result {
        for (name, _) in loaded {
            if let Some(Ok(program)) = ebpf.program_mut(name).map(<&mut FEntry>::try_from) {
                let _ = program.unload();
            }
        }
        return Err(reason);
    }
    for (name, link) in loaded {
        stat_links.fentry(name, link);
    }
    Ok(plan.hooks)
}

fn load_fentry(
    ebpf: &mut Ebpf,
    name: &str,
    function: &str,
    btf: &Btf,
) -> Result<FEntryLinkId, String> {
    let program: &mut FEntry = ebpf
        .program_mut(name)
        .ok_or_else(|| format!("program {name} is not in the embedded object"))?
        .try_into()
        .map_err(|e| format!("program {name}: {e}"))?;
    program
        .load(function, btf)
        .map_err(|e| format!("loading fentry on {function}: {e}"))?;
    program
        .attach()
        .map_err(|e| format!("attaching fentry to {function}: {e}"))
}

/// The raw tracepoint programs and the memcg tracepoint each hooks.
const RAW_PROGRAMS: [(&str, &str); 2] = [
    ("raw_memcg_lruvec_state", "mod_memcg_lruvec_state"),
    ("raw_memcg_state", "mod_memcg_state"),
];

/// The arguments both memcg tracepoints have had since 6.13, as the raw programs read them.
const RAW_PARAMS: [&str; 3] = ["struct mem_cgroup *", "int", "int"];

/// Whether BTF gives both memcg tracepoints the arguments the raw programs read.
/// Whether the raw memcg programs can run here: the tracepoints' prototypes are the ones the
/// programs read, and the struct offsets they need resolve (the same the fentry programs use).
pub(crate) fn raw_tracepoints_usable(types: &Types<'_>) -> Result<(), String> {
    check_raw_prototypes(types)?;
    FentryPlan::resolve(types).map(|_| ())
}

fn check_raw_prototypes(types: &Types<'_>) -> Result<(), String> {
    for (_, tracepoint) in RAW_PROGRAMS {
        match types
            .tracepoint_params(tracepoint)
            .map_err(|e| e.to_string())?
        {
            Some(params) if params == RAW_PARAMS => {}
            Some(params) => {
                return Err(format!(
                    "tracepoint {tracepoint} has arguments ({}), the raw programs read ({})",
                    params.join(", "),
                    RAW_PARAMS.join(", ")
                ));
            }
            None => return Err(format!("the kernel's BTF has no tracepoint {tracepoint}")),
        }
    }
    Ok(())
}

/// Attaches both raw memcg programs, or neither (a lone one would count part of the memory).
fn attach_raw(
    ebpf: &mut Ebpf,
    offsets: MemcgOffsets,
    stat_links: &mut StatLinks,
) -> Result<(), String> {
    Array::<_, MemcgOffsets>::try_from(
        ebpf.map_mut("MEMCG_OFFSETS")
            .ok_or("kernel map MEMCG_OFFSETS missing")?,
    )
    .and_then(|mut array| array.set(0, offsets, 0))
    .map_err(|e| format!("writing MEMCG_OFFSETS: {e}"))?;
    let mut links = Vec::new();
    for (name, tracepoint) in RAW_PROGRAMS {
        let program: &mut RawTracePoint = ebpf
            .program_mut(name)
            .ok_or_else(|| format!("program {name} is not in the embedded object"))?
            .try_into()
            .map_err(|e| format!("program {name}: {e}"))?;
        let attached = program
            .load()
            .map_err(|e| format!("loading {name}: {e}"))
            .and_then(|()| {
                program
                    .attach(tracepoint)
                    .map_err(|e| format!("attaching {name} to {tracepoint}: {e}"))
            });
        match attached {
            Ok(link) => links.push((name, tracepoint, link)),
            Err(reason) => {
                for (name, _, link) in links {
                    if let Some(Ok(program)) =
                        ebpf.program_mut(name).map(<&mut RawTracePoint>::try_from)
                    {
                        let _ = program.detach(link);
                    }
                }
                return Err(reason);
            }
        }
    }
    for (name, tracepoint, link) in links {
        stat_links.raw(name, tracepoint, link);
    }
    Ok(())
}

/// Says, for each memcg program not attached, why fentry could not stand in.
fn note_fentry_failure(skipped: &mut Vec<Skipped>, reason: &str) {
    for program in PROGRAMS.iter().filter(|p| p.category == MEMCG_CATEGORY) {
        match skipped.iter_mut().find(|s| s.program.name == program.name) {
            Some(entry) => entry.reason = format!("{}; fentry: {reason}", entry.reason),
            None => skipped.push(Skipped {
                program,
                reason: format!("fentry: {reason}"),
            }),
        }
    }
}

fn map<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut aya::maps::Map, LoadError> {
    ebpf.map_mut(name).ok_or_else(|| LoadError::Map {
        name,
        source: missing_map(),
    })
}

fn missing_map() -> aya::maps::MapError {
    aya::maps::MapError::InvalidName {
        name: "not in the embedded object".into(),
    }
}

/// Kernel item numbers of the tracked stats, from BTF.
fn config_for(btf: &Types<'_>, options: LoadOptions) -> Result<Config, LoadError> {
    let node = btf.enum_values("node_stat_item")?;
    let memcg = btf.enum_values("memcg_stat_item")?;
    let mut config = Config::EMPTY;
    config.step_bytes = options.step_bytes.max(1);
    config.page_size = page_size();
    config.hierarchy_id = options.hierarchy_id;
    config.budget_pages = options.budget_pages.unwrap_or_else(|| {
        default_budget_pages(config.step_bytes, config.page_size, possible_cpus())
    });
    for stat in Stat::ALL {
        let slot = stat as usize;
        let (lruvec, memcg_item) = match stat {
            Stat::Anon => (Some("NR_ANON_MAPPED"), None),
            Stat::File => (Some("NR_FILE_PAGES"), None),
            Stat::InactiveFile => (Some("NR_INACTIVE_FILE"), None),
            Stat::ActiveFile => (Some("NR_ACTIVE_FILE"), None),
            Stat::Kernel => (None, Some("MEMCG_KMEM")),
        };
        config.lruvec_items[slot] = match lruvec {
            Some(name) => item(btf::variant(&node, "node_stat_item", name)?),
            None => NO_ITEM,
        };
        config.memcg_items[slot] = match memcg_item {
            Some(name) => item(btf::variant(&memcg, "memcg_stat_item", name)?),
            None => NO_ITEM,
        };
    }
    debug_assert_eq!(config.lruvec_items.len(), NSTATS);
    Ok(config)
}

/// The incident programs' settings. A memory controller on its own v1 hierarchy (id > 0) needs
/// the task -> memory cgroup offsets for the current task; on v2 the programs ask the kernel
/// for its cgroup id. The OOM victim's program needs them on both.
fn incident_config_for(
    btf: &Types<'_>,
    options: LoadOptions,
    incidents: IncidentOptions,
) -> Result<IncidentConfig, LoadError> {
    let mut config = IncidentConfig::EMPTY;
    config.min_stall_ns = u64::try_from(incidents.min_stall.as_nanos())
        .unwrap_or(u64::MAX)
        .max(1);
    Ok(task_memcg::task_offsets(
        btf,
        config,
        options.hierarchy_id > 0,
    )?)
}

/// The raw program that records each OOM victim's memory cgroup, and the tracepoint
/// arguments it reads (6.8+).
const VICTIM_PROGRAM: (&str, &str) = ("raw_mark_victim", "mark_victim");
const VICTIM_PARAMS: [&str; 2] = ["struct task_struct *", "uid_t"];

/// Whether BTF gives `oom/mark_victim` the arguments `raw_mark_victim` reads.
fn victim_prototype(types: &Types<'_>) -> Result<(), String> {
    let (_, tracepoint) = VICTIM_PROGRAM;
    match types
        .tracepoint_params(tracepoint)
        .map_err(|e| e.to_string())?
    {
        Some(params) if params == VICTIM_PARAMS => Ok(()),
        Some(params) => Err(format!(
            "tracepoint {tracepoint} has arguments ({}), the program reads ({})",
            params.join(", "),
            VICTIM_PARAMS.join(", ")
        )),
        None => Err(format!("the kernel's BTF has no tracepoint {tracepoint}")),
    }
}

/// Attaches `raw_mark_victim` beside the classic `mark_victim` program. Without it an OOM
/// kill names its victim's cgroup from /proc, which a victim that exits first no longer shows.
fn attach_victim_cgroups(ebpf: &mut Ebpf, prototype: Result<(), String>) -> Result<(), String> {
    prototype?;
    let (name, tracepoint) = VICTIM_PROGRAM;
    let program: &mut RawTracePoint = ebpf
        .program_mut(name)
        .ok_or_else(|| format!("program {name} is not in the embedded object"))?
        .try_into()
        .map_err(|e| format!("program {name}: {e}"))?;
    program.load().map_err(|e| format!("loading {name}: {e}"))?;
    // The program keeps its link until the object is dropped.
    program
        .attach(tracepoint)
        .map(drop)
        .map_err(|e| format!("attaching {name} to {tracepoint}: {e}"))
}

fn item(value: i64) -> i32 {
    i32::try_from(value).unwrap_or(NO_ITEM)
}

/// CPUs the per-CPU maps have a slot for; 1 if the kernel does not say (a budget too small
/// costs speed, never accuracy).
fn possible_cpus() -> usize {
    aya::util::nr_cpus().unwrap_or(1)
}

/// Loads the given programs and attaches those whose tracepoint exists with the fields the
/// program reads, at the offsets this kernel's format gives.
fn attach_all(
    ebpf: &mut Ebpf,
    programs: impl Iterator<Item = &'static ProgramSpec>,
    stat_links: &mut StatLinks,
) -> Result<(Vec<&'static ProgramSpec>, Vec<Skipped>), LoadError> {
    let tracefs = probe::ensure_tracefs()?;
    let mut attached = Vec::new();
    let mut skipped = Vec::new();
    for spec in programs {
        if !probe::tracepoint_exists(&tracefs, spec) {
            skipped.push(Skipped {
                program: spec,
                reason: format!("this kernel has no tracepoint {}", spec.hook()),
            });
            continue;
        }
        if let Err(reason) = write_fields(ebpf, &tracefs, spec) {
            skipped.push(Skipped {
                program: spec,
                reason: format!("tracepoint {}: {reason}", spec.hook()),
            });
            continue;
        }
        let program: &mut TracePoint = ebpf
            .program_mut(spec.name)
            .ok_or_else(|| LoadError::Program {
                name: spec.name,
                source: aya::programs::ProgramError::UnexpectedProgramType,
            })?
            .try_into()
            .map_err(|source| LoadError::Program {
                name: spec.name,
                source,
            })?;
        program.load().map_err(|source| LoadError::Program {
            name: spec.name,
            source,
        })?;
        match program.attach(spec.category, spec.tracepoint) {
            Ok(link) => {
                if spec.category == MEMCG_CATEGORY {
                    stat_links.classic(spec.name, spec.category, spec.tracepoint, link);
                }
                attached.push(spec);
            }
            Err(err) => skipped.push(Skipped {
                program: spec,
                reason: err.to_string(),
            }),
        }
    }
    Ok((attached, skipped))
}

/// Reads the offsets of the fields the program reads from this kernel's format and writes
/// them into its `FIELDS` entry; an error says why the program cannot run here.
fn write_fields(ebpf: &mut Ebpf, tracefs: &Path, spec: &ProgramSpec) -> Result<(), String> {
    let Some(slot) = spec.fields_slot else {
        return Ok(());
    };
    let offsets = tracepoint_format::read(tracefs, spec).map_err(|e| e.to_string())?;
    Array::<_, FieldOffsets>::try_from(ebpf.map_mut("FIELDS").ok_or("kernel map FIELDS missing")?)
        .and_then(|mut array| array.set(slot as u32, offsets, 0))
        .map_err(|e| format!("writing FIELDS: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup_map_is_sized_to_four_times_the_node_s_cgroups_within_bounds() {
        for (cgroups, entries) in [
            (0, CGROUP_MAP_MIN_ENTRIES),
            (300, 4096),
            (1100, 8192),
            (4200, 32768),
            (16384, 65536),
            (1_000_000, CGROUP_MAP_MAX_ENTRIES),
            (usize::MAX, CGROUP_MAP_MAX_ENTRIES),
        ] {
            assert_eq!(cgroup_map_entries(cgroups), entries, "{cgroups} cgroups");
        }
    }

    #[test]
    fn the_default_budget_holds_back_less_than_a_quarter_step_on_all_cpus() {
        const KIB: u64 = 1024;
        let cases = [
            ("default step, 2 CPUs", 256 * KIB, 4096, 2, 8),
            ("default step, 1 CPU", 256 * KIB, 4096, 1, 16),
            (
                "default step, 64 CPUs: every update at once",
                256 * KIB,
                4096,
                64,
                1,
            ),
            ("large step, 64 CPUs", 64 * 1024 * KIB, 4096, 64, 64),
            ("64 KiB pages", 256 * KIB, 64 * KIB, 2, 1),
            ("no CPU count", 256 * KIB, 4096, 0, 16),
        ];
        for (name, step, page, ncpus, want) in cases {
            let budget = default_budget_pages(step, page, ncpus);
            assert_eq!(budget, want, "{name}");
            let held = u64::from(budget - 1) * ncpus.max(1) as u64 * page;
            assert!(
                budget == 1 || held < step / 4,
                "{name}: {held} bytes held back"
            );
        }
    }

    #[test]
    fn new_drops_are_the_increase_of_each_counter() {
        let earlier = Drops {
            ring_full: 5,
            map_full: 1,
            undecodable: 0,
        };
        let now = Drops {
            ring_full: 9,
            map_full: 1,
            undecodable: 2,
        };
        let cases = [
            (
                "some counters rose",
                now,
                earlier,
                Drops {
                    ring_full: 4,
                    map_full: 0,
                    undecodable: 2,
                },
            ),
            ("nothing new", now, now, Drops::default()),
            ("first call", now, Drops::default(), now),
        ];
        for (name, now, earlier, want) in cases {
            assert_eq!(now.since(earlier), want, "{name}");
        }
    }
}
