//! `monitor trace`: turning kernel events into lines a person (text) or a program (JSON lines)
//! reads, attributed to pods or cgroups, with reclaim stalls, OOM kills, growth bursts and
//! pressure, and a summary at the end. The event loop lives in `commands::trace`; everything
//! here is pure.
pub mod attribution;
pub mod burst;
pub mod filter;
pub mod incident;
pub mod record;
pub mod summary;
pub mod view;

pub use incident::RecentIncidents;
pub use record::TraceRecord;
pub use view::TraceView;
