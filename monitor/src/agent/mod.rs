//! The node agent's shell: kernel events -> working sets -> rankings -> decisions -> actions
//! -> checkpoint. The pure state machine is [`crate::engine::eviction_machine`]; [`run`] is
//! the event loop over the seams (the kernel programs behind `event_source::KernelEvents`,
//! the machine behind `reader::MachineReader`, the `actuator::Actuator`, the checkpoint
//! store behind `Persister`). Its components each keep their own state: [`actions`] (the
//! actuator and evictions in progress), [`checkpointer`], [`intake`] (held records, fork
//! arming, the pods handed out), [`stat_programs`] (the gate and its guard) and
//! [`visibility`] (metrics, snapshot, recent decisions); the steps that compose them are in
//! [`startup`], [`intake`], [`stat_programs`], [`decision_step`], [`evicted_pods`],
//! [`action_results`] and [`visibility`]. `loop_policy_tests` drives it over fakes of every
//! seam, without root.
pub(crate) mod action_path;
mod action_results;
mod actions;
pub(crate) mod actuator;
pub(crate) mod args;
pub(crate) mod cause;
mod checkpointer;
pub(crate) mod decision_log;
pub(crate) mod decision_report;
mod decision_step;
mod event_source;
mod evicted_pods;
mod fork_arming;
mod intake;
mod kernel_victim;
mod kubepods_brake;
pub(crate) mod local_first;
#[cfg(test)]
mod loop_policy_tests;
pub(crate) mod node_status;
mod psi_wake;
pub(crate) mod publish;
pub(crate) mod reader;
pub(crate) mod realtime;
mod reload;
pub(crate) mod resync;
mod run;
pub(crate) mod self_protect;
mod startup;
mod stat_programs;
mod visibility;

pub(crate) use args::AgentArgs;
pub(crate) use run::run;
