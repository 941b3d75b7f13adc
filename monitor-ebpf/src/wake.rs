//! Whether a stat record wakes userspace at once (see `monitor_common::WakeSlot`).
//!
//! Records that cannot move a signal across a threshold are sent with `BPF_RB_NO_WAKEUP`:
//! they wait in the ring until userspace reads it anyway (on a wake-up or its own timer),
//! which saves a context switch per record on a node far from pressure.
//! Minimum kernel: 5.8 (ring buffer wake-up flags).

use aya_ebpf::bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP};
use monitor_common::WakeSlot;

use crate::{
    atomic,
    maps::{EVENTS, EVENTS_BYTES, WAKE},
};

/// Adds a record's working-set growth to the running sum; returns the sum and the ring-buffer
/// flags for the record.
pub(crate) fn count_growth(growth_bytes: i64) -> (i64, u64) {
    let (Some(total_ptr), Some(&wake_at)) = (
        WAKE.get_ptr_mut(WakeSlot::Growth as u32),
        WAKE.get(WakeSlot::WakeAt as u32),
    ) else {
        return (0, 0);
    };
    if growth_bytes > 0 {
        // SAFETY: the pointer comes from the array map and stays valid for this program run;
        // other CPUs update the same entry, hence atomics.
        unsafe { atomic::add(total_ptr, growth_bytes) };
    }
    // May include other CPUs' later growth, which only makes the wake-up earlier.
    // SAFETY: as above.
    let total = unsafe { atomic::load(total_ptr) };
    (total, flags(total, wake_at))
}

fn flags(total: i64, wake_at: i64) -> u64 {
    if wake_at == 0 {
        // Userspace asked for the usual behaviour: wake when the reader has caught up.
        0
    } else if total >= wake_at || EVENTS.query(u64::from(BPF_RB_AVAIL_DATA)) >= EVENTS_BYTES / 2 {
        // A threshold may be crossed, or the ring is half full and must be read before
        // records are lost.
        u64::from(BPF_RB_FORCE_WAKEUP)
    } else {
        u64::from(BPF_RB_NO_WAKEUP)
    }
}
