//! The kubelet's eviction order, as a comparator chain and as a precomputed sort key.
//!
//! The kubelet sorts pods with `orderedBy(cmp...)`: comparators applied in turn, the first
//! non-equal one deciding. Per signal:
//!
//! * memory signals: exceeds its memory request (working set strictly greater than the
//!   request) first, then lower priority first, then larger working set above the request;
//! * `pid.available`: lower priority first, then more processes;
//! * disk signals: exceeds its ephemeral-storage request, priority, usage above the request,
//!   with usage summed over the filesystems the signal's disk holds (see [`DiskStats`]).
//!
//! Every usage-based comparator puts a pod without stats before a pod with stats. Where all
//! keys tie, this crate adds one rule of its own so the order is total and reproducible:
//! namespace, then name, then uid, ascending.
//!
//! [`kubelet_chain`] is that chain written the kubelet's way (the reference, also what a
//! full re-sort costs); [`RankKey`] folds the same chain into one value whose `Ord` agrees
//! with it, so an ordered set can keep pods ranked incrementally.
use std::cmp::Ordering;
use std::sync::Arc;

use serde::Serialize;

use super::kubelet_summary::{FsUsage, PodUsage};
use super::pod_facts::PodFacts;
use super::quantity::Quantity;
use super::signal::Signal;

/// Whether the container runtime keeps images and writable layers on a filesystem of its
/// own (the kubelet's `HasDedicatedImageFs`). A runtime that further splits writable layers
/// from images (`containerfs`) is not modelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FsLayout {
    /// One filesystem holds everything: nodefs and imagefs rank by the same usage.
    #[default]
    Shared,
    /// A dedicated imagefs: nodefs counts logs and local volumes, imagefs writable layers.
    DedicatedImageFs,
}

/// Which per-pod filesystem usage a disk signal counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DiskStats {
    /// Writable layers, logs and local volumes (no dedicated imagefs).
    All,
    /// Logs and local volumes (nodefs with a dedicated imagefs).
    LogsAndLocalVolumes,
    /// Writable layers (imagefs with a dedicated imagefs).
    Rootfs,
}

/// Bytes or inodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DiskMeasure {
    /// `*.available` signals.
    Bytes,
    /// `*.inodesFree` signals.
    Inodes,
}

/// One of the kubelet's ranking functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RankPolicy {
    /// `rankMemoryPressure`.
    Memory,
    /// `rankPIDPressure`.
    Pid,
    /// `rankDiskPressureFunc(stats, measure)`.
    Disk(DiskStats, DiskMeasure),
}

impl RankPolicy {
    /// The kubelet's `buildSignalToRankFunc` for one signal.
    pub(crate) fn for_signal(signal: Signal, layout: FsLayout) -> RankPolicy {
        let (stats, measure) = match (signal, layout) {
            (Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable, _) => {
                return RankPolicy::Memory;
            }
            (Signal::PidAvailable, _) => return RankPolicy::Pid,
            (Signal::NodeFsAvailable | Signal::ImageFsAvailable, FsLayout::Shared) => {
                (DiskStats::All, DiskMeasure::Bytes)
            }
            (Signal::NodeFsInodesFree | Signal::ImageFsInodesFree, FsLayout::Shared) => {
                (DiskStats::All, DiskMeasure::Inodes)
            }
            (Signal::NodeFsAvailable, FsLayout::DedicatedImageFs) => {
                (DiskStats::LogsAndLocalVolumes, DiskMeasure::Bytes)
            }
            (Signal::NodeFsInodesFree, FsLayout::DedicatedImageFs) => {
                (DiskStats::LogsAndLocalVolumes, DiskMeasure::Inodes)
            }
            (Signal::ImageFsAvailable, FsLayout::DedicatedImageFs) => {
                (DiskStats::Rootfs, DiskMeasure::Bytes)
            }
            (Signal::ImageFsInodesFree, FsLayout::DedicatedImageFs) => {
                (DiskStats::Rootfs, DiskMeasure::Inodes)
            }
        };
        RankPolicy::Disk(stats, measure)
    }

