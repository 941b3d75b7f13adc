//! The decision step: decide on the state as it is, report the decision, start its action
//! and checkpoint what must survive a restart; and, after a restart, resume the eviction the
//! checkpoint says was in flight. What becomes of evicted pods is in [`super::evicted_pods`].
use std::{
    io::{self, Write as _},
    path::PathBuf,
    sync::Arc,
    time::Duration,
};

use tokio::{sync::Notify, time::Instant};

use super::{
    actions::RunningGrace, args::GraceProjection, checkpointer::Started, components::Agent,
    decision_log, reclaim_step::Gate,
};
use crate::{
    action::REAP_WAIT,
    action::{actuator::ActionRequest, local_first::API_TIMEOUT},
    cgroupfs::procs::subtree_pids,
    checkpoint::read_now,
    engine::action_path::Route,
    engine::decision_report::{DecisionContext, DecisionReport},
    engine::{
        decide::{Action, Eviction, Idle},
        decision_repeats::Say,
        instant::{Clock as _, ManualClock, MonoInstant},
        memory_brake::BrakeInputs,
        oom_projection::{Grace, KILL_ALLOWANCE, affordable_grace},
        pod_facts::PodRef,
        quantity::Quantity,
        signal::{NodeCondition, Signal},
        threshold::{ThresholdId, ThresholdKind},
    },
    flags::OutputFormat,
    metrics::snapshot::DecisionView,
    node::kernel_victim,
    system_clock::{BootClock, monotonic_ns, unix_ns_now},
};

/// The least time before a decision held back by the last eviction is taken again: with a
/// zero interval and cleanup timeout a dry run would otherwise decide at every turn.
const DECIDE_AGAIN_AFTER_AT_LEAST: Duration = Duration::from_millis(100);

/// Whether a threshold is a hard one on memory: the only kind the brake holds the node for.
fn is_hard_memory(threshold: ThresholdId) -> bool {
    threshold.kind == ThresholdKind::Hard
        && threshold.signal.node_condition() == NodeCondition::MemoryPressure
}

/// A decision's grace period as a duration (negative: none).
pub(super) fn grace_secs(seconds: i64) -> u64 {
    u64::try_from(seconds).unwrap_or(0)
}

/// When a decision was taken, what led to it and how much of it to say.
#[derive(Clone, Copy)]
pub(super) struct Moment {
    /// CLOCK_MONOTONIC nanoseconds of the decision.
    decided_ns: u64,
    /// The wall clock at that instant, unix nanoseconds.
    decided_unix_ns: u64,
    /// The kernel event that led to it, when one did.
    trigger_ns: Option<u64>,
    say: Say,
    /// The decision's instant on the clock the core decided with.
    now: MonoInstant,
}

/// What an action carries from its decision besides the pod and its grace.
pub(super) struct ActOn {
    /// The decision's message in the kubelet's words.
    message: String,
    /// Decided on a hard threshold.
    hard: bool,
    /// See [`crate::action::KillTimings::reap_wait`].
    reap_wait: Duration,
    /// See [`crate::action::KillTimings::terminate`].
    terminate: bool,
}

