//! The compatibility table: every kernel program the agent can use, the hook it needs, and what
//! the agent loses without it. The loader attaches what the running kernel offers and skips the
//! rest with the reason; `monitor doctor` prints the same table.
//!
//! Per-cgroup memory stats come from the best hook the kernel has: the `memcg` tracepoints
//! (6.13+), else fentry on the kernel functions those tracepoints were placed in
//! ([`FENTRY_PROGRAMS`], 5.11+, where BTF shows them with the expected prototype), else
//! cgroupfs polling with PSI wake-ups.

use monitor_common::FieldsSlot;

/// A field of a tracepoint record that a program reads: the loader finds its offset in the
/// running kernel's format and refuses the program when the name, size or signedness differ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldSpec {
    pub name: &'static str,
    /// Bytes, as the format's `size:`.
    pub size: u32,
    /// As the format's `signed:`; not compared for a `__data_loc` field, whose flag follows
    /// the string's element type and differs between kernels (6.1 says signed, 6.18 not).
    pub signed: bool,
    /// A `__data_loc` word (offset and length of a string in the record), not a value.
    pub data_loc: bool,
}

const fn field(name: &'static str, size: u32, signed: bool) -> FieldSpec {
    FieldSpec {
        name,
        size,
        signed,
        data_loc: false,
    }
}

/// A `__data_loc char[]` string's 32-bit location word.
const fn string_at(name: &'static str) -> FieldSpec {
    FieldSpec {
        name,
        size: 4,
        signed: false,
        data_loc: true,
    }
}

