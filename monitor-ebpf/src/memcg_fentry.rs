//! fentry on `__mod_memcg_lruvec_state` and `__mod_memcg_state`: the per-cgroup stat deltas of
//! `memcg_stat` on kernels without the memcg tracepoints (5.11 to 6.12).
//!
//! The tracepoints that arrived in 6.13 were placed in these two functions, so attaching to
//! their entry sees the same updates: `(struct lruvec *, enum node_stat_item, int val)` and
//! `(struct mem_cgroup *, int idx, int val)`. Userspace attaches them by the name the running
//! kernel uses (6.13+ renamed them `mod_memcg_lruvec_state` / `mod_memcg_state`) only after
//! checking the prototype in its BTF. The functions get a pointer, not the cgroup id the
//! tracepoints carry, so the id is read as `memcg->css.cgroup->kn->id` with
//! `bpf_probe_read_kernel` and offsets from `MEMCG_OFFSETS`, and only for tracked items
//! (four or five reads per counted update, against none with the tracepoints), and only when
//! the pointer is not the one this CPU's pending entry was resolved from (`pending`): the
//! lruvec program, which fires about four times per faulted page, reads only its argument
//! on a repeat.
//! `val` is in pages for every item we track; only the `*_B` slab items count bytes.
//! Minimum kernel: 5.11 (that prototype), with BPF trampolines (x86-64 5.5+, arm64 6.0+).

use aya_ebpf::{
    EbpfContext, helpers::bpf_probe_read_kernel, macros::fentry, programs::FEntryContext,
};
use monitor_common::PendingSlot;

use crate::{
    maps::{config, lifecycle_generation, memcg_offsets},
    memcg_id::{memcg_id, read_ptr},
    memcg_stat::{record, slot_of},
    pending::{self, Owner},
};

#[fentry(function = "__mod_memcg_lruvec_state")]
pub(crate) fn fentry_memcg_lruvec_state(ctx: FEntryContext) -> u32 {
    let _ = try_lruvec(&ctx);
    0
}

#[fentry(function = "__mod_memcg_state")]
pub(crate) fn fentry_memcg_state(ctx: FEntryContext) -> u32 {
    let _ = try_memcg(&ctx);
    0
}

fn try_lruvec(ctx: &FEntryContext) -> Result<(), i64> {
    let cfg = config().ok_or(0)?;
    let slot = slot_of(&cfg.lruvec_items, ctx.arg::<i32>(1)).ok_or(0)?;
    let lruvec = pointer_arg(ctx, 0)?;
    // Read before resolving: a cgroup created or removed meanwhile leaves the entry stale.
    let generation = lifecycle_generation();
    let program = PendingSlot::Lruvec;
    let id = match pending::resolved_id(program, lruvec as u64, generation) {
        Some(id) => id,
        None => {
            let offsets = memcg_offsets().ok_or(0)?;
            // The lruvec lies inside its memcg's per-node info; step back to the start of that.
            let pn = lruvec.wrapping_sub(offsets.pn_lruvec as usize);
            // SAFETY: only handed to bpf_probe_read_kernel, which checks the access.
            let memcg = unsafe { read_ptr(pn, offsets.pn_memcg)? };
            memcg_id(memcg, offsets)?
        }
    };
    let owner = Owner {
        id,
        resolved_from: lruvec as u64,
        generation,
    };
    record(cfg, program, slot, owner, ctx.arg::<i32>(2))
}

fn try_memcg(ctx: &FEntryContext) -> Result<(), i64> {
    let cfg = config().ok_or(0)?;
    let slot = slot_of(&cfg.memcg_items, ctx.arg::<i32>(1)).ok_or(0)?;
    let memcg = pointer_arg(ctx, 0)?;
    let generation = lifecycle_generation();
    let program = PendingSlot::Memcg;
    let id = match pending::resolved_id(program, memcg as u64, generation) {
        Some(id) => id,
        None => memcg_id(memcg, memcg_offsets().ok_or(0)?)?,
    };
    let owner = Owner {
        id,
        resolved_from: memcg as u64,
        generation,
    };
    record(cfg, program, slot, owner, ctx.arg::<i32>(2))
}

/// Pointer argument `n` as a plain address. `ctx.arg` would give the verifier's typed kernel
/// pointer, which allows no offset unknown at load time (ours come from BTF at run time);
/// copied out with bpf_probe_read_kernel it is a number like any other.
fn pointer_arg(ctx: &FEntryContext, n: usize) -> Result<*const u8, i32> {
    // SAFETY: fentry's context is an array of one u64 per argument of the hooked function,
    // which has at least n + 1 of them (its prototype was checked before attaching).
    unsafe { bpf_probe_read_kernel((ctx.as_ptr() as *const *const u8).add(n)) }
}
