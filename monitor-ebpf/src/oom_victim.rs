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
use monitor_common::{COMM_LEN, DropReason, EventKind, OomEvent};

use crate::{
    maps::{EVENTS, count_drop, incident_config},
    task_memcg::current_memcg_id,
};

// Offsets from /sys/kernel/tracing/events/oom/mark_victim/format.
const PID_OFFSET: usize = 8;
const COMM_LOC_OFFSET: usize = 12;
const ANON_RSS_OFFSET: usize = 24;
const FILE_RSS_OFFSET: usize = 32;
const SHMEM_RSS_OFFSET: usize = 40;
const OOM_SCORE_ADJ_OFFSET: usize = 64;

#[tracepoint(category = "oom", name = "mark_victim")]
pub fn mark_victim(ctx: TracePointContext) -> u32 {
    let _ = try_mark_victim(&ctx);
    0
}

fn try_mark_victim(ctx: &TracePointContext) -> Result<(), i64> {
    let cfg = incident_config().ok_or(0)?;
    // SAFETY: offsets match the tracepoint's format.
    let mut event = unsafe {
        OomEvent {
            kind: EventKind::OomVictim as u32,
            pid: ctx.read_at::<i32>(PID_OFFSET)? as u32,
            trigger_cgroup_id: current_memcg_id(cfg),
            ts_ns: bpf_ktime_get_ns(),
            anon_rss_kb: ctx.read_at(ANON_RSS_OFFSET)?,
            file_rss_kb: ctx.read_at(FILE_RSS_OFFSET)?,
            shmem_rss_kb: ctx.read_at(SHMEM_RSS_OFFSET)?,
            oom_score_adj: i32::from(ctx.read_at::<i16>(OOM_SCORE_ADJ_OFFSET)?),
            _pad: 0,
            comm: [0; COMM_LEN],
        }
    };
    // SAFETY: as above.
    let comm_loc: u32 = unsafe { ctx.read_at(COMM_LOC_OFFSET)? };
    // __data_loc: low 16 bits are the offset of the string from the record start.
    let comm_src = unsafe { (ctx.as_ptr() as *const u8).add((comm_loc & 0xffff) as usize) };
    // SAFETY: reads at most COMM_LEN bytes of the record's string into the array.
    let _ = unsafe { bpf_probe_read_kernel_str_bytes(comm_src, &mut event.comm) };
    if EVENTS.output::<OomEvent>(&event, 0).is_err() {
        count_drop(DropReason::RingFull);
    }
    Ok(())
}
