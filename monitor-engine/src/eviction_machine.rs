//! The agent's pure state machine: pods, their cgroups, working sets kept current from kernel
//! events, the incremental rankings, and the decision step. Everything here takes plain data
//! (and a clock), so the whole pipeline from event to decision is tested without root.
//!
//! How the pod set changes and an eviction runs its course is in `pod_lifecycle`; how kernel
//! records and cgroupfs reads move the working sets, in `usage_readings`.
use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use super::{
    pod_table::{PodRow, PodTable},
    refusals::Refusals,
    working_set::{Estimate, UsageTracker},
};
use crate::{
    decide::{Decision, EvictionState, decide_among},
    eviction_config::EvictionConfig,
    eviction_order::{FsLayout, RankPolicy},
    headroom::{memory_headroom, pid_headroom},
    ids::{CgroupRel, PodId},
    instant::{Clock, MonoInstant},
    kubelet_summary::PodUsage,
    memory_signals::{allocatable_memory_available, memory_available},
    oom_projection::{GrowthWindow, OomDomain, OomPoints, Projection},
    pod_facts::PodFacts,
    rank_index::{RankIndex, RankIndexSet},
    signal::Signal,
    threshold::{SignalObservation, ThresholdKind},
};

mod pod_lifecycle;
mod usage_readings;

pub use pod_lifecycle::PodChanges;
pub use usage_readings::{PodReading, ReadScope};

/// The signals the agent computes (see [`AgentCore::observations`]); a threshold on any
/// other can never be met here, so no ranking is kept for it.
pub(crate) const OBSERVED_SIGNALS: [Signal; 3] = [
    Signal::MemoryAvailable,
    Signal::AllocatableMemoryAvailable,
    Signal::PidAvailable,
];

/// Node totals the signals are computed against.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeCapacity {
    /// MemTotal.
    pub memory_bytes: u64,
    /// The kubepods cgroup's limit, or `--allocatable-memory`.
    pub allocatable_memory_bytes: u64,
    /// The kubepods cgroup's memory limit, where it has one: the kernel's OOM point for pods.
    pub kubepods_limit: Option<u64>,
}

/// Why a ranked pod cannot be chosen now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NotActionable {
    /// No cgroup of its own on this node (not started yet, or already gone): nothing to
    /// reclaim.
    NoCgroup,
    /// Its cgroup could never be read: its usage is unknown, and an unknown usage must not
    /// make it the victim.
    Unreadable,
    /// A pod the agent must leave alone (its own).
    Excluded,
    /// Its eviction was refused by a PodDisruptionBudget a moment ago (see [`Refusals`]).
    Refused,
}

/// Pods, usage, rankings and remembered decisions.
pub struct AgentCore {
    config: EvictionConfig,
    capacity: NodeCapacity,
    kubepods_rel: CgroupRel,
    rankings: RankIndexSet,
    usage: UsageTracker,
    /// The last tens of milliseconds of growth, to project the OOM point.
    growth: GrowthWindow,
    pods: PodTable,
    pids: Option<SignalObservation>,
    /// Failed cgroupfs reads of pods, since start.
    read_failures: u64,
    /// Pods whose eviction was refused, held out for a while.
    refusals: Refusals,
    /// Uids of the rows no longer listed (their eviction in flight), so a decision need not
    /// walk every row to find them.
    unlisted: BTreeSet<String>,
    /// Uids of evicted pods whose processes outlived force (see
    /// [`AgentCore::eviction_stuck`]), until their cgroup is empty.
    stuck: BTreeSet<String>,
    /// How far ahead a memory signal is projected before deciding (`--predict`); `None`:
    /// decisions rest on what is, as the kubelet's.
    predict_lead: Option<Duration>,
    /// The projection the last decision acted on, if it did.
    prediction: Option<Prediction>,
    /// Private: the shell asks ([`Self::state`]) and the core changes itself.
    state: EvictionState,
}

/// A hard threshold acted on before its crossing: the signal now and as projected.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    pub signal: Signal,
    pub available_now: i64,
    pub available_then: i64,
    pub lead: Duration,
    pub bytes_per_s: f64,
}

/// A ranking for each signal the configuration's thresholds watch that the agent observes.
fn rankings_for(config: &EvictionConfig) -> RankIndexSet {
    RankIndexSet::new(
        FsLayout::Shared,
        config
            .thresholds
            .iter()
            .map(|t| t.signal)
            .filter(|signal| OBSERVED_SIGNALS.contains(signal)),
    )
}