impl Agent {
    /// Runs the decision step and acts on it; `trigger_ns` is the kernel event that led here.
    /// Nothing here can stop the agent: a report that cannot be printed or a checkpoint that
    /// cannot be written is logged, and the action goes ahead.
    pub(super) fn evaluate(&mut self, trigger_ns: Option<u64>) {
        // Both clocks are read back to back before deciding, so the report's monotonic stamp
        // is the instant the interval and grace rules saw, however long the rest takes.
        let decided_ns = monotonic_ns();
        // The wall clock of the same instant, which the report and the shadow scorecard say.
        let decided_unix_ns = unix_ns_now();
        self.recheck_running_grace(decided_ns);
        let clock = ManualClock::new(BootClock.now());
        let decision = self.core.decide_at(&clock, Some(decided_ns));
        if self.decisions.dry_run && decision.eviction().is_some() {
            self.core.nothing_signalled();
        }
        // With --reclaim-first a memory eviction may wait for reclaim, the brake holding the
        // node meanwhile as during a grace.
        let (decided, mut reclaim_said) =
            match self.reclaim_gate(&decision, decided_ns, clock.now()) {
                Gate::Goes(decided, said) => (decided, said),
                Gate::Waits(eviction) => {
                    if is_hard_memory(eviction.threshold) {
                        self.hold_brake(decided_ns);
                    }
                    (None, None)
                }
            };
        let mut grace_given = None;
        if let Some(eviction) = decided {
            // Nothing a dry run decides is carried out, so it decides on the same pod again at
            // every interval: said once, then summed up.
            let say = if self.decisions.dry_run {
                self.visibility
                    .repeats
                    .note(&eviction.pod.uid, eviction.signal, clock.now())
            } else {
                Say::First
            };
            let span = decision_log::open(eviction, trigger_ns, say);
            let _in_decision = span.enter();
            // Before the brake's records, which fall in the span ahead of the report's.
            span.record("threshold", self.threshold_of(eviction).ceil_units());
            if is_hard_memory(eviction.threshold) {
                // Before the grace is chosen: a brake that holds lets the victim keep it.
                self.hold_brake(decided_ns);
            }
            let grace = self.affordable_grace(eviction, decided_ns);
            let at = Moment {
                decided_ns,
                decided_unix_ns,
                trigger_ns,
                say,
                now: clock.now(),
            };
            if self.decisions.dry_run && say.is_said() {
                let threshold = self.threshold_of(eviction).ceil_units();
                reclaim_said = self.dry_run_reclaim(eviction, threshold);
            }
            if let Err(e) = self.report(eviction, &at, grace, reclaim_said) {
                tracing::error!("printing the decision for {}: {e}", eviction.pod);
            }
            self.score_decision(eviction, decided_unix_ns);
            // The API takes whole seconds: a cut grace period is rounded down.
            let seconds = match grace {
                Grace::Full(_) => eviction.grace_period_seconds,
                Grace::Cut { to, .. } => i64::try_from(to.as_secs()).unwrap_or(0),
            };
            grace_given = Some(seconds);
            if self
                .actions
                .route(eviction.threshold.kind == ThresholdKind::Hard)
                == Some(Route::Api)
            {
                self.warn_api_may_lose(grace.duration(), decided_ns);
            }
            self.act(
                eviction.pod.clone(),
                grace.duration(),
                seconds,
                ActOn {
                    message: eviction.reason.clone(),
                    hard: eviction.threshold.kind == ThresholdKind::Hard,
                    // The next pid.available reading must not count the victim's zombies.
                    reap_wait: if eviction.signal == Signal::PidAvailable {
                        REAP_WAIT
                    } else {
                        Duration::ZERO
                    },
                    terminate: true,
                },
                span.clone(),
            );
            // Reading every process is not repeated for a decision held back.
            if eviction.signal != Signal::PidAvailable && say.is_said() {
                self.name_kernel_victim(span.clone());
            }
        }
        if let Some(node_status) = &self.visibility.node_status {
            node_status.set(&decision.node_conditions);
        }
        // A hard memory threshold met again after the last victim went, while the eviction
        // interval holds the next eviction back (the victim freed too little): the brake
        // holds the pods' growth until the agent may act, instead of leaving the node to the
        // kernel's OOM killer meanwhile. While a victim is awaited the brake set at its
        // eviction holds, within its bound.
        if decision.action == Action::Idle(Idle::WaitingForInterval)
            && self
                .core
                .state()
                .thresholds_acting
                .iter()
                .any(|t| is_hard_memory(*t))
        {
            self.hold_brake(decided_ns);
        }
        self.update_metrics(decided, trigger_ns);
        self.end_reclaim_episode();
        self.step_brake(decided_ns);
        // A node can stay past a threshold with no reading moving (a dry run evicts nothing,
        // a victim may not go): the kubelet decides again at each of its rounds, so the agent
        // decides again once the last eviction's wait ends, not only at the next reading.
        self.actions.decide_again = match decision.action {
            Action::Idle(Idle::NoPressure | Idle::NoEvictablePod(_)) => None,
            Action::Evict(_) | Action::Idle(_) => self.core.decision_wait_ends().map(|ends| {
                Instant::now()
                    + ends
                        .saturating_since(clock.now())
                        .max(DECIDE_AGAIN_AFTER_AT_LEAST)
            }),
        };
        let started = decided.map(|eviction| Started {
            pod: &eviction.pod,
            signal: eviction.signal,
            grace_period_seconds: grace_given.unwrap_or(eviction.grace_period_seconds),
        });
        self.checkpoint.record_decision(
            self.core.state(),
            &decision.node_conditions,
            started,
            read_now,
            Instant::now(),
        );
    }

