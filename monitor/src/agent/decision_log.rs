//! One tracing span per eviction decision, so every record of it can be found by one query.
//!
//! The span opens when the decision is taken, with the pod, the signal, the observed value and
//! the kernel event that triggered it; the threshold and the decision's cause are added once
//! the report is built. It travels with the action ([`crate::action::actuator::ActionRequest::span`]),
//! so the action's own records fall inside it, and it closes when the action reports back
//! (or at once in a dry run), with the outcome recorded on it first.
//!
//! A dry run's decision repeated at each interval on the same pod
//! ([`crate::engine::decision_repeats`]) is said at debug level, its span too, so the log
//! holds the first of a series and then a summary each minute, not one story per interval.
use std::time::Duration;

use tracing::{Span, field::Empty};

use crate::{
    action::{
        KillOutcome,
        actuator::{ActionDone, ActionOutcome},
    },
    engine::{
        decide::Eviction, decision_repeats::Say, decision_report::DecisionReport,
        instant::MonoInstant,
    },
};

/// The decision span with its fields, at `$level`.
macro_rules! decision_span {
    ($level:expr, $eviction:expr, $trigger_ns:expr) => {
        tracing::span!(
            $level,
            "decision",
            pod.namespace = %$eviction.pod.namespace,
            pod.name = %$eviction.pod.name,
            pod.uid = %$eviction.pod.uid,
            signal = $eviction.signal.as_str(),
            observed = $eviction.observed.available,
            threshold = Empty,
            trigger_event_ns = $trigger_ns,
            cause.bursts = Empty,
            cause.stalls = Empty,
            cause.node_stalls = Empty,
            grace_ms = Empty,
            outcome = Empty,
        )
    };
}

/// The span of the decision to evict `eviction.pod`; `trigger_ns` is the CLOCK_MONOTONIC
/// time of the kernel event that led to it, when one did. A repeat held back is at debug.
pub(crate) fn open(eviction: &Eviction, trigger_ns: Option<u64>, say: Say) -> Span {
    if say.is_said() {
        decision_span!(tracing::Level::INFO, eviction, trigger_ns)
    } else {
        decision_span!(tracing::Level::DEBUG, eviction, trigger_ns)
    }
}

/// The span of an eviction begun before a restart and finished now.
pub(crate) fn resumed(pod: &crate::engine::pod_facts::PodRef) -> Span {
    tracing::info_span!(
        "decision",
        pod.namespace = %pod.namespace,
        pod.name = %pod.name,
        pod.uid = %pod.uid,
        resumed = true,
        outcome = Empty,
    )
}

/// Adds the report's threshold and cause to the current decision span, and records the
/// decision itself (`would evict NS/NAME` or `evicting NS/NAME`); a dry run's repeat at
/// debug, or as its series' summary.
pub(crate) fn decided(report: &DecisionReport, say: Say, now: MonoInstant) {
    let span = Span::current();
    span.record("threshold", report.threshold);
    span.record("cause.bursts", report.cause.bursts);
    span.record("cause.stalls", report.cause.stalls);
    span.record("cause.node_stalls", report.cause.node_stalls);
    span.record("grace_ms", report.grace.given_ms);
    if let Some(cut) = report.grace_cut() {
        tracing::info!(
            oom_in_ms = report.grace.oom_in_ms,
            growth_bytes_per_second = report.grace.growth_bytes_per_second,
            "{cut}"
        );
    }
    let verb = if report.action == "would_evict" {
        "would evict"
    } else {
        "evicting"
    };
    let (namespace, name) = (&report.namespace, &report.name);
    match say {
        Say::First => tracing::info!(
            action = report.action,
            grace_period_seconds = report.grace_period_seconds,
            "{verb} {namespace}/{name}"
        ),
        Say::Quiet { repeat } => tracing::debug!(
            action = report.action,
            repeat,
            "{verb} {namespace}/{name} again"
        ),
        Say::Summary {
            repeat,
            held,
            since,
        } => tracing::info!(
            action = report.action,
            repeat,
            "{verb} {namespace}/{name} again: the same dry-run decision on {} {repeat} times in \
             a row over {} ({held} since the last line; each one in --output json)",
            report.signal,
            whole_seconds(now.saturating_since(since))
        ),
    }
}