    /// The numbers the chain compares for one pod; `None` when the pod has no stats.
    pub fn measure(self, facts: &PodFacts, usage: Option<&PodUsage>) -> Option<Measured> {
        let usage = usage?;
        let (used, request, excess_base) = match self {
            RankPolicy::Memory => (
                Quantity::from_units(saturate(usage.memory_working_set_bytes)),
                facts.memory_request,
                facts.memory_request,
            ),
            RankPolicy::Pid => (
                Quantity::from_units(saturate(usage.process_count)),
                Quantity::ZERO,
                Quantity::ZERO,
            ),
            RankPolicy::Disk(stats, measure) => {
                let fs = match stats {
                    DiskStats::All => usage.rootfs.add_all(&[usage.logs, usage.local_volumes]),
                    DiskStats::LogsAndLocalVolumes => usage.logs.add_all(&[usage.local_volumes]),
                    DiskStats::Rootfs => usage.rootfs,
                };
                match measure {
                    DiskMeasure::Bytes => (
                        Quantity::from_units(saturate(fs.used_bytes)),
                        facts.ephemeral_storage_request,
                        facts.ephemeral_storage_request,
                    ),
                    // The kubelet compares inodes against an "inodes" request no pod can
                    // have (so zero), yet subtracts the ephemeral-storage request when
                    // ranking by excess. Both quirks are kept.
                    DiskMeasure::Inodes => (
                        Quantity::from_units(saturate(fs.inodes_used)),
                        Quantity::ZERO,
                        facts.ephemeral_storage_request,
                    ),
                }
            }
        };
        Some(Measured {
            usage: used,
            request,
            exceeds_request: used > request,
            above_request: used.saturating_sub(excess_base),
        })
    }
}

fn saturate(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

impl FsUsage {
    fn add_all(self, others: &[FsUsage]) -> FsUsage {
        others.iter().fold(self, |sum, other| FsUsage {
            used_bytes: sum.used_bytes.saturating_add(other.used_bytes),
            inodes_used: sum.inodes_used.saturating_add(other.inodes_used),
        })
    }
}

/// What the chain compares for one pod with stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Measured {
    /// Working set bytes, process count, or disk bytes/inodes.
    pub usage: Quantity,
    /// The request usage is compared with for the first key (zero for pids and inodes).
    pub request: Quantity,
    /// `usage > request`, strictly.
    pub exceeds_request: bool,
    /// Usage minus the request (negative when within it); for pids, the process count.
    pub above_request: Quantity,
}

/// A pod's position in the eviction order, precomputed: comparing two keys gives the same
/// answer as running the kubelet's chain (plus the tie-break) on the two pods.
///
/// The chain's keys are packed so that smaller means evicted first and a key stays 24 bytes
/// (small keys keep the ordered set's nodes in few cache lines): `head` holds the boolean
/// keys and the priority, `tail` the usage key in thousandths of a unit. The usage key
/// saturates beyond about 9.2e15 units (8 PiB), far past any real pod.
#[derive(Debug, Clone)]
pub struct RankKey {
    head: u64,
    tail: i64,
    facts: Arc<PodFacts>,
}

impl RankKey {
    /// Computes the key of a pod under a policy.
    pub fn new(policy: RankPolicy, facts: Arc<PodFacts>, usage: Option<&PodUsage>) -> RankKey {
        let measured = policy.measure(&facts, usage);
        // Priority biased into 0..2^32 so that unsigned order is priority order.
        let priority = (i64::from(facts.priority) - i64::from(i32::MIN)) as u64;
        let has_stats = u64::from(measured.is_some());
        let larger_first = |q: Quantity| {
            i64::try_from(-q.millis()).unwrap_or(if q.millis() > 0 { i64::MIN } else { i64::MAX })
        };
        let (head, tail) = match (policy, measured) {
            (RankPolicy::Pid, Some(m)) => (priority << 1 | has_stats, larger_first(m.usage)),
            (RankPolicy::Pid, None) => (priority << 1 | has_stats, 0),
            (_, Some(m)) => (
                has_stats << 33 | u64::from(!m.exceeds_request) << 32 | priority,
                larger_first(m.above_request),
            ),
            (_, None) => (has_stats << 33 | priority, 0),
        };
        RankKey { head, tail, facts }
    }

    /// The pod this key ranks.
    pub fn facts(&self) -> &Arc<PodFacts> {
        &self.facts
    }
}

impl PartialEq for RankKey {
    fn eq(&self, other: &RankKey) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for RankKey {}

impl PartialOrd for RankKey {
    fn partial_cmp(&self, other: &RankKey) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for RankKey {
    fn cmp(&self, other: &RankKey) -> Ordering {
        (self.head, self.tail)
            .cmp(&(other.head, other.tail))
            .then_with(|| self.facts.pod.cmp(&other.facts.pod))
    }
}

/// A pod as the reference chain sees it.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    /// The pod.
    pub facts: &'a PodFacts,
    /// Its usage, `None` when it has no stats.
    pub usage: Option<&'a PodUsage>,
}

/// Which key placed a pod after the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum RankReason {
    /// The earlier pod had no stats and this one has.
    NoStats,
    /// The earlier pod exceeds its request and this one does not.
    ExceedsRequest,
    /// The earlier pod has a lower priority.
    Priority,
    /// The earlier pod uses more above its request (more processes, for pids).
    Usage,
    /// All keys equal: namespace, name, uid.
    Tie,
}

