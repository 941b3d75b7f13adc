//! The node agent's shell: kernel events -> working sets -> rankings -> decisions -> actions
//! -> checkpoint. The pure state machine is [`crate::engine::eviction_machine`];
//! [`run`](mod@run) is the event loop over the seams (the kernel programs behind
//! `event_source::KernelEvents`, the machine behind [`crate::node::machine_reader`]'s
//! `MachineReader`, [`crate::action::actuator`]'s `Actuator`, the checkpoint store behind
//! `Persister`): it only waits for the next [`input`], which `Agent::handle` carries out. The
//! [`components`] it composes each keep their own state: [`actions`] (the actuator and
//! evictions in progress), [`checkpointer`], [`intake_state`] (held records, fork arming, the
//! pods handed out), [`wake_levels`] (when the kernel wakes the agent to read),
//! [`stat_programs`] (the gate and its guard's schedule), [`publish`]'s
//! `Visibility` (metrics, snapshot, recent decisions) and a dry run's [`shadow_score`]. The steps that compose them are in
//! [`startup`], [`intake`], [`guard_read`], [`decision_step`], [`evicted_pods`],
//! [`action_results`], [`visibility`] and [`scorecard_feed`]; each file stands above what it uses, so no two
//! import each other. `loop_policy_tests` drives `Agent::handle` over fakes of every seam,
//! without root.
//!
//! Only the loop, its steps and the components' state live here. The pure rules they apply
//! are the engine's (a decision's report and causes, an eviction's route, the resyncs'
//! cadence); the adapters to the machine sit beside the I/O they do: the machine's reader,
//! the OOM killer's choice and the Node's conditions in [`crate::node`], PSI wake-ups in
//! [`crate::source`], the actuators and the kubepods brake in [`crate::action`], the agent's
//! own process in `own_process`.
mod action_results;
mod actions;
pub(crate) mod args;
mod checkpointer;
mod components;
mod config_in_force;
pub(crate) mod decision_log;
mod decision_step;
mod event_source;
mod evicted_pods;
mod guard_read;
mod input;
mod intake;
mod intake_state;
#[cfg(test)]
mod loop_policy_tests;
pub(crate) mod publish;
mod reclaim_step;
mod reload;
mod resync;
mod resync_read;
mod run;
mod run_options;
mod scorecard_feed;
mod shadow_score;
mod startup;
mod stat_programs;
mod visibility;
mod wake_levels;

pub(crate) use args::AgentArgs;
pub(crate) use run::run;
