//! The decision step: observations, thresholds, rankings and remembered state in; node
//! conditions and at most one eviction out. It follows the kubelet's `synchronize`:
//!
//! 1. thresholds met now (`available < value`), plus thresholds that acted last time and
//!    have not yet reclaimed their minimum (`available < value + minReclaim`);
//! 2. each met threshold remembers when it was first met; a node condition is set while any
//!    of its thresholds was met within `evictionPressureTransitionPeriod`;
//! 3. thresholds whose grace period has passed (immediately for hard ones) may act;
//! 4. memory signals act before the others; hard before soft for one signal;
//! 5. the ranked pods for that signal are walked in order, critical pods skipped, and the
//!    first evictable one is evicted with a 1 s grace period (hard) or
//!    `min(evictionMaxPodGracePeriod, terminationGracePeriodSeconds)` (soft).
//!
//! Two gates model what the kubelet gets from its loop shape: no eviction within
//! `monitor.evictionInterval` of the previous one, and none while the previous pod is still
//! being stopped and cleaned up: for at most its grace period plus `monitor.podCleanupTimeout`,
//! as the kubelet first kills the pod with its grace period and then waits up to
//! `podCleanupTimeout` for its cleanup. The kubelet's check that a signal's stats were
//! refreshed since the last round is left to the caller, which should only pass fresh
//! observations.
//!
//! The caller may also rule pods out of this decision ([`decide_among`]): pods the node
//! cannot act on (no cgroup, unreadable stats, the agent's own pod). They keep their place in
//! the ranking; the walk passes over them to the next candidate.
use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::eviction_config::EvictionConfig;
use super::eviction_order::RankPolicy;
use super::instant::{Clock, MonoInstant};
use super::kubelet_summary::PodUsage;
use super::pod_facts::{PodFacts, PodRef};
use super::quantity::Quantity;
use super::rank_index::RankIndexSet;
use super::signal::{NodeCondition, Signal};
use super::threshold::{SignalObservation, Threshold, ThresholdId, ThresholdKind};

/// Grace period for evictions on hard thresholds (the kubelet's
/// `immediateEvictionGracePeriodSeconds`).
pub(crate) const HARD_EVICTION_GRACE_PERIOD_SECONDS: i64 = 1;

/// Everything the decision step remembers between calls. Plain data, checkpointed by the
/// agent so a restart does not forget a soft threshold's timer or a pending cleanup.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvictionState {
    /// When each currently met threshold was first met.
    pub thresholds_first_observed: Vec<ThresholdObservedAt>,
    /// Thresholds that were actionable last time; they stay met until their minimum
    /// reclaim is satisfied.
    pub thresholds_acting: Vec<ThresholdId>,
    /// When each node condition's thresholds were last met (kept for the transition period).
    pub conditions_last_observed: Vec<ConditionObservedAt>,
    /// When the last eviction was decided.
    pub last_eviction: Option<MonoInstant>,
    /// The last evicted pod, until it is reported gone or the cleanup timeout passes.
    pub awaiting_cleanup: Option<PendingCleanup>,
}

/// A threshold and the instant it was first met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThresholdObservedAt {
    /// Which threshold.
    pub threshold: ThresholdId,
    /// First met at.
    pub(crate) at: MonoInstant,
}

/// A node condition and the instant it was last observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConditionObservedAt {
    /// Which condition.
    pub(crate) condition: NodeCondition,
    /// Last observed at.
    pub(crate) at: MonoInstant,
}

/// An evicted pod not yet gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingCleanup {
    /// The pod.
    pub pod: PodRef,
    /// When its eviction was decided.
    pub evicted_at: MonoInstant,
    /// The grace period it was given; the wait for it lasts this plus the cleanup timeout.
    pub grace_period_seconds: i64,
}

