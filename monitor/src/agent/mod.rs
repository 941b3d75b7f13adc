//! The node agent's shell: kernel events -> working sets -> rankings -> decisions -> actions
//! -> checkpoint. The pure state machine is [`crate::engine::eviction_machine`]; [`run`] is
//! the event loop over the seams ([`event_source`], [`reader`], [`actuator`],
//! [`checkpoint_writer`]) with its steps in [`startup`], [`intake`], [`stat_programs`],
//! [`decision_step`], [`action_results`] and [`visibility`].
pub mod action_path;
mod action_results;
pub mod actuator;
pub mod args;
pub mod cause;
pub mod checkpoint_writer;
pub mod decision_log;
pub mod decision_report;
mod decision_step;
mod event_source;
mod fork_arming;
mod intake;
mod kernel_victim;
mod kubepods_brake;
pub mod local_first;
pub mod node_status;
pub mod persist;
mod psi_wake;
pub mod publish;
pub mod reader;
pub mod realtime;
mod reload;
pub mod resync;
mod run;
pub mod self_protect;
mod startup;
mod stat_programs;
mod visibility;

pub use args::AgentArgs;
pub use run::run;
