//! `sched/sched_process_fork`: every task created, process or thread, counted; one record
//! with a wake-up once the count reaches the level userspace armed (`WakeSlot::ForkWakeAt`).
//!
//! `pid.available` falls by one per task created (the kubelet counts threads too), so the
//! forks since userspace last read it bound how far it can have fallen: armed at the
//! distance to the nearest pid threshold, the record comes no later than the crossing, and
//! a fork bomb is read about when it gets there instead of at the next resync. Exits are
//! not counted: they only make the record early. The child's cgroup is marked for the PID
//! ranking (`task_cgroups`). Minimum kernel: 5.8 (ring buffer); the tracepoint is older, and
//! its fields are not read.

use aya_ebpf::{
    bindings::BPF_RB_FORCE_WAKEUP, helpers::bpf_ktime_get_ns, macros::tracepoint,
    programs::TracePointContext,
};
use monitor_common::{DropReason, EventKind, ForkEvent, WakeSlot};

use crate::{
    atomic,
    maps::{EVENTS, WAKE, count_drop},
    task_cgroups,
};

#[tracepoint(category = "sched", name = "sched_process_fork")]
pub(crate) fn sched_process_fork(_ctx: TracePointContext) -> u32 {
    task_cgroups::mark_current();
    count_fork();
    0
}

fn count_fork() {
    let (Some(forks), Some(wake_at)) = (
        WAKE.get_ptr_mut(WakeSlot::Forks as u32),
        WAKE.get_ptr_mut(WakeSlot::ForkWakeAt as u32),
    ) else {
        return;
    };
    // SAFETY: pointers from the array map, valid for this program run; other CPUs count
    // and userspace arms the same entries, hence atomics.
    let (total, armed) = unsafe {
        atomic::add(forks, 1);
        (atomic::load(forks), atomic::load(wake_at))
    };
    if armed == 0 || total < armed {
        return;
    }
    // The CPU that disarms sends the record: one per arming, whatever the fork rate.
    // SAFETY: as above.
    if !unsafe { atomic::swap_if(wake_at, armed, 0) } {
        return;
    }
    let event = ForkEvent {
        kind: EventKind::Forks as u32,
        _pad: 0,
        forks: total,
        // SAFETY: helper without preconditions.
        ts_ns: unsafe { bpf_ktime_get_ns() },
    };
    if EVENTS
        .output::<ForkEvent>(&event, u64::from(BPF_RB_FORCE_WAKEUP))
        .is_err()
    {
        count_drop(DropReason::RingFull);
    }
}
