//! The agent's one table of pods: a row per pod holding everything a decision needs about
//! it (its facts, its cgroup, its working-set estimate, its process count and what the agent
//! did to it), addressed by a dense [`PodId`].
//!
//! Kernel records name cgroups, and a cgroup's membership names its pod by id, so applying a
//! record costs one map lookup and no string hashing. Ids carry a generation: an id kept by a
//! cgroup membership after its pod left the table finds nothing, even once the slot holds
//! another pod.
use std::{collections::HashMap, sync::Arc};

use super::{
    ids::{CgroupRel, PodId, PodUid},
    working_set::Estimate,
};
use crate::pod_facts::PodFacts;

/// A pod's cgroup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodCgroup {
    /// Inode number of the cgroup directory, the id in kernel events.
    pub id: u64,
    /// Path relative to the hierarchy root.
    pub rel: CgroupRel,
}

/// What the agent knows about one pod.
#[derive(Clone, Debug)]
pub struct PodRow {
    pub facts: Arc<PodFacts>,
    pub cgroup: Option<PodCgroup>,
    /// Its working set: a cgroupfs read plus the kernel records since; `None` until read
    /// (no stats, which ranks first, as the kubelet ranks a pod without stats).
    pub(crate) estimate: Option<Estimate>,
    pub(crate) process_count: u64,
    /// The last read of its cgroup failed (EIO, EACCES, ...): its last good working set, if
    /// any, stands in.
    pub(crate) read_failed: bool,
    /// Stopped by this agent: terminal, like a pod the kubelet evicted (failed, no longer
    /// active), so not ranked while it stays in the pod set and does not run.
    pub(crate) evicted: bool,
    /// Evicted and its cgroup found empty after the kill: if processes show up there again
    /// (the kubelet restarted the containers), the pod is a candidate again.
    pub stopped: bool,
    /// Never chosen (the agent's own pod).
    pub(crate) excluded: bool,
    /// In the pod set. A pod that leaves it while its eviction is in flight keeps its row,
    /// unlisted, until its cgroup holds no process: the listing says nothing of its memory.
    pub(crate) listed: bool,
    /// Kernel records moved its working set since it was last read.
    pub(crate) changed: bool,
}

impl PodRow {
    /// A pod just listed: no stats, nothing done to it.
    pub(crate) fn new(facts: PodFacts, cgroup: Option<PodCgroup>) -> Self {
        Self {
            facts: Arc::new(facts),
            cgroup,
            estimate: None,
            process_count: 0,
            read_failed: false,
            evicted: false,
            stopped: false,
            excluded: false,
            listed: true,
            changed: false,
        }
    }

    /// Whether the decision step ranks it: every listed pod but those this agent stopped.
    pub(crate) fn ranked(&self) -> bool {
        self.listed && !self.evicted
    }
}

#[derive(Clone, Debug, Default)]
struct Slot {
    generation: u32,
    row: Option<PodRow>,
}

/// Pods by dense id, with the two lookups the agent needs: by uid (pod sources, decisions)
/// and by cgroup path (classifying a cgroup by its nearest pod ancestor).
#[derive(Clone, Debug, Default)]
pub(crate) struct PodTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    by_uid: HashMap<PodUid, PodId>,
    by_cgroup: HashMap<CgroupRel, PodId>,
}

impl PodTable {
    /// Adds a pod whose uid is not in the table yet.
    pub(crate) fn insert(&mut self, row: PodRow) -> PodId {
        debug_assert!(!self.by_uid.contains_key(row.facts.pod.uid.as_str()));
        let index = self.free.pop().unwrap_or_else(|| {
            self.slots.push(Slot::default());
            u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 pods")
        });
        let slot = &mut self.slots[index as usize];
        let id = PodId {
            index,
            generation: slot.generation,
        };
        self.by_uid.insert(row.facts.pod.uid.as_str().into(), id);
        if let Some(cgroup) = &row.cgroup {
            self.by_cgroup.insert(cgroup.rel.clone(), id);
        }
        slot.row = Some(row);
        id
    }

    /// Removes a pod; its id finds nothing from now on.
    pub(crate) fn remove(&mut self, id: PodId) -> Option<PodRow> {
        let slot = self.slots.get_mut(id.index as usize)?;
        if slot.generation != id.generation {
            return None;
        }
        let row = slot.row.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(id.index);
        self.by_uid.remove(row.facts.pod.uid.as_str());
        if let Some(cgroup) = &row.cgroup {
            self.unlink_cgroup(&cgroup.rel, id);
        }
        Some(row)
    }

