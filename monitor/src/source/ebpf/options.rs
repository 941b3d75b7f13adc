//! What the loader is asked for: the stat programs' step and budget, the per-cgroup map's
//! size, the memcg hook, and the incident programs' settings.
use std::{path::Path, time::Duration};

use crate::{cgroupfs::CgroupPaths, source::hook_plan::MemcgHook};

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

/// Entries of the per-cgroup map for a node whose memory hierarchy holds `cgroups` now: the
/// power of two at or above twice as many (room for two to four times today's cgroups, for
/// the pods yet to come; removed cgroups leave the map as they go), within the bounds.
/// Every entry is preallocated and charged to the agent, so more room costs the node's
/// memory. A cgroup that finds the map full gets no records and is counted
/// (`monitor_cgroup_map_full_total`); it is still read at each resync.
pub fn cgroup_map_entries(cgroups: usize) -> u32 {
    let wanted = u32::try_from(cgroups.saturating_mul(2)).unwrap_or(u32::MAX);
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

/// Settings for the incident programs (reclaim stalls, kswapd, OOM kills).
#[derive(Clone, Copy, Debug)]
pub struct IncidentOptions {
    /// Reclaim stalls shorter than this are not sent (rounded up to at least 1 ns).
    pub min_stall: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cgroup_map_is_sized_to_two_to_four_times_the_node_s_cgroups_within_bounds() {
        for (cgroups, entries) in [
            (0, CGROUP_MAP_MIN_ENTRIES),
            (300, 4096),
            (2100, 8192),
            (4200, 16384),
            (10_300, 32768),
            (16384, 32768),
            (16385, 65536),
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
}
