//! The memory cgroup of the current task, for the incident programs.
//!
//! Not a hook itself: used by `reclaim_stall` and `oom_victim` (which also reads the OOM
//! victim's own task this way, on either cgroup version). On cgroup v2,
//! `bpf_get_current_cgroup_id()` (kernel 4.18) names it. On cgroup v1 that helper names the
//! task's cgroup in the unified hierarchy, which is not the memory controller's, so we follow
//! `task->cgroups->subsys[memory_cgrp_id]->cgroup->kn->id` with `bpf_probe_read_kernel`
//! (kernel 5.5), using member offsets userspace resolved from the running kernel's BTF. This
//! avoids CO-RE relocations, which our build does not emit for these structs.

use aya_ebpf::helpers::{bpf_get_current_cgroup_id, bpf_get_current_task, bpf_probe_read_kernel};
use monitor_common::IncidentConfig;

/// The current task's memory cgroup id, or 0 when it cannot be read.
pub(crate) fn current_memcg_id(cfg: &IncidentConfig) -> u64 {
    if cfg.memcg_v1 == 0 {
        // SAFETY: helper without preconditions.
        return unsafe { bpf_get_current_cgroup_id() };
    }
    // SAFETY: helper without preconditions.
    let task = unsafe { bpf_get_current_task() } as *const u8;
    task_memcg_id(task, cfg).unwrap_or(0)
}

/// The memory cgroup id of the task at `task`, through the offsets in `cfg` (on cgroup v2 the
/// memory controller's css names the same cgroup a pod's processes live in).
pub(crate) fn task_memcg_id(task: *const u8, cfg: &IncidentConfig) -> Result<u64, i32> {
    // SAFETY: every pointer is only handed to bpf_probe_read_kernel, which checks the access;
    // a stale or wrong offset yields an error or a wrong id, never a fault.
    unsafe {
        let css_set = read_ptr(task, cfg.task_cgroups as usize)?;
        let slot = cfg.css_set_subsys as usize + cfg.memory_subsys as usize * size_of::<u64>();
        let css = read_ptr(css_set, slot)?;
        let cgroup = read_ptr(css, cfg.css_cgroup as usize)?;
        let kn = read_ptr(cgroup, cfg.cgroup_kn as usize)?;
        bpf_probe_read_kernel(kn.add(cfg.kernfs_id as usize) as *const u64)
    }
}

/// Reads the pointer stored `offset` bytes into the kernel object at `base`.
unsafe fn read_ptr(base: *const u8, offset: usize) -> Result<*const u8, i32> {
    unsafe { bpf_probe_read_kernel(base.add(offset) as *const *const u8) }
}
