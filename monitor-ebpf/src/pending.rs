//! Per-CPU accumulation of stat updates within a budget, the kernel's `percpu_counter` idea.
//!
//! A faulting task updates its cgroup's stats on one CPU many times in a row. Each CPU keeps
//! the updates of the last cgroup it saw in its own `PENDING` entry (a per-CPU array: no hash
//! lookup, no shared cache line, no atomic) for as long as the sum of a stat stays below
//! `Config::budget_pages` in magnitude; only then, or when an update of another cgroup comes,
//! is the sum folded into the cgroup's shared total in `CGROUP_STATS`, where the step and
//! the wake-up distance are checked.
//!
//! The entry also remembers the kernel pointer (memcg or lruvec) its cgroup id was read
//! from, stamped with `LIFECYCLE_GENERATION`: the raw tracepoint and fentry programs get a
//! pointer, and a repeat of the same pointer within the same generation names the same
//! cgroup (see `maps::LIFECYCLE_GENERATION`), so [`resolved_id`] spares them the reads of
//! `memcg->css.cgroup->kn->id` on the common hit.
//!
//! Bound: each CPU holds back less than the budget per stat, for one cgroup per program, so
//! the shared total of any cgroup lags its true sum by less than `ncpus * budget_pages` pages.
//! Userspace sets the budget so that this stays below a quarter of the step, and reads
//! `PENDING` beside `CGROUP_STATS` where it needs the exact sum.
//! Minimum kernel: as the programs that use it (per-CPU arrays since 4.6).

use aya_ebpf::{macros::map, maps::PerCpuArray};
use monitor_common::{Config, NPENDING, NSTATS, PendingPages, PendingSlot};

/// One entry per memcg program and CPU. A program never nests on its own CPU (classic
/// tracepoints run none inside another; raw tracepoints and fentry skip a recursive run of
/// the same program), so an entry is never seen half written.
#[map]
static PENDING: PerCpuArray<PendingPages> = PerCpuArray::with_max_entries(NPENDING, 0);

/// Whose update it is: the cgroup id and, for programs handed a pointer, where it was read.
#[derive(Clone, Copy)]
pub(crate) struct Owner {
    pub id: u64,
    /// The memcg or lruvec pointer the id was resolved from; 0: handed the id.
    pub resolved_from: u64,
    /// `LIFECYCLE_GENERATION` read before resolving; 0: not to be reused.
    pub generation: i64,
}

impl Owner {
    /// A cgroup id the kernel handed over (classic tracepoints): nothing to reuse.
    pub(crate) fn id_only(id: u64) -> Self {
        Self {
            id,
            resolved_from: 0,
            generation: 0,
        }
    }
}

/// What an update leaves to fold into the shared totals now.
pub(crate) struct Fold {
    /// Pages of the updated cgroup's stat to add to its total (0: all held back).
    pub pages: i64,
    /// Another cgroup whose held-back pages this CPU gave up for the updated one, per slot.
    pub evicted: Option<(u64, [i64; NSTATS])>,
}

/// The cgroup id this CPU's entry read from `pointer` in the current `generation`, if any.
pub(crate) fn resolved_id(program: PendingSlot, pointer: u64, generation: i64) -> Option<u64> {
    let entry = PENDING.get(program as u32)?;
    (generation != 0
        && entry.generation == generation
        && entry.resolved_from == pointer
        && entry.cgroup_id != 0)
        .then_some(entry.cgroup_id)
}

/// Adds `val` pages of `slot` for the owner's cgroup to this CPU's pending sum, or returns
/// them to be folded at once when the budget is reached (or off: a budget of 0 or 1; the
/// entry still remembers the owner for [`resolved_id`]). Inlined: with its result it would
/// take more than the five arguments a BPF call passes in registers.
#[inline(always)]
pub(crate) fn hold(
    cfg: &Config,
    program: PendingSlot,
    slot: usize,
    owner: Owner,
    val: i64,
) -> Fold {
    let budget = i64::from(cfg.budget_pages);
    let at_once = Fold {
        pages: val,
        evicted: None,
    };
    if slot >= NSTATS {
        return at_once;
    }
    let Some(entry) = PENDING.get_ptr_mut(program as u32) else {
        return at_once;
    };
    // SAFETY: this CPU's entry of the map, alive for this program run and used by no other
    // run meanwhile (see `PENDING`).
    let entry = unsafe { &mut *entry };
    let mut evicted = None;
    if entry.cgroup_id != owner.id {
        if entry.cgroup_id != 0 {
            evicted = Some((entry.cgroup_id, entry.pages));
        }
        entry.cgroup_id = owner.id;
        entry.pages = [0; NSTATS];
    }
    entry.resolved_from = owner.resolved_from;
    entry.generation = owner.generation;
    if budget <= 1 {
        return Fold {
            pages: val,
            evicted,
        };
    }
    let sum = entry.pages[slot] + val;
    if sum.abs() < budget {
        entry.pages[slot] = sum;
        return Fold { pages: 0, evicted };
    }
    entry.pages[slot] = 0;
    Fold {
        pages: sum,
        evicted,
    }
}