    /// On the API-only route the pod stops once the API server deleted it and the kubelet
    /// acted, which the agent neither controls nor sees: says so when the OOM point is
    /// projected nearer than the grace period plus the time the API may take to answer, so
    /// an operator sees why the kernel may win.
    fn warn_api_may_lose(&self, grace: Duration, decided_ns: u64) {
        let Some(projection) = self.core.oom_projection(decided_ns) else {
            return;
        };
        if projection.until_oom < grace + API_TIMEOUT {
            tracing::warn!(
                oom_in_ms = u64::try_from(projection.until_oom.as_millis()).unwrap_or(u64::MAX),
                "{projection}: through the API alone the pod stops only once the kubelet acts \
                 on the Eviction, and the kernel's OOM killer may act first \
                 (--kube-hard-action kill stops a pod on a hard threshold here at once)"
            );
        }
    }

    /// Logs, in the decision's span, whom the kernel's OOM killer would kill without this
    /// eviction (see [`kernel_victim`]); read off the agent's thread, after the action began.
    fn name_kernel_victim(&self, span: tracing::Span) {
        let (domain, domain_bytes) = self.core.nearest_oom_point();
        let question = kernel_victim::Question {
            domain,
            domain_bytes,
            kubepods_dir: self.hierarchy.dir(self.kubepods.rel.as_str()),
            version: self.hierarchy.version,
            pods: self
                .core
                .pods()
                .filter_map(|row| {
                    let pod = &row.facts.pod;
                    let rel = row.cgroup.as_ref()?.rel.as_str().to_string();
                    Some((rel, format!("{}/{}", pod.namespace, pod.name)))
                })
                .collect(),
            proc_root: PathBuf::from("/proc"),
        };
        tokio::task::spawn_blocking(move || {
            let _in_decision = span.enter();
            if let Some(victim) = question.answer() {
                tracing::info!(
                    kernel_victim.pid = victim.pid,
                    kernel_victim.comm = %victim.comm,
                    kernel_victim.pod = victim.pod.as_deref(),
                    kernel_victim.points = victim.points,
                    oom_domain = domain.as_str(),
                    "{}",
                    victim.text(domain)
                );
            } else {
                tracing::info!(
                    oom_domain = domain.as_str(),
                    "without it, the OOM killer would find no process it may kill ({})",
                    domain.as_str()
                );
            }
        });
    }

    /// Sets the memory brake on the pods' growth (cgroup v2, when on), or keeps it held.
    fn hold_brake(&mut self, now_ns: u64) {
        let (core, own_pod) = (&self.core, &self.own_pod);
        self.brake.step(
            BrakeInputs {
                hard_memory_eviction: true,
                pressure: true,
                now_ns,
            },
            // Every pod but the agent's own: a pod that does not grow is not held.
            || {
                core.pods()
                    .filter_map(|row| row.cgroup.as_ref())
                    .map(|c| c.rel.as_str())
                    .filter(|rel| !own_pod.holds(rel))
                    .map(str::to_string)
                    .collect()
            },
        );
    }

    /// Lifts the memory brake once no eviction is in flight and no memory threshold is met,
    /// or once it was held for its bound.
    pub(super) fn step_brake(&mut self, now_ns: u64) {
        let state = self.core.state();
        let pressure = state.awaiting_cleanup.is_some() || state.memory_threshold_met();
        self.brake.step(
            BrakeInputs {
                hard_memory_eviction: false,
                pressure,
                now_ns,
            },
            Vec::new,
        );
    }