impl PendingCleanup {
    /// When the wait for this pod ends, even if it is never reported gone.
    pub(crate) fn wait_ends(&self, cleanup_timeout: Duration) -> MonoInstant {
        let grace = Duration::from_secs(u64::try_from(self.grace_period_seconds).unwrap_or(0));
        self.evicted_at.saturating_add(grace + cleanup_timeout)
    }
}

impl EvictionState {
    /// Whether a threshold on memory (`memory.available`, `allocatableMemory.available`) is
    /// met now.
    pub fn memory_threshold_met(&self) -> bool {
        self.thresholds_first_observed
            .iter()
            .any(|met| met.threshold.signal.node_condition() == NodeCondition::MemoryPressure)
    }

    /// When the wait the last eviction imposes on the next one ends: the eviction interval
    /// over, and the wait for its pod's cleanup too while that pod is not reported gone.
    /// `None` when no eviction was decided.
    pub(crate) fn wait_ends(
        &self,
        eviction_interval: Duration,
        cleanup_timeout: Duration,
    ) -> Option<MonoInstant> {
        let interval_ends = self
            .last_eviction
            .map(|last| last.saturating_add(eviction_interval));
        let cleanup_ends = self
            .awaiting_cleanup
            .as_ref()
            .map(|pending| pending.wait_ends(cleanup_timeout));
        interval_ends.max(cleanup_ends)
    }

    /// Records that a pod is gone (its cgroup removed, or the API reports it deleted), which
    /// lifts the cleanup gate if it was the pod being waited for.
    pub(crate) fn pod_cleaned_up(&mut self, uid: &str) {
        if self
            .awaiting_cleanup
            .as_ref()
            .is_some_and(|pending| pending.pod.uid == uid)
        {
            self.awaiting_cleanup = None;
        }
    }
}

/// The outcome of one decision step.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Node conditions to report now.
    pub node_conditions: Vec<NodeCondition>,
    /// What to do.
    pub action: Action,
}

impl Decision {
    /// The eviction, if one was decided.
    pub fn eviction(&self) -> Option<&Eviction> {
        match &self.action {
            Action::Evict(eviction) => Some(eviction),
            Action::Idle(_) => None,
        }
    }
}

/// Evict one pod, or nothing (and why not).
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Evict this pod.
    Evict(Eviction),
    /// No eviction this time.
    Idle(Idle),
}

/// Why no pod is evicted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Idle {
    /// No threshold is met past its grace period.
    NoPressure,
    /// The previous eviction was less than an eviction interval ago.
    WaitingForInterval,
    /// The previously evicted pod is still being cleaned up.
    WaitingForCleanup(PodRef),
    /// Every ranked pod is critical, or none is ranked, for the signal under pressure.
    NoEvictablePod(Signal),
}

/// One eviction.
#[derive(Debug, Clone, PartialEq)]
pub struct Eviction {
    /// The pod to evict.
    pub pod: PodRef,
    /// The signal under pressure.
    pub signal: Signal,
    /// The threshold acted on.
    pub threshold: ThresholdId,
    /// What was observed for the signal.
    pub observed: SignalObservation,
    /// Termination grace period to give the pod.
    pub grace_period_seconds: i64,
    /// A message in the kubelet's words, for the pod status and events.
    pub reason: String,
}

