//! Working sets kept current from kernel stat events between cgroupfs reads.
//!
//! A cgroupfs read gives each scope (the node, the kubepods cgroup, every pod) an exact working
//! set: usage minus inactive file cache. Between reads, the kernel's per-cgroup stat deltas are
//! added to every scope the cgroup belongs to: anonymous, file and kernel memory raise usage,
//! inactive file cache is subtracted. The next read replaces the estimate, which bounds drift
//! and repairs lost events.
use std::collections::HashMap;

use monitor_common::Stat;

/// What a cgroup counts towards.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Membership {
    /// Below the kubepods cgroup (counts for allocatableMemory.available).
    pub in_kubepods: bool,
    /// The pod whose cgroup subtree holds it.
    pub pod: Option<String>,
}

/// Change of the working set caused by a change of one stat.
pub fn working_set_delta(stat: Stat, delta_bytes: i64) -> i64 {
    stat.working_set_sign() * delta_bytes
}

/// Exact base plus event deltas since the base was read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Estimate {
    base: u64,
    delta: i64,
}

impl Estimate {
    fn value(self) -> u64 {
        (self.base as i64).saturating_add(self.delta).max(0) as u64
    }
}

/// Working sets of the node, the kubepods cgroup and each pod.
#[derive(Clone, Debug, Default)]
pub struct UsageTracker {
    members: HashMap<u64, Membership>,
    node: Estimate,
    kubepods: Estimate,
    pods: HashMap<String, Estimate>,
}

impl UsageTracker {
    /// Records what a cgroup belongs to; unknown cgroups count for the node only.
    pub fn classify(&mut self, cgroup_id: u64, membership: Membership) {
        self.members.insert(cgroup_id, membership);
    }

    /// Forgets a removed cgroup.
    pub fn forget(&mut self, cgroup_id: u64) {
        self.members.remove(&cgroup_id);
    }

    /// The cgroups that belong to a pod (its own and its containers').
    pub fn cgroups_of(&self, uid: &str) -> Vec<u64> {
        self.members
            .iter()
            .filter(|(_, m)| m.pod.as_deref() == Some(uid))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Forgets every cgroup membership (before a full rescan).
    pub fn clear_memberships(&mut self) {
        self.members.clear();
    }

    /// Applies one stat event; returns the pod it changed, if any.
    pub fn apply(&mut self, cgroup_id: u64, stat: Stat, delta_bytes: i64) -> Option<&str> {
        let delta = working_set_delta(stat, delta_bytes);
        if delta == 0 {
            return None;
        }
        self.node.delta += delta;
        let member = self.members.get(&cgroup_id)?;
        if member.in_kubepods {
            self.kubepods.delta += delta;
        }
        let pod = member.pod.as_deref()?;
        // A pod without a base read has no stats yet; its first read sets them.
        self.pods.get_mut(pod)?.delta += delta;
        Some(pod)
    }

    /// Replaces the node's estimate with a fresh read.
    pub fn set_node(&mut self, working_set: u64) {
        self.node = Estimate {
            base: working_set,
            delta: 0,
        };
    }

    /// Replaces the kubepods estimate with a fresh read.
    pub fn set_kubepods(&mut self, working_set: u64) {
        self.kubepods = Estimate {
            base: working_set,
            delta: 0,
        };
    }

    /// Replaces a pod's estimate with a fresh read, or drops it when its stats are missing.
    pub fn set_pod(&mut self, uid: &str, working_set: Option<u64>) {
        match working_set {
            Some(ws) => {
                self.pods
                    .insert(uid.to_string(), Estimate { base: ws, delta: 0 });
            }
            None => {
                self.pods.remove(uid);
            }
        }
    }

    pub fn node(&self) -> u64 {
        self.node.value()
    }

    pub fn kubepods(&self) -> u64 {
        self.kubepods.value()
    }

    /// A pod's working set, or `None` when it has no stats (ranked first, as the kubelet does).
    pub fn pod(&self, uid: &str) -> Option<u64> {
        self.pods.get(uid).map(|e| e.value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker() -> UsageTracker {
        let mut t = UsageTracker::default();
        t.classify(
            10,
            Membership {
                in_kubepods: true,
                pod: Some("uid-a".into()),
            },
        );
        t.classify(
            11,
            Membership {
                in_kubepods: true,
                pod: Some("uid-a".into()),
            },
        );
        t.classify(
            20,
            Membership {
                in_kubepods: true,
                pod: None,
            },
        );
        t.set_node(1000);
        t.set_kubepods(500);
        t.set_pod("uid-a", Some(100));
        t
    }

    #[test]
    fn stat_deltas_move_every_scope_the_cgroup_belongs_to() {
        let mut t = tracker();
        assert_eq!(
            t.apply(11, Stat::Anon, 50),
            Some("uid-a"),
            "container cgroup of pod a"
        );
        assert_eq!(t.apply(20, Stat::File, 10), None, "kubepods but no pod");
        assert_eq!(t.apply(99, Stat::Kernel, 5), None, "system cgroup");
        assert_eq!(
            (t.node(), t.kubepods(), t.pod("uid-a")),
            (1065, 560, Some(150))
        );
        let mut pod_cgroups = t.cgroups_of("uid-a");
        pod_cgroups.sort();
        assert_eq!(pod_cgroups, [10, 11]);
    }

    #[test]
    fn inactive_file_lowers_the_working_set_and_active_file_does_not_count() {
        let mut t = tracker();
        t.apply(10, Stat::InactiveFile, 30);
        t.apply(10, Stat::ActiveFile, 999);
        assert_eq!(t.pod("uid-a"), Some(70));
        assert_eq!(working_set_delta(Stat::ActiveFile, 5), 0);
    }

    #[test]
    fn reads_replace_estimates_and_floor_at_zero() {
        let mut t = tracker();
        t.apply(10, Stat::Anon, -500);
        assert_eq!(t.pod("uid-a"), Some(0), "never negative");
        t.set_pod("uid-a", Some(42));
        assert_eq!(t.pod("uid-a"), Some(42));
        t.set_pod("uid-a", None);
        assert_eq!(t.pod("uid-a"), None, "missing stats");
        t.forget(10);
        assert_eq!(t.apply(10, Stat::Anon, 1), None);
    }
}
