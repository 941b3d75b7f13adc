//! Pods kept in eviction order as their usage changes, without re-sorting.
//!
//! The kubelet sorts every candidate pod on every decision. Here each pod's [`RankKey`] is
//! recomputed only when its usage or spec changes and kept in an ordered set, so an update
//! or removal costs O(log n) and the victim is the set's first element.
use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use super::eviction_order::{FsLayout, RankKey, RankPolicy};
use super::ids::PodUid;
use super::kubelet_summary::PodUsage;
use super::pod_facts::PodFacts;
use super::signal::Signal;

/// Pods ranked under one policy.
#[derive(Debug, Clone)]
pub struct RankIndex {
    policy: RankPolicy,
    order: BTreeSet<RankKey>,
    by_uid: HashMap<PodUid, Entry, BuildHasherDefault<UidHasher>>,
}

/// A word-at-a-time multiplicative hash for pod uids. Uids are assigned by the API server,
/// so the keyed default hash buys nothing here and costs a sizeable share of an update.
#[derive(Debug, Default, Clone, Copy)]
struct UidHasher(u64);

impl UidHasher {
    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for UidHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        let mut word = [0u8; 8];
        for chunk in &mut chunks {
            word.copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(word));
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[derive(Debug, Clone)]
struct Entry {
    key: RankKey,
    usage: Option<PodUsage>,
}

impl RankIndex {
    /// An empty index for one ranking policy.
    pub fn new(policy: RankPolicy) -> RankIndex {
        RankIndex {
            policy,
            order: BTreeSet::new(),
            by_uid: HashMap::default(),
        }
    }

    /// The policy this index ranks by.
    pub fn policy(&self) -> RankPolicy {
        self.policy
    }

    /// Adds a pod, or replaces its facts (after a spec change) keeping its usage. A new pod
    /// has no stats until [`RankIndex::update_usage`], so it ranks as the kubelet ranks a pod
    /// with missing stats. O(log n).
    pub fn upsert_pod(&mut self, facts: Arc<PodFacts>) {
        let usage = match self.by_uid.remove(facts.pod.uid.as_str()) {
            Some(old) => {
                self.order.remove(&old.key);
                old.usage
            }
            None => None,
        };
        self.insert(facts, usage);
    }

    /// Sets a pod's usage (`None`: no stats). Returns false when the pod is unknown. O(log n).
    pub fn update_usage(&mut self, uid: &str, usage: Option<PodUsage>) -> bool {
        let Some(entry) = self.by_uid.get_mut(uid) else {
            return false;
        };
        let key = RankKey::new(self.policy, Arc::clone(entry.key.facts()), usage.as_ref());
        entry.usage = usage;
        if key != entry.key {
            self.order.remove(&entry.key);
            self.order.insert(key.clone());
            entry.key = key;
        }
        true
    }

    /// Removes a pod. Returns false when it was not there. O(log n).
    pub(crate) fn remove(&mut self, uid: &str) -> bool {
        match self.by_uid.remove(uid) {
            Some(entry) => self.order.remove(&entry.key),
            None => false,
        }
    }

    /// The pod the kubelet would evict first (critical or not; see `decide`).
    pub fn victim(&self) -> Option<&Arc<PodFacts>> {
        self.order.first().map(RankKey::facts)
    }

    /// All pods in eviction order, first evicted first.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<PodFacts>> {
        self.order.iter().map(RankKey::facts)
    }

    /// The usage last set for a pod.
    pub(crate) fn usage(&self, uid: &str) -> Option<&PodUsage> {
        self.by_uid.get(uid).and_then(|entry| entry.usage.as_ref())
    }

    /// Number of pods.
    pub fn len(&self) -> usize {
        self.by_uid.len()
    }

    /// True when no pod is ranked.
    pub fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }

    fn insert(&mut self, facts: Arc<PodFacts>, usage: Option<PodUsage>) {
        let key = RankKey::new(self.policy, Arc::clone(&facts), usage.as_ref());
        self.order.insert(key.clone());
        self.by_uid
            .insert(facts.pod.uid.as_str().into(), Entry { key, usage });
    }
}

