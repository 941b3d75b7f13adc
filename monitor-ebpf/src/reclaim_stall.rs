//! `vmscan/mm_vmscan_direct_reclaim_{begin,end}` and `vmscan/mm_vmscan_memcg_reclaim_{begin,end}`:
//! tasks stalled in reclaim.
//!
//! A task that cannot get memory reclaims it itself before its allocation goes on; that time is
//! the latency a pod suffers under memory pressure. Begin stores the time per task, end computes
//! the stall and sends a `StallEvent` only when it lasted at least
//! `IncidentConfig::min_stall_ns`, so the many short reclaims of a busy node cost no wakeups.
//! The memcg tracepoints do not name the memcg being reclaimed; it is the task's memory cgroup
//! or one of its ancestors (the one at its limit), so the record carries the task's.
//! Minimum kernel: 5.8 (ring buffer); the tracepoints are older (2.6.37 / 3.x).

use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::tracepoint,
    programs::TracePointContext,
};
use monitor_common::{
    DropReason, EventKind, FieldsSlot, StallEvent, field::reclaim_end::NR_RECLAIMED,
};

use crate::{
    maps::{EVENTS, RECLAIM_STARTS, count_drop, fields, incident_config},
    task_memcg::current_memcg_id,
};

#[tracepoint(category = "vmscan", name = "mm_vmscan_direct_reclaim_begin")]
pub(crate) fn direct_reclaim_begin(_ctx: TracePointContext) -> u32 {
    begin(EventKind::DirectStall);
    0
}

#[tracepoint(category = "vmscan", name = "mm_vmscan_direct_reclaim_end")]
pub(crate) fn direct_reclaim_end(ctx: TracePointContext) -> u32 {
    let _ = try_end(&ctx, EventKind::DirectStall);
    0
}

#[tracepoint(category = "vmscan", name = "mm_vmscan_memcg_reclaim_begin")]
pub(crate) fn memcg_reclaim_begin(_ctx: TracePointContext) -> u32 {
    begin(EventKind::MemcgStall);
    0
}

#[tracepoint(category = "vmscan", name = "mm_vmscan_memcg_reclaim_end")]
pub(crate) fn memcg_reclaim_end(ctx: TracePointContext) -> u32 {
    let _ = try_end(&ctx, EventKind::MemcgStall);
    0
}

/// Key of the current task's pending reclaim of `kind`: both kinds can be pending for one task
/// only in theory, but keying by kind keeps their times apart.
fn start_key(kind: EventKind) -> u64 {
    (kind as u64) << 32 | (bpf_get_current_pid_tgid() & 0xffff_ffff)
}

fn begin(kind: EventKind) {
    // Nothing to time before userspace configured a threshold.
    if incident_config().is_none_or(|cfg| cfg.min_stall_ns == 0) {
        return;
    }
    // SAFETY: helper without preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    let _ = RECLAIM_STARTS.insert(&start_key(kind), &now, 0);
}

fn try_end(ctx: &TracePointContext, kind: EventKind) -> Result<(), i64> {
    let key = start_key(kind);
    // SAFETY: the value is copied out before the entry is removed.
    let start = unsafe { RECLAIM_STARTS.get(&key) }.copied().ok_or(0)?;
    let _ = RECLAIM_STARTS.remove(&key);
    let cfg = incident_config().ok_or(0)?;
    // SAFETY: helper without preconditions.
    let duration_ns = unsafe { bpf_ktime_get_ns() }.saturating_sub(start);
    if cfg.min_stall_ns == 0 || duration_ns < cfg.min_stall_ns {
        return Ok(());
    }
    let slot = match kind {
        EventKind::DirectStall => FieldsSlot::DirectReclaimEnd,
        _ => FieldsSlot::MemcgReclaimEnd,
    };
    let at = fields(slot).ok_or(0)?;
    // SAFETY: offset from this kernel's format; read_at copies with bpf_probe_read.
    let nr_reclaimed: u64 = unsafe { ctx.read_at(at.at(NR_RECLAIMED))? };
    let pid_tgid = bpf_get_current_pid_tgid();
    let event = StallEvent {
        kind: kind as u32,
        pid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        _pad: 0,
        cgroup_id: current_memcg_id(cfg),
        start_ns: start,
        duration_ns,
        nr_reclaimed,
        comm: bpf_get_current_comm().unwrap_or_default(),
    };
    if EVENTS.output::<StallEvent>(&event, 0).is_err() {
        count_drop(DropReason::RingFull);
    }
    Ok(())
}
