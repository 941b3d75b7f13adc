//! Finished actions taken back: the actuator's action path says which step runs next and
//! what the decision state hears, which lifts the wait for the pod's cleanup or passes it
//! over.

use tokio::time::Instant;

use super::{components::Agent, decision_log};
use crate::{
    action::actuator::{ActionDone, ActionOutcome, FORCE_FOR, stuck_causes},
    action::{KillOutcome, StuckProcess},
    engine::instant::Clock as _,
    engine::units::bytes,
    system_clock::BootClock,
};

impl Agent {
    /// Hands a finished step to the actuator's action path, which says what the decision
    /// state learns of it and which step runs next.
    pub(super) fn step_done(&mut self, done: ActionDone) {
        if let ActionOutcome::Killed(report) = &done.outcome
            && let KillOutcome::TimedOut { remaining } = &report.outcome
        {
            self.say_stuck(&done, remaining);
        }
        let after = self.actions.finished(done);
        if let Some(done) = after.decided {
            self.finish_action(done);
        }
        if let Some(recorded) = after.recorded {
            if recorded.failed {
                self.actions.count_failure();
            }
            self.visibility
                .decisions
                .amend(&recorded.pod.uid, &recorded.text);
        }
    }

    /// Says why processes of a kill outlived force, in the decision's span, and counts each
    /// cause once: on every route, the API's fallback included.
    fn say_stuck(&mut self, done: &ActionDone, remaining: &[StuckProcess]) {
        let _in_decision = done.request.span.enter();
        let listed: Vec<String> = remaining.iter().take(8).map(ToString::to_string).collect();
        tracing::warn!(
            stuck_causes = %stuck_causes(remaining).join(","),
            "pod {}: {} processes outlived force, repeated for {FORCE_FOR:?} after the grace \
             period: {}{}; their SIGKILL stays pending and ends them once they leave that state",
            done.request.pod,
            remaining.len(),
            listed.join("; "),
            if remaining.len() > listed.len() { "; ..." } else { "" }
        );
        for cause in stuck_causes(remaining) {
            self.actions.count_stuck(cause);
        }
    }

    /// Takes an action's report back into the decision state: a pod known stopped lifts the
    /// wait for its cleanup at once; a failed action lifts it too, so the next decision is
    /// not held back by a pod that is not going.
    pub(super) fn finish_action(&mut self, done: ActionDone) {
        let _in_decision = decision_log::reported(&done);
        let pod = &done.request.pod;
        let uid = pod.uid.clone();
        let stopped = done.outcome.pod_stopped();
        match &done.outcome {
            ActionOutcome::Killed(report) => {
                self.read_after_kill(&uid);
                let after = self.core.pod_working_set(&uid).unwrap_or(0);
                let freed = done
                    .request
                    .working_set_before
                    .unwrap_or(0)
                    .saturating_sub(after);
                if stopped {
                    tracing::info!(
                        "pod {pod} stopped after {:?} ({} processes signalled{}), {} freed",
                        report.elapsed,
                        report.terminated,
                        if report.forced { ", forced" } else { "" },
                        bytes(freed as i64)
                    );
                } else {
                    self.actions.count_failure();
                    tracing::warn!(
                        "pod {pod}: processes outlived force {:?} after SIGTERM, {} freed and \
                         {} still held: passed over, the next pod in the kubelet's order goes at \
                         the next eviction interval while the pressure lasts, and this one is \
                         not chosen again",
                        report.elapsed,
                        bytes(freed as i64),
                        bytes(after as i64),
                    );
                }
                self.checkpoint.record_freed(&uid, freed, Instant::now());
                if stopped {
                    self.core.eviction_over(&uid);
                } else {
                    self.core.eviction_stuck(&uid);
                }
            }
            ActionOutcome::Accepted => tracing::info!(
                "eviction of {pod} accepted (grace period {}s); waiting for the kubelet",
                done.request.grace_period_seconds
            ),
            ActionOutcome::Gone => {
                self.checkpoint.record_freed(&uid, 0, Instant::now());
                let rel = self.core.pod(&uid).and_then(|p| p.cgroup.as_ref());
                if self.no_process_left(rel.map(|c| &c.rel)) {
                    tracing::info!("pod {pod} was already gone");
                    self.core.eviction_over(&uid);
                } else {
                    // A force delete removes the object, not the processes, which may
                    // still be draining: the next eviction waits for them.
                    tracing::info!(
                        "pod {pod} is gone from the API but its processes still run: \
                         waiting for them"
                    );
                }
            }
            ActionOutcome::Refused(reason) => {
                self.actions.count_failure();
                tracing::warn!(
                    "{reason}; passed over for {:?}, the next candidate goes at once",
                    self.core
                        .config()
                        .monitor
                        .eviction_interval
                        .max(crate::engine::refusals::MIN_HOLD)
                );
                self.core.eviction_refused(&uid, BootClock.now());
            }
            ActionOutcome::Failed(reason) | ActionOutcome::TimedOut(reason) => {
                self.actions.count_failure();
                tracing::warn!(
                    "evicting {pod} failed: {reason}; the next decision is not held back"
                );
                self.core.eviction_failed(&uid);
            }
        }
        self.visibility
            .decisions
            .settle(&uid, done.outcome.describe());
    }
}
