//! Acting on a pod chosen for eviction. [`cgroup_kill`] ends a pod's processes through its
//! cgroup, for nodes where the agent acts without the Kubernetes API.
pub mod cgroup_kill;

pub use cgroup_kill::{KillError, KillOutcome, KillReport, KillTimings, kill_cgroup_tree};
