//! Types shared by the kernel programs (`monitor-ebpf`) and the userspace agent (`monitor`).
//!
//! Everything here is `#[repr(C)]` plain data with sizes checked at compile time, because
//! both sides read the same bytes: the kernel writes events into a ring buffer and userspace
//! writes the configuration into an array map. Enable the `user` feature on the userspace side
//! to get aya's `Pod` impls.
#![no_std]

/// Memory statistics the kernel programs aggregate per cgroup.
///
/// The kernel reports them by item number of `enum node_stat_item` (tracepoint
/// `memcg/mod_memcg_lruvec_state`) or `enum memcg_stat_item` (`memcg/mod_memcg_state`). Those
/// numbers change between kernel builds, so userspace resolves them from the running kernel's
/// BTF and writes them into [`Config`]; the slot numbers below are our own and stable.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stat {
    /// Anonymous memory mapped by processes (`NR_ANON_MAPPED`; memory.stat `rss`/`anon`).
    Anon = 0,
    /// Page cache (`NR_FILE_PAGES`; memory.stat `cache`/`file`).
    File = 1,
    /// Page cache on the inactive LRU (`NR_INACTIVE_FILE`), subtracted for the working set.
    InactiveFile = 2,
    /// Page cache on the active LRU (`NR_ACTIVE_FILE`).
    ActiveFile = 3,
    /// Kernel memory charged to the cgroup (`MEMCG_KMEM`).
    Kernel = 4,
}

/// Number of [`Stat`] slots.
pub const NSTATS: usize = 5;

impl Stat {
    /// All stats in slot order.
    pub const ALL: [Stat; NSTATS] = [
        Stat::Anon,
        Stat::File,
        Stat::InactiveFile,
        Stat::ActiveFile,
        Stat::Kernel,
    ];

    /// The stat in a slot, if the slot is valid.
    pub fn from_slot(slot: u32) -> Option<Stat> {
        Stat::ALL.get(slot as usize).copied()
    }

    /// How a change of this stat moves the working set (usage - inactive_file, as the
    /// kubelet computes it): +1, -1 or 0 times the change.
    pub fn working_set_sign(self) -> i64 {
        match self {
            Stat::Anon | Stat::File | Stat::Kernel => 1,
            Stat::InactiveFile => -1,
            Stat::ActiveFile => 0,
        }
    }

    /// Name as it appears in cgroup v2's memory.stat.
    pub fn name(self) -> &'static str {
        match self {
            Stat::Anon => "anon",
            Stat::File => "file",
            Stat::InactiveFile => "inactive_file",
            Stat::ActiveFile => "active_file",
            Stat::Kernel => "kernel",
        }
    }
}

/// Marks an unused entry in [`Config::lruvec_items`] and [`Config::memcg_items`].
pub const NO_ITEM: i32 = -1;

/// Configuration written by userspace into the single entry of the `CONFIG` array map.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// A [`StatEvent`] is sent when a stat moved by at least this many bytes since the last
    /// event for the same cgroup and stat. 0 means the programs are not configured yet and
    /// aggregate silently.
    pub step_bytes: u64,
    /// Page size of the running kernel; tracepoint values are in pages.
    pub page_size: u64,
    /// `node_stat_item` number for each [`Stat`] slot, or [`NO_ITEM`].
    pub lruvec_items: [i32; NSTATS],
    /// `memcg_stat_item` number for each [`Stat`] slot, or [`NO_ITEM`].
    pub memcg_items: [i32; NSTATS],
    /// Hierarchy id whose cgroup mkdir/rmdir events matter (the memory controller's hierarchy
    /// on cgroup v1, 0 for the unified hierarchy), or -1 for every hierarchy.
    pub hierarchy_id: i32,
    /// Per-CPU budget in pages: a stat update stays in its CPU's [`PendingPages`] while that
    /// CPU's unfolded sum for the cgroup and stat is smaller than this in magnitude, and is
    /// added to the cgroup's [`CgroupCounters`] (and checked against the step) only once it
    /// is not. 0 or 1: every update is added at once.
    pub budget_pages: u32,
}

