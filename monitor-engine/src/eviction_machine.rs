//! The agent's pure state machine: pods, their cgroups, working sets kept current from kernel
//! events, the incremental rankings, and the decision step. Everything here takes plain data
//! (and a clock), so the whole pipeline from event to decision is tested without root.
use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    time::Duration,
};

use super::{
    pod_table::{PodRow, PodTable},
    refusals::Refusals,
    working_set::{Estimate, Membership, StatChange, UsageTracker},
};
use crate::{
    decide::{Decision, EvictionState, decide_among},
    eviction_config::EvictionConfig,
    eviction_order::{FsLayout, RankPolicy},
    headroom::{memory_headroom, pid_headroom},
    ids::{CgroupRel, PodId, PodUid},
    instant::{Clock, MonoInstant},
    kubelet_summary::PodUsage,
    memory_signals::{allocatable_memory_available, memory_available},
    oom_projection::{GrowthWindow, OomDomain, OomPoints, Projection},
    pod_facts::{PodFacts, PodRef},
    pod_table::PodCgroup,
    rank_index::{RankIndex, RankIndexSet},
    signal::Signal,
    threshold::{SignalObservation, ThresholdKind},
};

/// The signals the agent computes (see [`AgentCore::observations`]); a threshold on any
/// other can never be met here, so no ranking is kept for it.
pub const OBSERVED_SIGNALS: [Signal; 3] = [
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

/// Why a ranked pod cannot be chosen now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotActionable {
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

/// How the pod set changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodChanges {
    pub added: Vec<String>,
    pub removed: Vec<String>,
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

    /// Replaces the pod set: new pods are added (without stats until read), vanished ones
    /// removed from the rankings, changed specs re-ranked.
    pub fn set_pods(&mut self, pods: Vec<(PodFacts, Option<PodCgroup>)>) -> PodChanges {
        let mut changes = PodChanges::default();
        let incoming: HashMap<PodUid, (PodFacts, Option<PodCgroup>)> = pods
            .into_iter()
            .map(|(f, c)| (f.pod.uid.as_str().into(), (f, c)))
            .collect();
        let gone: Vec<String> = self
            .pods
            .rows()
            .filter(|row| row.listed)
            .map(|row| &row.facts.pod.uid)
            .filter(|uid| !incoming.contains_key(uid.as_str()))
            .cloned()
            .collect();
        for uid in gone {
            if self.in_flight(&uid) {
                // Its processes may still hold their memory: the row stays, out of the
                // rankings, until its cgroup is empty (see `eviction_over`).
                let row = self.pods.by_uid_mut(&uid).expect("listed uid");
                row.listed = false;
                self.rankings.remove(&uid);
                self.unlisted.insert(uid.clone());
            } else {
                self.remove_pod(&uid);
            }
            changes.removed.push(uid);
        }
        for (uid, (facts, cgroup)) in incoming {
            let id = if let Some(id) = self.pods.id(uid.as_str()) {
                let row = self.pods.get_mut(id).expect("listed id");
                let relisted = !row.listed;
                if relisted {
                    // Listed again with the same uid while its eviction is in flight: the
                    // same pod, still being stopped, not a new candidate.
                    row.listed = true;
                    self.unlisted.remove(uid.as_str());
                    changes.added.push(uid.to_string());
                    if row.ranked() {
                        self.rankings.upsert_pod_shared(&row.facts);
                    }
                }
                let row = self.pods.get(id).expect("listed id");
                if *row.facts == facts && row.cgroup == cgroup {
                    if relisted {
                        self.rerank(id);
                    }
                    continue;
                }
                if row.cgroup != cgroup {
                    let row = self.pods.get_mut(id).expect("listed id");
                    if cgroup.is_none() {
                        row.estimate = None;
                    }
                    row.read_failed = false;
                    self.pods.set_cgroup(id, cgroup);
                }
                let row = self.pods.get_mut(id).expect("listed id");
                if *row.facts != facts {
                    row.facts = facts.into();
                    if row.ranked() {
                        self.rankings.upsert_pod_shared(&row.facts);
                    }
                }
                id
            } else {
                changes.added.push(uid.to_string());
                let row = PodRow::new(facts, cgroup);
                self.rankings.upsert_pod_shared(&row.facts);
                self.pods.insert(row)
            };
            self.rerank(id);
        }
        changes.added.sort();
        changes.removed.sort();
        changes
    }

    fn remove_pod(&mut self, uid: &str) {
        if let Some(id) = self.pods.id(uid) {
            self.pods.remove(id);
        }
        self.rankings.remove(uid);
        self.refusals.forget(uid);
        self.unlisted.remove(uid);
    }

    /// Whether the eviction of `uid` is in flight: it is the pod the decision step waits
    /// for, or this agent stopped it and has not yet found its cgroup empty.
    fn in_flight(&self, uid: &str) -> bool {
        self.state
            .awaiting_cleanup
            .as_ref()
            .is_some_and(|pending| pending.pod.uid == uid)
            || self
                .pods
                .by_uid(uid)
                .is_some_and(|row| row.evicted && !row.stopped)
    }

    /// The pods that left the pod set while their eviction was in flight, with their
    /// cgroups (`None`: gone), to find out when their processes are gone.
    pub fn unlisted_in_flight(&self) -> Vec<(PodRef, Option<CgroupRel>)> {
        self.unlisted
            .iter()
            .filter_map(|uid| self.pods.by_uid(uid))
            .map(|row| {
                let rel = row.cgroup.as_ref().map(|c| c.rel.clone());
                (row.facts.pod.clone(), rel)
            })
            .collect()
    }

    /// The eviction state the checkpoint keeps: the last eviction and the one in flight.
    pub fn state(&self) -> &EvictionState {
        &self.state
    }

    /// The pending eviction was decided in a dry run: nothing was signalled, so there is no
    /// grace period to wait out, only the cleanup timeout, as for a pod that does not go.
    pub fn nothing_signalled(&mut self) {
        if let Some(pending) = &mut self.state.awaiting_cleanup {
            pending.grace_period_seconds = 0;
        }
    }

    /// The eviction of `uid` failed, or its processes outlived force: the wait for its
    /// cleanup ends, so the next decision is not held back by it, while the pod stays a
    /// candidate (it was not stopped).
    pub fn eviction_failed(&mut self, uid: &str) {
        self.state.pod_cleaned_up(uid);
    }

    /// The cgroup of `uid` holds no process (or is gone): its eviction is over. The wait for
    /// its cleanup ends, and a pod no longer listed is forgotten; one still listed stays out
    /// of the rankings as stopped.
    pub fn eviction_over(&mut self, uid: &str) {
        self.state.pod_cleaned_up(uid);
        self.mark_stopped(uid);
        if self.pods.by_uid(uid).is_some_and(|row| !row.listed) {
            self.remove_pod(uid);
        }
    }

    /// Forgets unlisted pods whose eviction is no longer in flight (its cleanup wait timed
    /// out and nothing of this agent is stopping it).
    fn forget_settled_unlisted(&mut self) {
        let settled: Vec<String> = self
            .unlisted
            .iter()
            .filter(|uid| !self.in_flight(uid))
            .cloned()
            .collect();
        for uid in settled {
            self.remove_pod(&uid);
        }
    }

    /// Marks a pod as stopped by this agent: it leaves the rankings for as long as it stays in
    /// the pod set, as an evicted pod leaves the kubelet's active pods. Its cgroup still
    /// counts towards the node and kubepods working sets.
    pub fn mark_evicted(&mut self, uid: &str) {
        if let Some(row) = self.pods.by_uid_mut(uid) {
            row.evicted = true;
            self.rankings.remove(uid);
        }
    }

    /// Records that an evicted pod's cgroup is empty: from now on, processes in it mean the
    /// pod runs again.
    pub fn mark_stopped(&mut self, uid: &str) {
        if let Some(row) = self.pods.by_uid_mut(uid)
            && row.evicted
        {
            row.stopped = true;
        }
    }

    /// Whether a kernel record of this cgroup may mean a stopped pod runs again.
    pub fn belongs_to_stopped_pod(&self, cgroup_id: u64) -> bool {
        self.usage
            .pod_of(cgroup_id)
            .and_then(|id| self.pods.get(id))
            .is_some_and(|row| row.stopped)
    }

    /// The stopped pods and their cgroups, to look for processes that came back.
    pub fn stopped_pods(&self) -> Vec<(String, CgroupRel)> {
        self.pods
            .rows()
            .filter(|row| row.stopped)
            .filter_map(|row| {
                let rel = row.cgroup.as_ref()?.rel.clone();
                Some((row.facts.pod.uid.clone(), rel))
            })
            .collect()
    }

    /// A stopped pod runs again (its containers were restarted): it ranks by the kubelet's
    /// order again instead of growing unseen.
    pub fn runs_again(&mut self, uid: &str) {
        let Some(id) = self.pods.id(uid) else {
            return;
        };
        let row = self.pods.get_mut(id).expect("listed id");
        if !row.stopped || !row.evicted {
            return;
        }
        row.stopped = false;
        row.evicted = false;
        self.rankings.upsert_pod_shared(&row.facts);
        self.rerank(id);
    }

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
            if super::working_set::working_set_delta(change.stat, change.bytes) == 0 {
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

    /// Whether the decision step may choose this pod, and if not why.
    pub fn actionable(&self, uid: &str) -> Result<(), NotActionable> {
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
    };

    const MI: i64 = 1 << 20;

    fn facts(name: &str, priority: i32, request_mi: i64, critical: bool) -> PodFacts {
        PodFacts::named(name)
            .with_uid(&format!("uid-{name}"))
            .with_priority(priority)
            .with_critical(critical)
            .with_memory_request(request_mi * MI)
    }

    fn kubepods() -> CgroupRel {
        CgroupRel::new("/kubepods").unwrap()
    }

    fn cgroup(id: u64, name: &str) -> Option<PodCgroup> {
        Some(PodCgroup {
            id,
            rel: CgroupRel::new(&format!("/kubepods/burstable/pod-{name}")).unwrap(),
        })
    }

    fn read(working_set: u64, processes: u64) -> PodReading {
        PodReading::Read {
            working_set,
            processes: Some(processes),
        }
    }

    /// When the fixture reads cgroupfs; its kernel records come later.
    const READ_NS: u64 = 1_000;

    /// Kernel records (cgroup id, stat, bytes), sent after the fixture's reads.
    fn stats(records: &[(u64, Stat, i64)]) -> Vec<StatChange> {
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
    fn core() -> AgentCore {
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

    fn clock() -> ManualClock {
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

    #[test]
    fn one_pod_per_interval_and_none_while_cleaning_up() {
        let mut c = core();
        c.apply_stats(&stats(&[(21, Stat::Anon, 900 * MI)]));
        let clock = clock();
        assert!(c.decide(&clock).eviction().is_some());
        assert!(matches!(
            c.decide(&clock).action,
            Action::Idle(Idle::WaitingForCleanup(_))
        ));
        c.set_pods(pod_set(false));
        c.apply_stats(&stats(&[(11, Stat::Anon, 900 * MI)]));
        assert!(
            matches!(
                c.decide(&clock).action,
                Action::Idle(Idle::WaitingForCleanup(_))
            ),
            "unlisted is not gone"
        );
        c.eviction_over("uid-over-high");
        assert!(matches!(
            c.decide(&clock).action,
            Action::Idle(Idle::WaitingForInterval)
        ));
        clock.advance(Duration::from_secs(10));
        assert_eq!(
            c.decide(&clock).eviction().map(|e| e.pod.name.clone()),
            Some("big-low".into())
        );
    }

    /// The shell cannot reach into the core's state: it says what happened and the core
    /// changes itself. A dry run leaves no grace period to wait out; a failed eviction ends
    /// the wait for its pod, which stays a candidate.
    #[test]
    fn the_shell_reports_and_the_core_changes_its_own_state() {
        let mut c = core();
        c.apply_stats(&stats(&[(21, Stat::Anon, 850 * MI)]));
        let clock = clock();
        let first = c.decide(&clock).eviction().map(|e| e.pod.name.clone());
        assert_eq!(first.as_deref(), Some("over-high"));
        let pending = c
            .state()
            .awaiting_cleanup
            .clone()
            .expect("an eviction in flight");
        assert!(pending.grace_period_seconds > 0, "{pending:?}");
        c.nothing_signalled();
        assert_eq!(
            c.state()
                .awaiting_cleanup
                .as_ref()
                .map(|p| p.grace_period_seconds),
            Some(0)
        );
        c.eviction_failed("uid-other");
        assert!(
            c.state().awaiting_cleanup.is_some(),
            "another pod's failure"
        );
        c.eviction_failed("uid-over-high");
        assert_eq!(c.state().awaiting_cleanup, None);
        assert_eq!(c.actionable("uid-over-high"), Ok(()));
    }

    #[test]
    fn a_refused_eviction_moves_on_to_the_next_candidate_at_once() {
        let mut c = core();
        c.apply_stats(&stats(&[(11, Stat::Anon, 550 * MI)]));
        c.apply_stats(&stats(&[(21, Stat::Anon, 300 * MI)]));
        let clock = clock();
        let first = c.decide(&clock).eviction().map(|e| e.pod.name.clone());
        assert_eq!(first.as_deref(), Some("over-high"));
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
    fn pods_without_a_cgroup_rank_as_missing_stats() {
        let mut c = core();
        c.set_pods(vec![
            (facts("big-low", 0, 600, false), cgroup(10, "big-low")),
            (facts("no-cgroup", 0, 600, false), None),
        ]);
        c.apply_stats(&stats(&[(11, Stat::Anon, 900 * MI)]));
        let order: Vec<_> = c
            .ranking(Signal::AllocatableMemoryAvailable)
            .iter()
            .map(|(f, _)| f.pod.name.clone())
            .collect();
        assert_eq!(order, ["no-cgroup", "big-low"]);
    }

    #[test]
    fn a_pod_stopped_by_the_agent_is_not_chosen_again_while_listed() {
        let mut c = core();
        c.apply_stats(&stats(&[(21, Stat::Anon, 300 * MI)]));
        c.apply_stats(&stats(&[(11, Stat::Anon, 550 * MI)]));
        let clock = clock();
        let first = c.decide(&clock).eviction().map(|e| e.pod.name.clone());
        assert_eq!(first.as_deref(), Some("over-high"));
        c.mark_evicted("uid-over-high");
        // Killed: its working set is gone, but it stays in the pod set (a manifest).
        c.set_pod_reading("uid-over-high", read(0, 0), READ_NS);
        c.eviction_over("uid-over-high");
        c.set_pods(vec![
            (facts("big-low", 0, 600, false), cgroup(10, "big-low")),
            (
                facts("over-high", 1000, 100, false),
                cgroup(20, "over-high"),
            ),
        ]);
        c.apply_stats(&stats(&[(11, Stat::Anon, 300 * MI)]));
        clock.advance(Duration::from_secs(10));
        let names = |c: &AgentCore| -> Vec<String> {
            c.ranking(Signal::AllocatableMemoryAvailable)
                .iter()
                .map(|(f, _)| f.pod.name.clone())
                .collect()
        };
        assert_eq!(names(&c), ["big-low"]);
        assert_eq!(
            c.decide(&clock).eviction().map(|e| e.pod.name.clone()),
            Some("big-low".into())
        );
        assert_eq!(
            c.pod_working_set("uid-over-high"),
            Some(0),
            "still read and counted"
        );
        // Once it leaves the pod set and comes back (a new pod with the same uid), it ranks.
        c.set_pods(vec![(
            facts("big-low", 0, 600, false),
            cgroup(10, "big-low"),
        )]);
        c.set_pods(vec![
            (facts("big-low", 0, 600, false), cgroup(10, "big-low")),
            (
                facts("over-high", 1000, 100, false),
                cgroup(20, "over-high"),
            ),
        ]);
        assert_eq!(names(&c).len(), 2);
    }

    /// The three pods of [`core`] but over-high, or all of them.
    fn pod_set(with_over_high: bool) -> Vec<(PodFacts, Option<PodCgroup>)> {
        let mut pods = vec![
            (facts("big-low", 0, 600, false), cgroup(10, "big-low")),
            (
                facts("critical", 2_000_000_000, 10, true),
                cgroup(30, "critical"),
            ),
        ];
        if with_over_high {
            pods.push((
                facts("over-high", 1000, 100, false),
                cgroup(20, "over-high"),
            ));
        }
        pods
    }

    /// over-high (300Mi over its 100Mi request) evicted by a cgroup kill, big-low next in
    /// line; the clock at the decision.
    fn over_high_being_killed() -> (AgentCore, ManualClock) {
        let mut c = core();
        c.apply_stats(&stats(&[
            (21, Stat::Anon, 300 * MI),
            (11, Stat::Anon, 550 * MI),
        ]));
        let clock = clock();
        let first = c.decide(&clock).eviction().map(|e| e.pod.name.clone());
        assert_eq!(first.as_deref(), Some("over-high"));
        c.mark_evicted("uid-over-high");
        (c, clock)
    }

    fn decided(c: &mut AgentCore, clock: &ManualClock) -> Option<String> {
        c.decide(clock).eviction().map(|e| e.pod.name.clone())
    }

    #[test]
    fn a_victim_that_leaves_the_listing_holds_the_next_eviction_until_its_cgroup_is_empty() {
        let (mut c, clock) = over_high_being_killed();
        let changes = c.set_pods(pod_set(false));
        assert_eq!(changes.removed, ["uid-over-high"]);
        clock.advance(Duration::from_secs(12));
        assert!(
            matches!(
                c.decide(&clock).action,
                Action::Idle(Idle::WaitingForCleanup(ref pod)) if pod.name == "over-high"
            ),
            "its manifest went, its processes did not"
        );
        assert_eq!(
            c.pod_working_set("uid-over-high"),
            Some(300 << 20),
            "still read"
        );
        let unlisted = c.unlisted_in_flight();
        assert_eq!(unlisted.len(), 1);
        assert_eq!(unlisted[0].0.name, "over-high");
        assert_eq!(
            unlisted[0].1,
            Some(CgroupRel::new("/kubepods/burstable/pod-over-high").unwrap()),
            "the cgroup the eviction is keyed by"
        );
        assert!(
            !c.ranking(Signal::AllocatableMemoryAvailable)
                .iter()
                .any(|(f, _)| f.pod.name == "over-high")
        );
        c.eviction_over("uid-over-high");
        assert!(c.pod("uid-over-high").is_none(), "forgotten once empty");
        assert!(c.unlisted_in_flight().is_empty());
        assert_eq!(decided(&mut c, &clock), Some("big-low".into()));
    }

    #[test]
    fn a_victim_listed_again_with_its_uid_is_not_decided_on_again() {
        let (mut c, clock) = over_high_being_killed();
        c.set_pods(pod_set(false));
        let changes = c.set_pods(pod_set(true));
        assert_eq!(changes.added, ["uid-over-high"]);
        assert!(c.unlisted_in_flight().is_empty(), "listed again");
        clock.advance(Duration::from_secs(12));
        assert!(matches!(
            c.decide(&clock).action,
            Action::Idle(Idle::WaitingForCleanup(_))
        ));
        // Its kill ends: still listed, it stays stopped and out of the rankings.
        c.eviction_over("uid-over-high");
        assert!(c.pod("uid-over-high").is_some_and(|row| row.stopped));
        assert_eq!(decided(&mut c, &clock), Some("big-low".into()));
    }

    #[test]
    fn an_unlisted_pod_whose_wait_timed_out_is_forgotten_unless_still_being_killed() {
        // A dry run: the decision names the pod, nothing stops it. After the grace period
        // and the cleanup timeout the wait ends, and the unlisted pod is forgotten.
        let mut c = core();
        c.apply_stats(&stats(&[
            (21, Stat::Anon, 300 * MI),
            (11, Stat::Anon, 550 * MI),
        ]));
        let clock = clock();
        assert_eq!(decided(&mut c, &clock), Some("over-high".into()));
        c.set_pods(pod_set(false));
        assert_eq!(c.unlisted_in_flight().len(), 1);
        clock.advance(Duration::from_secs(32));
        assert_eq!(decided(&mut c, &clock), Some("big-low".into()));
        assert!(c.pod("uid-over-high").is_none());

        // A cgroup kill whose processes survived force: the wait ends, the row stays until
        // its cgroup is empty.
        let (mut c, clock) = over_high_being_killed();
        c.set_pods(pod_set(false));
        c.eviction_failed("uid-over-high");
        clock.advance(Duration::from_secs(12));
        assert_eq!(decided(&mut c, &clock), Some("big-low".into()));
        assert_eq!(c.unlisted_in_flight().len(), 1, "still being killed");
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
    fn a_stopped_pod_that_runs_again_ranks_again() {
        let mut c = core();
        c.apply_stats(&stats(&[(21, Stat::Anon, 300 * MI)]));
        c.mark_evicted("uid-over-high");
        c.runs_again("uid-over-high");
        assert!(
            !c.ranking(Signal::AllocatableMemoryAvailable)
                .iter()
                .any(|(f, _)| f.pod.name == "over-high"),
            "still being killed: not stopped yet, so not back"
        );
        c.mark_stopped("uid-over-high");
        assert_eq!(
            c.stopped_pods(),
            [(
                "uid-over-high".to_string(),
                CgroupRel::new("/kubepods/burstable/pod-over-high").unwrap()
            )]
        );
        c.runs_again("uid-over-high");
        assert!(c.stopped_pods().is_empty());
        c.apply_stats(&stats(&[(21, Stat::Anon, 600 * MI)]));
        assert_eq!(
            c.decide(&clock()).eviction().map(|e| e.pod.name.clone()),
            Some("over-high".into()),
            "back over its request, it is the victim again"
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
