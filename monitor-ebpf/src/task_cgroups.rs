//! `sched/sched_process_exit`, `cgroup/cgroup_attach_task` and the fork counter's marks: the
//! memory cgroups in which a task was created, ended or arrived since userspace last took
//! them, in `TASK_CGROUPS`.
//!
//! The PID ranking orders pods by their process counts. Listing every pod's `cgroup.procs`
//! when a fork bomb wakes the agent costs a read per cgroup on the decision path; with these
//! marks the agent re-counts only the pods whose processes changed. Marks are made only while
//! userspace asks for them (`WakeSlot::TaskCgroupsOn`, a pid threshold is set); a mark that
//! cannot be stored raises `WakeSlot::TaskCgroupsLost` and userspace re-counts every pod.
//! A child is created in its parent's cgroup (the current task at the fork tracepoint), an
//! exiting task is still in its own when the exit tracepoint fires, and a task moved (a
//! container's first process, `runc exec`) is named with its destination. Not marked: the
//! cgroup a task was moved out of, and a child created straight into another cgroup by
//! `clone3(CLONE_INTO_CGROUP)`; the pod's next fork or exit, or the resync, counts those.
//! Minimum kernel: as the fork counter; on cgroup v1 5.5 (`bpf_probe_read_kernel`).

use aya_ebpf::{bindings::BPF_NOEXIST, macros::tracepoint, programs::TracePointContext};
use monitor_common::{
    FieldsSlot, WakeSlot,
    field::cgroup_attach::{DST_ID, DST_ROOT},
};

use crate::{
    atomic,
    maps::{TASK_CGROUPS, WAKE, config, fields, incident_config},
    task_memcg::current_memcg_id,
};

/// `-EEXIST`: another CPU stored the same mark first.
const EEXIST: i32 = 17;

#[tracepoint(category = "sched", name = "sched_process_exit")]
pub(crate) fn sched_process_exit(_ctx: TracePointContext) -> u32 {
    mark_current();
    0
}

#[tracepoint(category = "cgroup", name = "cgroup_attach_task")]
pub(crate) fn cgroup_attach_task(ctx: TracePointContext) -> u32 {
    if marks_on() {
        mark_attach(&ctx);
    }
    0
}

/// Marks the current task's memory cgroup, when userspace asked for marks.
pub(crate) fn mark_current() {
    if marks_on() {
        mark(incident_config().map_or(0, current_memcg_id));
    }
}

/// Marks the cgroup a task was moved into, when it is in the memory hierarchy.
fn mark_attach(ctx: &TracePointContext) {
    let (Some(cfg), Some(at)) = (config(), fields(FieldsSlot::CgroupAttachTask)) else {
        lost();
        return;
    };
    // SAFETY: offsets from this kernel's format; read_at copies with bpf_probe_read.
    let read = unsafe {
        (
            ctx.read_at::<i32>(at.at(DST_ROOT)),
            ctx.read_at::<u64>(at.at(DST_ID)),
        )
    };
    let (Ok(root), Ok(id)) = read else {
        lost();
        return;
    };
    // cgroup v1 hierarchies number their ids independently: only the memory one counts.
    if cfg.hierarchy_id < 0 || cfg.hierarchy_id == root {
        mark(id);
    }
}

fn marks_on() -> bool {
    WAKE.get_ptr(WakeSlot::TaskCgroupsOn as u32)
        // SAFETY: the array's slot, valid for this program run; userspace sets it.
        .is_some_and(|on| unsafe { atomic::load(on) } != 0)
}

/// Stores the mark of cgroup `id` (0: unknown, which loses it).
fn mark(id: u64) {
    if id == 0 {
        lost();
        return;
    }
    // SAFETY: the value is only tested for presence.
    if unsafe { TASK_CGROUPS.get(&id) }.is_some() {
        return;
    }
    match TASK_CGROUPS.insert(&id, &1, u64::from(BPF_NOEXIST)) {
        Ok(()) => {}
        Err(e) if e == -EEXIST => {}
        Err(_) => lost(),
    }
}

fn lost() {
    if let Some(flag) = WAKE.get_ptr_mut(WakeSlot::TaskCgroupsLost as u32) {
        // SAFETY: as above; an aligned 64-bit store is atomic on BPF, and storing 1 from
        // several CPUs at once leaves 1.
        unsafe { core::ptr::write_volatile(flag, 1) };
    }
}