impl Config {
    /// A configuration that tracks nothing; userspace fills in the items.
    pub const EMPTY: Config = Config {
        step_bytes: 0,
        page_size: 4096,
        lruvec_items: [NO_ITEM; NSTATS],
        memcg_items: [NO_ITEM; NSTATS],
        hierarchy_id: -1,
        budget_pages: 0,
    };
}

/// Stat updates one CPU holds back for one cgroup, below [`Config::budget_pages`] each: an
/// entry of the per-CPU `PENDING` array map, one per memcg program ([`PendingSlot`]).
///
/// A cgroup's true sum of a stat is its [`CgroupCounters::pages`] plus its pending pages on
/// every CPU; each CPU holds back less than the budget, so the kernel's total lags the true
/// one by less than `ncpus * budget_pages` pages per stat.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PendingPages {
    /// The cgroup whose updates are pending; 0 (no cgroup has that id): none.
    pub cgroup_id: u64,
    /// The kernel pointer (memcg or lruvec) the program resolved `cgroup_id` from; 0 for
    /// the classic tracepoints, which are handed the id.
    pub resolved_from: u64,
    /// `LIFECYCLE_GENERATION` read before `cgroup_id` was resolved; 0: not to be reused.
    pub generation: i64,
    /// Pages not yet added to the cgroup's [`CgroupCounters::pages`], per [`Stat`] slot.
    pub pages: [i64; NSTATS],
}

/// The entries of the `PENDING` per-CPU array map: one per memcg program, because a program
/// may interrupt the other on its CPU but never itself.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PendingSlot {
    /// The program on `mod_memcg_lruvec_state` (or its fentry / raw form).
    Lruvec = 0,
    /// The program on `mod_memcg_state` (or its fentry / raw form).
    Memcg = 1,
}

/// Number of [`PendingSlot`]s.
pub const NPENDING: u32 = 2;

/// Per-cgroup aggregate kept in the `CGROUP_STATS` hash map, keyed by cgroup id.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupCounters {
    /// Pages accumulated per stat since the programs were attached (deltas, may be negative).
    pub pages: [i64; NSTATS],
    /// Value of `pages` when the last event for that stat was sent.
    pub reported: [i64; NSTATS],
}

/// Kind tag at the start of every ring-buffer record.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A [`StatEvent`].
    Stat = 1,
    /// A [`CgroupEvent`] for a new cgroup.
    Mkdir = 2,
    /// A [`CgroupEvent`] for a removed cgroup.
    Rmdir = 3,
    /// A [`StallEvent`] for a task in direct (global) reclaim.
    DirectStall = 4,
    /// A [`StallEvent`] for a task reclaiming from a memory cgroup at its limit.
    MemcgStall = 5,
    /// A [`KswapdEvent`]: kswapd of a node woke up.
    KswapdWake = 6,
    /// A [`KswapdEvent`]: kswapd of a node went back to sleep.
    KswapdSleep = 7,
    /// An [`OomEvent`].
    OomVictim = 8,
    /// A [`ForkEvent`]: tasks were created up to the level userspace armed.
    Forks = 9,
}

impl EventKind {
    /// The kind for a raw tag, if known.
    pub fn from_raw(raw: u32) -> Option<EventKind> {
        match raw {
            1 => Some(EventKind::Stat),
            2 => Some(EventKind::Mkdir),
            3 => Some(EventKind::Rmdir),
            4 => Some(EventKind::DirectStall),
            5 => Some(EventKind::MemcgStall),
            6 => Some(EventKind::KswapdWake),
            7 => Some(EventKind::KswapdSleep),
            8 => Some(EventKind::OomVictim),
            9 => Some(EventKind::Forks),
            _ => None,
        }
    }
}

/// A significant change of one stat of one cgroup.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatEvent {
    /// [`EventKind::Stat`].
    pub kind: u32,
    /// [`Stat`] slot.
    pub stat: u32,
    /// Cgroup id: the inode number of the cgroup's directory.
    pub cgroup_id: u64,
    /// `bpf_ktime_get_ns()`, i.e. CLOCK_MONOTONIC, when the change crossed the step.
    pub ts_ns: u64,
    /// Bytes added (negative: removed) since the previous event for this cgroup and stat.
    pub delta_bytes: i64,
    /// Bytes accumulated since the programs were attached.
    pub total_bytes: i64,
    /// The [`WakeSlot::Growth`] sum after this record was counted.
    pub growth_bytes: i64,
}