impl AgentCore {
    pub fn new(
        config: EvictionConfig,
        capacity: NodeCapacity,
        kubepods_rel: CgroupRel,
        state: EvictionState,
    ) -> Self {
        let rankings = rankings_for(&config);
        Self {
            config,
            capacity,
            kubepods_rel,
            rankings,
            usage: UsageTracker::default(),
            growth: GrowthWindow::default(),
            pods: PodTable::default(),
            pids: None,
            read_failures: 0,
            refusals: Refusals::default(),
            unlisted: BTreeSet::new(),
            stuck: BTreeSet::new(),
            predict_lead: None,
            prediction: None,
            state,
        }
    }

    pub fn config(&self) -> &EvictionConfig {
        &self.config
    }

    /// The signals with a threshold that the agent does not observe (the kubelet's default
    /// nodefs and imagefs thresholds, say): never met here, so never acted on.
    pub fn unobserved_signals(&self) -> Vec<Signal> {
        let mut signals: Vec<Signal> = self
            .config
            .thresholds
            .iter()
            .map(|t| t.signal)
            .filter(|signal| !OBSERVED_SIGNALS.contains(signal))
            .collect();
        signals.sort();
        signals.dedup();
        signals
    }

    /// Whether pods are ranked by their process counts: only for `pid.available`, so only
    /// when a threshold watches it.
    pub fn counts_processes(&self) -> bool {
        self.rankings.for_signal(Signal::PidAvailable).is_some()
    }

    /// The eviction state the checkpoint keeps: the last eviction and the one in flight.
    pub fn state(&self) -> &EvictionState {
        &self.state
    }

    /// When the decision step, held back by the last eviction (the eviction interval, the
    /// wait for its pod's cleanup), may act again (see [`EvictionState::wait_ends`]).
    pub fn decision_wait_ends(&self) -> Option<MonoInstant> {
        self.state.wait_ends(
            self.config.monitor.eviction_interval,
            self.config.monitor.pod_cleanup_timeout,
        )
    }

    /// Whether the decision step may choose this pod, and if not why.
    pub(crate) fn actionable(&self, uid: &str) -> Result<(), NotActionable> {
        let row = self.pods.by_uid(uid).ok_or(NotActionable::NoCgroup)?;
        if row.excluded {
            return Err(NotActionable::Excluded);
        }
        if self.refusals.holds(uid) {
            return Err(NotActionable::Refused);
        }
        if row.cgroup.is_none() {
            return Err(NotActionable::NoCgroup);
        }
        if row.read_failed && row.estimate.is_none() {
            return Err(NotActionable::Unreadable);
        }
        Ok(())
    }

    /// Keeps a pod out of every decision for as long as it is listed (the agent's own pod).
    pub fn exclude(&mut self, uid: &str) {
        if let Some(row) = self.pods.by_uid_mut(uid) {
            row.excluded = true;
        }
    }

    /// Takes a new configuration (the agent's SIGHUP): its thresholds and waits, and a
    /// ranking for each signal it now watches, holding every ranked pod with its usage.
    /// Remembered state (the last eviction, a pending one, soft-threshold timers) stays.
    pub fn reconfigure(&mut self, config: EvictionConfig) {
        self.rankings = rankings_for(&config);
        self.config = config;
        let ids: Vec<PodId> = self
            .pods
            .iter()
            .filter(|(_, row)| row.ranked())
            .map(|(id, _)| id)
            .collect();
        for id in ids {
            if let Some(row) = self.pods.get(id) {
                self.rankings.upsert_pod_shared(&row.facts);
            }
            self.rerank(id);
        }
    }

    /// Fresh `pid.available` reading.
    pub fn set_pid_reading(&mut self, pids: Option<SignalObservation>) {
        self.pids = pids;
    }

    fn rerank(&mut self, id: PodId) {
        let Some(row) = self.pods.get(id) else {
            return;
        };
        if !row.ranked() {
            return;
        }
        let usage = row.estimate.map(|estimate| PodUsage {
            memory_working_set_bytes: estimate.value(),
            process_count: row.process_count,
            ..PodUsage::default()
        });
        self.rankings.update_usage(&row.facts.pod.uid, usage);
    }

