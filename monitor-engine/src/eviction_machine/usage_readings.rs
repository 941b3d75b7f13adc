//! How kernel records and cgroupfs reads reach the working sets, apart from the decisions on them.
use std::collections::HashSet;

use super::AgentCore;
use crate::{
    ids::{CgroupRel, PodId},
    pod_facts::PodRef,
    working_set::{Estimate, Membership, StatChange},
};

/// One cgroupfs read of a pod's cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodReading {
    /// Read: the working set and the processes in its subtree (0 when not counted; `None`
    /// when the count failed, so the last one stands).
    Read {
        working_set: u64,
        processes: Option<u64>,
    },
    /// The cgroup is gone: the pod has nothing left on this node to reclaim.
    Gone,
    /// The read failed; not the same as missing stats.
    Failed,
}

/// Which pods a resync reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadScope {
    /// Every pod with a cgroup.
    All,
    /// Only pods whose estimate may be off: kernel records moved it since its last read, it
    /// was never read, or its last read failed. The others' estimates are their last read,
    /// which the kernel says still holds (to within one unsent step per stat).
    Changed,
}

impl AgentCore {
    /// Records which pod (if any) and whether kubepods hold a cgroup, from its path. A path
    /// that cannot name a cgroup (the kernel sends none) counts for the node only.
    pub fn classify(&mut self, cgroup_id: u64, path: &str) {
        let membership = match CgroupRel::new(path) {
            Ok(path) => Membership {
                in_kubepods: path.is_within(&self.kubepods_rel),
                pod: self.pod_owning(path),
            },
            Err(_) => Membership::default(),
        };
        self.usage.classify(cgroup_id, membership);
    }

    /// Forgets a removed cgroup.
    pub fn forget_cgroup(&mut self, cgroup_id: u64) {
        self.usage.forget(cgroup_id);
    }

    /// Forgets all cgroup classifications, before classifying a fresh scan.
    pub fn clear_cgroups(&mut self) {
        self.usage.clear_memberships();
    }

    /// The pod whose cgroup is `path` or one of its ancestors below the root.
    fn pod_owning(&self, path: CgroupRel) -> Option<PodId> {
        let mut candidate = Some(path);
        while let Some(path) = candidate.filter(|path| *path != CgroupRel::root()) {
            if let Some(id) = self.pods.owning_exactly(&path) {
                return Some(id);
            }
            candidate = path.parent();
        }
        None
    }

    /// Applies a batch of kernel stat records; returns when the newest record that moves a
    /// working set was sent (`None`: no record does). Each pod is re-ranked once per batch,
    /// however many of its records the batch holds: after a quiet spell the kernel hands
    /// over hundreds at once.
    pub fn apply_stats(&mut self, changes: &[StatChange]) -> Option<u64> {
        let mut newest = None;
        let mut touched: HashSet<PodId> = HashSet::new();
        for &change in changes {
            if crate::working_set::working_set_delta(change.stat, change.bytes) == 0 {
                continue;
            }
            newest = newest.max(Some(change.sent_ns));
            let moved = self.usage.apply(change);
            self.growth
                .record(change.sent_ns, self.usage.kubepods(), self.usage.node());
            let Some((id, delta)) = moved else {
                continue;
            };
            // A pod without a base read has no stats yet; its first read sets them.
            if let Some(row) = self.pods.get_mut(id)
                && let Some(estimate) = &mut row.estimate
                && estimate.add(delta, change.sent_ns)
            {
                row.changed = true;
                touched.insert(id);
            }
        }
        for id in touched {
            self.rerank(id);
        }
        newest
    }

    /// Fresh cgroupfs reading of the node and kubepods working sets, started at `read_ns`
    /// (CLOCK_MONOTONIC): kernel records sent before it are already contained.
    pub fn set_node_reading(
        &mut self,
        node_working_set: u64,
        kubepods_working_set: u64,
        read_ns: u64,
    ) {
        self.usage.set_node(node_working_set, read_ns);
        self.usage.set_kubepods(kubepods_working_set, read_ns);
    }

    /// The pods a resync reads, with their cgroups.
    pub fn pods_to_read(&self, scope: ReadScope) -> Vec<(PodRef, CgroupRel)> {
        self.pods
            .rows()
            .filter(|row| match scope {
                ReadScope::All => true,
                ReadScope::Changed => row.changed || row.estimate.is_none() || row.read_failed,
            })
            .filter_map(|row| Some((row.facts.pod.clone(), row.cgroup.as_ref()?.rel.clone())))
            .collect()
    }

    /// The pods holding any of `cgroup_ids` (the cgroups the kernel saw a task created or
    /// ending in), once each, with their cgroups; `None` when an id was never classified (its
    /// creation record not taken yet), so it could be any pod's.
    pub fn pods_holding(&self, cgroup_ids: &[u64]) -> Option<Vec<(PodRef, CgroupRel)>> {
        let mut seen = HashSet::new();
        let mut pods = Vec::new();
        for &cgroup_id in cgroup_ids {
            if !self.usage.knows(cgroup_id) {
                return None;
            }
            let Some(id) = self.usage.pod_of(cgroup_id) else {
                continue;
            };
            if !seen.insert(id) {
                continue;
            }
            let row = self.pods.get(id).expect("classified pods are listed");
            if let Some(cgroup) = &row.cgroup {
                pods.push((row.facts.pod.clone(), cgroup.rel.clone()));
            }
        }
        Some(pods)
    }