/// Runs one decision step, choosing only among ranked pods for which `actionable` is true.
/// `observations` must hold the latest value of each signal.
pub(crate) fn decide_among(
    config: &EvictionConfig,
    observations: &BTreeMap<Signal, SignalObservation>,
    rankings: &RankIndexSet,
    state: &mut EvictionState,
    clock: &impl Clock,
    actionable: impl Fn(&PodFacts) -> bool,
) -> Decision {
    let now = clock.now();
    let met_now = |threshold: &Threshold, enforce_min_reclaim: bool| {
        observations
            .get(&threshold.signal)
            .is_some_and(|observed| threshold.is_met(*observed, enforce_min_reclaim))
    };
    let met: Vec<&Threshold> = config
        .thresholds
        .iter()
        .filter(|t| {
            met_now(t, false) || (state.thresholds_acting.contains(&t.id()) && met_now(t, true))
        })
        .collect();

    state.thresholds_first_observed = met
        .iter()
        .map(|t| {
            let previous = state
                .thresholds_first_observed
                .iter()
                .find(|o| o.threshold == t.id());
            ThresholdObservedAt {
                threshold: t.id(),
                at: previous.map_or(now, |o| o.at),
            }
        })
        .collect();

    let node_conditions = update_conditions(state, &met, now, config.pressure_transition_period);

    let mut acting: Vec<&Threshold> = met
        .into_iter()
        .filter(|t| {
            let first = state
                .thresholds_first_observed
                .iter()
                .find(|o| o.threshold == t.id());
            first.is_some_and(|o| now.saturating_since(o.at) >= t.grace_period)
        })
        .collect();
    acting.sort_by_key(|t| (t.signal, t.kind()));
    state.thresholds_acting = acting.iter().map(|t| t.id()).collect();

    let decision = |action| Decision {
        node_conditions: node_conditions.clone(),
        action,
    };
    let Some(threshold) = acting.first() else {
        return decision(Action::Idle(Idle::NoPressure));
    };
    if let Some(pending) = &state.awaiting_cleanup {
        if now < pending.wait_ends(config.monitor.pod_cleanup_timeout) {
            return decision(Action::Idle(Idle::WaitingForCleanup(pending.pod.clone())));
        }
        state.awaiting_cleanup = None;
    }
    if state
        .last_eviction
        .is_some_and(|last| now.saturating_since(last) < config.monitor.eviction_interval)
    {
        return decision(Action::Idle(Idle::WaitingForInterval));
    }
    let Some(index) = rankings.for_signal(threshold.signal) else {
        return decision(Action::Idle(Idle::NoEvictablePod(threshold.signal)));
    };
    let Some(victim) = index
        .iter()
        .find(|facts| !facts.critical && actionable(facts))
    else {
        return decision(Action::Idle(Idle::NoEvictablePod(threshold.signal)));
    };
    let observed = observations[&threshold.signal];
    let grace_period_seconds =
        grace_period_seconds(threshold, victim, config.max_pod_grace_period_seconds);
    let eviction = Eviction {
        pod: victim.pod.clone(),
        signal: threshold.signal,
        threshold: threshold.id(),
        observed,
        grace_period_seconds,
        reason: reason(
            threshold,
            observed,
            index.policy(),
            victim,
            index.usage(&victim.pod.uid),
        ),
    };
    state.last_eviction = Some(now);
    state.awaiting_cleanup = Some(PendingCleanup {
        pod: victim.pod.clone(),
        evicted_at: now,
        grace_period_seconds,
    });
    decision(Action::Evict(eviction))
}

/// Marks the conditions of met thresholds as seen now, forgets conditions not seen for a
/// transition period, and returns those still within it.
fn update_conditions(
    state: &mut EvictionState,
    met: &[&Threshold],
    now: MonoInstant,
    transition_period: Duration,
) -> Vec<NodeCondition> {
    for threshold in met {
        let condition = threshold.signal.node_condition();
        match state
            .conditions_last_observed
            .iter_mut()
            .find(|o| o.condition == condition)
        {
            Some(observed) => observed.at = now,
            None => state
                .conditions_last_observed
                .push(ConditionObservedAt { condition, at: now }),
        }
    }
    state
        .conditions_last_observed
        .retain(|o| now.saturating_since(o.at) < transition_period);
    state.conditions_last_observed.sort_by_key(|o| o.condition);
    state
        .conditions_last_observed
        .iter()
        .map(|o| o.condition)
        .collect()
}

