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

    /// Tracepoint fields the program reads that older kernels lack; the loader skips the program
    /// when the format misses one.
    pub fn required_fields(&self) -> &'static [&'static str] {
        match self.name {
            "mark_victim" => &["anon_rss", "oom_score_adj"],
            _ => &[],
        }
    }
}

/// Every program in the embedded object.
pub const PROGRAMS: &[ProgramSpec] = &[
    ProgramSpec {
        name: "mod_memcg_lruvec_state",
        category: "memcg",
        tracepoint: "mod_memcg_lruvec_state",
        provides: "per-cgroup anon, file and LRU page deltas as they happen",
        fallback: "poll memory.stat at the poll interval, sooner on PSI memory stalls",
        since: "6.8",
    },
    ProgramSpec {
        name: "mod_memcg_state",
        category: "memcg",
        tracepoint: "mod_memcg_state",
        provides: "per-cgroup kernel memory deltas",
        fallback: "poll memory.stat at the poll interval, sooner on PSI memory stalls",
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

/// The incident programs (reclaim stalls, kswapd, OOM kills). Kept apart from [`PROGRAMS`]
/// because only `monitor trace` attaches them (see `KernelSource::load_with_incidents`): the
/// agent's choice of event source does not depend on them.
pub const INCIDENT_PROGRAMS: &[ProgramSpec] = &[
    ProgramSpec {
        name: "direct_reclaim_begin",
        category: "vmscan",
        tracepoint: "mm_vmscan_direct_reclaim_begin",
        provides: "start of a task's direct (node-wide) reclaim, for stall times",
        fallback: "no per-task stalls; node PSI (/proc/pressure/memory) still shows pressure",
        since: "2.6.36",
    },
    ProgramSpec {
        name: "direct_reclaim_end",
        category: "vmscan",
        tracepoint: "mm_vmscan_direct_reclaim_end",
        provides: "direct reclaim stalls above --min-stall with task, cgroup and pages reclaimed",
        fallback: "no per-task stalls; node PSI (/proc/pressure/memory) still shows pressure",
        since: "2.6.36",
    },
    ProgramSpec {
        name: "memcg_reclaim_begin",
        category: "vmscan",
        tracepoint: "mm_vmscan_memcg_reclaim_begin",
        provides: "start of a task's reclaim in a cgroup at its limit, for stall times",
        fallback: "no per-task stalls; cgroup PSI (memory.pressure) still shows pressure",
        since: "2.6.36",
    },
    ProgramSpec {
        name: "memcg_reclaim_end",
        category: "vmscan",
        tracepoint: "mm_vmscan_memcg_reclaim_end",
        provides: "cgroup-limit reclaim stalls above --min-stall with task, cgroup and pages",
        fallback: "no per-task stalls; cgroup PSI (memory.pressure) still shows pressure",
        since: "2.6.36",
    },
    ProgramSpec {
        name: "kswapd_wake",
        category: "vmscan",
        tracepoint: "mm_vmscan_kswapd_wake",
        provides: "a node's background reclaim starting (free memory below the low watermark)",
        fallback: "node PSI only",
        since: "2.6.36",
    },
    ProgramSpec {
        name: "kswapd_sleep",
        category: "vmscan",
        tracepoint: "mm_vmscan_kswapd_sleep",
        provides: "a node's background reclaim finishing",
        fallback: "node PSI only",
        since: "2.6.36",
    },
    ProgramSpec {
        name: "mark_victim",
        category: "oom",
        tracepoint: "mark_victim",
        provides: "OOM kills as they happen: victim pid, comm, sizes, and the OOM'ing cgroup",
        fallback: "OOM kills only after the fact (memory.events oom_kill counters)",
        since: "6.8",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_hooks_well_formed() {
        let mut names: Vec<_> = PROGRAMS
            .iter()
            .chain(INCIDENT_PROGRAMS)
            .map(|p| p.name)
            .collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), PROGRAMS.len() + INCIDENT_PROGRAMS.len());
        assert_eq!(PROGRAMS[0].hook(), "memcg/mod_memcg_lruvec_state");
    }

    #[test]
    fn incident_programs_need_fields_only_where_the_format_grew() {
        let cases = [
            ("mark_victim", true),
            ("direct_reclaim_end", false),
            ("mod_memcg_state", false),
        ];
        for (name, needs_fields) in cases {
            let spec = PROGRAMS
                .iter()
                .chain(INCIDENT_PROGRAMS)
                .find(|p| p.name == name)
                .unwrap();
            assert_eq!(!spec.required_fields().is_empty(), needs_fields, "{name}");
        }
    }
}
