//! The node agent: kernel events -> working sets -> rankings -> decisions -> actions ->
//! checkpoint. [`core`] is the pure state machine; the rest wires it to the machine.
pub mod action_path;
pub mod actuator;
pub mod args;
pub mod cause;
pub mod checkpoint_writer;
pub mod core;
pub mod decision_log;
mod event_source;
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
pub mod usage;

pub use args::AgentArgs;
pub use run::run;