/// `75s`: a summary's span, to the second.
fn whole_seconds(span: Duration) -> String {
    format!("{}s", span.as_secs())
}

/// Records that nothing is done in a dry run; the span closes when the last handle drops.
pub(crate) fn dry_run(span: &Span) {
    span.record("outcome", "dry_run");
}

/// Records the action's outcome on its span and enters it for the records that follow.
pub(crate) fn reported(done: &ActionDone) -> tracing::span::EnteredSpan {
    let span = done.request.span.clone();
    span.record("outcome", outcome_name(&done.outcome));
    span.entered()
}

/// The outcome as one word, for queries: `killed`, `timed_out` (processes survived force),
/// `evicted` (accepted by the API server), `gone`, `refused`, `failed`, `no_answer` (the API
/// server did not answer in time).
fn outcome_name(outcome: &ActionOutcome) -> &'static str {
    match outcome {
        ActionOutcome::Killed(report) => match report.outcome {
            KillOutcome::Emptied => "killed",
            KillOutcome::TimedOut { .. } => "timed_out",
        },
        ActionOutcome::Accepted => "evicted",
        ActionOutcome::Gone => "gone",
        ActionOutcome::Refused(_) => "refused",
        ActionOutcome::Failed(_) => "failed",
        ActionOutcome::TimedOut(_) => "no_answer",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::KillReport;

    #[test]
    fn a_dry_runs_repeat_is_held_back_and_its_summary_says_how_often() {
        use crate::{
            engine::decision_report::tests::{eviction, report},
            engine::signal::Signal,
            logging::{LogFormat, tests::captured},
        };
        let eviction = eviction(Signal::AllocatableMemoryAvailable, 180 << 20);
        let at = |seconds: u64| MonoInstant::from_millis(seconds * 1000);
        let summary = Say::Summary {
            repeat: 13,
            held: 12,
            since: at(100),
        };
        let cases = [
            (
                "the first",
                Say::First,
                Some("would evict default/web-1"),
                true,
            ),
            ("a repeat", Say::Quiet { repeat: 2 }, None, false),
            (
                "the summary",
                summary,
                Some(
                    "would evict default/web-1 again: the same dry-run decision on \
                     allocatableMemory.available 13 times in a row over 60s (12 since the last \
                     line; each one in --output json)",
                ),
                true,
            ),
        ];
        for (name, say, said, closed) in cases {
            let lines = captured(LogFormat::Json, None, || {
                let span = open(&eviction, None, say);
                span.in_scope(|| decided(&report(true, Some(612 << 20)), say, at(160)));
                dry_run(&span);
            });
            let records: Vec<serde_json::Value> = lines
                .iter()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            let messages: Vec<&str> = records
                .iter()
                .filter_map(|r| r["fields"]["message"].as_str())
                .filter(|m| *m != "close")
                .collect();
            assert_eq!(messages, said.into_iter().collect::<Vec<_>>(), "{name}");
            let close = records.iter().any(|r| r["fields"]["message"] == "close");
            assert_eq!(close, closed, "{name}: the span's close at info: {lines:?}");
        }
    }

    #[test]
    fn outcomes_have_one_word_each() {
        let killed = |outcome| {
            ActionOutcome::Killed(KillReport {
                outcome,
                elapsed: Duration::ZERO,
                terminated: 1,
                forced: false,
            })
        };
        let cases = [
            ("emptied cgroup", killed(KillOutcome::Emptied), "killed"),
            (
                "processes survived force",
                killed(KillOutcome::TimedOut {
                    remaining: vec![crate::action::StuckProcess {
                        pid: 7,
                        comm: "java".into(),
                        cause: crate::action::StuckCause::Other { state: 'D' },
                    }],
                }),
                "timed_out",
            ),
            ("API accepted", ActionOutcome::Accepted, "evicted"),
            (
                "API silent",
                ActionOutcome::TimedOut("10s".into()),
                "no_answer",
            ),
            ("already gone", ActionOutcome::Gone, "gone"),
            ("PDB", ActionOutcome::Refused("429".into()), "refused"),
            ("error", ActionOutcome::Failed("EPERM".into()), "failed"),
        ];
        for (name, outcome, word) in cases {
            assert_eq!(outcome_name(&outcome), word, "{name}");
        }
    }
}
