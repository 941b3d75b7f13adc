//! The pure core of the memory-pressure monitor: plain data and a clock in, decisions out.
//! A crate of its own so that Cargo, not a comment, keeps tokio, aya, libc and the
//! filesystem out: its dependencies are data formats (serde, the Kubernetes API types,
//! libyaml's tokenizer) and the records shared with the kernel programs. Every rule is tested
//! without root.
//!
//! * [`ids`]: pod uids and cgroup paths, checked and normalised once;
//! * [`eviction_config`], [`config_origin`], [`duration`] and [`yaml_bounds`]: thresholds and
//!   settings from a KubeletConfiguration YAML string, bounded before it is parsed;
//! * [`pod_facts`], [`pod_request`], `allocation`, [`quantity`], [`qos`] and
//!   [`kubelet_view`]: what ranking needs from a Pod object, on the resources the kubelet
//!   allocated, and whether the node's kubelet counts it as active;
//! * [`signal`], [`threshold`] and [`memory_signals`]: the signals as the kubelet derives them;
//! * [`kubelet_summary`]: pod usage, and the kubelet's Summary API as one source of it;
//! * [`eviction_order`] and [`rank_index`]: the kubelet's eviction order, kept incrementally;
//! * [`decide`]: thresholds, grace periods, min-reclaim and the one-pod-per-interval rule;
//! * `headroom`: how far memory is from its thresholds, which sets when the kernel wakes us;
//! * [`resync`]: which pods a timed resync reads, in chunks at what pace;
//! * [`stat_gate`]: whether the kernel's stat programs must run at that distance, and
//!   [`attach_distance`]: which distance, when no operator says;
//! * [`rank_report`]: the eviction order explained, for `monitor rank`;
//! * [`memory_brake`] and [`oom_projection`]: when the pods are held while a victim drains,
//!   and how long the node can wait for it;
//! * [`reclaim_ladder`]: the page cache taken back from the pods, head first, before an
//!   eviction (`--reclaim-first`), and when the race forbids it; [`reclaim_record`]: what
//!   earlier steps gave; [`reclaim_plan`]: what a dry run would take;
//! * [`oom_badness`]: whom the kernel's OOM killer would choose, which a decision names;
//! * [`cause`]: what led to a decision, the reclaim stalls ([`incident`]) and growth bursts
//!   ([`burst`]) of the kernel's records before it, shared with `monitor trace`;
//! * [`decision_report`]: the line and the JSON object a decision is told in, with the
//!   [`action_path`] its eviction takes: which step runs first and which follows each report;
//! * [`decision_repeats`]: which of a dry run's repeated decisions to say, and
//!   [`event_correlation`]: the kubelet's rules for counting, combining and rate-limiting the
//!   Events it posts;
//! * [`shadow`]: a dry run's decisions matched with the kubelet's evictions and the kernel's
//!   OOM kills, the scorecard for the switch to act;
//! * [`checkpoint`]: the agent's saved state, its format and checksum (the files are the
//!   agent's);
//! * [`instant`]: the clock the core is given; [`units`] and [`printable`]: how numbers and
//!   untrusted names are shown;
//! * [`eviction_machine`]: the agent's state machine over all of these: the [`pod_table`],
//!   working sets kept current from kernel records ([`working_set`]), budget [`refusals`]
//!   and the decision step.
pub mod action_path;
mod allocation;
pub mod attach_distance;
pub mod burst;
pub mod cause;
pub mod checkpoint;
pub mod config_origin;
pub mod decide;
pub mod decision_repeats;
pub mod decision_report;
pub mod duration;
pub mod event_correlation;
pub mod eviction_config;
pub mod eviction_machine;
pub mod eviction_order;
mod headroom;
pub mod ids;
pub mod incident;
pub mod instant;
pub mod kubelet_summary;
pub mod kubelet_view;
pub mod memory_brake;
pub mod memory_signals;
pub mod oom_badness;
pub mod oom_projection;
pub mod pod_facts;
pub mod pod_request;
pub mod pod_table;
pub mod printable;
pub mod qos;
pub mod quantity;
pub mod rank_index;
pub mod rank_report;
pub mod reclaim_ladder;
pub mod reclaim_plan;
pub mod reclaim_record;
pub mod refusals;
pub mod resync;
pub mod shadow;
pub mod signal;
pub mod stat_gate;
pub mod threshold;
pub mod units;
pub mod working_set;
pub mod yaml_bounds;