impl RankReason {
    /// In words, for a pod placed after the previous one by this key under `policy`.
    pub(crate) fn explain(self, policy: RankPolicy) -> &'static str {
        match self {
            RankReason::NoStats => "pods without stats go first",
            RankReason::ExceedsRequest => "pods over their request go first",
            RankReason::Priority => "lower priority goes first",
            RankReason::Usage if policy == RankPolicy::Pid => "more processes go first",
            RankReason::Usage => "more usage above request goes first",
            RankReason::Tie => "all keys equal, by namespace/name/uid",
        }
    }
}

/// A comparator: `Less` means the first pod is evicted first.
type CompareFn = Box<dyn Fn(&Candidate<'_>, &Candidate<'_>) -> Ordering + Send + Sync>;

/// One comparator of the chain, with what it looks at.
pub struct ChainLink {
    /// What this comparator looks at.
    pub(crate) reason: RankReason,
    compare: CompareFn,
}

impl ChainLink {
    /// Runs the comparator.
    pub(crate) fn compare(&self, a: &Candidate<'_>, b: &Candidate<'_>) -> Ordering {
        (self.compare)(a, b)
    }
}

/// The kubelet's `cmpBool`: true sorts first.
fn cmp_bool(a: bool, b: bool) -> Ordering {
    b.cmp(&a)
}

/// The kubelet's comparator list for a policy, followed by the tie-break. Each usage-based
/// comparator measures both pods and puts a pod without stats first, as the kubelet's do.
pub fn kubelet_chain(policy: RankPolicy) -> Vec<ChainLink> {
    let exceeds = move |a: &Candidate<'_>, b: &Candidate<'_>| match (
        policy.measure(a.facts, a.usage),
        policy.measure(b.facts, b.usage),
    ) {
        (Some(x), Some(y)) => cmp_bool(x.exceeds_request, y.exceeds_request),
        (x, y) => cmp_bool(x.is_none(), y.is_none()),
    };
    let larger_usage = move |a: &Candidate<'_>, b: &Candidate<'_>| match (
        policy.measure(a.facts, a.usage),
        policy.measure(b.facts, b.usage),
    ) {
        (Some(x), Some(y)) => y.above_request.cmp(&x.above_request),
        (x, y) => cmp_bool(x.is_none(), y.is_none()),
    };
    let priority = |a: &Candidate<'_>, b: &Candidate<'_>| a.facts.priority.cmp(&b.facts.priority);
    let tie = |a: &Candidate<'_>, b: &Candidate<'_>| a.facts.pod.cmp(&b.facts.pod);
    let link = |reason, compare: CompareFn| ChainLink { reason, compare };
    match policy {
        RankPolicy::Pid => vec![
            link(RankReason::Priority, Box::new(priority)),
            link(RankReason::Usage, Box::new(larger_usage)),
            link(RankReason::Tie, Box::new(tie)),
        ],
        RankPolicy::Memory | RankPolicy::Disk(..) => vec![
            link(RankReason::ExceedsRequest, Box::new(exceeds)),
            link(RankReason::Priority, Box::new(priority)),
            link(RankReason::Usage, Box::new(larger_usage)),
            link(RankReason::Tie, Box::new(tie)),
        ],
    }
}

/// The kubelet's `multiSorter.Less`, as an `Ordering`: the first non-equal comparator wins.
pub fn ordered_by(chain: &[ChainLink], a: &Candidate<'_>, b: &Candidate<'_>) -> Ordering {
    chain
        .iter()
        .map(|link| link.compare(a, b))
        .find(|o| o.is_ne())
        .unwrap_or(Ordering::Equal)
}

