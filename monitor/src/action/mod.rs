//! Acting on a pod chosen for eviction. [`cgroup_kill`] ends a pod's processes through its
//! cgroup, for nodes where the agent acts without the Kubernetes API; [`kube_evict`] asks the
//! API server to evict the pod.
pub mod cgroup_kill;
pub mod kube_evict;

pub use cgroup_kill::{KillError, KillOutcome, KillReport, KillTimings, kill_cgroup_tree};
pub use kube_evict::{EvictError, KubeEvictor};
