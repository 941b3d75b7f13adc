//! The cgroup id of a `struct mem_cgroup *`, for the programs that are handed a pointer (raw
//! tracepoints, fentry) rather than the id the classic tracepoints carry.
//! Minimum kernel: as the programs that use it; the offsets come from the kernel's BTF.

use aya_ebpf::helpers::bpf_probe_read_kernel;
use monitor_common::MemcgOffsets;

/// `memcg->css.cgroup->kn->id`.
pub(crate) fn memcg_id(memcg: *const u8, offsets: &MemcgOffsets) -> Result<u64, i32> {
    // SAFETY: every pointer is only handed to bpf_probe_read_kernel, which checks the access;
    // a wrong offset yields an error or a wrong id, never a fault.
    unsafe {
        let cgroup = read_ptr(memcg, offsets.memcg_cgroup)?;
        let kn = read_ptr(cgroup, offsets.cgroup_kn)?;
        bpf_probe_read_kernel(kn.wrapping_add(offsets.kernfs_id as usize) as *const u64)
    }
}

/// Reads the pointer stored `offset` bytes into the kernel object at `base`.
///
/// # Safety
/// None beyond the helper's: `bpf_probe_read_kernel` checks the access and fails on a bad
/// address; `unsafe` because the helper binding is.
pub(crate) unsafe fn read_ptr(base: *const u8, offset: u32) -> Result<*const u8, i32> {
    // SAFETY: as the function's contract says, the helper validates the address.
    unsafe { bpf_probe_read_kernel(base.wrapping_add(offset as usize) as *const *const u8) }
}
