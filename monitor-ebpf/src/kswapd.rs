//! `vmscan/mm_vmscan_kswapd_wake` and `vmscan/mm_vmscan_kswapd_sleep`: node-level background
//! reclaim starting and stopping.
//!
//! kswapd wakes when a node's free memory falls below the low watermark; while it runs, the node
//! is short of memory even if no task stalls yet. Both fire at most a few times per second per
//! node, so every one is sent. Minimum kernel: 5.8 (ring buffer); the tracepoints are older.

use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::tracepoint, programs::TracePointContext};
use monitor_common::{
    DropReason, EventKind, FieldsSlot, KswapdEvent,
    field::kswapd::{NID, ORDER},
};

use crate::maps::{EVENTS, count_drop, fields, incident_config};

#[tracepoint(category = "vmscan", name = "mm_vmscan_kswapd_wake")]
pub(crate) fn kswapd_wake(ctx: TracePointContext) -> u32 {
    let _ = try_kswapd(&ctx, EventKind::KswapdWake);
    0
}

#[tracepoint(category = "vmscan", name = "mm_vmscan_kswapd_sleep")]
pub(crate) fn kswapd_sleep(ctx: TracePointContext) -> u32 {
    let _ = try_kswapd(&ctx, EventKind::KswapdSleep);
    0
}

fn try_kswapd(ctx: &TracePointContext, kind: EventKind) -> Result<(), i64> {
    // Silent until userspace configured the incident programs.
    incident_config()
        .filter(|cfg| cfg.min_stall_ns != 0)
        .ok_or(0)?;
    let slot = match kind {
        EventKind::KswapdWake => FieldsSlot::KswapdWake,
        _ => FieldsSlot::KswapdSleep,
    };
    let at = fields(slot).ok_or(0)?;
    // SAFETY: offsets from this kernel's format (sleep has only `nid`).
    let nid: i32 = unsafe { ctx.read_at(at.at(NID))? };
    let order: i32 = match kind {
        EventKind::KswapdWake => unsafe { ctx.read_at(at.at(ORDER))? },
        _ => 0,
    };
    let event = KswapdEvent {
        kind: kind as u32,
        nid,
        order,
        _pad: 0,
        // SAFETY: helper without preconditions.
        ts_ns: unsafe { bpf_ktime_get_ns() },
    };
    if EVENTS.output::<KswapdEvent>(&event, 0).is_err() {
        count_drop(DropReason::RingFull);
    }
    Ok(())
}
