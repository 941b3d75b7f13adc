//! Raw tracepoints on `memcg/mod_memcg_lruvec_state` and `memcg/mod_memcg_state`: the
//! aggregation of `memcg_stat` without the classic tracepoint's record.
//!
//! A classic tracepoint program runs after the kernel filled a perf record with every field
//! (the memcg's cgroup id read through three pointers among them), and reads each field with
//! a helper call. A raw tracepoint gets the `TP_PROTO` arguments as they are,
//! `(struct mem_cgroup *, int item, int val)` on 6.13+, so untracked items are dropped after
//! one load from the context, and only tracked ones pay for the cgroup id
//! (`memcg->css.cgroup->kn->id` with the fentry programs' BTF offsets): one read for the
//! cgroup pointer, and two more only when it is not the one this CPU resolved last
//! (`cgroup_ids`). The default where they attach; `--memcg-hook tracepoint` takes the
//! classic ones (`memcg_stat`).
//! Minimum kernel: 6.13 (the tracepoints), raw tracepoints since 4.17.

use aya_ebpf::{
    helpers::bpf_probe_read_kernel, macros::raw_tracepoint, programs::RawTracePointContext,
};
use monitor_common::PendingSlot;

use crate::{
    cgroup_ids,
    maps::{config, memcg_offsets},
    memcg_stat::{record, slot_of},
};

#[raw_tracepoint(tracepoint = "mod_memcg_lruvec_state")]
pub(crate) fn raw_memcg_lruvec_state(ctx: RawTracePointContext) -> u32 {
    let _ = try_raw(&ctx, false);
    0
}

#[raw_tracepoint(tracepoint = "mod_memcg_state")]
pub(crate) fn raw_memcg_state(ctx: RawTracePointContext) -> u32 {
    let _ = try_raw(&ctx, true);
    0
}

fn try_raw(ctx: &RawTracePointContext, memcg_item: bool) -> Result<(), i64> {
    let cfg = config().ok_or(0)?;
    let (items, program) = if memcg_item {
        (&cfg.memcg_items, PendingSlot::Memcg)
    } else {
        (&cfg.lruvec_items, PendingSlot::Lruvec)
    };
    let slot = slot_of(items, ctx.arg::<i32>(1)).ok_or(0)?;
    let offsets = memcg_offsets().ok_or(0)?;
    let memcg = ctx.arg::<u64>(0) as *const u8;
    // SAFETY: only handed to bpf_probe_read_kernel, which checks the access.
    let cgroup: *const u8 = unsafe {
        bpf_probe_read_kernel(memcg.wrapping_add(offsets.memcg_cgroup as usize) as *const _)?
    };
    let id = cgroup_ids::cgroup_id(program, cgroup, offsets)?;
    record(cfg, program, slot, id, ctx.arg::<i32>(2))
}