/// When stat records wake userspace: the slots of the `WAKE` array map, one `i64` each (two
/// entries rather than one struct, so userspace can set its slot while the kernel adds to
/// the other).
///
/// Most records only keep the pod ranking current and can wait for userspace's next read;
/// the ones that may take a signal across a threshold must wake it at once. Userspace knows how
/// far each memory signal is from its thresholds, and no working set can grow by more than
/// all working sets together, so it sets the wake-up level to the growth that could close the
/// smallest distance, and records are sent without a wake-up until the growth reaches it.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WakeSlot {
    /// Sum of the working-set growth of every stat record sent (kernel-maintained; decreases
    /// are not subtracted, so it only rises).
    Growth = 0,
    /// Set by userspace: records wake it once the growth reaches this. 0, the initial value,
    /// leaves the ring buffer's usual behaviour: every record can wake the reader.
    WakeAt = 1,
    /// Tasks created (processes and threads, every `sched_process_fork`) since the programs
    /// were attached (kernel-maintained; exits are not subtracted, so it only rises).
    Forks = 2,
    /// Set by userspace: the [`ForkEvent`] is sent, with a wake-up, once `Forks` reaches
    /// this; the program that sends it sets it back to 0 (off), so one record per arming.
    /// Userspace arms it at the distance of `pid.available` from its nearest threshold:
    /// exits only add to what is available, so the record can come early, never late.
    ForkWakeAt = 3,
    /// Set by userspace to 1 when it ranks pods by their process counts: the fork and exit
    /// programs then mark the memory cgroup of each task created or ending in `TASK_CGROUPS`,
    /// so userspace re-counts those pods only. 0 (the initial value): nothing is marked.
    TaskCgroupsOn = 4,
    /// Set to 1 by the kernel when a mark could not be stored (its map full, or the task's
    /// cgroup unreadable); userspace swaps it back to 0 as it takes the marks and re-counts
    /// every pod, for some changes went unmarked.
    TaskCgroupsLost = 5,
}

/// Size of the `EVENTS` ring buffer in bytes. With 10,000 pods, a tenth of them churning,
/// the kernel sends about 60,000 records a second: 1 MiB holds a third of a second of them,
/// time enough for the agent's start-up (256 KiB overflowed there).
pub const EVENTS_BYTES: u64 = 1024 * 1024;

/// Most records one read of the ring can return: the ring full of the smallest record
/// ([`StatEvent`], plus the ring's 8-byte record header). Userspace sizes its batch buffer
/// with it at start, so reading never allocates under memory pressure.
pub const MAX_RECORDS: usize = EVENTS_BYTES as usize / (size_of::<StatEvent>() + 8);

/// Number of [`WakeSlot`]s.
pub const NWAKE: u32 = 6;

/// Longest cgroup path carried in a [`CgroupEvent`], including the NUL.
pub const PATH_MAX: usize = 256;

/// A cgroup was created or removed.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupEvent {
    /// [`EventKind::Mkdir`] or [`EventKind::Rmdir`].
    pub kind: u32,
    /// Depth below the hierarchy root (the root is 0).
    pub level: i32,
    /// Cgroup id: the inode number of the cgroup's directory.
    pub cgroup_id: u64,
    /// CLOCK_MONOTONIC nanoseconds.
    pub ts_ns: u64,
    /// Hierarchy id the cgroup belongs to.
    pub hierarchy_id: i32,
    /// Bytes of `path` in use, without the NUL.
    pub path_len: u32,
    /// Path relative to the hierarchy root, starting with `/`, NUL-terminated, truncated to fit.
    pub path: [u8; PATH_MAX],
}

