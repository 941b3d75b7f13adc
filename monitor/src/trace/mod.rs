//! `monitor trace`: turning kernel events into lines a person (text) or a program (JSON lines)
//! reads, attributed to pods or cgroups, with reclaim stalls, OOM kills, growth bursts and
//! pressure, and a summary at the end. The event loop lives in `commands::trace`; everything
//! here is pure.
pub(crate) mod attribution;
pub(crate) mod filter;
pub(crate) mod record;
pub(crate) mod summary;
pub(crate) mod view;

pub(crate) use record::TraceRecord;
pub(crate) use view::TraceView;
