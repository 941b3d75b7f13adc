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
//! (three or four reads per counted update, against none with the tracepoints).
//! `val` is in pages for every item we track; only the `*_B` slab items count bytes.
//! Minimum kernel: 5.11 (that prototype), with BPF trampolines (x86-64 5.5+, arm64 6.0+).

use aya_ebpf::{
    EbpfContext, helpers::bpf_probe_read_kernel, macros::fentry, programs::FEntryContext,
};
use monitor_common::MemcgOffsets;

use crate::{
    maps::{config, memcg_offsets},
    memcg_stat::{record, slot_of},
};

#[fentry(function = "__mod_memcg_lruvec_state")]
pub fn fentry_memcg_lruvec_state(ctx: FEntryContext) -> u32 {
    let _ = try_lruvec(&ctx);
    0
}

#[fentry(function = "__mod_memcg_state")]
pub fn fentry_memcg_state(ctx: FEntryContext) -> u32 {
    let _ = try_memcg(&ctx);
    0
}

fn try_lruvec(ctx: &FEntryContext) -> Result<(), i64> {
    let cfg = config().ok_or(0)?;
    let slot = slot_of(&cfg.lruvec_items, ctx.arg::<i32>(1)).ok_or(0)?;
    let offsets = memcg_offsets().ok_or(0)?;
    // The lruvec lies inside its memcg's per-node info; step back to the start of that.
    let pn = pointer_arg(ctx, 0)?.wrapping_sub(offsets.pn_lruvec as usize);
    // SAFETY: only handed to bpf_probe_read_kernel, which checks the access.
    let memcg = unsafe { read_ptr(pn, offsets.pn_memcg)? };
    record(cfg, slot, memcg_id(memcg, offsets)?, ctx.arg::<i32>(2))
}

fn try_memcg(ctx: &FEntryContext) -> Result<(), i64> {
    let cfg = config().ok_or(0)?;
    let slot = slot_of(&cfg.memcg_items, ctx.arg::<i32>(1)).ok_or(0)?;
    let offsets = memcg_offsets().ok_or(0)?;
    let memcg = pointer_arg(ctx, 0)?;
    record(cfg, slot, memcg_id(memcg, offsets)?, ctx.arg::<i32>(2))
}

/// Pointer argument `n` as a plain address. `ctx.arg` would give the verifier's typed kernel
/// pointer, which allows no offset unknown at load time (ours come from BTF at run time);
/// copied out with bpf_probe_read_kernel it is a number like any other.
fn pointer_arg(ctx: &FEntryContext, n: usize) -> Result<*const u8, i32> {
    // SAFETY: fentry's context is an array of one u64 per argument of the hooked function,
    // which has at least n + 1 of them (its prototype was checked before attaching).
    unsafe { bpf_probe_read_kernel((ctx.as_ptr() as *const *const u8).add(n)) }
}

/// `memcg->css.cgroup->kn->id`.
pub fn memcg_id(memcg: *const u8, offsets: &MemcgOffsets) -> Result<u64, i32> {
    // SAFETY: every pointer is only handed to bpf_probe_read_kernel, which checks the access;
    // a wrong offset yields an error or a wrong id, never a fault.
    unsafe {
        let cgroup = read_ptr(memcg, offsets.memcg_cgroup)?;
        let kn = read_ptr(cgroup, offsets.cgroup_kn)?;
        bpf_probe_read_kernel(kn.add(offsets.kernfs_id as usize) as *const u64)
    }
}

/// Reads the pointer stored `offset` bytes into the kernel object at `base`.
unsafe fn read_ptr(base: *const u8, offset: u32) -> Result<*const u8, i32> {
    unsafe { bpf_probe_read_kernel(base.wrapping_add(offset as usize) as *const *const u8) }
}
