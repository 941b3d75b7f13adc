//! Support for the end-to-end tests: test-owned cgroups and temporary directories that are
//! removed even when a test fails, processes that allocate real memory inside them, the agent
//! and `monitor trace` as subprocesses, pods and the scene an agent runs on, and a policy that
//! fails a test which cannot run here unless its reason for skipping is allowed.
//!
//! Each module sets up one thing; everything is re-exported at the crate root.
mod binaries;
/// Cgroup trees owned by a test, shared with xtask.
pub use test_harness::cgroup_tree;
mod cgroups;
pub mod deploy_files;
mod fork_bomb;
mod freezer;
mod helper_processes;
mod http;
mod image_archive;
pub mod kernel_programs;
pub mod kube_api;
mod kube_scene;
mod kubepods;
mod monitor_process;
pub mod mounts;
mod netns;
mod node_cpus;
mod node_pids;
mod pids_cap;
mod pods;
mod scene;
pub mod scene_decisions;
mod skip;
pub mod stand_in_kubelet;
mod temp_dir;
mod trace_process;

pub use binaries::{binary, monitor_bin};
pub use cgroups::{TestCgroup, cgroup_id, cgroup_pids, oom_kills, set_memory_limit};
pub use fork_bomb::{fork_bomb, reap, reap_within};
pub use freezer::{Freezer, V1_FREEZER, v2_frozen};
pub use helper_processes::{Allocator, TermIgnorer, process_alive, sigterms_logged};
pub use http::{http_get, http_get_as, metric, metrics_addr};
pub use image_archive::image_archive;
pub use kube_scene::KubeScene;
pub use kubepods::{Kubepods, Qos};
pub use monitor_process::MonitorProcess;
pub use netns::{add_loopback_alias, in_own_network_namespace};
pub use node_cpus::{attach_distance_bound_mib, online_cpus, possible_cpus};
pub use node_pids::pid_available_now;
pub use pids_cap::PidsCap;
pub use pods::{TestPod, uid_for};
pub use scene::AgentScene;
pub use skip::{
    Reason, cannot_run, has_cap_sys_resource, memory_on_cgroup_v2, on_the_host, outside_the_vm,
    running_as_root,
};
pub use temp_dir::TempDir;
pub use test_harness::cgroup_tree::oom_kills_in;
pub use trace_process::Trace;
