//! Builds what the agent publishes after each evaluation (see [`crate::metrics::snapshot`]):
//! the signals against their thresholds, the head of each ranking explained, and the last
//! decisions with what came of them, kept in the loop's [`Visibility`]. Reads the core;
//! changes nothing in it.
use std::collections::VecDeque;

use crate::engine::eviction_machine::AgentCore;
use crate::node::status::NodeStatusPublisher;
use crate::{
    engine::{
        decision_repeats::DecisionRepeats,
        eviction_order::{DiskMeasure, RankPolicy},
        quantity::Quantity,
        rank_report::explained_head,
    },
    metrics::{
        Metrics,
        snapshot::{
            DECISIONS_KEPT, DecisionView, Publisher, RANKING_HEAD, RankedEntry, RankingView,
            SignalView, ThresholdView,
        },
    },
};

/// Each observed signal with its configured thresholds, resolved and marked met or not.
pub(crate) fn signals(core: &AgentCore) -> Vec<SignalView> {
    core.observations()
        .into_iter()
        .map(|(signal, observed)| SignalView {
            signal,
            available: observed.available,
            capacity: observed.capacity,
            thresholds: core
                .config()
                .thresholds
                .iter()
                .filter(|t| t.signal == signal)
                .map(|t| ThresholdView {
                    kind: t.kind(),
                    value: t.value.resolve(observed.capacity).ceil_units(),
                    met: core
                        .state()
                        .thresholds_first_observed
                        .iter()
                        .any(|o| o.threshold == t.id()),
                    grace_period_seconds: t.grace_period.as_secs(),
                })
                .collect(),
        })
        .collect()
}

/// The first [`RANKING_HEAD`] pods of each observed signal's ranking, each with why.
pub(crate) fn rankings(core: &AgentCore) -> Vec<RankingView> {
    core.observations()
        .into_keys()
        .filter_map(|signal| {
            let index = core.rank_index(signal)?;
            let policy = index.policy();
            let counts = matches!(
                policy,
                RankPolicy::Pid | RankPolicy::Disk(_, DiskMeasure::Inodes)
            );
            let amount = |q: Quantity| {
                if counts {
                    q.ceil_units().to_string()
                } else {
                    q.to_string()
                }
            };
            let head = explained_head(index, RANKING_HEAD)
                .into_iter()
                .map(|pod| RankedEntry {
                    why: pod.why(policy, &amount),
                    pod,
                })
                .collect();
            Some(RankingView {
                signal,
                pods_total: index.len(),
                head,
            })
        })
        .collect()
}

/// The last [`DECISIONS_KEPT`] decisions, oldest first.
#[derive(Debug, Default)]
pub(crate) struct RecentDecisions(VecDeque<DecisionView>);

impl RecentDecisions {
    /// Adds a decision; a dry run's repeat of the newest one takes its place, so the list
    /// shows what was decided, not the same pod twenty times.
    pub(crate) fn push(&mut self, decision: DecisionView) {
        if let Some(newest) = self.0.back_mut()
            && decision.report.repeat > 1
            && newest.report.uid == decision.report.uid
            && newest.report.signal == decision.report.signal
        {
            *newest = decision;
            return;
        }
        if self.0.len() == DECISIONS_KEPT {
            self.0.pop_front();
        }
        self.0.push_back(decision);
    }

    /// Records what came of the newest decision on pod `uid` that has no outcome yet.
    pub(crate) fn settle(&mut self, uid: &str, outcome: String) {
        if let Some(decision) = self
            .0
            .iter_mut()
            .rev()
            .find(|d| d.report.uid == uid && d.outcome.is_none())
        {
            decision.outcome = Some(outcome);
        }
    }

    /// Adds to the outcome of the pod's latest decision what came after it (the API's answer
    /// to an eviction whose pod was already stopped).
    pub(crate) fn amend(&mut self, uid: &str, more: &str) {
        if let Some(decision) = self.0.iter_mut().rev().find(|d| d.report.uid == uid) {
            let outcome = decision.outcome.get_or_insert_default();
            if !outcome.is_empty() {
                outcome.push_str("; ");
            }
            outcome.push_str(more);
        }
    }

    pub(crate) fn to_vec(&self) -> Vec<DecisionView> {
        self.0.iter().cloned().collect()
    }
}

/// What readers of the agent see, owned by the loop.
pub(super) struct Visibility {
    /// Readers get a copy in each published snapshot.
    pub(super) metrics: Metrics,
    pub(super) publisher: Publisher,
    pub(super) decisions: RecentDecisions,
    /// A dry run's decisions repeated at each interval: which to say.
    pub(super) repeats: DecisionRepeats,
    /// With --kube: the agent's own node conditions, published on the Node.
    pub(super) node_status: Option<NodeStatusPublisher>,
}

impl Visibility {
    pub(super) fn new(publisher: Publisher, node_status: Option<NodeStatusPublisher>) -> Self {
        Self {
            metrics: Metrics::default(),
            publisher,
            decisions: RecentDecisions::default(),
            repeats: DecisionRepeats::default(),
            node_status,
        }
    }
}
