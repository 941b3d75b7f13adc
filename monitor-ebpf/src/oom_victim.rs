//! `oom/mark_victim`: the OOM killer chose a process to kill.
//!
//! The tracepoint names the victim by pid and comm with its memory sizes, but (up to 6.18 at
//! least) not its cgroup, and it runs in the context of the task that invoked the OOM killer.
//! We record that task's memory cgroup as the trigger; for a cgroup OOM it is a task of the
//! cgroup at its limit. Minimum kernel: 6.8, where the tracepoint gained comm and the memory
//! sizes (before, it carried only the pid); the loader skips this program when the format
//! lacks them.
//!
//! The victim's own cgroup comes from `raw_mark_victim`, a raw tracepoint on the same hook,
//! whose first argument is the victim's `task_struct` (6.8+, `TP_PROTO(struct task_struct *,
//! uid_t)`; the loader checks the prototype in BTF): it stores the victim's memory cgroup id
//! by pid in `VICTIM_CGROUPS`, where userspace looks it up when it reads the record. The two
//! programs run one after the other in the same tracepoint call, in an order we do not
//! control, hence the map rather than a field of the record.

use aya_ebpf::{
    EbpfContext,
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes},
    macros::{raw_tracepoint, tracepoint},
    programs::{RawTracePointContext, TracePointContext},
};
use monitor_common::{
    COMM_LEN, DropReason, EventKind, FieldsSlot, OomEvent,
    field::mark_victim::{ANON_RSS, COMM, FILE_RSS, OOM_SCORE_ADJ, PID, SHMEM_RSS},
};

use crate::{
    maps::{EVENTS, VICTIM_CGROUPS, count_drop, fields, incident_config},
    task_memcg::{current_memcg_id, task_memcg_id},
};

#[tracepoint(category = "oom", name = "mark_victim")]
pub(crate) fn mark_victim(ctx: TracePointContext) -> u32 {
    let _ = try_mark_victim(&ctx);
    0
}

fn try_mark_victim(ctx: &TracePointContext) -> Result<(), i64> {
    let cfg = incident_config().ok_or(0)?;
    let at = fields(FieldsSlot::MarkVictim).ok_or(0)?;
    // SAFETY: offsets from this kernel's format; read_at copies with bpf_probe_read.
    let mut event = unsafe {
        OomEvent {
            kind: EventKind::OomVictim as u32,
            pid: ctx.read_at::<i32>(at.at(PID))? as u32,
            trigger_cgroup_id: current_memcg_id(cfg),
            ts_ns: bpf_ktime_get_ns(),
            anon_rss_kb: ctx.read_at(at.at(ANON_RSS))?,
            file_rss_kb: ctx.read_at(at.at(FILE_RSS))?,
            shmem_rss_kb: ctx.read_at(at.at(SHMEM_RSS))?,
            oom_score_adj: i32::from(ctx.read_at::<i16>(at.at(OOM_SCORE_ADJ))?),
            _pad: 0,
            comm: [0; COMM_LEN],
        }
    };
    // SAFETY: as above.
    let comm_loc: u32 = unsafe { ctx.read_at(at.at(COMM))? };
    // __data_loc: low 16 bits are the offset of the string from the record start.
    let comm_src = unsafe { (ctx.as_ptr() as *const u8).add((comm_loc & 0xffff) as usize) };
    // SAFETY: reads at most COMM_LEN bytes of the record's string into the array.
    let _ = unsafe { bpf_probe_read_kernel_str_bytes(comm_src, &mut event.comm) };
    if EVENTS.output::<OomEvent>(&event, 0).is_err() {
        count_drop(DropReason::RingFull);
    }
    Ok(())
}

#[raw_tracepoint(tracepoint = "mark_victim")]
pub(crate) fn raw_mark_victim(ctx: RawTracePointContext) -> u32 {
    let _ = try_raw_mark_victim(&ctx);
    0
}

fn try_raw_mark_victim(ctx: &RawTracePointContext) -> Result<(), i64> {
    let cfg = incident_config().ok_or(0)?;
    if cfg.task_pid == 0 {
        return Err(0);
    }
    let task = ctx.arg::<u64>(0) as *const u8;
    // SAFETY: bpf_probe_read_kernel checks the access; the offset is from this kernel's BTF.
    let pid: i32 = unsafe { bpf_probe_read_kernel(task.add(cfg.task_pid as usize) as *const i32) }
        .map_err(i64::from)?;
    let id = task_memcg_id(task, cfg).map_err(i64::from)?;
    VICTIM_CGROUPS.insert(pid as u32, id, 0).map_err(i64::from)
}
