//! The node as the agent reads it: eviction signals computed as the kubelet computes them,
//! `memory.available`, `allocatableMemory.available` and `pid.available` (pure arithmetic and
//! parsing live in the engine's `memory_signals` and in [`pids`]; [`read`] gathers the inputs
//! from /proc and cgroupfs); [`machine_reader`], the seam the agent reads the node's and the
//! pods' numbers through; [`kernel_victim`], the process the kernel's OOM killer would choose;
//! and [`status`], the agent's pressure conditions on the Node object.
pub(crate) mod kernel_victim;
pub(crate) mod machine_reader;
pub(crate) mod pids;
pub(crate) mod read;
pub(crate) mod status;
