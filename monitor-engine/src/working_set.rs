//! Working sets kept current from kernel stat events between cgroupfs reads.
//!
//! A cgroupfs read gives each scope (the node, the kubepods cgroup, every pod) an exact working
//! set: usage minus inactive file cache. Between reads, the kernel's per-cgroup stat deltas are
//! added to every scope the cgroup belongs to: anonymous, file and kernel memory raise usage,
//! inactive file cache is subtracted. The next read replaces the estimate, which bounds drift
//! and repairs lost events.
//!
//! Records can wait in the ring buffer (up to a second when no threshold is near), so a read
//! may already contain changes whose records arrive after it. Each estimate remembers when it
//! was read and skips records the kernel sent before that; counting them again would inflate
//! the working set by everything that happened while they waited. What remains is one step
//! per cgroup and stat: changes the kernel had summed but not yet sent when the read was taken.
use std::collections::HashMap;

use monitor_common::Stat;

use super::ids::PodId;

/// What a cgroup counts towards.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Membership {
    /// Below the kubepods cgroup (counts for allocatableMemory.available).
    pub(crate) in_kubepods: bool,
    /// The pod whose cgroup subtree holds it.
    pub(crate) pod: Option<PodId>,
}

/// Change of the working set caused by a change of one stat.
pub(crate) fn working_set_delta(stat: Stat, delta_bytes: i64) -> i64 {
    stat.working_set_sign() * delta_bytes
}

/// One kernel stat record: `bytes` of `stat` changed in `cgroup_id`, sent by the kernel at
/// `sent_ns` (CLOCK_MONOTONIC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatChange {
    pub cgroup_id: u64,
    pub stat: Stat,
    pub bytes: i64,
    pub sent_ns: u64,
}

/// Exact base read at `read_ns` (CLOCK_MONOTONIC) plus the deltas of records sent after it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Estimate {
    base: u64,
    read_ns: u64,
    delta: i64,
}

impl Estimate {
    pub(crate) fn read(base: u64, read_ns: u64) -> Self {
        Self {
            base,
            read_ns,
            delta: 0,
        }
    }

    /// Adds a record's delta unless the read already contains it; true when added.
    pub(crate) fn add(&mut self, delta: i64, sent_ns: u64) -> bool {
        if sent_ns < self.read_ns {
            return false;
        }
        self.delta += delta;
        true
    }

    pub(crate) fn value(self) -> u64 {
        (self.base as i64).saturating_add(self.delta).max(0) as u64
    }
}

/// Working sets of the node and the kubepods cgroup, and what each cgroup counts towards;
/// each pod's estimate is in its row of the pod table.
#[derive(Clone, Debug, Default)]
pub(crate) struct UsageTracker {
    members: HashMap<u64, Membership>,
    node: Estimate,
    kubepods: Estimate,
}

impl UsageTracker {
    /// Records what a cgroup belongs to; unknown cgroups count for the node only.
    pub(crate) fn classify(&mut self, cgroup_id: u64, membership: Membership) {
        self.members.insert(cgroup_id, membership);
    }

    /// Forgets a removed cgroup.
    pub(crate) fn forget(&mut self, cgroup_id: u64) {
        self.members.remove(&cgroup_id);
    }

    /// The pod a cgroup belongs to, if any.
    pub(crate) fn pod_of(&self, cgroup_id: u64) -> Option<PodId> {
        self.members.get(&cgroup_id)?.pod
    }

    /// Whether the cgroup was classified (by a scan or its creation record).
    pub(crate) fn knows(&self, cgroup_id: u64) -> bool {
        self.members.contains_key(&cgroup_id)
    }

