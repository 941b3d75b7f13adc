//! Maps shared by the programs; userspace finds them by these names.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use aya_log_ebpf::warn;
pub(crate) use monitor_common::EVENTS_BYTES;
use monitor_common::{
    CgroupCounters, Config, DropReason, FieldOffsets, FieldsSlot, IncidentConfig, MemcgOffsets,
    NDROPS, NFIELDS_SLOTS, NWAKE,
};

/// Single entry written by userspace before attaching.
#[map]
pub(crate) static CONFIG: Array<Config> = Array::with_max_entries(1, 0);

/// Per-cgroup aggregates keyed by cgroup id.
#[map]
pub(crate) static CGROUP_STATS: HashMap<u64, CgroupCounters> = HashMap::with_max_entries(65536, 0);

/// Cgroups removed since the programs attached, keyed by cgroup id. A removed memory cgroup
/// lingers while pages are still charged to it, and their uncharging updates its stats: the
/// stat programs consult this map before creating an entry, so a dying cgroup does not come
/// back into [`CGROUP_STATS`] after its rmdir. LRU, so it never fills; a dying cgroup that
/// outlives its slot here is removed by userspace's sweep (`KernelSource::remove_stale`).
/// Userspace sizes it to the node at load, a quarter of `CGROUP_STATS`.
#[map]
pub(crate) static REMOVED: LruHashMap<u64, u8> = LruHashMap::with_max_entries(16384, 0);

/// Each tracepoint program's field offsets, from this kernel's tracefs `format`, indexed by
/// `FieldsSlot`; written by userspace before it attaches the program.
#[map]
pub(crate) static FIELDS: Array<FieldOffsets> = Array::with_max_entries(NFIELDS_SLOTS, 0);

/// Single entry for the fentry stat programs, written by userspace when it attaches them.
#[map]
pub(crate) static MEMCG_OFFSETS: Array<MemcgOffsets> = Array::with_max_entries(1, 0);

/// Bumped by every cgroup creation and removal, in any hierarchy; 0 (the pending entries'
/// remembered ids off) until userspace has both lifecycle programs attached and sets it to 1.
/// An entry stamped with the current generation therefore saw no cgroup come or go since it
/// was filled: a memcg (and the lruvecs inside it) is freed only after its cgroup's removal,
/// and its memory can name another cgroup only after that one's creation (see `pending`).
#[map]
pub(crate) static LIFECYCLE_GENERATION: Array<i64> = Array::with_max_entries(1, 0);

/// Single entry for the incident programs (reclaim stalls, OOM kills), written by userspace.
#[map]
pub(crate) static INCIDENT_CONFIG: Array<IncidentConfig> = Array::with_max_entries(1, 0);

/// When each task entered reclaim, keyed by `reclaim_stall::start_key`. LRU because a task
/// killed inside reclaim never reaches the end tracepoint and would otherwise leak its entry.
/// 4,096 tasks in reclaim at once is far more than a node sees; the map's memory is charged
/// to the agent's cgroup.
#[map]
pub(crate) static RECLAIM_STARTS: LruHashMap<u64, u64> = LruHashMap::with_max_entries(4096, 0);

/// The memory cgroup id of each OOM victim, keyed by pid, written by `raw_mark_victim` as the
/// killer chooses it: the victim leaves its cgroup as it exits, often before userspace could
/// read `/proc/PID/cgroup`. LRU, so it never fills; 1,024 victims is a long storm.
#[map]
pub(crate) static VICTIM_CGROUPS: LruHashMap<u32, u64> = LruHashMap::with_max_entries(1024, 0);

/// The memory cgroups in which a task was created or ended since userspace last took them,
/// keyed by cgroup id (the value is unused). Preallocated, as tracing programs on older
/// kernels require; 1,024 cgroups with process changes between two of the agent's reads is a
/// busy node, and a full map costs a re-count of every pod, not a wrong count.
#[map]
pub(crate) static TASK_CGROUPS: HashMap<u64, u8> = HashMap::with_max_entries(1024, 0);

/// Records for userspace, told apart by their first u32 (`EventKind`).
#[map]
pub(crate) static EVENTS: RingBuf = RingBuf::with_byte_size(EVENTS_BYTES as u32, 0);

/// Growth counted by the kernel and wake-up level set by userspace, indexed by `WakeSlot`.
#[map]
pub(crate) static WAKE: Array<i64> = Array::with_max_entries(NWAKE, 0);

/// Counts of what could not be recorded, indexed by `DropReason`.
#[map]
pub(crate) static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(NDROPS, 0);

/// Counts one dropped record (per-CPU, so no atomics are needed) and logs the 1st, 2nd, 4th,
/// 8th, ... drop of each reason on each CPU: a storm of drops costs a few log records, and the
/// path that records successfully never reaches here.
pub(crate) fn count_drop(reason: DropReason) {
    let Some(counter) = DROPS.get_ptr_mut(reason as u32) else {
        return;
    };
    // SAFETY: the pointer comes from the map and this CPU's slot is not shared.
    let dropped = unsafe {
        *counter += 1;
        *counter
    };
    if !dropped.is_power_of_two() {
        return;
    }
    // aya-log asks for a program context but does not use it; callers here have none at hand.
    match reason {
        DropReason::RingFull => warn!(
            &(),
            "ring buffer full: {} records dropped on this CPU so far", dropped
        ),
        DropReason::MapFull => warn!(
            &(),
            "per-cgroup map full: {} stat updates not counted on this CPU so far", dropped
        ),
    }
}

/// The configuration, or `None` before userspace wrote it.
pub(crate) fn config() -> Option<&'static Config> {
    CONFIG.get(0)
}

/// The incident configuration, or `None` before userspace wrote it.
pub(crate) fn incident_config() -> Option<&'static IncidentConfig> {
    INCIDENT_CONFIG.get(0)
}

/// The current [`LIFECYCLE_GENERATION`]; 0 while the id caches are off.
pub(crate) fn lifecycle_generation() -> i64 {
    LIFECYCLE_GENERATION
        .get_ptr(0)
        // SAFETY: the map's single slot, alive for this program run.
        .map_or(0, |generation| unsafe { crate::atomic::load(generation) })
}

/// A tracepoint program's field offsets, or `None` before userspace wrote them.
pub(crate) fn fields(slot: FieldsSlot) -> Option<&'static FieldOffsets> {
    FIELDS.get(slot as u32).filter(|f| f.valid != 0)
}

/// The fentry programs' offsets, or `None` before userspace wrote them.
pub(crate) fn memcg_offsets() -> Option<&'static MemcgOffsets> {
    MEMCG_OFFSETS.get(0).filter(|o| o.valid != 0)
}