    /// The signals the agent observes, as the kubelet computes them.
    pub fn observations(&self) -> BTreeMap<Signal, SignalObservation> {
        let mut observed = BTreeMap::from([
            (
                Signal::MemoryAvailable,
                memory_available(self.capacity.memory_bytes, self.usage.node()),
            ),
            (
                Signal::AllocatableMemoryAvailable,
                allocatable_memory_available(
                    self.capacity.allocatable_memory_bytes,
                    self.usage.kubepods(),
                ),
            ),
        ]);
        if let Some(pids) = self.pids {
            observed.insert(Signal::PidAvailable, pids);
        }
        observed
    }

    /// Runs the decision step on the current numbers, among the pods it can act on: a pod
    /// without a cgroup, or whose usage could never be read, keeps its place in the ranking
    /// but the next candidate is taken.
    pub fn decide(&mut self, clock: &impl Clock) -> Decision {
        self.decide_at(clock, None)
    }

    /// Projects the memory signals `lead` ahead at the growth of the last tens of
    /// milliseconds before each decision from now on; `None`: no projection.
    pub fn set_predict_lead(&mut self, lead: Option<Duration>) {
        self.predict_lead = lead;
    }

    /// The projection the last decision acted on, if it did.
    pub fn prediction(&self) -> Option<Prediction> {
        self.prediction
    }

    /// [`Self::decide`] at `now_ns` (CLOCK_MONOTONIC, as the kernel's records): with a
    /// prediction lead set, a memory signal whose projection crosses one of its hard
    /// thresholds within the lead is taken at its projected value, so the eviction starts
    /// before the crossing instead of after it.
    pub fn decide_at(&mut self, clock: &impl Clock, now_ns: Option<u64>) -> Decision {
        let mut observations = self.observations();
        self.prediction = match (self.predict_lead, now_ns) {
            (Some(lead), Some(now_ns)) => self.predict(&mut observations, lead, now_ns),
            _ => None,
        };
        self.refusals.expire(clock.now());
        let previous_eviction = self.state.last_eviction;
        let mut state = std::mem::take(&mut self.state);
        let decision = decide_among(
            &self.config,
            &observations,
            &self.rankings,
            &mut state,
            clock,
            |facts| self.actionable(&facts.pod.uid).is_ok(),
        );
        self.state = state;
        self.forget_settled_unlisted();
        if let Some(eviction) = decision.eviction() {
            self.refusals.decided(&eviction.pod.uid, previous_eviction);
        }
        decision
    }

    /// Replaces each memory signal whose projection `lead` ahead meets a hard threshold that
    /// it does not meet now by that projection; the first such signal's figures.
    fn predict(
        &self,
        observations: &mut BTreeMap<Signal, SignalObservation>,
        lead: Duration,
        now_ns: u64,
    ) -> Option<Prediction> {
        let ahead = self.growth.growth_ahead(lead, now_ns);
        let mut first = None;
        for (signal, grown, bytes_per_s) in [
            (Signal::MemoryAvailable, ahead.node, ahead.node_bps),
            (
                Signal::AllocatableMemoryAvailable,
                ahead.kubepods,
                ahead.kubepods_bps,
            ),
        ] {
            let Some(now) = observations.get_mut(&signal) else {
                continue;
            };
            let then = SignalObservation {
                available: now
                    .available
                    .saturating_sub(i64::try_from(grown).unwrap_or(i64::MAX)),
                ..*now
            };
            let crosses = self.config.thresholds.iter().any(|t| {
                t.signal == signal
                    && t.kind() == ThresholdKind::Hard
                    && !t.is_met(*now, false)
                    && t.is_met(then, false)
            });
            if crosses {
                first.get_or_insert(Prediction {
                    signal,
                    available_now: now.available,
                    available_then: then.available,
                    lead,
                    bytes_per_s,
                });
                *now = then;
            }
        }
        first
    }

    /// The API server refused to evict `uid` (a PodDisruptionBudget): the pod is held out
    /// for an eviction interval and the decision taken back, so the next candidate is
    /// evicted at once (see [`Refusals`]).
    pub fn eviction_refused(&mut self, uid: &str, now: MonoInstant) {
        let interval = self.config.monitor.eviction_interval;
        self.refusals.refused(uid, now, interval, &mut self.state);
    }

