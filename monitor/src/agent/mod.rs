//! The node agent: kernel events -> working sets -> rankings -> decisions -> actions ->
//! checkpoint. [`core`] is the pure state machine; the rest wires it to the machine.
pub mod core;
pub mod persist;
pub mod report;
pub mod usage;
