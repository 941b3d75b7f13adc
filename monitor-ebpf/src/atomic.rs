//! 64-bit atomics on map values.
//!
//! Rust's `core::sync::atomic` offers only loads and stores on the BPF target, but the BPF
//! instruction set has fetch-add and compare-exchange (kernel 5.12+), which the compiler
//! intrinsics emit directly.

use core::intrinsics::{AtomicOrdering, atomic_cxchg, atomic_xadd};

/// Adds `val` to `*dst`.
///
/// The old value is not returned: with the default BPF CPU (which aya's build uses) the backend
/// only has the non-fetching form of the instruction.
///
/// # Safety
/// `dst` must point at a live, aligned i64 (a map value from a lookup in this program run).
pub(crate) unsafe fn add(dst: *mut i64, val: i64) {
    unsafe { atomic_xadd::<i64, i64, { AtomicOrdering::Relaxed }>(dst, val) };
}

/// Reads `*src`. A plain aligned 64-bit load is atomic on BPF; the backend has no pattern for
/// an atomic-load instruction, so this is a volatile read.
///
/// # Safety
/// As for [`add`].
pub(crate) unsafe fn load(src: *const i64) -> i64 {
    unsafe { core::ptr::read_volatile(src) }
}

/// Replaces `*dst` with `new` if it still holds `old`; true when it did.
///
/// # Safety
/// As for [`add`].
pub(crate) unsafe fn swap_if(dst: *mut i64, old: i64, new: i64) -> bool {
    unsafe {
        atomic_cxchg::<i64, { AtomicOrdering::Relaxed }, { AtomicOrdering::Relaxed }>(dst, old, new)
            .1
    }
}