/// 1 s for hard thresholds; for soft ones the pod's own grace period capped by
/// `evictionMaxPodGracePeriod` (the cap alone when the pod sets none).
fn grace_period_seconds(
    threshold: &Threshold,
    pod: &PodFacts,
    max_pod_grace_period_seconds: i64,
) -> i64 {
    match threshold.kind() {
        ThresholdKind::Hard => HARD_EVICTION_GRACE_PERIOD_SECONDS,
        ThresholdKind::Soft => pod
            .termination_grace_period_seconds
            .map_or(max_pod_grace_period_seconds, |own| {
                own.min(max_pod_grace_period_seconds)
            }),
    }
}

/// The kubelet's eviction message: the starved resource, the threshold and what was
/// available, and the pod's usage against its request.
fn reason(
    threshold: &Threshold,
    observed: SignalObservation,
    policy: RankPolicy,
    pod: &PodFacts,
    usage: Option<&PodUsage>,
) -> String {
    let resource = threshold.signal.resource_name();
    let level = threshold.value.resolve(observed.capacity);
    let mut message = format!(
        "The node was low on resource: {resource}. Threshold quantity: {level}, available: {}. ",
        Quantity::from_units(observed.available)
    );
    match policy.measure(pod, usage) {
        Some(measured) => message.push_str(&format!(
            "Pod {} was using {}, request is {}, priority {}.",
            pod.pod.name, measured.usage, measured.request, pod.priority
        )),
        None => message.push_str(&format!(
            "Pod {} had no usage stats, priority {}.",
            pod.pod.name, pod.priority
        )),
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::eviction_order::FsLayout;
    use crate::instant::ManualClock;

    const MI: i64 = 1 << 20;

    fn pod(
        name: &str,
        priority: i32,
        critical: bool,
        working_set_mi: u64,
        grace: Option<i64>,
    ) -> (PodFacts, PodUsage) {
        let facts = PodFacts::named(name)
            .with_namespace("ns")
            .with_priority(priority)
            .with_critical(critical)
            .with_memory_request(100 * MI)
            .with_grace_period(grace);
        (
            facts,
            PodUsage {
                memory_working_set_bytes: working_set_mi << 20,
                ..PodUsage::default()
            },
        )
    }

    #[test]
    fn the_wait_after_an_eviction_ends_with_the_later_of_interval_and_cleanup() {
        let at = MonoInstant::from_millis;
        let pending = |grace_period_seconds| PendingCleanup {
            pod: PodFacts::named("p").pod,
            evicted_at: at(10_000),
            grace_period_seconds,
        };
        let second = Duration::from_secs(1);
        let cases = [
            ("no eviction yet", None, None, None),
            (
                "interval only: the pod is gone",
                Some(at(10_000)),
                None,
                Some(at(11_000)),
            ),
            (
                "the cleanup wait outlasts the interval",
                Some(at(10_000)),
                Some(pending(30)),
                Some(at(41_000)),
            ),
            (
                "the interval outlasts a cleanup wait without grace",
                Some(at(10_000)),
                Some(pending(0)),
                Some(at(11_000)),
            ),
        ];
        for (name, last_eviction, awaiting_cleanup, expected) in cases {
            let state = EvictionState {
                last_eviction,
                awaiting_cleanup,
                ..EvictionState::default()
            };
            // Interval 1 s; cleanup timeout 1 s after the grace period.
            assert_eq!(state.wait_ends(second, second), expected, "{name}");
        }
    }

    fn rankings(pods: Vec<(PodFacts, PodUsage)>) -> RankIndexSet {
        let mut set = RankIndexSet::new(FsLayout::Shared, Signal::ALL);
        for (facts, usage) in pods {
            let uid = facts.pod.uid.clone();
            set.upsert_pod_shared(&Arc::new(facts));
            set.update_usage(&uid, Some(usage));
        }
        set
    }

    fn memory_available(mi: i64) -> BTreeMap<Signal, SignalObservation> {
        BTreeMap::from([(
            Signal::MemoryAvailable,
            SignalObservation {
                available: mi * MI,
                capacity: 8192 * MI,
            },
        )])
    }

    /// One call of a scenario: advance the clock, optionally report a pod gone, observe.
    struct Step {
        after: Duration,
        cleaned_up: Option<&'static str>,
        available_mi: i64,
        expect: Expect,
    }

    #[derive(Debug, PartialEq)]
    enum Expect {
        Evict { pod: &'static str, grace: i64 },
        Idle(Idle),
    }

    fn step(after_secs: u64, available_mi: i64, expect: Expect) -> Step {
        Step {
            after: Duration::from_secs(after_secs),
            cleaned_up: None,
            available_mi,
            expect,
        }
    }

    fn evict(pod: &'static str, grace: i64) -> Expect {
        Expect::Evict { pod, grace }
    }

    #[test]
    fn decides_like_the_kubelet() {
        let default_pods = || {
            vec![
                pod("hog", 0, false, 900, Some(45)),
                pod("calm", 0, false, 50, Some(45)),
            ]
        };
        struct Case {
            name: &'static str,
            config: &'static str,
            pods: Vec<(PodFacts, PodUsage)>,
            steps: Vec<Step>,
        }
        let cases = [
            Case {
                name: "no pressure, no eviction",
                config: "",
                pods: default_pods(),
                steps: vec![step(0, 500, Expect::Idle(Idle::NoPressure))],
            },
            Case {
                name: "hard threshold evicts the top pod at once with a 1s grace period",
                config: "",
                pods: default_pods(),
                steps: vec![step(0, 50, evict("hog", 1))],
            },
            Case {
                name: "critical pods are skipped and the next candidate taken",
                config: "",
                pods: vec![
                    pod("static", 0, true, 900, None),
                    pod("next", 0, false, 800, None),
                ],
                steps: vec![step(0, 50, evict("next", 1))],
            },
            Case {
                name: "only critical pods: nothing to evict",
                config: "",
                pods: vec![pod("static", 0, true, 900, None)],
                steps: vec![step(
                    0,
                    50,
                    Expect::Idle(Idle::NoEvictablePod(Signal::MemoryAvailable)),
                )],
            },
            Case {
                name: "one pod per interval, and none while the last one is being cleaned up",
                config: "monitor: {evictionInterval: 10s, podCleanupTimeout: 30s}",
                pods: default_pods(),
                steps: vec![
                    step(0, 50, evict("hog", 1)),
                    step(
                        5,
                        50,
                        Expect::Idle(Idle::WaitingForCleanup(pod("hog", 0, false, 0, None).0.pod)),
                    ),
                    Step {
                        cleaned_up: Some("hog"),
                        ..step(1, 50, Expect::Idle(Idle::WaitingForInterval))
                    },
                    step(4, 50, evict("hog", 1)),
                ],
            },
            Case {
                name: "the cleanup wait ends after the grace period plus the timeout",
                config: "monitor: {evictionInterval: 1s, podCleanupTimeout: 30s}",
                pods: default_pods(),
                steps: vec![
                    step(0, 50, evict("hog", 1)),
                    step(
                        30,
                        50,
                        Expect::Idle(Idle::WaitingForCleanup(pod("hog", 0, false, 0, None).0.pod)),
                    ),
                    step(1, 50, evict("hog", 1)),
                ],
            },
            Case {
                name: "a soft eviction's grace period is waited out before the cleanup timeout starts",
                config: "evictionHard: {}\nevictionSoft: {memory.available: 1Gi}\n\
                         evictionSoftGracePeriod: {memory.available: 1s}\nevictionMaxPodGracePeriod: 30\n\
                         monitor: {evictionInterval: 1s, podCleanupTimeout: 30s}",
                pods: default_pods(),
                steps: vec![
                    step(0, 500, Expect::Idle(Idle::NoPressure)),
                    step(1, 500, evict("hog", 30)),
                    step(
                        59,
                        500,
                        Expect::Idle(Idle::WaitingForCleanup(pod("hog", 0, false, 0, None).0.pod)),
                    ),
                    step(1, 500, evict("hog", 30)),
                ],
            },
            Case {
                name: "soft threshold fires only after its grace period, with the capped pod grace",
                config: "evictionHard: {}\nevictionSoft: {memory.available: 1Gi}\n\
                         evictionSoftGracePeriod: {memory.available: 1m30s}\nevictionMaxPodGracePeriod: 30",
                pods: default_pods(),
                steps: vec![
                    step(0, 500, Expect::Idle(Idle::NoPressure)),
                    step(89, 500, Expect::Idle(Idle::NoPressure)),
                    step(1, 500, evict("hog", 30)),
                ],
            },
            Case {
                name: "soft grace timer restarts when the signal recovers",
                config: "evictionHard: {}\nevictionSoft: {memory.available: 1Gi}\n\
                         evictionSoftGracePeriod: {memory.available: 1m}\nevictionMaxPodGracePeriod: 60",
                pods: default_pods(),
                steps: vec![
                    step(0, 500, Expect::Idle(Idle::NoPressure)),
                    step(50, 2000, Expect::Idle(Idle::NoPressure)),
                    step(10, 500, Expect::Idle(Idle::NoPressure)),
                    step(59, 500, Expect::Idle(Idle::NoPressure)),
                    step(1, 500, evict("hog", 45)),
                ],
            },
            Case {
                name: "min reclaim keeps the threshold met until value plus reclaim",
                config: "evictionHard: {memory.available: 100Mi}\nevictionMinimumReclaim: {memory.available: 400Mi}\n\
                         monitor: {evictionInterval: 10s, podCleanupTimeout: 0s}",
                pods: default_pods(),
                steps: vec![
                    step(0, 50, evict("hog", 1)),
                    // Above the threshold but below threshold + min reclaim: still reclaiming.
                    step(10, 300, evict("hog", 1)),
                    step(10, 500, Expect::Idle(Idle::NoPressure)),
                    // Once resolved, min reclaim no longer applies to a fresh observation.
                    step(10, 300, Expect::Idle(Idle::NoPressure)),
                ],
            },
        ];
        for case in cases {
            let config = EvictionConfig::from_yaml(case.config).expect(case.name);
            let rankings = rankings(case.pods);
            let clock = ManualClock::new(MonoInstant::from_millis(1_000_000));
            let mut state = EvictionState::default();
            for (i, step) in case.steps.into_iter().enumerate() {
                clock.advance(step.after);
                if let Some(uid) = step.cleaned_up {
                    state.pod_cleaned_up(uid);
                }
                let decision = decide_among(
                    &config,
                    &memory_available(step.available_mi),
                    &rankings,
                    &mut state,
                    &clock,
                    |_| true,
                );
                match (decision.action, &step.expect) {
                    (Action::Evict(e), Expect::Evict { pod, grace }) => assert_eq!(
                        (e.pod.name.as_str(), e.grace_period_seconds),
                        (*pod, *grace),
                        "case {:?}, step {i}",
                        case.name
                    ),
                    (Action::Idle(idle), Expect::Idle(expected)) => {
                        assert_eq!(&idle, expected, "case {:?}, step {i}", case.name);
                    }
                    (got, expected) => panic!(
                        "case {:?}, step {i}: got {got:?}, expected {expected:?}",
                        case.name
                    ),
                }
            }
        }
    }

    #[test]
    fn pods_ruled_out_keep_their_place_but_the_next_candidate_is_chosen() {
        let config = EvictionConfig::default();
        let rankings = rankings(vec![
            pod("hog", 0, false, 900, None),
            pod("calm", 0, false, 50, None),
        ]);
        let clock = ManualClock::new(MonoInstant::from_millis(0));
        type Case = (&'static str, fn(&PodFacts) -> bool, Option<&'static str>);
        let cases: [Case; 3] = [
            ("all actionable", |_| true, Some("hog")),
            (
                "the first one ruled out",
                |f| f.pod.name != "hog",
                Some("calm"),
            ),
            ("none actionable", |_| false, None),
        ];
        for (name, actionable, expect) in cases {
            let mut state = EvictionState::default();
            let decision = decide_among(
                &config,
                &memory_available(50),
                &rankings,
                &mut state,
                &clock,
                actionable,
            );
            match expect {
                Some(pod) => assert_eq!(
                    decision.eviction().map(|e| e.pod.name.as_str()),
                    Some(pod),
                    "{name}"
                ),
                None => assert_eq!(
                    decision.action,
                    Action::Idle(Idle::NoEvictablePod(Signal::MemoryAvailable)),
                    "{name}"
                ),
            }
        }
        assert_eq!(
            rankings
                .for_signal(Signal::MemoryAvailable)
                .unwrap()
                .iter()
                .next()
                .unwrap()
                .pod
                .name,
            "hog",
            "the ranking itself is unchanged"
        );
    }

    #[test]
    fn node_conditions_follow_the_transition_period() {
        let config = EvictionConfig::from_yaml(
            "evictionPressureTransitionPeriod: 5m\nmonitor: {evictionInterval: 1s, podCleanupTimeout: 0s}",
        )
        .expect("config");
        let rankings = rankings(vec![pod("hog", 0, false, 900, None)]);
        let clock = ManualClock::new(MonoInstant::from_millis(0));
        let mut state = EvictionState::default();
        struct Case {
            name: &'static str,
            after_secs: u64,
            available_mi: i64,
            conditions: &'static [NodeCondition],
        }
        let cases = [
            Case {
                name: "pressure sets the condition",
                after_secs: 0,
                available_mi: 50,
                conditions: &[NodeCondition::MemoryPressure],
            },
            Case {
                name: "still set within the transition period after recovery",
                after_secs: 299,
                available_mi: 4000,
                conditions: &[NodeCondition::MemoryPressure],
            },
            Case {
                name: "cleared once the period has passed",
                after_secs: 1,
                available_mi: 4000,
                conditions: &[],
            },
        ];
        for case in cases {
            clock.advance(Duration::from_secs(case.after_secs));
            let decision = decide_among(
                &config,
                &memory_available(case.available_mi),
                &rankings,
                &mut state,
                &clock,
                |_| true,
            );
            assert_eq!(
                decision.node_conditions, case.conditions,
                "case {:?}",
                case.name
            );
        }
    }

    #[test]
    fn eviction_carries_signal_threshold_and_reason() {
        let config = EvictionConfig::default();
        let rankings = rankings(vec![pod("hog", 7, false, 900, None)]);
        let clock = ManualClock::new(MonoInstant::from_millis(0));
        let mut state = EvictionState::default();
        let decision = decide_among(
            &config,
            &memory_available(50),
            &rankings,
            &mut state,
            &clock,
            |_| true,
        );
        let eviction = decision.eviction().expect("an eviction");
        assert_eq!(eviction.signal, Signal::MemoryAvailable);
        assert_eq!(
            eviction.threshold,
            ThresholdId {
                signal: Signal::MemoryAvailable,
                kind: ThresholdKind::Hard
            }
        );
        assert_eq!(eviction.observed.available, 50 * MI);
        assert_eq!(
            eviction.reason,
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi. \
             Pod hog was using 900Mi, request is 100Mi, priority 7."
        );
        // The remembered state survives a JSON round trip unchanged.
        let json = serde_json::to_string(&state).expect("serialize");
        assert_eq!(
            serde_json::from_str::<EvictionState>(&json).expect("deserialize"),
            state
        );
        assert_eq!(
            state.awaiting_cleanup.as_ref().map(|p| p.pod.name.as_str()),
            Some("hog")
        );
    }
}
