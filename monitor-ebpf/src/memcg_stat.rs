//! `memcg/mod_memcg_state` and `memcg/mod_memcg_lruvec_state`: per-cgroup memory stat deltas.
//!
//! Both tracepoints fire on every update of a memcg's statistics with the memcg's cgroup id,
//! the stat item number and the change in pages. Each CPU sums a cgroup's updates within a
//! budget (`pending`); past it they go into a running sum per cgroup and stat, and a record is
//! sent only when the sum moved by at least `Config::step_bytes` since the last record; the
//! record wakes userspace only when it may matter for a threshold (see `wake`).
//! Minimum kernel: 6.13 (the memcg tracepoints were added then); on 5.11 to 6.12 the same
//! aggregation runs from fentry programs on the functions the tracepoints were later placed
//! in (`memcg_fentry`), and without either userspace polls.

use aya_ebpf::{
    bindings::BPF_NOEXIST, helpers::bpf_ktime_get_ns, macros::tracepoint,
    programs::TracePointContext,
};
use monitor_common::{
    CgroupCounters, Config, DropReason, EventKind, FieldsSlot, NSTATS, PendingSlot, Stat,
    StatEvent,
    field::memcg::{ID, ITEM, VAL},
};

use crate::{
    atomic,
    maps::{CGROUP_STATS, EVENTS, REMOVED, config, count_drop, fields},
    pending::{self, Owner},
    wake,
};

#[tracepoint(category = "memcg", name = "mod_memcg_lruvec_state")]
pub(crate) fn mod_memcg_lruvec_state(ctx: TracePointContext) -> u32 {
    let _ = try_record(&ctx, false);
    0
}

#[tracepoint(category = "memcg", name = "mod_memcg_state")]
pub(crate) fn mod_memcg_state(ctx: TracePointContext) -> u32 {
    let _ = try_record(&ctx, true);
    0
}

fn try_record(ctx: &TracePointContext, memcg_item: bool) -> Result<(), i64> {
    let cfg = config().ok_or(0)?;
    let (items, slot, program) = if memcg_item {
        (&cfg.memcg_items, FieldsSlot::MemcgState, PendingSlot::Memcg)
    } else {
        (
            &cfg.lruvec_items,
            FieldsSlot::MemcgLruvecState,
            PendingSlot::Lruvec,
        )
    };
    // Offsets from this kernel's format, checked against the fields' sizes by userspace.
    let at = fields(slot).ok_or(0)?;
    // SAFETY: read_at copies with bpf_probe_read; the offset lies inside the record.
    let item: i32 = unsafe { ctx.read_at(at.at(ITEM))? };
    let slot = slot_of(items, item).ok_or(0)?;
    // SAFETY: as above.
    let (id, val) = unsafe {
        (
            ctx.read_at::<u64>(at.at(ID))?,
            ctx.read_at::<i32>(at.at(VAL))?,
        )
    };
    record(cfg, program, slot, Owner::id_only(id), val)
}

/// The [`Stat`] slot a kernel item number is tracked in, if any.
pub(crate) fn slot_of(items: &[i32; NSTATS], item: i32) -> Option<usize> {
    let mut slot = NSTATS;
    for (i, tracked) in items.iter().enumerate() {
        if *tracked == item {
            slot = i;
        }
    }
    (slot < NSTATS).then_some(slot)
}

/// Counts `val` pages of `slot` for the cgroup: held back on this CPU within the budget
/// (`pending`), else added to the cgroup's sum, which sends a record when it moved by a step
/// since the last one. Shared by the tracepoint, raw tracepoint and fentry programs; inlined,
/// as BPF calls take at most five arguments in registers.
#[inline(always)]
pub(crate) fn record(
    cfg: &Config,
    program: PendingSlot,
    slot: usize,
    owner: Owner,
    val: i32,
) -> Result<(), i64> {
    let id = owner.id;
    let fold = pending::hold(cfg, program, slot, owner, i64::from(val));
    if let Some((evicted, pages)) = fold.evicted {
        fold_all(cfg, evicted, &pages);
    }
    if fold.pages == 0 {
        return Ok(());
    }
    add(cfg, counters_of(id)?, slot, id, fold.pages);
    Ok(())
}

/// Folds what this CPU held back for a cgroup it no longer sees into the cgroup's sums.
fn fold_all(cfg: &Config, id: u64, pages: &[i64; NSTATS]) {
    if pages.iter().all(|p| *p == 0) {
        return;
    }
    let Ok(counters) = counters_of(id) else {
        return;
    };
    for (slot, held) in pages.iter().enumerate() {
        if *held != 0 {
            add(cfg, counters, slot, id, *held);
        }
    }
}

/// Adds `pages` to the cgroup's sum in `slot` and sends a record when the sum moved by a step
/// since the last one.
fn add(cfg: &Config, counters: *mut CgroupCounters, slot: usize, id: u64, pages: i64) {
    if slot >= NSTATS {
        return;
    }
    // SAFETY: the pointers come from the hash map entry and stay valid for this program run;
    // other CPUs update the same entry, hence atomics.
    let total_ptr = unsafe { &raw mut (*counters).pages[slot] };
    let reported_ptr = unsafe { &raw mut (*counters).reported[slot] };
    unsafe { atomic::add(total_ptr, pages) };
    if cfg.step_bytes == 0 {
        return;
    }
    // `total` may already include other CPUs' later additions; that is fine because records
    // carry differences between successive values of `reported`, which only moves by exchange.
    let (total, last) = unsafe { (atomic::load(total_ptr), atomic::load(reported_ptr)) };
    let moved = (total - last).unsigned_abs() * cfg.page_size;
    if moved < cfg.step_bytes {
        return;
    }
    // Only the CPU that advances `reported` sends the record, so deltas never overlap.
    if !unsafe { atomic::swap_if(reported_ptr, last, total) } {
        return;
    }
    let page = cfg.page_size as i64;
    let delta_bytes = (total - last) * page;
    let sign = Stat::from_slot(slot as u32).map_or(0, Stat::working_set_sign);
    let (growth_bytes, flags) = wake::count_growth(sign * delta_bytes);
    let event = StatEvent {
        kind: EventKind::Stat as u32,
        stat: slot as u32,
        cgroup_id: id,
        // SAFETY: helper without preconditions.
        ts_ns: unsafe { bpf_ktime_get_ns() },
        delta_bytes,
        total_bytes: total * page,
        growth_bytes,
    };
    if EVENTS.output::<StatEvent>(&event, flags).is_err() {
        // Give the delta back so the next record carries it.
        // SAFETY: as above.
        unsafe { atomic::swap_if(reported_ptr, total, last) };
        count_drop(DropReason::RingFull);
    }
}

fn counters_of(id: u64) -> Result<*mut CgroupCounters, i64> {
    if let Some(counters) = CGROUP_STATS.get_ptr_mut(&id) {
        return Ok(counters);
    }
    // Only on the rare path that creates an entry: a removed cgroup gets none again.
    // SAFETY: the value is only tested for presence.
    if unsafe { REMOVED.get(&id) }.is_some() {
        return Err(0);
    }
    // Another CPU may insert the same id first; BPF_NOEXIST keeps its entry.
    if CGROUP_STATS
        .insert(&id, &CgroupCounters::default(), u64::from(BPF_NOEXIST))
        .is_err()
        && CGROUP_STATS.get_ptr_mut(&id).is_none()
    {
        count_drop(DropReason::MapFull);
        return Err(0);
    }
    CGROUP_STATS.get_ptr_mut(&id).ok_or(0)
}