/// Where the fentry stat programs find a memory cgroup's id, written by userspace into the
/// single entry of the `MEMCG_OFFSETS` map from the running kernel's BTF (member offsets
/// change between builds; no CO-RE relocation is needed this way).
///
/// `__mod_memcg_lruvec_state` gets a `struct lruvec *` embedded in a
/// `struct mem_cgroup_per_node`, whose `memcg` names the cgroup; `__mod_memcg_state` gets the
/// `struct mem_cgroup *` itself. The id is `memcg->css.cgroup->kn->id`, the same number the
/// memcg tracepoints report.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemcgOffsets {
    /// Byte offset of `mem_cgroup_per_node::lruvec`.
    pub pn_lruvec: u32,
    /// Byte offset of `mem_cgroup_per_node::memcg` (`struct mem_cgroup *`).
    pub pn_memcg: u32,
    /// Byte offset of `css.cgroup` in `struct mem_cgroup` (`struct cgroup *`).
    pub memcg_cgroup: u32,
    /// Byte offset of `cgroup::kn` (`struct kernfs_node *`).
    pub cgroup_kn: u32,
    /// Byte offset of `kernfs_node::id`.
    pub kernfs_id: u32,
    /// 1 once userspace wrote the offsets; the programs do nothing before.
    pub valid: u32,
}

impl MemcgOffsets {
    /// Not written yet.
    pub const EMPTY: MemcgOffsets = MemcgOffsets {
        pn_lruvec: 0,
        pn_memcg: 0,
        memcg_cgroup: 0,
        cgroup_kn: 0,
        kernfs_id: 0,
        valid: 0,
    };
}

/// Length of a task's `comm`, including the NUL (`TASK_COMM_LEN`).
pub const COMM_LEN: usize = 16;

/// How the incident programs (reclaim stalls, OOM kills) find a task's memory cgroup, and which
/// stalls matter. Written by userspace into the single entry of the `INCIDENT_CONFIG` map; kept
/// apart from [`Config`] so that layout stays unchanged.
///
/// On cgroup v2 `bpf_get_current_cgroup_id()` is the memory cgroup. On cgroup v1 the memory
/// controller has its own hierarchy, so the programs follow
/// `task->cgroups->subsys[memory_cgrp_id]->cgroup->kn->id` with `bpf_probe_read_kernel`, using
/// member offsets userspace read from the kernel's BTF (no CO-RE relocation needed).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IncidentConfig {
    /// Reclaim stalls shorter than this are not reported. 0 means not configured yet: nothing
    /// is reported.
    pub min_stall_ns: u64,
    /// 1 when the memory controller is on cgroup v1 and the offsets below are valid.
    pub memcg_v1: u32,
    /// `memory_cgrp_id` in `enum cgroup_subsys_id`: the index into `css_set::subsys`.
    pub memory_subsys: u32,
    /// Byte offset of `task_struct::cgroups` (`struct css_set *`).
    pub task_cgroups: u32,
    /// Byte offset of `css_set::subsys` (array of `struct cgroup_subsys_state *`).
    pub css_set_subsys: u32,
    /// Byte offset of `cgroup_subsys_state::cgroup`.
    pub css_cgroup: u32,
    /// Byte offset of `cgroup::kn` (`struct kernfs_node *`).
    pub cgroup_kn: u32,
    /// Byte offset of `kernfs_node::id`, the cgroup id.
    pub kernfs_id: u32,
    /// Byte offset of `task_struct::pid`; 0 until userspace resolved the offsets above on
    /// either cgroup version, which the OOM victim's raw program needs (it reads the victim's
    /// task, not the current one).
    pub task_pid: u32,
}

impl IncidentConfig {
    /// Reports nothing until userspace writes a configuration.
    pub const EMPTY: IncidentConfig = IncidentConfig {
        min_stall_ns: 0,
        memcg_v1: 0,
        memory_subsys: 0,
        task_cgroups: 0,
        css_set_subsys: 0,
        css_cgroup: 0,
        cgroup_kn: 0,
        kernfs_id: 0,
        task_pid: 0,
    };
}

