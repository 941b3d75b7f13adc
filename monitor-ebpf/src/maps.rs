//! Maps shared by the programs; userspace finds them by these names.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
};
pub use monitor_common::EVENTS_BYTES;
use monitor_common::{
    CgroupCounters, Config, DropReason, FieldOffsets, FieldsSlot, IncidentConfig, MemcgOffsets,
    NDROPS, NFIELDS_SLOTS, NWAKE,
};

/// Single entry written by userspace before attaching.
#[map]
pub static CONFIG: Array<Config> = Array::with_max_entries(1, 0);

/// Per-cgroup aggregates keyed by cgroup id.
#[map]
pub static CGROUP_STATS: HashMap<u64, CgroupCounters> = HashMap::with_max_entries(65536, 0);

/// Cgroups removed since the programs attached, keyed by cgroup id. A removed memory cgroup
/// lingers while pages are still charged to it, and their uncharging updates its stats: the
/// stat programs consult this map before creating an entry, so a dying cgroup does not come
/// back into [`CGROUP_STATS`] after its rmdir. LRU, so it never fills; a dying cgroup that
/// outlives its slot here is removed by userspace's sweep (`KernelSource::sweep_stale`).
#[map]
pub static REMOVED: LruHashMap<u64, u8> = LruHashMap::with_max_entries(16384, 0);

/// Each tracepoint program's field offsets, from this kernel's tracefs `format`, indexed by
/// `FieldsSlot`; written by userspace before it attaches the program.
#[map]
pub static FIELDS: Array<FieldOffsets> = Array::with_max_entries(NFIELDS_SLOTS, 0);

/// Single entry for the fentry stat programs, written by userspace when it attaches them.
#[map]
pub static MEMCG_OFFSETS: Array<MemcgOffsets> = Array::with_max_entries(1, 0);

/// Single entry for the incident programs (reclaim stalls, OOM kills), written by userspace.
#[map]
pub static INCIDENT_CONFIG: Array<IncidentConfig> = Array::with_max_entries(1, 0);

/// When each task entered reclaim, keyed by `reclaim_stall::start_key`. LRU because a task
/// killed inside reclaim never reaches the end tracepoint and would otherwise leak its entry.
#[map]
pub static RECLAIM_STARTS: LruHashMap<u64, u64> = LruHashMap::with_max_entries(16384, 0);

/// Records for userspace, told apart by their first u32 (`EventKind`).
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(EVENTS_BYTES as u32, 0);

/// Growth counted by the kernel and wake-up level set by userspace, indexed by `WakeSlot`.
#[map]
pub static WAKE: Array<i64> = Array::with_max_entries(NWAKE, 0);

/// Counts of what could not be recorded, indexed by `DropReason`.
#[map]
pub static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(NDROPS, 0);

/// Counts one dropped record; per-CPU, so no atomics are needed.
pub fn count_drop(reason: DropReason) {
    if let Some(counter) = DROPS.get_ptr_mut(reason as u32) {
        // SAFETY: the pointer comes from the map and this CPU's slot is not shared.
        unsafe { *counter += 1 };
    }
}

/// The configuration, or `None` before userspace wrote it.
pub fn config() -> Option<&'static Config> {
    CONFIG.get(0)
}

/// The incident configuration, or `None` before userspace wrote it.
pub fn incident_config() -> Option<&'static IncidentConfig> {
    INCIDENT_CONFIG.get(0)
}

/// A tracepoint program's field offsets, or `None` before userspace wrote them.
pub fn fields(slot: FieldsSlot) -> Option<&'static FieldOffsets> {
    FIELDS.get(slot as u32).filter(|f| f.valid != 0)
}

/// The fentry programs' offsets, or `None` before userspace wrote them.
pub fn memcg_offsets() -> Option<&'static MemcgOffsets> {
    MEMCG_OFFSETS.get(0).filter(|o| o.valid != 0)
}
