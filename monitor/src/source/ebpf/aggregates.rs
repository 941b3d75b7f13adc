//! The kernel's per-cgroup aggregates read from its maps: running totals, what the CPUs hold
//! back, the OOM victims' cgroups, and the sweep of aggregates of cgroups that are gone.
use aya::maps::{HashMap, PerCpuArray};
use monitor_common::{CgroupCounters, NPENDING, PendingPages, Stat};

use super::{KernelSource, missing_map};
use crate::cgroupfs::CgroupPaths;

impl KernelSource {
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

    /// Deletes the kernel's aggregates of the cgroups in `tracked` that `live` (a walk of the
    /// memory hierarchy) does not hold. The kernel already keeps removed cgroups out of
    /// `CGROUP_STATS` for as long as its list of removed ids holds them; this catches the rest:
    /// cgroups removed before the programs attached whose leftover pages are uncharged later,
    /// and dying cgroups that outlived their slot in that list. `tracked` is
    /// [`Self::tracked_cgroups`] listed before the walk began, so a cgroup created meanwhile is
    /// never taken for a dead one. Returns how many entries were deleted.
    pub fn remove_stale(
        &mut self,
        tracked: Vec<u64>,
        live: &CgroupPaths,
    ) -> Result<usize, aya::maps::MapError> {
        let map = self.ebpf.map_mut("CGROUP_STATS").ok_or_else(missing_map)?;
        let mut stats = HashMap::<_, u64, CgroupCounters>::try_from(map)?;
        let mut deleted = 0;
        for id in tracked.into_iter().filter(|id| live.get(*id).is_none()) {
            match stats.remove(&id) {
                Ok(()) => deleted += 1,
                // Removed by the kernel's rmdir program in the meantime (the delete's ENOENT).
                Err(aya::maps::MapError::SyscallError(e))
                    if e.io_error.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }
}