/// A task spent at least `IncidentConfig::min_stall_ns` in reclaim before its allocation could
/// go on.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StallEvent {
    /// [`EventKind::DirectStall`] or [`EventKind::MemcgStall`].
    pub kind: u32,
    /// Process id (thread group id).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    pub _pad: u32,
    /// Memory cgroup of the stalled task (the sufferer). For memcg reclaim the cgroup at its
    /// limit is this one or one of its ancestors.
    pub cgroup_id: u64,
    /// CLOCK_MONOTONIC nanoseconds when reclaim began.
    pub start_ns: u64,
    /// How long the task was in reclaim.
    pub duration_ns: u64,
    /// Pages the reclaim freed.
    pub nr_reclaimed: u64,
    /// The task's command name, NUL-terminated.
    pub comm: [u8; COMM_LEN],
}

/// kswapd of a NUMA node woke up or went to sleep.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KswapdEvent {
    /// [`EventKind::KswapdWake`] or [`EventKind::KswapdSleep`].
    pub kind: u32,
    /// NUMA node.
    pub nid: i32,
    /// Allocation order that woke it (0 for sleep).
    pub order: i32,
    pub _pad: u32,
    /// CLOCK_MONOTONIC nanoseconds.
    pub ts_ns: u64,
}

/// Tasks were created up to the level userspace armed ([`WakeSlot::ForkWakeAt`]): at most
/// one record per arming, so it never crowds the ring.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForkEvent {
    /// [`EventKind::Forks`].
    pub kind: u32,
    pub _pad: u32,
    /// [`WakeSlot::Forks`] when the record was sent.
    pub forks: i64,
    /// CLOCK_MONOTONIC nanoseconds.
    pub ts_ns: u64,
}

/// The OOM killer chose a victim (tracepoint `oom/mark_victim`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OomEvent {
    /// [`EventKind::OomVictim`].
    pub kind: u32,
    /// The victim's pid.
    pub pid: u32,
    /// Memory cgroup of the task that ran the OOM killer: for a cgroup OOM, a task of the cgroup
    /// at its limit. The tracepoint does not name the victim's cgroup; userspace reads it from
    /// `/proc/<pid>/cgroup` while the victim still exits.
    pub trigger_cgroup_id: u64,
    /// CLOCK_MONOTONIC nanoseconds.
    pub ts_ns: u64,
    /// The victim's anonymous, file and shmem resident memory, in KiB.
    pub anon_rss_kb: u64,
    pub file_rss_kb: u64,
    pub shmem_rss_kb: u64,
    /// The victim's `oom_score_adj`.
    pub oom_score_adj: i32,
    pub _pad: u32,
    /// The victim's command name, NUL-terminated.
    pub comm: [u8; COMM_LEN],
}

/// Indexes of the `DROPS` per-CPU counter array: why something was not recorded.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// An event was not sent because the ring buffer was full.
    RingFull = 0,
    /// A cgroup could not be tracked because `CGROUP_STATS` was full.
    MapFull = 1,
}

/// Number of [`DropReason`] counters.
pub const NDROPS: u32 = 2;

/// Most tracepoint fields one program reads.
pub const MAX_FIELDS: usize = 6;

/// Where the fields a tracepoint program reads lie in this kernel's tracepoint record, in the
/// order the program's compatibility entry lists them (see [`field`]). Userspace reads them
/// from the tracepoint's tracefs `format` and writes them into the program's [`FieldsSlot`]
/// of the `FIELDS` array map before attaching; a program whose fields do not match is not
/// attached at all.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldOffsets {
    /// Byte offset of each field from the start of the record.
    pub offsets: [u32; MAX_FIELDS],
    /// Nonzero once userspace wrote the entry; a program reads nothing before.
    pub valid: u32,
    pub _pad: u32,
}

impl FieldOffsets {
    /// An entry not written yet.
    pub const EMPTY: FieldOffsets = FieldOffsets {
        offsets: [0; MAX_FIELDS],
        valid: 0,
        _pad: 0,
    };

    /// The offset of field `index` as a `usize`.
    pub fn at(&self, index: usize) -> usize {
        self.offsets.get(index).copied().unwrap_or(0) as usize
    }
}