    /// Gives a pod another cgroup (or none), keeping the cgroup lookup in step.
    pub(crate) fn set_cgroup(&mut self, id: PodId, cgroup: Option<PodCgroup>) {
        let Some(row) = self.get_mut(id) else {
            return;
        };
        let old = std::mem::replace(&mut row.cgroup, cgroup.clone());
        if let Some(old) = old {
            self.unlink_cgroup(&old.rel, id);
        }
        if let Some(new) = cgroup {
            self.by_cgroup.insert(new.rel, id);
        }
    }

    fn unlink_cgroup(&mut self, rel: &CgroupRel, id: PodId) {
        if self.by_cgroup.get(rel) == Some(&id) {
            self.by_cgroup.remove(rel);
        }
    }

    pub(crate) fn get(&self, id: PodId) -> Option<&PodRow> {
        let slot = self.slots.get(id.index as usize)?;
        (slot.generation == id.generation)
            .then_some(slot.row.as_ref())
            .flatten()
    }

    pub(crate) fn get_mut(&mut self, id: PodId) -> Option<&mut PodRow> {
        let slot = self.slots.get_mut(id.index as usize)?;
        (slot.generation == id.generation)
            .then_some(slot.row.as_mut())
            .flatten()
    }

    /// The id of the pod with this uid.
    pub(crate) fn id(&self, uid: &str) -> Option<PodId> {
        self.by_uid.get(uid).copied()
    }

    pub(crate) fn by_uid(&self, uid: &str) -> Option<&PodRow> {
        self.get(self.id(uid)?)
    }

    pub(crate) fn by_uid_mut(&mut self, uid: &str) -> Option<&mut PodRow> {
        self.get_mut(self.id(uid)?)
    }

    /// The pod whose own cgroup is exactly `rel`.
    pub(crate) fn owning_exactly(&self, rel: &CgroupRel) -> Option<PodId> {
        self.by_cgroup.get(rel).copied()
    }

    /// Every pod, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (PodId, &PodRow)> {
        self.slots.iter().enumerate().filter_map(|(index, slot)| {
            let row = slot.row.as_ref()?;
            let id = PodId {
                index: index as u32,
                generation: slot.generation,
            };
            Some((id, row))
        })
    }

    pub(crate) fn rows(&self) -> impl Iterator<Item = &PodRow> {
        self.slots.iter().filter_map(|slot| slot.row.as_ref())
    }

    /// How many pods the table holds.
    pub(crate) fn count(&self) -> usize {
        self.by_uid.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cgroup_rel(path: &str) -> CgroupRel {
        path.parse().unwrap()
    }

    fn row(uid: &str, rel: Option<&str>) -> PodRow {
        let facts = PodFacts::named(uid);
        let cgroup = rel.map(|path| PodCgroup {
            id: 1,
            rel: cgroup_rel(path),
        });
        PodRow::new(facts, cgroup)
    }

    #[test]
    fn a_removed_pods_id_finds_nothing_even_after_its_slot_is_reused() {
        let mut table = PodTable::default();
        let a = table.insert(row("a", Some("/kubepods/poda")));
        assert!(table.remove(a).is_some());
        let b = table.insert(row("b", Some("/kubepods/podb")));
        assert!(table.get(a).is_none(), "stale id");
        assert!(table.remove(a).is_none(), "removed once only");
        assert_eq!(table.get(b).map(|r| r.facts.pod.uid.as_str()), Some("b"));
        assert_eq!(table.id("a"), None);
        assert_eq!(table.owning_exactly(&cgroup_rel("/kubepods/poda")), None);
        assert_eq!(table.owning_exactly(&cgroup_rel("/kubepods/podb")), Some(b));
        assert_eq!(table.count(), 1);
    }

    #[test]
    fn a_moved_cgroup_is_found_under_its_new_path_only() {
        let mut table = PodTable::default();
        let a = table.insert(row("a", Some("/kubepods/old")));
        table.set_cgroup(
            a,
            Some(PodCgroup {
                id: 2,
                rel: cgroup_rel("/kubepods/new"),
            }),
        );
        assert_eq!(table.owning_exactly(&cgroup_rel("/kubepods/old")), None);
        assert_eq!(table.owning_exactly(&cgroup_rel("/kubepods/new")), Some(a));
        table.set_cgroup(a, None);
        assert_eq!(table.owning_exactly(&cgroup_rel("/kubepods/new")), None);
        assert!(table.get(a).is_some_and(|r| r.cgroup.is_none()));
    }
}
