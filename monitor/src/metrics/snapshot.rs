//! What the agent shows its readers, and how it hands it over without sharing its state.
//!
//! The event loop owns every working set, ranking and timer alone and never waits for a
//! reader. After each evaluation it builds an immutable [`Snapshot`] and publishes it on a
//! `watch` channel: a reader clones the `Arc` of the newest one and renders from it at its
//! own pace, so a slow or stuck HTTP client holds no lock the loop needs. The loop also
//! stamps a [`Heartbeat`] (an atomic) each time it turns, which `/healthz` reads.
use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use serde::Serialize;
use tokio::sync::watch;

use super::Metrics;
use crate::{
    checkpoint::health::CheckpointHealth,
    engine::decision_report::DecisionReport,
    engine::{rank_report::RankedPod, signal::Signal, threshold::ThresholdKind},
};

/// Everything readers see, as of one evaluation.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    pub metrics: Metrics,
    pub readiness: Readiness,
    pub ranking: DebugRanking,
    /// `/debug/config`; `None` before the agent has a configuration.
    pub config: Option<DebugConfig>,
    /// `/debug/shadow`: a dry run's shadow scorecard (`None`: an acting agent).
    pub shadow: Option<crate::engine::shadow::ShadowReport>,
}

/// `/debug/config`: the configuration in force, since when, and a change refused, as JSON
/// (what `monitor config --agent` shows).
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DebugConfig {
    /// Which files are read, and why, in words.
    pub source: String,
    pub kubelet_config: Option<String>,
    pub config: Option<String>,
    /// `sha256:` and 16 hex digits of the files' bytes in order.
    pub checksum: String,
    /// When it was put in force (RFC 3339).
    pub since: String,
    /// Why the files' newest content was refused, while it is.
    pub refused: Option<String>,
    /// Changes refused since start.
    pub refusals: u64,
    pub settings: Vec<crate::engine::config_origin::Setting>,
}

/// What `/readyz` needs: each part the agent must have before its decisions mean anything.
#[derive(Debug, Clone)]
pub(crate) struct Readiness {
    /// The event source in words, once it runs.
    pub source: Option<String>,
    /// Pods known from the pod source; `Err` says why they are not (not read yet, the
    /// source failed and is being opened again).
    pub pods: Result<usize, String>,
    /// Whether checkpoint writes succeed; `None` before the first evaluation.
    pub checkpoint: Option<CheckpointHealth>,
}

impl Default for Readiness {
    fn default() -> Self {
        Self {
            source: None,
            pods: Err("the pod source has not been read yet".into()),
            checkpoint: None,
        }
    }
}

/// `/debug/ranking`: what the agent sees and would do, as JSON.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DebugRanking {
    /// Each observed signal with its thresholds.
    pub signals: Vec<SignalView>,
    /// The head of each signal's eviction ranking.
    pub rankings: Vec<RankingView>,
    /// The latest decisions, newest last (at most [`DECISIONS_KEPT`]).
    pub decisions: Vec<DecisionView>,
    /// The event source and its counters.
    pub source: SourceView,
}

/// How many pods of each ranking `/debug/ranking` lists.
pub(crate) const RANKING_HEAD: usize = 20;
/// How many decisions `/debug/ranking` keeps.
pub(crate) const DECISIONS_KEPT: usize = 20;

/// One signal as last observed.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SignalView {
    pub signal: Signal,
    /// What is left, in the signal's unit (bytes, or processes for `pid.available`).
    pub available: i64,
    /// The total percentages refer to.
    pub capacity: i64,
    pub thresholds: Vec<ThresholdView>,
}

/// One configured threshold of a signal.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ThresholdView {
    pub kind: ThresholdKind,
    /// The level, resolved against the signal's capacity.
    pub value: i64,
    /// Whether it is met now (for a soft one: its grace period may still run).
    pub met: bool,
    pub grace_period_seconds: u64,
}

/// The first pods in eviction order for a signal.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RankingView {
    pub signal: Signal,
    /// Pods in the whole ranking.
    pub pods_total: usize,
    pub head: Vec<RankedEntry>,
}

/// One pod of a ranking head: its three keys (exceeds request, priority, usage above
/// request) and, in words, why it comes after the one before.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RankedEntry {
    #[serde(flatten)]
    pub pod: RankedPod,
    pub why: String,
}

/// A decision and, once known, what came of it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DecisionView {
    #[serde(flatten)]
    pub report: DecisionReport,
    /// The decision as printed.
    pub text: String,
    /// What the action reported (`None` while it runs).
    pub outcome: Option<String>,
}

/// The event source and what it delivered.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SourceView {
    pub description: String,
    pub events_received: u64,
    pub events_lost: u64,
    pub events_undecodable: u64,
}

/// When the event loop last turned, CLOCK_MONOTONIC nanoseconds (0: not yet).
#[derive(Debug, Default)]
pub(crate) struct Heartbeat(AtomicU64);

impl Heartbeat {
    pub(crate) fn beat(&self, now_ns: u64) {
        self.0.store(now_ns, Ordering::Relaxed);
    }

    pub(crate) fn last(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The loop's side: publishes snapshots and stamps the heartbeat.
#[derive(Debug)]
pub(crate) struct Publisher {
    snapshots: watch::Sender<Arc<Snapshot>>,
    pub heartbeat: Arc<Heartbeat>,
}

impl Publisher {
    /// Replaces the snapshot readers see; never waits for them.
    pub(crate) fn publish(&self, snapshot: Snapshot) {
        self.snapshots.send_replace(Arc::new(snapshot));
    }
}

/// A reader's side, cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct AgentView {
    snapshots: watch::Receiver<Arc<Snapshot>>,
    pub heartbeat: Arc<Heartbeat>,
}

impl AgentView {
    /// The newest snapshot.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        Arc::clone(&self.snapshots.borrow())
    }
}

/// A publisher and a view of what it publishes, starting from an empty snapshot.
pub(crate) fn channel() -> (Publisher, AgentView) {
    let (snapshots, receiver) = watch::channel(Arc::new(Snapshot::default()));
    let heartbeat = Arc::new(Heartbeat::default());
    (
        Publisher {
            snapshots,
            heartbeat: Arc::clone(&heartbeat),
        },
        AgentView {
            snapshots: receiver,
            heartbeat,
        },
    )
}