    /// The decision on `uid` is not carried out now (reclaim goes first): taken back, so the
    /// next decision may evict at once, as if it had not been taken.
    pub fn take_back(&mut self, uid: &str) {
        self.refusals.take_back(uid, &mut self.state);
    }

    /// The nearest OOM point at the growth the kernel reported over the last tens of
    /// milliseconds, as of `now_ns` (CLOCK_MONOTONIC); `None` while nothing grows.
    pub fn oom_projection(&self, now_ns: u64) -> Option<Projection> {
        let points = OomPoints {
            kubepods_limit: self.capacity.kubepods_limit,
            node_memory: self.capacity.memory_bytes,
        };
        self.growth.project(points, now_ns)
    }

    pub fn capacity(&self) -> NodeCapacity {
        self.capacity
    }

    /// New node totals (the kubepods limit re-read): the signals follow from the next
    /// observation on.
    pub fn set_capacity(&mut self, capacity: NodeCapacity) {
        self.capacity = capacity;
    }

    /// The OOM point the working sets are nearest, and the memory the kernel scales
    /// `oom_score_adj` by there.
    pub fn nearest_oom_point(&self) -> (OomDomain, u64) {
        OomPoints {
            kubepods_limit: self.capacity.kubepods_limit,
            node_memory: self.capacity.memory_bytes,
        }
        .nearest(self.usage.kubepods(), self.usage.node())
    }

    /// How much the working sets may grow before a memory threshold could be met.
    pub fn memory_headroom(&self) -> Option<u64> {
        memory_headroom(&self.config.thresholds, &self.observations())
    }

    /// How many tasks may be created before a pid threshold could be met, from the last
    /// `pid.available` reading (see [`pid_headroom`]).
    pub fn pid_headroom(&self) -> Option<u64> {
        pid_headroom(&self.config.thresholds, &self.observations())
    }

    pub fn pod(&self, uid: &str) -> Option<&PodRow> {
        self.pods.by_uid(uid)
    }

    pub fn pods(&self) -> impl Iterator<Item = &PodRow> {
        self.pods.rows()
    }

    /// A pod's current usage and the ranking policy for a signal, for reports.
    pub fn rank_inputs(
        &self,
        uid: &str,
        signal: Signal,
    ) -> Option<(RankPolicy, Option<&PodUsage>)> {
        let index = self.rankings.for_signal(signal)?;
        Some((index.policy(), index.usage(uid)))
    }