    /// The grace period the node can afford for a decision taken at `decided_ns`: on a hard
    /// threshold, cut when the OOM point is nearer than the whole grace period, unless the
    /// memory brake holds the pods' growth back.
    fn affordable_grace(&self, eviction: &Eviction, decided_ns: u64) -> Grace {
        let full = Duration::from_secs(grace_secs(eviction.grace_period_seconds));
        if eviction.threshold.kind != ThresholdKind::Hard
            || self.decisions.grace_projection == GraceProjection::Off
            || self.brake.is_held()
        {
            return Grace::Full(full);
        }
        affordable_grace(full, self.core.oom_projection(decided_ns), KILL_ALLOWANCE)
    }

    /// While a local kill's grace period runs: forces it now when the OOM point is projected
    /// nearer than what is left of it (the victim, or another pod, grew meanwhile).
    fn recheck_running_grace(&mut self, now_ns: u64) {
        let Some(running) = &self.actions.grace else {
            return;
        };
        // The growth measured is the one before the brake held it: it stands in for the cut
        // while it holds, and the projection takes over again once it is lifted.
        if self.brake.is_held() {
            return;
        }
        let now = Instant::now();
        if now >= running.ends {
            self.actions.grace = None;
            return;
        }
        let left = running.ends - now;
        let grace = affordable_grace(left, self.core.oom_projection(now_ns), KILL_ALLOWANCE);
        if let Grace::Cut { projection, .. } = grace {
            running.force_now.notify_one();
            let forced = Grace::Cut {
                from: left,
                to: Duration::ZERO,
                projection,
            };
            running
                .span
                .in_scope(|| tracing::info!("forcing now, the rest of the {forced}"));
            self.actions.grace = None;
        }
    }

    /// The decision's threshold, as the node's capacity resolves it.
    fn threshold_of(&self, eviction: &Eviction) -> Quantity {
        self.core
            .config()
            .thresholds
            .iter()
            .find(|t| t.id() == eviction.threshold)
            .map(|t| t.value.resolve(eviction.observed.capacity))
            .unwrap_or_default()
    }

    /// Prints the decision (in text, a dry run's repeat only as its series' summary; in JSON,
    /// every one) and keeps it for readers.
    pub(super) fn report(
        &mut self,
        eviction: &Eviction,
        at: &Moment,
        grace: Grace,
        reclaim_first: Option<String>,
    ) -> anyhow::Result<()> {
        let Moment {
            decided_ns,
            decided_unix_ns,
            trigger_ns,
            say,
            now,
        } = *at;
        let Some(entry) = self.core.pod(&eviction.pod.uid) else {
            return Ok(());
        };
        let Some((policy, usage)) = self.core.rank_inputs(&eviction.pod.uid, eviction.signal)
        else {
            return Ok(());
        };
        let threshold = self.threshold_of(eviction);
        let report = DecisionReport::new(
            eviction,
            DecisionContext {
                dry_run: self.decisions.dry_run,
                monotonic_ns: decided_ns,
                wall_unix_ms: decided_unix_ns / 1_000_000,
                event_monotonic_ns: trigger_ns,
                threshold,
                facts: &entry.facts,
                usage,
                policy,
                cause: self
                    .causes
                    .explain(&self.core.cgroups_of(&eviction.pod.uid), monotonic_ns()),
                route: self
                    .actions
                    .route(eviction.threshold.kind == ThresholdKind::Hard),
                grace,
                prediction: self
                    .core
                    .prediction()
                    .filter(|p| p.signal == eviction.signal),
                repeat: say.repeat(),
                reclaim_first,
            },
        );
        decision_log::decided(&report, say, now);
        let text = report.text();
        let line = match self.decisions.output {
            OutputFormat::Text if !say.is_said() => None,
            OutputFormat::Text => Some(text.clone()),
            OutputFormat::Json => Some(serde_json::to_string(&report)?),
        };
        self.visibility.decisions.push(DecisionView {
            report,
            text,
            outcome: self
                .decisions
                .dry_run
                .then(|| "dry-run: nothing done".into()),
        });
        if let Some(line) = line {
            let mut out = io::stdout().lock();
            writeln!(out, "{line}")?;
            out.flush()?;
        }
        Ok(())
    }