    /// A fresh count of one pod's processes, its working set left as it is: the PID
    /// ranking moves with it.
    pub fn set_pod_processes(&mut self, uid: &str, processes: u64) {
        let Some(id) = self.pods.id(uid) else {
            return;
        };
        let row = self.pods.get_mut(id).expect("listed id");
        if row.process_count == processes {
            return;
        }
        row.process_count = processes;
        self.rerank(id);
    }

    /// Fresh cgroupfs reading of one pod, started at `read_ns`. A failed read keeps the last
    /// good working set; it never turns into missing stats, which would rank the pod first.
    pub fn set_pod_reading(&mut self, uid: &str, reading: PodReading, read_ns: u64) {
        let Some(id) = self.pods.id(uid) else {
            return;
        };
        let row = self.pods.get_mut(id).expect("listed id");
        match reading {
            PodReading::Read {
                working_set,
                processes,
            } => {
                if let Some(processes) = processes {
                    row.process_count = processes;
                }
                row.read_failed = false;
                row.changed = false;
                row.estimate = Some(Estimate::read(working_set, read_ns));
            }
            PodReading::Gone => {
                row.process_count = 0;
                row.read_failed = false;
                row.changed = false;
                row.estimate = None;
                self.pods.set_cgroup(id, None);
            }
            PodReading::Failed => {
                row.read_failed = true;
                self.read_failures += 1;
            }
        }
        self.rerank(id);
    }

    /// Failed cgroupfs reads of pods since start.
    pub fn read_failures(&self) -> u64 {
        self.read_failures
    }
}

#[cfg(test)]
mod tests {
    use monitor_common::Stat;

    use super::*;
    use crate::{
        eviction_machine::{
            NotActionable,
            tests::{MI, READ_NS, cgroup, clock, core, facts, read, stats},
        },
        pod_table::PodCgroup,
        signal::Signal,
    };

    #[test]
    fn container_events_count_for_their_pod_and_kubepods() {
        let mut c = core();
        assert!(
            c.apply_stats(&stats(&[(11, Stat::Anon, 500 * MI)]))
                .is_some()
        );
        assert_eq!(c.pod_working_set("uid-big-low"), Some(500 << 20));
        let allocatable = c.observations()[&Signal::AllocatableMemoryAvailable].available;
        assert_eq!(allocatable, (1 << 30) - 500 * MI);
        assert!(
            c.apply_stats(&stats(&[(11, Stat::ActiveFile, MI)]))
                .is_none(),
            "active file does not move the working set"
        );
    }

    #[test]
    fn a_batch_ranks_like_its_events_one_by_one() {
        let events = [
            (11, Stat::Anon, 300 * MI),
            (21, Stat::Anon, 50 * MI),
            (11, Stat::InactiveFile, 40 * MI),
            (21, Stat::Anon, 100 * MI),
            (11, Stat::Anon, -100 * MI),
            (31, Stat::ActiveFile, 5 * MI),
        ];
        let mut batched = core();
        assert_eq!(batched.apply_stats(&stats(&events)), Some(READ_NS + 1));
        let mut single = core();
        for event in events {
            single.apply_stats(&stats(&[event]));
        }
        let order = |c: &AgentCore| -> Vec<(String, Option<u64>)> {
            c.ranking(Signal::AllocatableMemoryAvailable)
                .iter()
                .map(|(f, _)| (f.pod.name.clone(), c.pod_working_set(&f.pod.uid)))
                .collect()
        };
        assert_eq!(order(&batched), order(&single));
        assert_eq!(batched.pod_working_set("uid-big-low"), Some(160 << 20));
        assert_eq!(batched.pod_working_set("uid-over-high"), Some(150 << 20));
        assert_eq!(batched.observations(), single.observations());
    }

    #[test]
    fn records_that_waited_in_the_ring_past_a_read_do_not_count_twice() {
        let mut c = core();
        // big-low allocated 550Mi (within its 600Mi request); the record waited in the ring
        // while a resync read it, and arrives after the read.
        c.set_pod_reading("uid-big-low", read(550 << 20, 1), READ_NS + 10);
        let waited = StatChange {
            cgroup_id: 11,
            stat: Stat::Anon,
            bytes: 550 * MI,
            sent_ns: READ_NS + 5,
        };
        c.apply_stats(&[waited]);
        assert_eq!(
            c.pod_working_set("uid-big-low"),
            Some(550 << 20),
            "the pod read already held it"
        );
        let allocatable = c.observations()[&Signal::AllocatableMemoryAvailable].available;
        assert_eq!(
            allocatable,
            (1 << 30) - 550 * MI,
            "the kubepods read was older, so it counts there"
        );
    }

