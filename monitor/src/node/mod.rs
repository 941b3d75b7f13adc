//! Node-level eviction signals computed as the kubelet computes them: `memory.available`,
//! `allocatableMemory.available` and `pid.available`. Pure arithmetic and parsing live in
//! the engine's `memory_signals` and in [`pids`]; [`read`] gathers the inputs from /proc and cgroupfs.
pub(crate) mod pids;
pub(crate) mod read;
