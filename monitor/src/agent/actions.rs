//! The evictions in progress: the actuator the flags chose (dry run, cgroup kill, the
//! Eviction API), the tasks of the steps that run now, the local kill whose grace period
//! runs (re-checked against the OOM projection at each decision), and the failures counted.
use std::collections::BTreeMap;

use tokio::{task::JoinSet, time::Instant};
use tracing::Instrument as _;

use crate::{
    action::actuator::{ActionDone, ActionRequest, Actuator, AfterStep},
    engine::action_path::Route,
};

/// A grace period running on this node: SIGTERM was sent, force comes at `ends`, or when
/// `force_now` is notified.
pub(super) struct RunningGrace {
    pub(super) ends: Instant,
    pub(super) force_now: std::sync::Arc<tokio::sync::Notify>,
    pub(super) span: tracing::Span,
}

pub(super) struct Actions {
    actuator: Box<dyn Actuator>,
    running: JoinSet<ActionDone>,
    failures: u64,
    /// Kills whose processes outlived force, by cause (see [`crate::action::StuckCause`]).
    stuck: BTreeMap<&'static str, u64>,
    /// The local kill whose grace period runs now.
    pub(super) grace: Option<RunningGrace>,
    /// When the last decision's wait (the eviction interval, its pod's cleanup) ends, with
    /// a threshold still met: the agent decides again then.
    pub(super) decide_again: Option<Instant>,
}

impl Actions {
    pub(super) fn new(actuator: Box<dyn Actuator>) -> Self {
        Self {
            actuator,
            running: JoinSet::new(),
            failures: 0,
            stuck: BTreeMap::new(),
            grace: None,
            decide_again: None,
        }
    }

    /// The route an eviction on a hard (or soft) threshold takes; `None` in dry-run.
    pub(super) fn route(&self, hard: bool) -> Option<Route> {
        self.actuator.route(hard)
    }

    /// Starts `request`'s first step inside `span`; false when there is nothing to do
    /// (dry-run).
    pub(super) fn start(&mut self, request: ActionRequest, span: tracing::Span) -> bool {
        match self.actuator.start(request) {
            Some(task) => {
                self.running.spawn(task.instrument(span));
                true
            }
            None => false,
        }
    }

    /// Whether a step runs now.
    pub(super) fn running(&self) -> bool {
        !self.running.is_empty()
    }

    /// The next step to finish (`None`: its task panicked, which is logged, never the
    /// loop's end); never ready while none runs.
    pub(super) async fn next_done(&mut self) -> Option<ActionDone> {
        match self.running.join_next().await {
            Some(Ok(done)) => Some(done),
            Some(Err(e)) => {
                tracing::error!("eviction task failed: {e}");
                None
            }
            None => std::future::pending().await,
        }
    }

    /// Hands a finished step to the actuator's route; its next step, if any, starts now.
    pub(super) fn finished(&mut self, done: ActionDone) -> AfterStep {
        let mut after = self.actuator.finished(done);
        if let Some(task) = after.next.take() {
            self.running.spawn(task);
        }
        after
    }

    /// Actions that failed or were refused, since start.
    pub(super) fn failures(&self) -> u64 {
        self.failures
    }

    pub(super) fn count_failure(&mut self) {
        self.failures += 1;
    }

    /// Kills whose processes outlived force, by cause, since start.
    pub(super) fn stuck(&self) -> &BTreeMap<&'static str, u64> {
        &self.stuck
    }

    pub(super) fn count_stuck(&mut self, cause: &'static str) {
        *self.stuck.entry(cause).or_default() += 1;
    }
}
