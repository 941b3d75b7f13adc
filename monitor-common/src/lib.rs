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
    pub _pad: u32,
}

impl Config {
    /// A configuration that tracks nothing; userspace fills in the items.
    pub const EMPTY: Config = Config {
        step_bytes: 0,
        page_size: 4096,
        lruvec_items: [NO_ITEM; NSTATS],
        memcg_items: [NO_ITEM; NSTATS],
        hierarchy_id: -1,
        _pad: 0,
    };
}

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
}

impl EventKind {
    /// The kind for a raw tag, if known.
    pub fn from_raw(raw: u32) -> Option<EventKind> {
        match raw {
            1 => Some(EventKind::Stat),
            2 => Some(EventKind::Mkdir),
            3 => Some(EventKind::Rmdir),
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
}

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

// Both sides must agree on these layouts byte for byte.
const _: () = assert!(core::mem::size_of::<Config>() == 64);
const _: () = assert!(core::mem::size_of::<CgroupCounters>() == 16 * NSTATS);
const _: () = assert!(core::mem::size_of::<StatEvent>() == 40);
const _: () = assert!(core::mem::size_of::<CgroupEvent>() == 32 + PATH_MAX);

#[cfg(feature = "user")]
mod pod_impls {
    // SAFETY: all four are repr(C) integer aggregates with no padding holes left implicit, so
    // every bit pattern is a valid value.
    unsafe impl aya::Pod for super::Config {}
    unsafe impl aya::Pod for super::CgroupCounters {}
    unsafe impl aya::Pod for super::StatEvent {}
    unsafe impl aya::Pod for super::CgroupEvent {}
}