/// The entry of the `FIELDS` map each tracepoint program reads its field offsets from.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldsSlot {
    MemcgLruvecState = 0,
    MemcgState = 1,
    CgroupMkdir = 2,
    CgroupRmdir = 3,
    KswapdWake = 4,
    KswapdSleep = 5,
    DirectReclaimEnd = 6,
    MemcgReclaimEnd = 7,
    MarkVictim = 8,
    CgroupAttachTask = 9,
}

/// Number of [`FieldsSlot`] entries.
pub const NFIELDS_SLOTS: u32 = 10;

/// Index of each field in [`FieldOffsets::offsets`], per tracepoint layout. They follow the
/// order of the `fields` of the program's compatibility entry in userspace, which a test
/// checks by name.
pub mod field {
    /// `memcg/mod_memcg_state` and `memcg/mod_memcg_lruvec_state`.
    pub mod memcg {
        pub const ID: usize = 0;
        pub const ITEM: usize = 1;
        pub const VAL: usize = 2;
    }
    /// `cgroup/cgroup_mkdir` and `cgroup/cgroup_rmdir`.
    pub mod cgroup {
        pub const ROOT: usize = 0;
        pub const LEVEL: usize = 1;
        pub const ID: usize = 2;
        pub const PATH: usize = 3;
    }
    /// `cgroup/cgroup_attach_task`.
    pub mod cgroup_attach {
        pub const DST_ROOT: usize = 0;
        pub const DST_ID: usize = 1;
    }
    /// `vmscan/mm_vmscan_kswapd_wake` (`ORDER`) and `_sleep` (`NID` only).
    pub mod kswapd {
        pub const NID: usize = 0;
        pub const ORDER: usize = 1;
    }
    /// `vmscan/mm_vmscan_direct_reclaim_end` and `vmscan/mm_vmscan_memcg_reclaim_end`.
    pub mod reclaim_end {
        pub const NR_RECLAIMED: usize = 0;
    }
    /// `oom/mark_victim`.
    pub mod mark_victim {
        pub const PID: usize = 0;
        pub const COMM: usize = 1;
        pub const ANON_RSS: usize = 2;
        pub const FILE_RSS: usize = 3;
        pub const SHMEM_RSS: usize = 4;
        pub const OOM_SCORE_ADJ: usize = 5;
    }
}

// Both sides must agree on these layouts byte for byte.
const _: () = assert!(size_of::<Config>() == 64);
const _: () = assert!(size_of::<CgroupCounters>() == 16 * NSTATS);
const _: () = assert!(size_of::<PendingPages>() == 24 + 8 * NSTATS);
const _: () = assert!(size_of::<StatEvent>() == 48);
const _: () = assert!(size_of::<CgroupEvent>() == 32 + PATH_MAX);
const _: () = assert!(size_of::<IncidentConfig>() == 40);
const _: () = assert!(size_of::<MemcgOffsets>() == 24);
const _: () = assert!(size_of::<StallEvent>() == 48 + COMM_LEN);
const _: () = assert!(size_of::<KswapdEvent>() == 24);
const _: () = assert!(size_of::<ForkEvent>() == 24);
const _: () = assert!(size_of::<OomEvent>() == 56 + COMM_LEN);
const _: () = assert!(size_of::<FieldOffsets>() == 4 * MAX_FIELDS + 8);

#[cfg(feature = "user")]
mod pod_impls {
    // SAFETY: all of these are repr(C) integer aggregates with no padding holes left implicit,
    // so every bit pattern is a valid value.
    unsafe impl aya::Pod for super::Config {}
    unsafe impl aya::Pod for super::CgroupCounters {}
    unsafe impl aya::Pod for super::PendingPages {}
    unsafe impl aya::Pod for super::StatEvent {}
    unsafe impl aya::Pod for super::CgroupEvent {}
    unsafe impl aya::Pod for super::IncidentConfig {}
    unsafe impl aya::Pod for super::MemcgOffsets {}
    unsafe impl aya::Pod for super::StallEvent {}
    unsafe impl aya::Pod for super::KswapdEvent {}
    unsafe impl aya::Pod for super::ForkEvent {}
    unsafe impl aya::Pod for super::OomEvent {}
    unsafe impl aya::Pod for super::FieldOffsets {}
}