    /// Starts the eviction's action in the background: a kill of the pod's cgroup, or with
    /// --kube an Eviction through the API; nothing in dry-run. `grace` is the time left
    /// before force; `message` the decision's, for the pod's Event; `hard` whether a hard
    /// threshold decided it (with --kube the pod is then stopped on the node first).
    pub(super) fn act(
        &mut self,
        pod: PodRef,
        grace: Duration,
        grace_period_seconds: i64,
        on: ActOn,
        span: tracing::Span,
    ) {
        let ActOn {
            message,
            hard,
            reap_wait,
            terminate,
        } = on;
        let force_now = Arc::new(Notify::new());
        let request = ActionRequest {
            cgroup: self
                .core
                .pod(&pod.uid)
                .and_then(|p| p.cgroup.as_ref())
                .map(|c| c.rel.to_string()),
            working_set_before: self.core.pod_working_set(&pod.uid),
            grace,
            grace_period_seconds,
            pod,
            message,
            hard,
            span: span.clone(),
            force_now: force_now.clone(),
            reap_wait,
            terminate,
        };
        let local = self.actions.route(hard).is_some_and(Route::kills);
        let uid = request.pod.uid.clone();
        let pod = request.pod.to_string();
        if self.actions.start(request, span.clone()) {
            // Stopped for good, like a pod the kubelet evicted: never chosen again while it
            // is listed (a manifest outlives its processes). With --kube the pod leaves the
            // watch instead.
            if local {
                self.core.mark_evicted(&uid);
                if hard
                    && !grace.is_zero()
                    && self.decisions.grace_projection == GraceProjection::On
                {
                    self.actions.grace = Some(RunningGrace {
                        ends: Instant::now() + grace,
                        force_now,
                        span: span.clone(),
                    });
                }
            }
            tracing::info!(grace_s = grace.as_secs(), "eviction of {pod} started");
        } else {
            decision_log::dry_run(&span);
        }
    }

    /// After a restart: an eviction whose pod still runs is finished on its original
    /// deadline (no second SIGTERM, force once its grace period from the decision is over),
    /// instead of being waited out for the cleanup timeout and started over. Only this mode's
    /// own eviction: a dry run's is never carried out ([`crate::engine::checkpoint::handover`]).
    pub(super) fn resume_pending_eviction(&mut self) {
        let Some(pending) = self.core.state().awaiting_cleanup.clone() else {
            return;
        };
        let pod = pending.pod.clone();
        let running = self
            .core
            .pod(&pod.uid)
            .and_then(|p| p.cgroup.as_ref())
            .is_some_and(|c| {
                subtree_pids(&self.hierarchy.dir(&c.rel)).is_ok_and(|pids| !pids.is_empty())
            });
        if !running || !self.evictor_is_local() {
            return;
        }
        let Some(grace_period_seconds) = self.checkpoint.own().pending_grace_period_seconds()
        else {
            tracing::warn!(
                "pod {pod} was being evicted before the restart, but the checkpoint does not \
                 say its grace period (an older version wrote it): it is decided on again once \
                 the cleanup timeout has passed"
            );
            return;
        };
        let deadline = pending
            .evicted_at
            .saturating_add(Duration::from_secs(grace_secs(grace_period_seconds)));
        let left = deadline.saturating_since(BootClock.now());
        tracing::info!(
            "resuming the eviction of {pod} begun before the restart: no second SIGTERM, force in \
             {left:?}, at the end of its {grace_period_seconds}s grace period"
        );
        // Only a --pods eviction is resumed; the flag is not read on that route.
        let span = decision_log::resumed(&pod);
        let _in_decision = span.enter();
        self.act(
            pod,
            left,
            grace_period_seconds,
            ActOn {
                message: "resumed after a restart".into(),
                hard: true,
                // The checkpoint does not say which signal: done once the cgroup is empty,
                // as for memory.
                reap_wait: Duration::ZERO,
                // Its SIGTERM went out before the restart: the checkpoint is written before
                // the action starts.
                terminate: false,
            },
            span.clone(),
        );
    }

    /// Whether evictions are carried out on this node (a cgroup kill), not through the API.
    pub(super) fn evictor_is_local(&self) -> bool {
        !self.decisions.dry_run && !self.decisions.through_api
    }
}
