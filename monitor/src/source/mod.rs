//! Where memory numbers come from: the kernel programs (ring buffer) or, where they cannot
//! load, cgroupfs polling; and PSI triggers, the kernel's word that tasks stall on memory
//! ([`pressure`]), which wake the polling agent at once ([`psi_wake`]).
pub mod btf;
pub(crate) mod btf_bytes;
pub mod ebpf;
pub mod event;
pub mod fentry;
pub(crate) mod hook_plan;
pub mod hook_unavailable;
pub mod kernel_log;
pub mod pressure;
pub mod probe;
pub mod programs;
pub(crate) mod psi_wake;
pub mod run_stats;
pub mod struct_members;
pub mod tracefs;
pub mod tracepoint_format;
pub mod tracepoint_prototype;
