//! Node-level eviction signals computed as the kubelet computes them: `memory.available`,
//! `allocatableMemory.available` and `pid.available`. Pure arithmetic and parsing live in
//! the engine's `memory_signals` and in [`pids`]; [`read`] gathers the inputs from /proc and cgroupfs.
pub mod pids;
pub mod read;

pub use crate::engine::memory_signals::{
    MemoryLimit, allocatable_bytes, allocatable_memory_available, memory_available,
};
pub use pids::pid_available;
pub use read::{
    NodeError, node_working_set, read_mem_total, read_memory_limit, read_pid_available,
};
