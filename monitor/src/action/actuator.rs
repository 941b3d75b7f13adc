//! Carrying out an eviction, and telling the decision state how it ended.
//!
//! Four actuators: none in dry-run, a kill of the pod's cgroup on this node, an Eviction
//! through the Kubernetes API, or with `--kube` on hard thresholds both in turn
//! ([`super::local_first`]). Each step runs in the background and reports back as an
//! [`ActionDone`], which the actuator's [`Actuator::finished`] turns into what the decision
//! state hears and which step runs next ([`crate::engine::action_path`]), so a refused or failed
//! action reaches the decision state instead of being waited out: the decision step then
//! moves on instead of waiting for a pod that is not going.
use std::{pin::Pin, sync::Arc, time::Duration};

use tokio::sync::Notify;

use crate::{
    action::{
        EvictError, KillOutcome, KillReport, KillTimings, KubeEvictor, StuckProcess,
        kill_cgroup_tree,
        kube_event::{EventReason, EventRecorder},
    },
    cgroupfs::MemoryHierarchy,
    engine::action_path::{ActionPath, Route, StepEnd},
    engine::pod_facts::PodRef,
};

/// How long force is repeated after a pod's grace period before its leftovers are reported:
/// SIGKILL and `process_mrelease` end a process that can take them within milliseconds, so
/// one still there after this is frozen or asleep in the kernel, and the node is better
/// served by the next pod than by waiting out the cleanup timeout.
pub(crate) const FORCE_FOR: Duration = Duration::from_secs(5);

/// One eviction to carry out.
#[derive(Clone, Debug)]
pub(crate) struct ActionRequest {
    pub pod: PodRef,
    /// The pod's cgroup, relative to the hierarchy root, when it has one.
    pub cgroup: Option<String>,
    /// Time between SIGTERM and force: the whole grace period, or what is left of it when an
    /// interrupted eviction is resumed after a restart.
    pub grace: Duration,
    /// The decision's grace period in seconds, for the API.
    pub grace_period_seconds: i64,
    /// Working set before the action, to tell what it freed.
    pub working_set_before: Option<u64>,
    /// The decision's message in the kubelet's words, for the pod's Event.
    pub message: String,
    /// Decided on a hard threshold (with `--kube`, the pod is stopped on the node first).
    pub hard: bool,
    /// The decision's span (the agent's decision log): the action runs inside it, and it
    /// closes once the [`ActionDone`] has been taken back.
    pub span: tracing::Span,
    /// Notified when the node can no longer afford the rest of the grace period: a cgroup
    /// kill forces at once.
    pub force_now: Arc<Notify>,
    /// How long a cgroup kill waits for its processes to be reaped (see
    /// [`KillTimings::reap_wait`]).
    pub reap_wait: Duration,
    /// Whether a cgroup kill sends SIGTERM (see [`KillTimings::terminate`]).
    pub terminate: bool,
}

/// How an action ended.
#[derive(Debug)]
pub(crate) enum ActionOutcome {
    /// The pod's cgroup subtree was emptied (or force failed to empty it, see the report).
    Killed(KillReport),
    /// The API server accepted the Eviction; the pod leaving the watch ends the wait.
    Accepted,
    /// The pod was already gone.
    Gone,
    /// A PodDisruptionBudget allows no disruption now (429); nothing was freed.
    Refused(String),
    /// The action could not be carried out; the reason is in the message.
    Failed(String),
    /// The API server did not answer in time; the reason is in the message.
    TimedOut(String),
}

impl ActionOutcome {
    /// Whether the pod is known to be stopped (or gone) on this node now.
    pub(crate) fn pod_stopped(&self) -> bool {
        match self {
            ActionOutcome::Killed(report) => report.outcome == KillOutcome::Emptied,
            ActionOutcome::Gone => true,
            ActionOutcome::Accepted
            | ActionOutcome::Refused(_)
            | ActionOutcome::Failed(_)
            | ActionOutcome::TimedOut(_) => false,
        }
    }