    #[test]
    fn a_pod_whose_cgroup_went_away_is_passed_over() {
        let mut c = core();
        c.apply_stats(&stats(&[(11, Stat::Anon, 550 * MI)]));
        c.apply_stats(&stats(&[(21, Stat::Anon, 300 * MI)]));
        c.set_pod_reading("uid-over-high", PodReading::Gone, READ_NS + 10);
        assert_eq!(c.actionable("uid-over-high"), Err(NotActionable::NoCgroup));
        let decision = c.decide(&clock());
        assert_eq!(
            decision.eviction().map(|e| e.pod.name.clone()),
            Some("big-low".into())
        );
    }

    #[test]
    fn a_failed_read_keeps_the_last_good_value_and_never_makes_the_victim() {
        // big-low is the hog (900Mi over a 600Mi request); small uses 5Mi of 600Mi, and then
        // its memory.stat cannot be read.
        let cases = [
            ("last good value stands in", Some(5u64 << 20)),
            (
                "never read: left out rather than ranked as missing stats",
                None,
            ),
        ];
        for (name, read_before) in cases {
            let mut c = core();
            c.set_pods(vec![
                (facts("big-low", 0, 600, false), cgroup(10, "big-low")),
                (facts("small", 0, 600, false), cgroup(40, "small")),
            ]);
            c.classify(41, "/kubepods/burstable/pod-small/ctr");
            if let Some(ws) = read_before {
                c.set_pod_reading("uid-small", read(ws, 1), READ_NS);
            }
            c.set_pod_reading("uid-small", PodReading::Failed, READ_NS + 5);
            c.apply_stats(&stats(&[(11, Stat::Anon, 900 * MI)]));
            assert_eq!(c.read_failures(), 1, "{name}");
            assert_eq!(c.pod_working_set("uid-small"), read_before, "{name}");
            assert_eq!(
                c.decide(&clock()).eviction().map(|e| e.pod.name.clone()),
                Some("big-low".to_string()),
                "{name}"
            );
        }
    }

    #[test]
    fn a_partial_resync_reads_the_pods_whose_estimate_may_be_off() {
        let mut c = core();
        c.set_pods(vec![
            (facts("big-low", 0, 600, false), cgroup(10, "big-low")),
            (
                facts("over-high", 1000, 100, false),
                cgroup(20, "over-high"),
            ),
            (
                facts("critical", 2_000_000_000, 10, true),
                cgroup(30, "critical"),
            ),
            (facts("new", 0, 100, false), cgroup(40, "new")),
            (facts("waiting", 0, 100, false), None),
        ]);
        c.classify(41, "/kubepods/burstable/pod-new/ctr");
        c.apply_stats(&stats(&[(11, Stat::Anon, MI), (21, Stat::ActiveFile, MI)]));
        c.set_pod_reading("uid-critical", PodReading::Failed, READ_NS + 5);
        let names = |c: &AgentCore, scope| {
            let mut names: Vec<String> = c
                .pods_to_read(scope)
                .into_iter()
                .map(|(pod, _)| pod.name)
                .collect();
            names.sort();
            names
        };
        assert_eq!(
            names(&c, ReadScope::Changed),
            ["big-low", "critical", "new"],
            "moved by a record, failed, never read; not over-high (active file only) nor \
             waiting (no cgroup)"
        );
        assert_eq!(names(&c, ReadScope::All).len(), 4);
        c.set_pod_reading("uid-big-low", read(MI as u64, 1), READ_NS + 10);
        assert!(!names(&c, ReadScope::Changed).contains(&"big-low".to_string()));
    }

    #[test]
    fn a_pod_moved_to_another_cgroup_no_longer_owns_the_old_one() {
        // Paths as a pod source may spell them: without the leading `/`, with a trailing one.
        let cases = [
            ("normalised", "/kubepods/burstable/pod-a"),
            ("no leading slash", "kubepods/burstable/pod-a"),
            ("trailing slash", "/kubepods/burstable/pod-a/"),
        ];
        for (name, old_rel) in cases {
            let mut c = core();
            let old = PodCgroup {
                id: 50,
                rel: CgroupRel::new(old_rel).unwrap(),
            };
            c.set_pods(vec![(facts("a", 0, 100, false), Some(old))]);
            let new = PodCgroup {
                id: 60,
                rel: CgroupRel::new("/kubepods/besteffort/pod-a").unwrap(),
            };
            c.set_pods(vec![(facts("a", 0, 100, false), Some(new))]);
            c.classify(51, "/kubepods/burstable/pod-a/ctr");
            c.classify(61, "/kubepods/besteffort/pod-a/ctr");
            assert_eq!(c.cgroups_of("uid-a"), [61], "{name}");
        }
    }

    #[test]
    fn system_cgroups_count_for_the_node_only() {
        let mut c = core();
        c.classify(99, "/system.slice/sshd.service");
        c.apply_stats(&stats(&[(99, Stat::Anon, 100 * MI)]));
        let obs = c.observations();
        assert_eq!(
            obs[&Signal::MemoryAvailable].available,
            (8 << 30) - (2 << 30) - 100 * MI
        );
        assert_eq!(obs[&Signal::AllocatableMemoryAvailable].available, 1 << 30);
    }
}
