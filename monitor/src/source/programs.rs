//! The compatibility table: every kernel program the agent can use, the hook it needs, and what
//! the agent loses without it. The loader attaches what the running kernel offers and skips the
//! rest with the reason; `monitor doctor` prints the same table.
//!
//! Per-cgroup memory stats come from the best hook the kernel has: the `memcg` tracepoints
//! (6.13+), else fentry on the kernel functions those tracepoints were placed in
//! ([`FENTRY_PROGRAMS`], 5.11+, where BTF shows them with the expected prototype), else
//! cgroupfs polling with PSI wake-ups.

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
        fallback: "fentry on __mod_memcg_lruvec_state (5.11+), else poll memory.stat at the poll interval, sooner on PSI memory stalls",
        since: "6.13",
    },
    ProgramSpec {
        name: "mod_memcg_state",
        category: "memcg",
        tracepoint: "mod_memcg_state",
        provides: "per-cgroup kernel memory deltas",
        fallback: "fentry on __mod_memcg_state (5.11+), else poll memory.stat at the poll interval, sooner on PSI memory stalls",
        since: "6.13",
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

/// An fentry program standing in for a `memcg` tracepoint program on kernels before 6.13.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FentrySpec {
    /// Function name in `monitor-ebpf`, which is also the program's name in the object.
    pub name: &'static str,
    /// The [`ProgramSpec`] (a tracepoint program) whose records it sends.
    pub replaces: &'static str,
    /// Kernel functions it may attach to, by the names kernels have used, oldest first.
    pub functions: &'static [&'static str],
    /// Accepted spellings of each parameter's type (see `Types::function_params`).
    pub params: &'static [&'static [&'static str]],
    /// First mainline kernel with the function and that prototype.
    pub since: &'static str,
}

impl FentrySpec {
    /// Whether a function with these parameter types is what the program reads.
    pub fn accepts(&self, params: &[String]) -> bool {
        params.len() == self.params.len()
            && params
                .iter()
                .zip(self.params)
                .all(|(got, accepted)| accepted.contains(&got.as_str()))
    }
}

/// The fentry programs, one per `memcg` tracepoint program. The functions were renamed
/// without the leading underscores when the tracepoints went in; 6.13+ kernels have both
/// the tracepoints and the renamed functions, so only the tracepoints are used there unless
/// the loader is told otherwise.
pub const FENTRY_PROGRAMS: &[FentrySpec] = &[
    FentrySpec {
        name: "fentry_memcg_lruvec_state",
        replaces: "mod_memcg_lruvec_state",
        functions: &["__mod_memcg_lruvec_state", "mod_memcg_lruvec_state"],
        params: &[&["struct lruvec *"], &["enum node_stat_item"], &["int"]],
        since: "5.11",
    },
    FentrySpec {
        name: "fentry_memcg_state",
        replaces: "mod_memcg_state",
        functions: &["__mod_memcg_state", "mod_memcg_state"],
        params: &[
            &["struct mem_cgroup *"],
            &["int", "enum memcg_stat_item"],
            &["int"],
        ],
        since: "5.11",
    },
];

/// The incident programs (reclaim stalls, kswapd, OOM kills). Kept apart from [`PROGRAMS`]
/// because they are optional: `monitor trace` and the agent (for the causes a decision names)
/// attach them with `KernelSource::load_with_incidents`, and the agent's choice of event
/// source does not depend on them.
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
    fn fentry_programs_accept_the_prototypes_of_each_kernel_generation() {
        let spell = |params: &[&str]| params.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        let lruvec = &FENTRY_PROGRAMS[0];
        let memcg = &FENTRY_PROGRAMS[1];
        let cases = [
            (
                "6.1 __mod_memcg_lruvec_state",
                lruvec,
                spell(&["struct lruvec *", "enum node_stat_item", "int"]),
                true,
            ),
            (
                "6.1 __mod_memcg_state, int item",
                memcg,
                spell(&["struct mem_cgroup *", "int", "int"]),
                true,
            ),
            (
                "6.18 mod_memcg_state, enum item",
                memcg,
                spell(&["struct mem_cgroup *", "enum memcg_stat_item", "int"]),
                true,
            ),
            (
                "a long val would be read wrong",
                lruvec,
                spell(&["struct lruvec *", "enum node_stat_item", "long"]),
                false,
            ),
            (
                "another first argument",
                memcg,
                spell(&["struct lruvec *", "int", "int"]),
                false,
            ),
            (
                "one parameter more",
                memcg,
                spell(&["struct mem_cgroup *", "int", "int", "int"]),
                false,
            ),
        ];
        for (name, spec, params, accepted) in cases {
            assert_eq!(spec.accepts(&params), accepted, "{name}");
        }
        for spec in FENTRY_PROGRAMS {
            assert!(
                PROGRAMS
                    .iter()
                    .any(|p| p.name == spec.replaces && p.category == "memcg"),
                "{} replaces no memcg program",
                spec.name
            );
        }
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
