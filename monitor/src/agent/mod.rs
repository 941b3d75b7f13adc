//! The node agent: kernel events -> working sets -> rankings -> decisions -> actions ->
//! checkpoint. [`core`] is the pure state machine; [`run`] the event loop over the seams ([`event_source`],
//! [`reader`], [`actuator`], [`checkpoint_writer`]) with its steps in [`startup`], [`intake`],
//! [`decision_step`], [`action_results`] and [`visibility`].
pub mod action_path;
mod action_results;
pub mod actuator;
pub mod args;
pub mod cause;
pub mod checkpoint_writer;
pub mod core;
pub mod decision_log;
mod decision_step;
mod event_source;
mod intake;
pub mod local_first;
pub mod node_status;
pub mod persist;
pub mod pod_table;
mod psi_wake;
pub mod publish;
pub mod reader;
pub mod realtime;
pub mod refusals;
pub mod report;
pub mod resync;
mod run;
pub mod self_protect;
mod startup;
pub mod usage;
mod visibility;

pub use args::AgentArgs;
pub use run::run;