    /// The end of a step as the action's route sees it.
    pub(crate) fn step_end(&self) -> StepEnd {
        match self {
            ActionOutcome::Killed(_) if self.pod_stopped() => StepEnd::Stopped,
            ActionOutcome::Killed(_) | ActionOutcome::Failed(_) => StepEnd::Failed,
            ActionOutcome::Accepted => StepEnd::Accepted,
            ActionOutcome::Gone => StepEnd::Gone,
            ActionOutcome::Refused(_) => StepEnd::Refused,
            ActionOutcome::TimedOut(_) => StepEnd::TimedOut,
        }
    }

    /// In words, for the list of recent decisions.
    pub(crate) fn describe(&self) -> String {
        match self {
            ActionOutcome::Killed(report) => format!(
                "{} after {:.1}s ({} processes signalled{})",
                match &report.outcome {
                    KillOutcome::Emptied => "stopped".to_string(),
                    KillOutcome::TimedOut { remaining } => format!(
                        "processes survived force ({})",
                        stuck_causes(remaining).join(", ")
                    ),
                },
                report.elapsed.as_secs_f64(),
                report.terminated,
                if report.forced { ", forced" } else { "" }
            ),
            ActionOutcome::Accepted => "eviction accepted by the API server".into(),
            ActionOutcome::Gone => "already gone".into(),
            ActionOutcome::Refused(reason) => format!("refused: {reason}"),
            ActionOutcome::Failed(reason) => format!("failed: {reason}"),
            ActionOutcome::TimedOut(reason) => format!("timed out: {reason}"),
        }
    }
}

/// The distinct causes of processes that outlived force, as the metric labels them.
pub(crate) fn stuck_causes(remaining: &[StuckProcess]) -> Vec<&'static str> {
    let mut causes: Vec<&'static str> = remaining.iter().map(|p| p.cause.label()).collect();
    causes.sort_unstable();
    causes.dedup();
    causes
}

/// A finished step of an action.
#[derive(Debug)]
pub(crate) struct ActionDone {
    pub request: ActionRequest,
    pub outcome: ActionOutcome,
    /// The action's route and the step that finished.
    pub path: ActionPath,
}

/// What follows a finished step (see [`Actuator::finished`]).
#[derive(Default)]
pub(crate) struct AfterStep {
    /// The report for the decision state, when this step decides what the node got.
    pub decided: Option<ActionDone>,
    /// The next step of the same action.
    pub next: Option<ActionTask>,
    /// The action ended after its pod was stopped on the node: what the API made of it.
    pub recorded: Option<Recorded>,
}

/// How the API took an eviction whose pod the agent had already stopped.
#[derive(Debug)]
pub(crate) struct Recorded {
    pub pod: PodRef,
    /// The path and the API's answer in words, for the recent decisions.
    pub text: String,
    /// The API did not record it (refused, failed, timed out): counted as a failed action.
    pub failed: bool,
}

/// The work of one action, to be run by the agent's task set.
pub(crate) type ActionTask = Pin<Box<dyn Future<Output = ActionDone> + Send>>;

/// Something that carries out evictions.
pub(crate) trait Actuator {
    /// The task that carries out `request`'s first step; `None` when nothing is to be done
    /// (dry-run).
    fn start(&self, request: ActionRequest) -> Option<ActionTask>;

    /// The route an eviction on a hard (or soft) threshold takes; `None` in dry-run.
    fn route(&self, hard: bool) -> Option<Route>;

    /// Takes a finished step: a one-step route hands it to the decision state as it is.
    fn finished(&self, done: ActionDone) -> AfterStep {
        AfterStep {
            decided: Some(done),
            ..AfterStep::default()
        }
    }
}

/// `--dry-run`: decisions are reported, nothing is signalled; with `--dry-run-events` each
/// is recorded as an `EvictionDryRun` Event on the pod (the same decision again counted on
/// one Event, as the kubelet's recorder does).
pub(crate) struct DryRun {
    pub events: Option<EventRecorder>,
}

impl Actuator for DryRun {
    fn start(&self, request: ActionRequest) -> Option<ActionTask> {
        if let Some(events) = &self.events {
            events.record(&request.pod, EventReason::EvictionDryRun, &request.message);
        }
        None
    }

