//! Raw tracepoints on `memcg/mod_memcg_lruvec_state` and `memcg/mod_memcg_state`: the
//! aggregation of `memcg_stat` without the classic tracepoint's record.
//!
//! A classic tracepoint program runs after the kernel filled a perf record with every field
//! (the memcg's cgroup id read through three pointers among them), and reads each field with
//! a helper call. A raw tracepoint gets the `TP_PROTO` arguments as they are,
//! `(struct mem_cgroup *, int item, int val)` on 6.13+, so untracked items are dropped after
//! one load from the context, and only tracked ones pay for the cgroup id
//! (`memcg->css.cgroup->kn->id` with the fentry programs' BTF offsets), and only when the
//! memcg is not the one this CPU's pending entry was resolved from (`pending`): a fault
//! loop's repeated hits read nothing. The default where they attach; `--memcg-hook
//! tracepoint` takes the classic ones (`memcg_stat`).
//! Minimum kernel: 6.13 (the tracepoints), raw tracepoints since 4.17.

use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};
use monitor_common::PendingSlot;

use crate::{
    maps::{config, lifecycle_generation, memcg_offsets},
    memcg_id::memcg_id,
    memcg_stat::{record, slot_of},
    pending::{self, Owner},
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
    let memcg = ctx.arg::<u64>(0);
    // Read before resolving: a cgroup created or removed meanwhile leaves the entry stale.
    let generation = lifecycle_generation();
    let id = match pending::resolved_id(program, memcg, generation) {
        Some(id) => id,
        None => memcg_id(memcg as *const u8, memcg_offsets().ok_or(0)?)?,
    };
    let owner = Owner {
        id,
        resolved_from: memcg,
        generation,
    };
    record(cfg, program, slot, owner, ctx.arg::<i32>(2))
}
