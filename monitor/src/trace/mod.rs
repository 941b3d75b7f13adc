//! `monitor trace`: turning kernel events into lines a person (text) or a program (JSON lines)
//! reads. The event loop lives in `commands::trace`; this module is pure apart from the
//! baseline read that gives each cgroup's current value.
pub mod record;
pub mod view;

pub use record::TraceRecord;
pub use view::TraceView;