/// Which key put `later` after `earlier` (`None` if it does not come after it).
pub(crate) fn decided_by(
    chain: &[ChainLink],
    earlier: &Candidate<'_>,
    later: &Candidate<'_>,
) -> Option<RankReason> {
    let link = chain
        .iter()
        .find(|link| link.compare(earlier, later).is_ne())?;
    if link.compare(earlier, later).is_gt() {
        return None;
    }
    let stats_differ = earlier.usage.is_none() != later.usage.is_none();
    Some(if stats_differ && link.reason != RankReason::Priority {
        RankReason::NoStats
    } else {
        link.reason
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(name: &str, priority: i32, memory_request_mi: i64) -> PodFacts {
        PodFacts::named(name)
            .with_namespace("ns")
            .with_uid(&format!("uid-{name}"))
            .with_priority(priority)
            .with_memory_request(memory_request_mi << 20)
            .with_ephemeral_storage_request(memory_request_mi << 20)
    }

    fn memory(working_set_mi: u64) -> Option<PodUsage> {
        Some(PodUsage {
            memory_working_set_bytes: working_set_mi << 20,
            ..PodUsage::default()
        })
    }

    struct Pod {
        facts: PodFacts,
        usage: Option<PodUsage>,
    }

    fn pod(name: &str, priority: i32, request_mi: i64, usage: Option<PodUsage>) -> Pod {
        Pod {
            facts: facts(name, priority, request_mi),
            usage,
        }
    }

    /// The names in eviction order, by the reference chain and by the key; both must agree.
    fn order(policy: RankPolicy, pods: &[Pod]) -> Vec<String> {
        let chain = kubelet_chain(policy);
        let mut by_chain: Vec<&Pod> = pods.iter().collect();
        by_chain.sort_by(|a, b| {
            let a = Candidate {
                facts: &a.facts,
                usage: a.usage.as_ref(),
            };
            let b = Candidate {
                facts: &b.facts,
                usage: b.usage.as_ref(),
            };
            ordered_by(&chain, &a, &b)
        });
        let mut by_key: Vec<RankKey> = pods
            .iter()
            .map(|p| RankKey::new(policy, Arc::new(p.facts.clone()), p.usage.as_ref()))
            .collect();
        by_key.sort();
        let chain_names: Vec<String> = by_chain.iter().map(|p| p.facts.pod.name.clone()).collect();
        let key_names: Vec<String> = by_key.iter().map(|k| k.facts().pod.name.clone()).collect();
        assert_eq!(chain_names, key_names, "chain and key disagree");
        chain_names
    }

    #[test]
    fn ranks_like_the_kubelet() {
        let disk = |rootfs: u64, logs: u64, volumes: u64| {
            let fs = |bytes: u64| FsUsage {
                used_bytes: bytes << 20,
                inodes_used: bytes,
            };
            Some(PodUsage {
                rootfs: fs(rootfs),
                logs: fs(logs),
                local_volumes: fs(volumes),
                ..PodUsage::default()
            })
        };
        let pids = |count| {
            Some(PodUsage {
                process_count: count,
                ..PodUsage::default()
            })
        };
        struct Case {
            name: &'static str,
            policy: RankPolicy,
            pods: Vec<Pod>,
            order: &'static [&'static str],
        }
        let cases = [
            Case {
                name: "a pod exactly at its request does not exceed it",
                policy: RankPolicy::Memory,
                pods: vec![
                    pod("at", 0, 100, memory(100)),
                    pod("over", 100, 100, memory(101)),
                ],
                order: &["over", "at"],
            },
            Case {
                name: "a low-priority pod within its request survives a high-priority pod over it",
                policy: RankPolicy::Memory,
                pods: vec![
                    pod("low-within", -100, 1000, memory(900)),
                    pod("high-over", 1000, 100, memory(200)),
                ],
                order: &["high-over", "low-within"],
            },
            Case {
                name: "among pods over their request, lower priority first",
                policy: RankPolicy::Memory,
                pods: vec![
                    pod("p10", 10, 100, memory(500)),
                    pod("p5", 5, 100, memory(101)),
                ],
                order: &["p5", "p10"],
            },
            Case {
                name: "same priority: larger excess first, not larger usage",
                policy: RankPolicy::Memory,
                pods: vec![
                    pod("big", 0, 4000, memory(4100)),
                    pod("small", 0, 100, memory(300)),
                ],
                order: &["small", "big"],
            },
            Case {
                name: "within requests: usage further below request goes later",
                policy: RankPolicy::Memory,
                pods: vec![
                    pod("far-below", 0, 1000, memory(100)),
                    pod("near", 0, 1000, memory(900)),
                ],
                order: &["near", "far-below"],
            },
            Case {
                name: "missing stats first, even at high priority",
                policy: RankPolicy::Memory,
                pods: vec![
                    pod("over", 0, 100, memory(500)),
                    pod("no-stats", 1000, 100, None),
                ],
                order: &["no-stats", "over"],
            },
            Case {
                name: "pods without stats among themselves by priority",
                policy: RankPolicy::Memory,
                pods: vec![pod("a-high", 10, 0, None), pod("b-low", 1, 0, None)],
                order: &["b-low", "a-high"],
            },
            Case {
                name: "full tie broken by namespace, name, uid",
                policy: RankPolicy::Memory,
                pods: vec![pod("b", 0, 100, memory(50)), pod("a", 0, 100, memory(50))],
                order: &["a", "b"],
            },
            Case {
                name: "pid: priority first, whatever the process count",
                policy: RankPolicy::Pid,
                pods: vec![pod("many", 10, 0, pids(5000)), pod("few", 0, 0, pids(2))],
                order: &["few", "many"],
            },
            Case {
                name: "pid: same priority, more processes first",
                policy: RankPolicy::Pid,
                pods: vec![pod("few", 0, 0, pids(2)), pod("many", 0, 0, pids(5000))],
                order: &["many", "few"],
            },
            Case {
                name: "pid: missing stats only beat pods of the same priority",
                policy: RankPolicy::Pid,
                pods: vec![
                    pod("none-high", 10, 0, None),
                    pod("low", 0, 0, pids(1)),
                    pod("high", 10, 0, pids(9)),
                ],
                order: &["low", "none-high", "high"],
            },
            Case {
                name: "disk without imagefs counts writable layers, logs and volumes",
                policy: RankPolicy::for_signal(Signal::NodeFsAvailable, FsLayout::Shared),
                pods: vec![
                    pod("layer", 0, 100, disk(150, 0, 0)),
                    pod("logs", 0, 100, disk(0, 60, 60)),
                ],
                order: &["layer", "logs"],
            },
            Case {
                name: "nodefs with a dedicated imagefs ignores writable layers",
                policy: RankPolicy::for_signal(Signal::NodeFsAvailable, FsLayout::DedicatedImageFs),
                pods: vec![
                    pod("layer", 0, 100, disk(150, 0, 0)),
                    pod("logs", 0, 100, disk(0, 60, 60)),
                ],
                order: &["logs", "layer"],
            },
            Case {
                name: "imagefs with a dedicated imagefs counts only writable layers",
                policy: RankPolicy::for_signal(
                    Signal::ImageFsAvailable,
                    FsLayout::DedicatedImageFs,
                ),
                pods: vec![
                    pod("logs", 0, 0, disk(0, 500, 500)),
                    pod("layer", 0, 0, disk(1, 0, 0)),
                ],
                order: &["layer", "logs"],
            },
            Case {
                name: "inodes: any inode use exceeds the (zero) inode request",
                policy: RankPolicy::for_signal(Signal::NodeFsInodesFree, FsLayout::Shared),
                pods: vec![
                    pod("unused", -5, 0, disk(0, 0, 0)),
                    pod("used", 5, 100, disk(1, 0, 0)),
                ],
                order: &["used", "unused"],
            },
        ];
        for case in cases {
            assert_eq!(
                order(case.policy, &case.pods),
                case.order,
                "case {:?}",
                case.name
            );
        }
    }

    #[test]
    fn names_the_deciding_key() {
        let chain = kubelet_chain(RankPolicy::Memory);
        let pods = [
            pod("over", 5, 100, memory(200)),
            pod("within", 0, 100, memory(50)),
            pod("within-high", 9, 100, memory(50)),
            pod("none", 0, 100, None),
        ];
        let (over, within, within_high, none) = (0, 1, 2, 3);
        struct Case {
            name: &'static str,
            earlier: usize,
            later: usize,
            reason: Option<RankReason>,
        }
        let cases = [
            Case {
                name: "exceeds",
                earlier: over,
                later: within,
                reason: Some(RankReason::ExceedsRequest),
            },
            Case {
                name: "priority",
                earlier: within,
                later: within_high,
                reason: Some(RankReason::Priority),
            },
            Case {
                name: "no stats",
                earlier: none,
                later: over,
                reason: Some(RankReason::NoStats),
            },
            Case {
                name: "wrong way round",
                earlier: within,
                later: over,
                reason: None,
            },
        ];
        let c = |i: usize| Candidate {
            facts: &pods[i].facts,
            usage: pods[i].usage.as_ref(),
        };
        for case in cases {
            assert_eq!(
                decided_by(&chain, &c(case.earlier), &c(case.later)),
                case.reason,
                "case {:?}",
                case.name
            );
        }
    }
}