    fn route(&self, _hard: bool) -> Option<Route> {
        None
    }
}

/// Kills the pod's cgroup subtree: SIGTERM, its grace period, then force.
pub(crate) struct CgroupKiller {
    pub hierarchy: MemoryHierarchy,
}

impl Actuator for CgroupKiller {
    fn start(&self, request: ActionRequest) -> Option<ActionTask> {
        let hierarchy = self.hierarchy.clone();
        Some(Box::pin(async move {
            let outcome = match &request.cgroup {
                None => ActionOutcome::Gone,
                Some(rel) => {
                    let timings = KillTimings {
                        grace: request.grace,
                        force_for: FORCE_FOR,
                        reap_wait: request.reap_wait,
                        terminate: request.terminate,
                    };
                    match kill_cgroup_tree(&hierarchy, rel, timings, &request.force_now).await {
                        Ok(report) => ActionOutcome::Killed(report),
                        Err(crate::action::KillError::NotFound(_)) => ActionOutcome::Gone,
                        Err(error) => ActionOutcome::Failed(error.to_string()),
                    }
                }
            };
            ActionDone {
                request,
                outcome,
                path: ActionPath::new(Route::Local),
            }
        }))
    }

    fn route(&self, _hard: bool) -> Option<Route> {
        Some(Route::Local)
    }
}

/// `--kube`: a policy/v1 Eviction (or a deletion, see [`KubeEvictor::deleting`]); the
/// kubelet stops the pod. Once the API server accepts, an `Evicted` Event is recorded on the
/// pod; a refused eviction records none.
pub(crate) struct KubeApi {
    pub evictor: KubeEvictor,
    pub events: EventRecorder,
}

impl Actuator for KubeApi {
    fn start(&self, request: ActionRequest) -> Option<ActionTask> {
        let evictor = self.evictor.clone();
        let events = self.events.clone();
        Some(Box::pin(async move {
            let outcome = match evictor
                .evict(&request.pod, request.grace_period_seconds)
                .await
            {
                Ok(()) => {
                    events.record(&request.pod, EventReason::Evicted, &request.message);
                    ActionOutcome::Accepted
                }
                Err(EvictError::NotFound { .. }) => ActionOutcome::Gone,
                Err(error @ EvictError::DisruptionBudget { .. }) => {
                    ActionOutcome::Refused(error.to_string())
                }
                Err(error) => ActionOutcome::Failed(error.to_string()),
            };
            ActionDone {
                request,
                outcome,
                path: ActionPath::new(Route::Api),
            }
        }))
    }

    fn route(&self, _hard: bool) -> Option<Route> {
        Some(Route::Api)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroupfs::CgroupVersion;

    fn request(cgroup: Option<&str>) -> ActionRequest {
        ActionRequest {
            pod: PodRef {
                namespace: "default".into(),
                name: "hog".into(),
                uid: "u1".into(),
            },
            cgroup: cgroup.map(str::to_owned),
            grace: Duration::ZERO,
            grace_period_seconds: 1,
            working_set_before: Some(1),
            message: String::new(),
            hard: true,
            span: tracing::Span::none(),
            force_now: Arc::default(),
            reap_wait: Duration::ZERO,
            terminate: true,
        }
    }

    #[tokio::test]
    async fn kills_report_back_a_vanished_cgroup_as_gone_and_a_refusal_as_failed() {
        let tmp = tempfile::tempdir().unwrap();
        let killer = CgroupKiller {
            hierarchy: MemoryHierarchy {
                version: CgroupVersion::V2,
                mount: tmp.path().into(),
                hierarchy_id: 0,
            },
        };
        let cases = [
            ("no cgroup", None, true),
            ("cgroup vanished", Some("/kubepods/podgone"), true),
            ("the root is refused", Some("/"), false),
        ];
        for (name, cgroup, stopped) in cases {
            let done = killer.start(request(cgroup)).expect("a task").await;
            assert_eq!(done.outcome.pod_stopped(), stopped, "{name}: {done:?}");
            assert_eq!(done.request.pod.name, "hog", "{name}");
        }
        assert!(DryRun { events: None }.start(request(None)).is_none());
    }
}
