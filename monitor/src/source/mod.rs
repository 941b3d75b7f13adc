//! Where memory numbers come from: the kernel programs (ring buffer) or, where they cannot
//! load, cgroupfs polling.
pub mod programs;
