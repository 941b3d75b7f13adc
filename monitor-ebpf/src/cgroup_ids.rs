//! The cgroup id of a `struct cgroup *`, remembered per CPU for the raw memcg programs.
//!
//! A faulting task updates its own cgroup's stats many times in a row on one CPU, and reading
//! the id (`cgroup->kn->id`) takes two `bpf_probe_read_kernel` calls. Each program keeps, per
//! CPU, the last cgroup pointer it resolved with its id, stamped with `LIFECYCLE_GENERATION`:
//! a `struct cgroup` is freed, and its memory may come back as another cgroup, only after a
//! removal, and a new cgroup exists only after a creation, both of which move the generation.
//! So an entry with the current generation and the same pointer names the same cgroup.
//! Minimum kernel: as the programs that use it (per-CPU arrays since 4.6).

use aya_ebpf::{helpers::bpf_probe_read_kernel, macros::map, maps::PerCpuArray};
use monitor_common::{MemcgOffsets, NPENDING, PendingSlot};

use crate::maps::lifecycle_generation;

/// The last cgroup one program resolved on one CPU.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ResolvedCgroup {
    cgroup: u64,
    id: u64,
    /// `LIFECYCLE_GENERATION` read before the id was resolved; 0: empty.
    generation: i64,
}

/// One entry per memcg program and CPU, indexed by `PendingSlot`: programs never nest on
/// their own CPU (a raw tracepoint skips a recursive run of the same program), so an entry
/// is never read half written; the two programs may nest, hence one entry each.
#[map]
static CGROUP_IDS: PerCpuArray<ResolvedCgroup> = PerCpuArray::with_max_entries(NPENDING, 0);

/// `cgroup->kn->id`, from this CPU's entry when it is still valid.
pub(crate) fn cgroup_id(
    program: PendingSlot,
    cgroup: *const u8,
    offsets: &MemcgOffsets,
) -> Result<u64, i32> {
    let generation = lifecycle_generation();
    let entry = CGROUP_IDS.get_ptr_mut(program as u32);
    if let Some(entry) = entry {
        // SAFETY: this CPU's entry of the map, alive for this program run.
        let entry = unsafe { *entry };
        if generation != 0 && entry.generation == generation && entry.cgroup == cgroup as u64 {
            return Ok(entry.id);
        }
    }
    // SAFETY: the pointers are only handed to bpf_probe_read_kernel, which checks the access.
    let id = unsafe {
        let kn: *const u8 = bpf_probe_read_kernel(
            cgroup.wrapping_add(offsets.cgroup_kn as usize) as *const *const u8
        )?;
        bpf_probe_read_kernel(kn.wrapping_add(offsets.kernfs_id as usize) as *const u64)?
    };
    if let Some(entry) = entry.filter(|_| generation != 0) {
        // SAFETY: as above. Stamped with the generation read before resolving: a cgroup
        // created or removed meanwhile leaves the entry already stale.
        unsafe {
            *entry = ResolvedCgroup {
                cgroup: cgroup as u64,
                id,
                generation,
            };
        }
    }
    Ok(id)
}
