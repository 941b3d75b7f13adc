//! The pure core: plain data and a clock in, decisions out. No tokio, no aya, no filesystem,
//! so every rule is tested without root.
//!
//! * [`ids`]: pod uids and cgroup paths, checked and normalised once;
//! * [`config`]: thresholds and settings from a KubeletConfiguration YAML string;
//! * [`pod_facts`], [`pod_request`], [`allocation`] and [`qos`]: what ranking needs from a
//!   Pod object, on the resources the kubelet allocated;
//! * [`summary`]: pod usage, and the kubelet's Summary API as one source of it;
//! * [`rank`] and [`rank_index`]: the kubelet's eviction order, kept incrementally;
//! * [`decide`]: thresholds, grace periods, min-reclaim and the one-pod-per-interval rule;
//! * [`headroom`]: how far memory is from its thresholds, which sets when the kernel wakes us;
//! * [`stat_gate`]: whether the kernel's stat programs must run at that distance;
//! * [`report`]: the eviction order explained, for `monitor rank`;
//! * [`memory_brake`]: when the kubepods cgroup is throttled while a victim drains;
//! * [`oom_badness`]: whom the kernel's OOM killer would choose, which a decision names;
//! * [`eviction_machine`]: the agent's state machine over all of these: the [`pod_table`],
//!   working sets kept current from kernel records ([`working_set`]), budget [`refusals`]
//!   and the decision step.
pub mod allocation;
pub mod checkpoint;
pub mod config_origin;
pub mod decide;
pub mod duration;
pub mod eviction_config;
pub mod eviction_machine;
pub mod eviction_order;
pub mod headroom;
pub mod ids;
pub mod instant;
pub mod kubelet_summary;
pub mod memory_brake;
pub mod oom_badness;
pub mod oom_projection;
pub mod pod_facts;
pub mod pod_request;
pub mod pod_table;
pub mod qos;
pub mod quantity;
pub mod rank_index;
pub mod rank_report;
pub mod refusals;
pub mod signal;
pub mod stat_gate;
pub mod threshold;
pub mod working_set;