    /// Pods in eviction order for a signal, with their usage.
    pub fn ranking(&self, signal: Signal) -> Vec<(&PodFacts, Option<&PodUsage>)> {
        self.rankings
            .for_signal(signal)
            .map(|index| {
                index
                    .iter()
                    .map(|f| (f.as_ref(), index.usage(&f.pod.uid)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The ranking index for a signal, to read its head without collecting it all.
    pub fn rank_index(&self, signal: Signal) -> Option<&RankIndex> {
        self.rankings.for_signal(signal)
    }

    /// The cgroup ids of a pod's subtree.
    pub fn cgroups_of(&self, uid: &str) -> Vec<u64> {
        self.pods
            .id(uid)
            .map(|id| self.usage.cgroups_of(id))
            .unwrap_or_default()
    }

    pub fn pod_count(&self) -> usize {
        self.pods.count()
    }

    pub fn pod_working_set(&self, uid: &str) -> Option<u64> {
        self.pods.by_uid(uid)?.estimate.map(Estimate::value)
    }
}

#[cfg(test)]
mod tests {
    use monitor_common::Stat;

    use super::*;
    use crate::{
        decide::{Action, Idle},
        instant::ManualClock,
        pod_table::PodCgroup,
        working_set::StatChange,
    };

    pub(super) const MI: i64 = 1 << 20;

    pub(super) fn facts(name: &str, priority: i32, request_mi: i64, critical: bool) -> PodFacts {
        PodFacts::named(name)
            .with_uid(&format!("uid-{name}"))
            .with_priority(priority)
            .with_critical(critical)
            .with_memory_request(request_mi * MI)
    }

    fn kubepods() -> CgroupRel {
        CgroupRel::new("/kubepods").unwrap()
    }

    pub(super) fn cgroup(id: u64, name: &str) -> Option<PodCgroup> {
        Some(PodCgroup {
            id,
            rel: CgroupRel::new(&format!("/kubepods/burstable/pod-{name}")).unwrap(),
        })
    }

    pub(super) fn read(working_set: u64, processes: u64) -> PodReading {
        PodReading::Read {
            working_set,
            processes: Some(processes),
        }
    }

    /// When the fixture reads cgroupfs; its kernel records come later.
    pub(super) const READ_NS: u64 = 1_000;

    /// Kernel records (cgroup id, stat, bytes), sent after the fixture's reads.
    pub(super) fn stats(records: &[(u64, Stat, i64)]) -> Vec<StatChange> {
        records
            .iter()
            .map(|&(cgroup_id, stat, bytes)| StatChange {
                cgroup_id,
                stat,
                bytes,
                sent_ns: READ_NS + 1,
            })
            .collect()
    }

    /// allocatableMemory.available < 200Mi with 1 GiB allocatable.
    pub(super) fn core() -> AgentCore {
        let config =
            EvictionConfig::from_yaml("evictionHard:\n  allocatableMemory.available: 200Mi\n")
                .unwrap();
        let capacity = NodeCapacity {
            memory_bytes: 8 << 30,
            allocatable_memory_bytes: 1 << 30,
            kubepods_limit: None,
        };
        let mut core = AgentCore::new(config, capacity, kubepods(), EvictionState::default());
        core.set_pods(vec![
            (facts("big-low", 0, 600, false), cgroup(10, "big-low")),
            (
                facts("over-high", 1000, 100, false),
                cgroup(20, "over-high"),
            ),
            (
                facts("critical", 2_000_000_000, 10, true),
                cgroup(30, "critical"),
            ),
        ]);
        for (id, name) in [(10, "big-low"), (20, "over-high"), (30, "critical")] {
            core.classify(id, &format!("/kubepods/burstable/pod-{name}"));
            // A container cgroup below the pod cgroup.
            core.classify(id + 1, &format!("/kubepods/burstable/pod-{name}/ctr"));
        }
        core.set_node_reading(2 << 30, 0, READ_NS);
        for name in ["big-low", "over-high", "critical"] {
            core.set_pod_reading(&format!("uid-{name}"), read(0, 1), READ_NS);
        }
        core
    }

    pub(super) fn clock() -> ManualClock {
        ManualClock::new(MonoInstant::from_millis(1_000))
    }

    /// Records of cgroup 11 (big-low's container): 600 MiB at once, then 2 MiB every ms for
    /// 50 ms (2000 MiB/s), the last at 50 ms after the fixture's reads.
    fn racing() -> Vec<StatChange> {
        const MS: u64 = 1_000_000;
        let mut records = vec![StatChange {
            cgroup_id: 11,
            stat: Stat::Anon,
            bytes: 600 * MI,
            sent_ns: READ_NS + 1,
        }];
        records.extend((1..=50).map(|t| StatChange {
            cgroup_id: 11,
            stat: Stat::Anon,
            bytes: 2 * MI,
            sent_ns: READ_NS + t * MS,
        }));
        records
    }

    #[test]
    fn predict_acts_on_a_hard_crossing_projected_within_its_lead_and_only_then() {
        const LAST_NS: u64 = READ_NS + 50_000_000;
        let ms = Duration::from_millis;
        // 700 MiB of 1 GiB: 324 MiB left against 200Mi; at 2000 MiB/s, 100 ms is 200 MiB
        // more (124 MiB left: met), 10 ms is 20 MiB (304 MiB: not met).
        struct Case {
            name: &'static str,
            config: &'static str,
            lead: Option<Duration>,
            evicts: bool,
        }
        let hard = "evictionHard:\n  allocatableMemory.available: 200Mi\n";
        let cases = [
            Case {
                name: "no lead: the kubelet's rule, not met yet",
                config: hard,
                lead: None,
                evicts: false,
            },
            Case {
                name: "the crossing is 62 ms away, within a 100 ms lead",
                config: hard,
                lead: Some(ms(100)),
                evicts: true,
            },
            Case {
                name: "the crossing is beyond a 10 ms lead",
                config: hard,
                lead: Some(ms(10)),
                evicts: false,
            },
            Case {
                name: "a soft threshold keeps its grace period: never projected",
                config: "evictionSoft:\n  allocatableMemory.available: 200Mi\n\
                         evictionSoftGracePeriod:\n  allocatableMemory.available: 30s\n",
                lead: Some(ms(100)),
                evicts: false,
            },
        ];
        for case in cases {
            let mut c = core();
            c.reconfigure(EvictionConfig::from_yaml(case.config).unwrap());
            c.set_predict_lead(case.lead);
            c.apply_stats(&racing());
            let decision = c.decide_at(&clock(), Some(LAST_NS));
            assert_eq!(decision.eviction().is_some(), case.evicts, "{}", case.name);
            let prediction = c.prediction();
            assert_eq!(prediction.is_some(), case.evicts, "{}", case.name);
            if let Some(p) = prediction {
                assert_eq!(p.signal, Signal::AllocatableMemoryAvailable);
                assert_eq!(p.available_now, 324 * MI, "{}", case.name);
                // The first record is 1 ns after the reads: the rate is a hair above.
                assert!(
                    (p.available_then - 124 * MI).abs() < 1024,
                    "{}: {p:?}",
                    case.name
                );
                assert!((p.bytes_per_s / (2000.0 * MI as f64) - 1.0).abs() < 1e-6);
            }
            // What is observed stays what is: the projection lives in the decision only.
            assert_eq!(
                c.observations()[&Signal::AllocatableMemoryAvailable].available,
                324 * MI
            );
        }
    }

    #[test]
    fn a_new_configuration_moves_the_thresholds_and_keeps_every_pod_ranked() {
        let mut c = core();
        c.apply_stats(&stats(&[(11, Stat::Anon, 500 * MI)]));
        assert!(
            c.decide(&clock()).eviction().is_none(),
            "524Mi available is above 200Mi"
        );
        assert!(!c.counts_processes(), "no pid threshold yet");
        c.reconfigure(
            EvictionConfig::from_yaml(
                "evictionHard:\n  allocatableMemory.available: 600Mi\n  pid.available: 10%\n",
            )
            .unwrap(),
        );
        let ranked = |signal| {
            c.ranking(signal)
                .iter()
                .map(|(f, u)| (f.pod.name.clone(), u.map(|u| u.memory_working_set_bytes)))
                .collect::<Vec<_>>()
        };
        assert!(
            c.counts_processes(),
            "the new pid threshold wants process counts"
        );
        assert_eq!(
            c.rank_index(Signal::PidAvailable).map(RankIndex::len),
            Some(3),
            "the pid ranking holds every pod"
        );
        assert_eq!(
            ranked(Signal::AllocatableMemoryAvailable)[0],
            ("big-low".to_string(), Some(500 << 20)),
            "usage kept across the change"
        );
        let eviction = c.decide(&clock());
        let eviction = eviction
            .eviction()
            .expect("524Mi available is now below 600Mi");
        assert_eq!(eviction.pod.name, "big-low");
    }

    #[test]
    fn process_counts_are_wanted_only_with_a_pid_threshold() {
        assert!(!core().counts_processes(), "memory thresholds only");
        let config = EvictionConfig::from_yaml("evictionHard:\n  pid.available: 10%\n").unwrap();
        let capacity = NodeCapacity {
            memory_bytes: 8 << 30,
            allocatable_memory_bytes: 1 << 30,
            kubepods_limit: None,
        };
        let core = AgentCore::new(config, capacity, kubepods(), EvictionState::default());
        assert!(core.counts_processes());
    }

    #[test]
    fn pod_over_its_request_goes_first_even_with_higher_priority_and_less_memory() {
        let mut c = core();
        c.apply_stats(&stats(&[(11, Stat::Anon, 550 * MI)])); // within its 600Mi request
        c.apply_stats(&stats(&[(21, Stat::Anon, 150 * MI)])); // over its 100Mi request
        c.apply_stats(&stats(&[(31, Stat::Anon, 200 * MI)])); // critical, over request
        let decision = c.decide(&clock());
        let eviction = decision
            .eviction()
            .expect("900Mi used of 1Gi leaves 124Mi < 200Mi");
        assert_eq!(eviction.pod.name, "over-high");
        assert_eq!(eviction.grace_period_seconds, 1);
    }

    /// A core that just decided on `over-high`, `big-low` next in line.
    fn decided_on_over_high() -> (AgentCore, ManualClock) {
        let mut c = core();
        c.apply_stats(&stats(&[(11, Stat::Anon, 550 * MI)]));
        c.apply_stats(&stats(&[(21, Stat::Anon, 300 * MI)]));
        let clock = clock();
        let first = c.decide(&clock).eviction().map(|e| e.pod.name.clone());
        assert_eq!(first.as_deref(), Some("over-high"));
        (c, clock)
    }

    #[test]
    fn a_refused_eviction_moves_on_to_the_next_candidate_at_once() {
        let (mut c, clock) = decided_on_over_high();
        c.eviction_refused("uid-over-high", clock.now());
        assert_eq!(c.actionable("uid-over-high"), Err(NotActionable::Refused));
        assert_eq!(
            c.decide(&clock).eviction().map(|e| e.pod.name.clone()),
            Some("big-low".into()),
            "neither the cleanup wait nor the interval holds the next candidate back"
        );
        // big-low goes; the refused pod keeps its place and is tried again after an interval.
        c.set_pod_reading("uid-big-low", PodReading::Gone, READ_NS + 10);
        c.eviction_failed("uid-big-low");
        clock.advance(Duration::from_secs(10));
        assert_eq!(
            c.decide(&clock).eviction().map(|e| e.pod.name.clone()),
            Some("over-high".into())
        );
    }

    #[test]
    fn a_decision_taken_back_is_decided_again_at_once_on_the_same_pod() {
        let (mut c, clock) = decided_on_over_high();
        c.take_back("uid-over-high");
        assert!(c.state().awaiting_cleanup.is_none());
        assert_eq!(
            c.decide(&clock).eviction().map(|e| e.pod.name.clone()),
            Some("over-high".into()),
            "neither held out nor held back by the interval"
        );
        assert!(
            c.decide(&clock).eviction().is_none(),
            "a decision not taken back waits for its pod"
        );
    }

    #[test]
    fn a_pod_without_a_cgroup_is_passed_over_for_the_next_candidate() {
        let mut c = core();
        c.set_pods(vec![
            (facts("big-low", 0, 600, false), cgroup(10, "big-low")),
            (facts("stale", 0, 600, false), None),
        ]);
        c.apply_stats(&stats(&[(11, Stat::Anon, 900 * MI)]));
        assert_eq!(c.actionable("uid-stale"), Err(NotActionable::NoCgroup));
        assert_eq!(
            c.decide(&clock()).eviction().map(|e| e.pod.name.clone()),
            Some("big-low".into()),
            "the stale manifest ranks first but has nothing to reclaim"
        );
    }

    #[test]
    fn an_excluded_pod_is_never_chosen() {
        let mut c = core();
        c.apply_stats(&stats(&[(21, Stat::Anon, 900 * MI)]));
        c.exclude("uid-over-high");
        assert_eq!(c.actionable("uid-over-high"), Err(NotActionable::Excluded));
        assert_eq!(
            c.decide(&clock()).eviction().map(|e| e.pod.name.clone()),
            Some("big-low".into())
        );
    }

    #[test]
    fn critical_pods_are_never_chosen() {
        let mut c = core();
        c.set_pods(vec![(
            facts("critical", 2_000_000_000, 10, true),
            cgroup(30, "critical"),
        )]);
        c.apply_stats(&stats(&[(31, Stat::Anon, 1000 * MI)]));
        assert!(matches!(
            c.decide(&clock()).action,
            Action::Idle(Idle::NoEvictablePod(_))
        ));
    }

    #[test]
    fn rankings_are_kept_only_for_observed_signals() {
        let config = EvictionConfig::from_yaml(
            "evictionHard:\n  memory.available: 100Mi\n  nodefs.available: 10%\n  \
             imagefs.available: 15%\n  nodefs.inodesFree: 5%\n",
        )
        .unwrap();
        let c = AgentCore::new(
            config,
            NodeCapacity::default(),
            kubepods(),
            EvictionState::default(),
        );
        assert!(c.rank_index(Signal::MemoryAvailable).is_some());
        for signal in [
            Signal::NodeFsAvailable,
            Signal::ImageFsAvailable,
            Signal::NodeFsInodesFree,
        ] {
            assert!(c.rank_index(signal).is_none(), "{signal:?}");
        }
        assert_eq!(
            c.unobserved_signals(),
            [
                Signal::NodeFsAvailable,
                Signal::NodeFsInodesFree,
                Signal::ImageFsAvailable
            ]
        );
    }
}