    /// The cgroups that belong to a pod (its own and its containers').
    pub(crate) fn cgroups_of(&self, pod: PodId) -> Vec<u64> {
        self.members
            .iter()
            .filter(|(_, m)| m.pod == Some(pod))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Forgets every cgroup membership (before a full rescan).
    pub(crate) fn clear_memberships(&mut self) {
        self.members.clear();
    }

    /// Applies one stat record to the node and kubepods estimates; returns the record's
    /// working-set delta and the pod whose cgroup it came from, whose estimate the caller
    /// moves with [`Estimate::add`].
    pub(crate) fn apply(&mut self, change: StatChange) -> Option<(PodId, i64)> {
        let delta = working_set_delta(change.stat, change.bytes);
        if delta == 0 {
            return None;
        }
        self.node.add(delta, change.sent_ns);
        let member = self.members.get(&change.cgroup_id)?;
        if member.in_kubepods {
            self.kubepods.add(delta, change.sent_ns);
        }
        Some((member.pod?, delta))
    }

    /// Replaces the node's estimate with a read started at `read_ns`.
    pub(crate) fn set_node(&mut self, working_set: u64, read_ns: u64) {
        self.node = Estimate::read(working_set, read_ns);
    }

    /// Replaces the kubepods estimate with a read started at `read_ns`.
    pub(crate) fn set_kubepods(&mut self, working_set: u64, read_ns: u64) {
        self.kubepods = Estimate::read(working_set, read_ns);
    }

    pub(crate) fn node(&self) -> u64 {
        self.node.value()
    }

    pub(crate) fn kubepods(&self) -> u64 {
        self.kubepods.value()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod_facts::PodFacts;
    use crate::pod_table::{PodRow, PodTable};

    /// When the fixture's reads were taken.
    const READ_NS: u64 = 1_000;

    /// A record the kernel sent after the fixture's reads.
    fn change(cgroup_id: u64, stat: Stat, bytes: i64) -> StatChange {
        sent_at(cgroup_id, stat, bytes, READ_NS + 1)
    }

    fn sent_at(cgroup_id: u64, stat: Stat, bytes: i64, sent_ns: u64) -> StatChange {
        StatChange {
            cgroup_id,
            stat,
            bytes,
            sent_ns,
        }
    }

    fn pod_a() -> PodId {
        let facts = PodFacts::named("a").with_uid("uid-a");
        PodTable::default().insert(PodRow::new(facts, None))
    }

    /// Cgroups 10 and 11 belong to pod a, 20 to kubepods only; pod a read at 100 bytes.
    fn tracker(a: PodId) -> (UsageTracker, Estimate) {
        let mut t = UsageTracker::default();
        for (id, pod) in [(10, Some(a)), (11, Some(a)), (20, None)] {
            t.classify(
                id,
                Membership {
                    in_kubepods: true,
                    pod,
                },
            );
        }
        t.set_node(1000, READ_NS);
        t.set_kubepods(500, READ_NS);
        (t, Estimate::read(100, READ_NS))
    }

    /// Applies a record as the agent does: the scopes here, the pod's estimate by its id.
    fn apply(t: &mut UsageTracker, pod: &mut Estimate, change: StatChange) -> Option<PodId> {
        let (id, delta) = t.apply(change)?;
        pod.add(delta, change.sent_ns).then_some(id)
    }

    #[test]
    fn stat_deltas_move_every_scope_the_cgroup_belongs_to() {
        let a = pod_a();
        let (mut t, mut pod) = tracker(a);
        assert_eq!(
            apply(&mut t, &mut pod, change(11, Stat::Anon, 50)),
            Some(a),
            "container cgroup of pod a"
        );
        assert_eq!(
            apply(&mut t, &mut pod, change(20, Stat::File, 10)),
            None,
            "kubepods but no pod"
        );
        assert_eq!(
            apply(&mut t, &mut pod, change(99, Stat::Kernel, 5)),
            None,
            "system cgroup"
        );
        assert_eq!((t.node(), t.kubepods(), pod.value()), (1065, 560, 150));
        let mut pod_cgroups = t.cgroups_of(a);
        pod_cgroups.sort_unstable();
        assert_eq!(pod_cgroups, [10, 11]);
    }

    #[test]
    fn inactive_file_lowers_the_working_set_and_active_file_does_not_count() {
        let (mut t, mut pod) = tracker(pod_a());
        apply(&mut t, &mut pod, change(10, Stat::InactiveFile, 30));
        apply(&mut t, &mut pod, change(10, Stat::ActiveFile, 999));
        assert_eq!(pod.value(), 70);
        assert_eq!(working_set_delta(Stat::ActiveFile, 5), 0);
    }

    #[test]
    fn estimates_floor_at_zero_and_forgotten_cgroups_count_for_the_node_only() {
        let (mut t, mut pod) = tracker(pod_a());
        apply(&mut t, &mut pod, change(10, Stat::Anon, -500));
        assert_eq!(pod.value(), 0, "never negative");
        t.forget(10);
        assert_eq!(apply(&mut t, &mut pod, change(10, Stat::Anon, 1)), None);
        assert_eq!(t.node(), 1000 - 500 + 1);
    }

    #[test]
    fn a_record_sent_before_a_read_is_already_in_it() {
        let a = pod_a();
        let (mut t, mut pod) = tracker(a);
        // 30 bytes allocated before the reads; their record waited in the ring until now.
        assert_eq!(
            apply(&mut t, &mut pod, sent_at(11, Stat::Anon, 30, READ_NS - 1)),
            None
        );
        assert_eq!(
            (t.node(), t.kubepods(), pod.value()),
            (1000, 500, 100),
            "not counted twice"
        );
        // A pod read later than the node: a record between the two counts for the node only.
        pod = Estimate::read(100, READ_NS + 10);
        assert_eq!(
            apply(&mut t, &mut pod, sent_at(11, Stat::Anon, 7, READ_NS + 5)),
            None
        );
        assert_eq!((t.node(), t.kubepods(), pod.value()), (1007, 507, 100));
        assert_eq!(
            apply(&mut t, &mut pod, sent_at(11, Stat::Anon, 5, READ_NS + 10)),
            Some(a),
            "sent as the read began: the read may have missed it"
        );
        assert_eq!(pod.value(), 105);
    }
}