/// One index per ranking policy the configured signals need; the agent feeds every pod
/// change here and asks for the index of the signal under pressure.
#[derive(Debug, Clone)]
pub(crate) struct RankIndexSet {
    layout: FsLayout,
    indexes: Vec<RankIndex>,
}

impl RankIndexSet {
    /// Indexes for the given signals (typically those with a threshold).
    pub(crate) fn new(layout: FsLayout, signals: impl IntoIterator<Item = Signal>) -> RankIndexSet {
        let mut indexes: Vec<RankIndex> = Vec::new();
        for signal in signals {
            let policy = RankPolicy::for_signal(signal, layout);
            if !indexes.iter().any(|index| index.policy == policy) {
                indexes.push(RankIndex::new(policy));
            }
        }
        RankIndexSet { layout, indexes }
    }

    /// Adds or replaces a pod in every index, with facts shared with the caller's own table.
    pub(crate) fn upsert_pod_shared(&mut self, facts: &Arc<PodFacts>) {
        for index in &mut self.indexes {
            index.upsert_pod(Arc::clone(facts));
        }
    }

    /// Sets a pod's usage in every index. Returns false when the pod is unknown.
    pub(crate) fn update_usage(&mut self, uid: &str, usage: Option<PodUsage>) -> bool {
        self.indexes
            .iter_mut()
            .fold(false, |known, index| index.update_usage(uid, usage) | known)
    }

    /// Removes a pod from every index. Returns false when it was not there.
    pub(crate) fn remove(&mut self, uid: &str) -> bool {
        self.indexes
            .iter_mut()
            .fold(false, |known, index| index.remove(uid) | known)
    }

    /// The index ranking pods for pressure on `signal`, if that signal was asked for.
    pub(crate) fn for_signal(&self, signal: Signal) -> Option<&RankIndex> {
        let policy = RankPolicy::for_signal(signal, self.layout);
        self.indexes.iter().find(|index| index.policy == policy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eviction_order::{Candidate, DiskMeasure, DiskStats, kubelet_chain, ordered_by};
    use crate::kubelet_summary::FsUsage;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Upsert {
            pod: u8,
            priority: i32,
            request: i64,
        },
        Usage {
            pod: u8,
            usage: Option<PodUsage>,
        },
        Remove {
            pod: u8,
        },
    }

    // Small value ranges so that ties on every key are common.
    fn usage() -> impl Strategy<Value = Option<PodUsage>> {
        let fs = (0u64..4, 0u64..4).prop_map(|(b, i)| FsUsage {
            used_bytes: b * 100,
            inodes_used: i,
        });
        prop::option::weighted(0.85, (0u64..6, 0u64..4, fs.clone(), fs.clone(), fs)).prop_map(
            |usage| {
                usage.map(
                    |(memory, processes, rootfs, logs, local_volumes)| PodUsage {
                        memory_working_set_bytes: memory * 100,
                        process_count: processes,
                        rootfs,
                        logs,
                        local_volumes,
                    },
                )
            },
        )
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            1 => (0u8..12, -2i32..3, 0i64..4).prop_map(|(pod, priority, request)| Op::Upsert {
                pod,
                priority,
                request: request * 100
            }),
            3 => (0u8..12, usage()).prop_map(|(pod, usage)| Op::Usage { pod, usage }),
            1 => (0u8..12).prop_map(|pod| Op::Remove { pod }),
        ]
    }

    fn policy() -> impl Strategy<Value = RankPolicy> {
        prop_oneof![
            Just(RankPolicy::Memory),
            Just(RankPolicy::Pid),
            Just(RankPolicy::Disk(DiskStats::All, DiskMeasure::Bytes)),
            Just(RankPolicy::Disk(
                DiskStats::LogsAndLocalVolumes,
                DiskMeasure::Inodes
            )),
            Just(RankPolicy::Disk(DiskStats::Rootfs, DiskMeasure::Bytes)),
        ]
    }

