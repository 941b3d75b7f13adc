//! The compatibility table: every kernel program the agent can use, the hook it needs, and what
//! the agent loses without it. The loader attaches what the running kernel offers and skips the
//! rest with the reason; `monitor doctor` prints the same table.

/// One tracepoint program in the embedded object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgramSpec {
    /// Function name in `monitor-ebpf`, which is also the program's name in the object.
    pub name: &'static str,
    /// Tracepoint category (directory under tracefs `events/`).
    pub category: &'static str,
    /// Tracepoint name within the category.
    pub tracepoint: &'static str,
    /// What the agent gets from it.
    pub provides: &'static str,
    /// What the agent does when the hook is missing.
    pub fallback: &'static str,
    /// First mainline kernel with the hook.
    pub since: &'static str,
}

impl ProgramSpec {
    /// `category/tracepoint`, as tracefs and the kernel documentation name it.
    pub fn hook(&self) -> String {
        format!("{}/{}", self.category, self.tracepoint)
    }
}

/// Every program in the embedded object.
pub const PROGRAMS: &[ProgramSpec] = &[
    ProgramSpec {
        name: "mod_memcg_lruvec_state",
        category: "memcg",
        tracepoint: "mod_memcg_lruvec_state",
        provides: "per-cgroup anon, file and LRU page deltas as they happen",
        fallback: "poll memory.stat at the poll interval",
        since: "6.8",
    },
    ProgramSpec {
        name: "mod_memcg_state",
        category: "memcg",
        tracepoint: "mod_memcg_state",
        provides: "per-cgroup kernel memory deltas",
        fallback: "poll memory.stat at the poll interval",
        since: "6.8",
    },
    ProgramSpec {
        name: "cgroup_mkdir",
        category: "cgroup",
        tracepoint: "cgroup_mkdir",
        provides: "new cgroups as they appear",
        fallback: "rescan the hierarchy at the resync interval",
        since: "4.18",
    },
    ProgramSpec {
        name: "cgroup_rmdir",
        category: "cgroup",
        tracepoint: "cgroup_rmdir",
        provides: "removed cgroups, and freeing their kernel map entries",
        fallback: "rescan the hierarchy at the resync interval",
        since: "4.18",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_hooks_well_formed() {
        let mut names: Vec<_> = PROGRAMS.iter().map(|p| p.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), PROGRAMS.len());
        assert_eq!(PROGRAMS[0].hook(), "memcg/mod_memcg_lruvec_state");
    }
}
