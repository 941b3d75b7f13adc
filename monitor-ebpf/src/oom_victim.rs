//! `oom/mark_victim`: the OOM killer chose a process to kill.
//!
//! The tracepoint names the victim by pid and comm with its memory sizes, but (up to 6.18 at
//! least) not its cgroup, and it runs in the context of the task that invoked the OOM killer.
//! We record that task's memory cgroup as the trigger; for a cgroup OOM it is a task of the
//! cgroup at its limit. Userspace resolves the victim's own cgroup from /proc while the victim
//! exits. Minimum kernel: 6.8, where the tracepoint gained comm and the memory sizes (before,
//! it carried only the pid); the loader skips this program when the format lacks them.

use aya_ebpf::{
    EbpfContext,
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel_str_bytes},
    macros::tracepoint,
    programs::TracePointContext,
};
use monitor_common::{
    COMM_LEN, DropReason, EventKind, FieldsSlot, OomEvent,
    field::mark_victim::{ANON_RSS, COMM, FILE_RSS, OOM_SCORE_ADJ, PID, SHMEM_RSS},
};

use crate::{
    maps::{EVENTS, count_drop, fields, incident_config},
    task_memcg::current_memcg_id,
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
