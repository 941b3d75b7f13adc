//! `--kube` with `--kube-hard-action kill` (the default): an eviction decided on a hard
//! threshold kills the pod's cgroup on this node first, then posts the Eviction so the API
//! server records it; soft thresholds go through the API alone. The steps and what each
//! report means are [`crate::engine::action_path`]'s; this actuator only runs them.
use std::time::Duration;

use super::actuator::{
    ActionDone, ActionOutcome, ActionRequest, ActionTask, Actuator, AfterStep, CgroupKiller,
    KubeApi, Recorded,
};
use crate::{
    action::hard_action::HardAction,
    engine::action_path::{ActionPath, Route, Step},
};

/// How long the API server may take to answer an Eviction that follows a kill: the pod is
/// stopped already, so a slow API server must not keep the action open.
pub(crate) const API_TIMEOUT: Duration = Duration::from_secs(10);

/// Kills on the node, then asks the API server; or asks the API server alone.
pub(crate) struct LocalFirst {
    pub killer: CgroupKiller,
    pub api: KubeApi,
    pub hard_action: HardAction,
}

impl LocalFirst {
    /// The task of `step` for `request`, reporting back on `path`.
    fn run(&self, step: Step, request: ActionRequest, path: ActionPath) -> Option<ActionTask> {
        let task = match step {
            Step::Kill => self.killer.start(request.clone())?,
            Step::Evict => self.api.start(request.clone())?,
        };
        // Only the API step after a kill is bounded: the pod is stopped, the node is safe.
        let timeout =
            (step == Step::Evict && path.route == Route::LocalFirst).then_some(API_TIMEOUT);
        Some(Box::pin(async move {
            let done = match timeout {
                None => Ok(task.await),
                Some(limit) => tokio::time::timeout(limit, task).await,
            };
            match done {
                Ok(done) => ActionDone { path, ..done },
                Err(_) => ActionDone {
                    request,
                    outcome: ActionOutcome::TimedOut(format!(
                        "the API server did not answer the Eviction within {API_TIMEOUT:?}"
                    )),
                    path,
                },
            }
        }))
    }
}

impl Actuator for LocalFirst {
    fn start(&self, request: ActionRequest) -> Option<ActionTask> {
        let route = self.route(request.hard)?;
        if route == Route::LocalFirst {
            tracing::info!("evicting {}: {}", request.pod, route.describe());
        }
        let path = ActionPath::new(route);
        self.run(path.step, request, path)
    }

    fn route(&self, hard: bool) -> Option<Route> {
        Some(self.hard_action.route(true, hard))
    }

    fn finished(&self, done: ActionDone) -> AfterStep {
        let mut path = done.path;
        let step = path.step;
        let transition = path.advance(done.outcome.step_end());
        if path.route != Route::LocalFirst {
            return AfterStep {
                decided: Some(done),
                ..AfterStep::default()
            };
        }
        let pod = done.request.pod.clone();
        let said = format!("{pod}: {} ({})", transition.why, done.outcome.describe());
        if transition.unrecorded || (step == Step::Kill && !path.stopped_locally) {
            tracing::warn!("{said}");
        } else {
            tracing::info!("{said}");
        }
        let next = transition.next.and_then(|step| {
            let mut request = done.request.clone();
            // The Event tells Kubernetes the pod was not left to the kubelet.
            if path.stopped_locally {
                request.message.push_str(
                    " The pod was stopped on the node at once (hard threshold), as the kubelet \
                     does; this eviction records it.",
                );
            }
            self.run(step, request, path)
        });
        let recorded = (step == Step::Evict && !transition.tell_decision).then(|| Recorded {
            pod,
            text: format!("{}: {}", transition.why, done.outcome.describe()),
            failed: transition.unrecorded,
        });
        AfterStep {
            decided: transition.tell_decision.then_some(done),
            next,
            recorded,
        }
    }
}
