//! `cgroup/cgroup_mkdir` and `cgroup/cgroup_rmdir`: cgroup creation and removal.
//!
//! Userspace keeps its cgroup id -> path cache current from these records, and removal drops the
//! cgroup's aggregate from `CGROUP_STATS` so the map does not fill with dead cgroups; it also
//! notes the id in `REMOVED` first, so later stat updates of the dying cgroup (its remaining
//! pages being uncharged) do not insert the entry again. Both also advance
//! `LIFECYCLE_GENERATION`, which ends the cgroup ids the pending entries remember.
//! Minimum kernel: 4.19 (cgroup tracepoints), 5.8 for the ring buffer.

use aya_ebpf::{
    EbpfContext,
    helpers::{bpf_ktime_get_ns, bpf_probe_read_kernel_str_bytes},
    macros::tracepoint,
    programs::TracePointContext,
};
use aya_log_ebpf::warn;
use monitor_common::{
    CgroupEvent, DropReason, EventKind, FieldsSlot,
    field::cgroup::{ID, LEVEL, PATH, ROOT},
};

use crate::{
    atomic,
    maps::{CGROUP_STATS, EVENTS, LIFECYCLE_GENERATION, REMOVED, config, count_drop, fields},
};

#[tracepoint(category = "cgroup", name = "cgroup_mkdir")]
pub(crate) fn cgroup_mkdir(ctx: TracePointContext) -> u32 {
    let _ = try_lifecycle(&ctx, EventKind::Mkdir);
    0
}

#[tracepoint(category = "cgroup", name = "cgroup_rmdir")]
pub(crate) fn cgroup_rmdir(ctx: TracePointContext) -> u32 {
    let _ = try_lifecycle(&ctx, EventKind::Rmdir);
    0
}

fn try_lifecycle(ctx: &TracePointContext, kind: EventKind) -> Result<(), i64> {
    // Before any filter: whichever hierarchy, a cgroup came or went. Off (0) stays off.
    if let Some(generation) = LIFECYCLE_GENERATION.get_ptr_mut(0) {
        // SAFETY: the map's single slot, alive for this program run; other CPUs bump it too.
        unsafe {
            if atomic::load(generation) != 0 {
                atomic::add(generation, 1);
            }
        }
    }
    let cfg = config().ok_or(0)?;
    let slot = match kind {
        EventKind::Mkdir => FieldsSlot::CgroupMkdir,
        _ => FieldsSlot::CgroupRmdir,
    };
    let at = fields(slot).ok_or(0)?;
    // SAFETY: offsets from this kernel's format; read_at copies with bpf_probe_read.
    let (root, level, id, path_loc) = unsafe {
        (
            ctx.read_at::<i32>(at.at(ROOT))?,
            ctx.read_at::<i32>(at.at(LEVEL))?,
            ctx.read_at::<u64>(at.at(ID))?,
            ctx.read_at::<u32>(at.at(PATH))?,
        )
    };
    // cgroup v1 hierarchies number their ids independently: ignore the ones we do not watch.
    if cfg.hierarchy_id >= 0 && cfg.hierarchy_id != root {
        return Ok(());
    }
    if kind == EventKind::Rmdir {
        // Noted before the entry goes, so a concurrent update finds one or the other.
        if REMOVED.insert(&id, &1, 0).is_err() {
            warn!(
                ctx,
                "cgroup {} removed but not noted: a late update may count it again", id
            );
        }
        let _ = CGROUP_STATS.remove(&id);
    }
    let Some(mut entry) = EVENTS.reserve::<CgroupEvent>(0) else {
        count_drop(DropReason::RingFull);
        return Ok(());
    };
    let event = entry.as_mut_ptr();
    // __data_loc: low 16 bits are the offset of the string from the record start.
    // SAFETY: pointer arithmetic only; the string is read with bpf_probe_read_kernel_str_bytes,
    // which checks the access.
    let path_src = unsafe { (ctx.as_ptr() as *const u8).add((path_loc & 0xffff) as usize) };
    // SAFETY: `event` points at reserved ring-buffer memory of the right size and alignment.
    unsafe {
        (*event).kind = kind as u32;
        (*event).level = level;
        (*event).cgroup_id = id;
        (*event).ts_ns = bpf_ktime_get_ns();
        (*event).hierarchy_id = root;
        (*event).path_len = match bpf_probe_read_kernel_str_bytes(path_src, &mut (*event).path) {
            Ok(path) => path.len() as u32,
            Err(_) => 0,
        };
    }
    entry.submit(0);
    Ok(())
}
