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
//! One module per concern: what is asked (`options`), the configuration maps
//! (`kernel_config`), one module per hook kind (`raw_tracepoints`, `tracepoints`,
//! `fentry_hooks`, `victim_cgroups`) with the errors they share (`attach_error`), the walk
//! over the plan `monitor doctor` shows ([`super::hook_plan`]) that picks the memcg
//! programs' hook (`memcg_hooks`), the stat programs' links (`stat_links`), the ring
//! (`ring`), the per-cgroup aggregates (`aggregates`) and what was lost (`drops`).
//!
//! Minimum kernel: 5.8 (BPF ring buffer) with BTF; the memcg stat programs need 6.8.
mod aggregates;
mod attach_error;
mod drops;
mod fentry_hooks;
mod kernel_config;
mod load_error;
mod memcg_hooks;
mod memcg_offsets;
mod options;
mod raw_tracepoints;
mod ring;
mod stat_links;
mod task_marks;
mod tracepoints;
mod victim_cgroups;
mod without_kernel_btf;

use std::path::Path;

use aya::{
    Ebpf,
    maps::{Array, MapData, RingBuf},
};
use monitor_common::{Config, IncidentConfig};
use tokio::io::{Interest, unix::AsyncFd};

pub use super::hook_plan::MemcgHook;
pub use drops::Drops;
pub use load_error::LoadError;
pub use options::{
    CGROUP_MAP_ENTRY_BYTES, CGROUP_MAP_MAX_ENTRIES, CGROUP_MAP_MIN_ENTRIES, IncidentOptions,
    LoadOptions, cgroup_map_entries, cgroup_map_entries_at, default_budget_pages,
};
pub use stat_links::StatLinkError;
use stat_links::StatLinks;
use task_marks::MarkState;
pub use task_marks::TaskCgroups;

pub(crate) use kernel_config::stat_items;
use kernel_config::{config_for, incident_config_for};
use memcg_hooks::{MemcgAttached, MemcgPlan};
pub(crate) use raw_tracepoints::raw_tracepoints_usable;
use tracepoints::attach_all;
use victim_cgroups::{VICTIM_PROGRAM, attach_victim_cgroups, victim_prototype};

use super::{
    btf::{Types, VMLINUX_BTF},
    btf_bytes::BtfBytes,
    programs::{FentrySpec, INCIDENT_PROGRAMS, PROGRAMS, ProgramSpec},
    run_stats::ProgramRuns,
    tracefs::ensure_tracefs,
};

static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/monitor"));

/// A program that was not attached, and why.
#[derive(Clone, Debug)]
pub struct Skipped {
    pub program: &'static ProgramSpec,
    pub reason: String,
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
    /// The incident programs' configuration (with the task -> memory cgroup offsets) is
    /// written, so the task programs can name a task's cgroup.
    incidents: bool,
    /// Whether the task programs mark cgroups for the PID ranking.
    task_marks: MarkState,
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
        let memcg_plan = MemcgPlan::resolve(options.memcg_hook, &types);
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
        let incidents_written = incident_config.is_some();
        let incident_programs = if incidents.is_some() {
            INCIDENT_PROGRAMS
        } else {
            &[]
        };
        let tracefs = ensure_tracefs()?;
        let mut stat_links = StatLinks::default();
        let MemcgAttached {
            mut attached,
            mut skipped,
            fentry,
        } = memcg_plan.attach(&mut ebpf, &tracefs, &mut stat_links)?;
        let others = PROGRAMS
            .iter()
            .filter(|p| p.category != MEMCG_CATEGORY)
            .chain(incident_programs);
        let (others_attached, others_skipped) =
            attach_all(&mut ebpf, &tracefs, others, &mut stat_links)?;
        attached.extend(others_attached);
        skipped.extend(others_skipped);
        if attached.iter().any(|p| p.name == VICTIM_PROGRAM.1)
            && let Err(reason) = attach_victim_cgroups(&mut ebpf, victim_check)
        {
            tracing::info!("OOM victims' cgroups read from /proc only: {reason}");
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
            incidents: incidents_written,
            task_marks: MarkState::Off,
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
}

/// Tracepoint category of the per-cgroup memory programs.
const MEMCG_CATEGORY: &str = "memcg";
/// The programs whose records end the fentry programs' cached ids (`LIFECYCLE_GENERATION`).
const LIFECYCLE_PROGRAMS: [&str; 2] = ["cgroup_mkdir", "cgroup_rmdir"];

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
