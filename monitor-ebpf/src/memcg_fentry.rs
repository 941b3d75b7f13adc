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
//! (four or five reads per counted update, against none with the tracepoints). The lruvec
//! program, which fires about four times per faulted page, keeps the last lruvec it resolved
//! per CPU with its id, valid while no cgroup was created or removed (`LIFECYCLE_GENERATION`):
//! a repeat costs one read and a lookup instead of five reads.
//! `val` is in pages for every item we track; only the `*_B` slab items count bytes.
//! Minimum kernel: 5.11 (that prototype), with BPF trampolines (x86-64 5.5+, arm64 6.0+).

use aya_ebpf::{
    EbpfContext,
    helpers::bpf_probe_read_kernel,
    macros::{fentry, map},
    maps::PerCpuArray,
    programs::FEntryContext,
};
use monitor_common::{MemcgOffsets, PendingSlot};

use crate::{
    maps::{config, lifecycle_generation, memcg_offsets},
    memcg_stat::{record, slot_of},
};

/// The last lruvec this CPU's lruvec program resolved and its memcg's cgroup id.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ResolvedLruvec {
    lruvec: u64,
    cgroup_id: u64,
    /// `LIFECYCLE_GENERATION` read before the id was resolved; 0: empty.
    generation: i64,
}

/// Per CPU, so a hit touches no shared line; one program never nests on its own CPU (the
/// trampoline skips a recursive run), so an entry is never read half written.
#[map]
static LRUVEC_IDS: PerCpuArray<ResolvedLruvec> = PerCpuArray::with_max_entries(1, 0);

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
    let generation = lifecycle_generation();
    let cached = LRUVEC_IDS.get_ptr_mut(0);
    if let Some(entry) = cached {
        // SAFETY: this CPU's slot of the map, alive for this program run.
        let entry = unsafe { *entry };
        if generation != 0 && entry.generation == generation && entry.lruvec == lruvec as u64 {
            return record(
                cfg,
                PendingSlot::Lruvec,
                slot,
                entry.cgroup_id,
                ctx.arg::<i32>(2),
            );
        }
    }
    let offsets = memcg_offsets().ok_or(0)?;
    // The lruvec lies inside its memcg's per-node info; step back to the start of that.
    let pn = lruvec.wrapping_sub(offsets.pn_lruvec as usize);
    // SAFETY: only handed to bpf_probe_read_kernel, which checks the access.
    let memcg = unsafe { read_ptr(pn, offsets.pn_memcg)? };
    let cgroup_id = memcg_id(memcg, offsets)?;
    if let Some(entry) = cached.filter(|_| generation != 0) {
        // SAFETY: as above. Stamped with the generation read before resolving: a cgroup
        // created or removed meanwhile leaves the entry already stale.
        unsafe {
            *entry = ResolvedLruvec {
                lruvec: lruvec as u64,
                cgroup_id,
                generation,
            };
        }
    }
    record(cfg, PendingSlot::Lruvec, slot, cgroup_id, ctx.arg::<i32>(2))
}

fn try_memcg(ctx: &FEntryContext) -> Result<(), i64> {
    let cfg = config().ok_or(0)?;
    let slot = slot_of(&cfg.memcg_items, ctx.arg::<i32>(1)).ok_or(0)?;
    let offsets = memcg_offsets().ok_or(0)?;
    let memcg = pointer_arg(ctx, 0)?;
    let id = memcg_id(memcg, offsets)?;
    record(cfg, PendingSlot::Memcg, slot, id, ctx.arg::<i32>(2))
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
fn memcg_id(memcg: *const u8, offsets: &MemcgOffsets) -> Result<u64, i32> {
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