/// `u64 id; int item; int val;` of both memcg tracepoints, in `field::memcg` order.
const MEMCG_FIELDS: &[FieldSpec] = &[
    field("id", 8, false),
    field("item", 4, true),
    field("val", 4, true),
];
/// `int root; int level; u64 id; __data_loc char[] path;`, in `field::cgroup` order.
const CGROUP_FIELDS: &[FieldSpec] = &[
    field("root", 4, true),
    field("level", 4, true),
    field("id", 8, false),
    string_at("path"),
];
/// `unsigned long nr_reclaimed;` of both reclaim end tracepoints.
const RECLAIM_END_FIELDS: &[FieldSpec] = &[field("nr_reclaimed", 8, false)];

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
    /// The record fields the program reads, in the order of its `monitor_common::field`
    /// indices; the loader skips the program when this kernel's format does not match.
    pub fields: &'static [FieldSpec],
    /// Its entry in the `FIELDS` map; `None` for programs that read no field.
    pub fields_slot: Option<FieldsSlot>,
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
        fallback: "fentry on __mod_memcg_lruvec_state (5.11+), else poll memory.stat at the poll interval, sooner on PSI memory stalls",
        since: "6.13",
        fields: MEMCG_FIELDS,
        fields_slot: Some(FieldsSlot::MemcgLruvecState),
    },
    ProgramSpec {
        name: "mod_memcg_state",
        category: "memcg",
        tracepoint: "mod_memcg_state",
        provides: "per-cgroup kernel memory deltas",
        fallback: "fentry on __mod_memcg_state (5.11+), else poll memory.stat at the poll interval, sooner on PSI memory stalls",
        since: "6.13",
        fields: MEMCG_FIELDS,
        fields_slot: Some(FieldsSlot::MemcgState),
    },
    ProgramSpec {
        name: "cgroup_mkdir",
        category: "cgroup",
        tracepoint: "cgroup_mkdir",
        provides: "new cgroups as they appear",
        fallback: "rescan the hierarchy at the resync interval",
        since: "4.18",
        fields: CGROUP_FIELDS,
        fields_slot: Some(FieldsSlot::CgroupMkdir),
    },
    ProgramSpec {
        name: "cgroup_rmdir",
        category: "cgroup",
        tracepoint: "cgroup_rmdir",
        provides: "removed cgroups, and freeing their kernel map entries",
        fallback: "rescan the hierarchy at the resync interval",
        since: "4.18",
        fields: CGROUP_FIELDS,
        fields_slot: Some(FieldsSlot::CgroupRmdir),
    },
    ProgramSpec {
        name: "sched_process_fork",
        category: "sched",
        tracepoint: "sched_process_fork",
        provides: "tasks created, waking the agent when pid.available may reach a threshold",
        fallback: "read pid.available at the resync interval only",
        since: "2.6.32",
        fields: &[],
        fields_slot: None,
    },
    ProgramSpec {
        name: "sched_process_exit",
        category: "sched",
        tracepoint: "sched_process_exit",
        provides: "with the fork counter, the pods whose processes changed: only those are re-counted for the PID ranking",
        fallback: "list every pod's cgroup.procs when the PID ranking is read",
        since: "2.6.32",
        fields: &[],
        fields_slot: None,
    },
    ProgramSpec {
        name: "cgroup_attach_task",
        category: "cgroup",
        tracepoint: "cgroup_attach_task",
        provides: "with the fork counter, tasks moved into a pod (a container's start, an exec): only the pods whose processes changed are re-counted for the PID ranking",
        fallback: "list every pod's cgroup.procs when the PID ranking is read",
        since: "4.13",
        fields: &[field("dst_root", 4, true), field("dst_id", 8, false)],
        fields_slot: Some(FieldsSlot::CgroupAttachTask),
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
        fields: &[],
        fields_slot: None,
    },
    ProgramSpec {
        name: "direct_reclaim_end",
        category: "vmscan",
        tracepoint: "mm_vmscan_direct_reclaim_end",
        provides: "direct reclaim stalls above --min-stall with task, cgroup and pages reclaimed",
        fallback: "no per-task stalls; node PSI (/proc/pressure/memory) still shows pressure",
        since: "2.6.36",
        fields: RECLAIM_END_FIELDS,
        fields_slot: Some(FieldsSlot::DirectReclaimEnd),
    },
    ProgramSpec {
        name: "memcg_reclaim_begin",
        category: "vmscan",
        tracepoint: "mm_vmscan_memcg_reclaim_begin",
        provides: "start of a task's reclaim in a cgroup at its limit, for stall times",
        fallback: "no per-task stalls; cgroup PSI (memory.pressure) still shows pressure",
        since: "2.6.36",
        fields: &[],
        fields_slot: None,
    },
    ProgramSpec {
        name: "memcg_reclaim_end",
        category: "vmscan",
        tracepoint: "mm_vmscan_memcg_reclaim_end",
        provides: "cgroup-limit reclaim stalls above --min-stall with task, cgroup and pages",
        fallback: "no per-task stalls; cgroup PSI (memory.pressure) still shows pressure",
        since: "2.6.36",
        fields: RECLAIM_END_FIELDS,
        fields_slot: Some(FieldsSlot::MemcgReclaimEnd),
    },
    ProgramSpec {
        name: "kswapd_wake",
        category: "vmscan",
        tracepoint: "mm_vmscan_kswapd_wake",
        provides: "a node's background reclaim starting (free memory below the low watermark)",
        fallback: "node PSI only",
        since: "2.6.36",
        fields: &[field("nid", 4, true), field("order", 4, true)],
        fields_slot: Some(FieldsSlot::KswapdWake),
    },
    ProgramSpec {
        name: "kswapd_sleep",
        category: "vmscan",
        tracepoint: "mm_vmscan_kswapd_sleep",
        provides: "a node's background reclaim finishing",
        fallback: "node PSI only",
        since: "2.6.36",
        fields: &[field("nid", 4, true)],
        fields_slot: Some(FieldsSlot::KswapdSleep),
    },
    ProgramSpec {
        name: "mark_victim",
        category: "oom",
        tracepoint: "mark_victim",
        provides: "OOM kills as they happen: victim pid, comm, sizes, and the OOM'ing cgroup",
        fallback: "OOM kills only after the fact (memory.events oom_kill counters)",
        since: "6.8",
        fields: &[
            field("pid", 4, true),
            string_at("comm"),
            field("anon_rss", 8, false),
            field("file_rss", 8, false),
            field("shmem_rss", 8, false),
            field("oom_score_adj", 2, true),
        ],
        fields_slot: Some(FieldsSlot::MarkVictim),
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
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), PROGRAMS.len() + INCIDENT_PROGRAMS.len());
        assert_eq!(PROGRAMS[0].hook(), "memcg/mod_memcg_lruvec_state");
    }

    #[test]
    fn fentry_programs_accept_the_prototypes_of_each_kernel_generation() {
        let spell = |params: &[&str]| params.iter().map(ToString::to_string).collect::<Vec<_>>();
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
    fn field_lists_follow_the_kernel_programs_indices() {
        use monitor_common::{MAX_FIELDS, field};
        let named = |name: &str| {
            PROGRAMS
                .iter()
                .chain(INCIDENT_PROGRAMS)
                .find(|p| p.name == name)
                .unwrap()
                .fields
        };
        let cases = [
            ("mod_memcg_state", field::memcg::ITEM, "item"),
            ("mod_memcg_lruvec_state", field::memcg::VAL, "val"),
            ("mod_memcg_lruvec_state", field::memcg::ID, "id"),
            ("cgroup_mkdir", field::cgroup::PATH, "path"),
            ("cgroup_rmdir", field::cgroup::ROOT, "root"),
            ("cgroup_rmdir", field::cgroup::LEVEL, "level"),
            ("cgroup_rmdir", field::cgroup::ID, "id"),
            (
                "cgroup_attach_task",
                field::cgroup_attach::DST_ROOT,
                "dst_root",
            ),
            ("cgroup_attach_task", field::cgroup_attach::DST_ID, "dst_id"),
            ("kswapd_wake", field::kswapd::ORDER, "order"),
            ("kswapd_sleep", field::kswapd::NID, "nid"),
            (
                "direct_reclaim_end",
                field::reclaim_end::NR_RECLAIMED,
                "nr_reclaimed",
            ),
            ("mark_victim", field::mark_victim::PID, "pid"),
            ("mark_victim", field::mark_victim::COMM, "comm"),
            ("mark_victim", field::mark_victim::ANON_RSS, "anon_rss"),
            ("mark_victim", field::mark_victim::FILE_RSS, "file_rss"),
            ("mark_victim", field::mark_victim::SHMEM_RSS, "shmem_rss"),
            (
                "mark_victim",
                field::mark_victim::OOM_SCORE_ADJ,
                "oom_score_adj",
            ),
        ];
        for (program, index, name) in cases {
            assert_eq!(named(program)[index].name, name, "{program}[{index}]");
        }
        let mut slots = Vec::new();
        for spec in PROGRAMS.iter().chain(INCIDENT_PROGRAMS) {
            assert!(spec.fields.len() <= MAX_FIELDS, "{}", spec.name);
            assert_eq!(
                spec.fields.is_empty(),
                spec.fields_slot.is_none(),
                "{}",
                spec.name
            );
            slots.extend(spec.fields_slot.map(|s| s as u32));
        }
        let count = slots.len();
        slots.sort_unstable();
        slots.dedup();
        assert_eq!(slots.len(), count, "each program has its own FIELDS entry");
        assert!(slots.iter().all(|&s| s < monitor_common::NFIELDS_SLOTS));
    }
}
