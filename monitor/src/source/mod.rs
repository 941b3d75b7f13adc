//! Where memory numbers come from: the kernel programs (ring buffer) or, where they cannot
//! load, cgroupfs polling.
pub mod btf;
pub mod ebpf;
pub mod event;
pub mod probe;
pub mod programs;