    fn facts(pod: u8, priority: i32, request: i64) -> PodFacts {
        // Names collide across namespaces on purpose, to exercise the whole tie-break.
        PodFacts::named(&format!("p{}", pod % 5))
            .with_namespace(&format!("ns{}", pod % 2))
            .with_uid(&format!("u{pod}"))
            .with_priority(priority)
            .with_memory_request(request)
            .with_ephemeral_storage_request(request)
    }

    proptest! {
        #[test]
        fn index_order_matches_a_full_sort_by_the_kubelet_chain(
            policy in policy(),
            ops in prop::collection::vec(op(), 1..80),
        ) {
            let mut index = RankIndex::new(policy);
            let mut model: HashMap<String, (PodFacts, Option<PodUsage>)> = HashMap::new();
            let chain = kubelet_chain(policy);
            for op in ops {
                match op {
                    Op::Upsert { pod, priority, request } => {
                        let facts = facts(pod, priority, request);
                        let usage = model.get(&facts.pod.uid).and_then(|(_, usage)| *usage);
                        model.insert(facts.pod.uid.clone(), (facts.clone(), usage));
                        index.upsert_pod(Arc::new(facts));
                    }
                    Op::Usage { pod, usage } => {
                        let uid = format!("u{pod}");
                        let known = model.get_mut(&uid).map(|entry| entry.1 = usage).is_some();
                        prop_assert_eq!(index.update_usage(&uid, usage), known);
                    }
                    Op::Remove { pod } => {
                        let uid = format!("u{pod}");
                        prop_assert_eq!(index.remove(&uid), model.remove(&uid).is_some());
                    }
                }
                let mut expected: Vec<&(PodFacts, Option<PodUsage>)> = model.values().collect();
                expected.sort_by(|a, b| {
                    let a = Candidate { facts: &a.0, usage: a.1.as_ref() };
                    let b = Candidate { facts: &b.0, usage: b.1.as_ref() };
                    ordered_by(&chain, &a, &b)
                });
                let expected: Vec<&str> = expected.iter().map(|(f, _)| f.pod.uid.as_str()).collect();
                let actual: Vec<&str> = index.iter().map(|f| f.pod.uid.as_str()).collect();
                prop_assert_eq!(&actual, &expected);
                prop_assert_eq!(index.victim().map(|f| f.pod.uid.as_str()), expected.first().copied());
                prop_assert_eq!(index.len(), model.len());
            }
        }
    }

    #[test]
    fn set_routes_signals_to_the_right_index() {
        let mut set = RankIndexSet::new(
            FsLayout::Shared,
            [
                Signal::MemoryAvailable,
                Signal::AllocatableMemoryAvailable,
                Signal::NodeFsAvailable,
                Signal::ImageFsAvailable,
            ],
        );
        set.upsert_pod_shared(&Arc::new(facts(1, 0, 100)));
        set.upsert_pod_shared(&Arc::new(facts(2, 0, 100)));
        let heavy = PodUsage {
            memory_working_set_bytes: 500,
            rootfs: FsUsage {
                used_bytes: 0,
                inodes_used: 0,
            },
            ..PodUsage::default()
        };
        let disk_heavy = PodUsage {
            rootfs: FsUsage {
                used_bytes: 500,
                inodes_used: 1,
            },
            ..PodUsage::default()
        };
        assert!(set.update_usage("u1", Some(heavy)));
        assert!(set.update_usage("u2", Some(disk_heavy)));
        assert!(!set.update_usage("u9", None));
        fn victim(set: &RankIndexSet, signal: Signal) -> Option<String> {
            set.for_signal(signal)
                .and_then(|i| i.victim())
                .map(|f| f.pod.uid.clone())
        }
        assert_eq!(victim(&set, Signal::MemoryAvailable).as_deref(), Some("u1"));
        assert_eq!(
            victim(&set, Signal::AllocatableMemoryAvailable).as_deref(),
            Some("u1")
        );
        assert_eq!(
            victim(&set, Signal::ImageFsAvailable).as_deref(),
            Some("u2")
        );
        assert!(set.for_signal(Signal::PidAvailable).is_none());
        assert!(set.remove("u1"));
        assert!(!set.remove("u1"));
        assert_eq!(victim(&set, Signal::MemoryAvailable).as_deref(), Some("u2"));
    }
}
