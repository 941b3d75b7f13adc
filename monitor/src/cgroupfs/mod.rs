//! The cgroup filesystem: where the memory controller is mounted, the cgroup id -> path cache,
//! reading a cgroup's memory numbers and its hits of its own limit. Everything that touches cgroupfs goes through here.
pub mod hierarchy;
pub(crate) mod limit_hits;
pub mod paths;
pub mod procs;
pub mod reclaim;
pub mod stats;

pub use hierarchy::{CgroupVersion, HierarchyError, MemoryHierarchy};
pub use paths::CgroupPaths;
pub use stats::{MemoryStats, StatsError};
