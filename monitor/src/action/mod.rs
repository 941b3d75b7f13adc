//! Acting on a pod chosen for eviction. The [`actuator`]s carry out the agent's decisions
//! (both steps in turn with [`local_first`]); [`cgroup_kill`] ends a pod's processes through
//! its cgroup, for nodes where the agent acts without the Kubernetes API; [`kube_evict`] asks
//! the API server to evict the pod, and [`kube_event`] tells Kubernetes about it;
//! [`hard_action`] says which of them an eviction on a hard threshold takes first, and
//! [`kubepods_brake`] holds the other pods' memory while a victim drains; [`reclaim_first`]
//! takes page cache back from the pods before an eviction, when the operator asks.
pub(crate) mod actuator;
pub mod cgroup_kill;
mod freezer;
pub(crate) mod hard_action;
pub mod kube_event;
pub mod kube_evict;
pub(crate) mod kubepods_brake;
pub(crate) mod local_first;
pub mod reap;
pub(crate) mod reclaim_first;
pub mod stuck;

pub use cgroup_kill::{
    KillError, KillOutcome, KillReport, KillTimings, REAP_WAIT, kill_cgroup_tree,
};
pub use kube_evict::{EvictError, KubeEvictor};
pub use stuck::{StuckCause, StuckProcess};
