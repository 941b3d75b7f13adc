//! What the agent prints for each eviction it decides: one line for people, or one JSON object
//! per line with monotonic and wall-clock timestamps for programs (benchmarks read it).
use serde::Serialize;

use crate::{
    action_path::Route,
    cause::Cause,
    decide::Eviction,
    eviction_machine::Prediction,
    eviction_order::{Measured, RankPolicy},
    kubelet_summary::PodUsage,
    oom_projection::Grace,
    pod_facts::PodFacts,
    printable::printable,
    quantity::Quantity,
    threshold::ThresholdKind,
    units::bytes,
};

/// One decided eviction with the numbers that led to it.
#[derive(Clone, Debug, Serialize)]
pub struct DecisionReport {
    /// `would_evict` in dry-run, `evict` otherwise.
    pub action: &'static str,
    /// CLOCK_MONOTONIC nanoseconds when the decision was taken.
    pub monotonic_ns: u64,
    /// Wall clock, unix milliseconds.
    pub wall_unix_ms: u64,
    /// CLOCK_MONOTONIC nanoseconds of the kernel event that triggered the decision, if one did.
    pub event_monotonic_ns: Option<u64>,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub signal: &'static str,
    pub threshold_kind: ThresholdKind,
    /// The threshold level in the signal's unit.
    pub threshold: i64,
    /// What was available; with `--predict`, as projected (see `predicted`).
    pub observed: i64,
    pub grace_period_seconds: i64,
    pub priority: i32,
    /// The pod's rank keys; absent when the pod had no stats.
    pub rank: Option<Measured>,
    /// The kubelet's eviction message.
    pub reason: String,
    /// Reclaim stalls and growth bursts that preceded the decision.
    pub cause: Cause,
    /// How the eviction is carried out (`kill`, `api`, `kill_then_api`); absent in dry-run.
    pub path: Option<&'static str>,
    /// The grace period given, and why it was cut when it was.
    pub grace: GraceFields,
    /// With `--predict`, when the decision was taken before the crossing: what was available
    /// then, and the projection that led to it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted: Option<PredictedFields>,
    /// In a dry run, the decision's number among the decisions on this pod and signal in a
    /// row (1 the first; see [`crate::decision_repeats`]); 1 when acting.
    pub repeat: u64,
    /// With `--reclaim-first`: what reclaim did before this eviction, or in a dry run what it
    /// would do (see [`crate::reclaim_ladder`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reclaim_first: Option<String>,
    #[serde(skip)]
    grace_text: Option<String>,
    #[serde(skip)]
    path_text: Option<&'static str>,
}

/// The grace period a victim was given (see [`Grace`]).
#[derive(Clone, Debug, Serialize)]
pub struct GraceFields {
    /// Time between SIGTERM and force.
    pub given_ms: u64,
    /// Whether it was cut from `grace_period_seconds` because the OOM point was nearer.
    pub cut: bool,
    /// The projection that cut it: time until the OOM point, the growth rate, and the bytes
    /// left before it.
    pub oom_in_ms: Option<u64>,
    pub growth_bytes_per_second: Option<u64>,
    pub bytes_to_oom: Option<u64>,
}

impl GraceFields {
    fn new(grace: Grace) -> Self {
        let given_ms = u64::try_from(grace.duration().as_millis()).unwrap_or(u64::MAX);
        match grace {
            Grace::Full(_) => Self {
                given_ms,
                cut: false,
                oom_in_ms: None,
                growth_bytes_per_second: None,
                bytes_to_oom: None,
            },
            Grace::Cut { projection, .. } => Self {
                given_ms,
                cut: true,
                oom_in_ms: u64::try_from(projection.until_oom.as_millis()).ok(),
                // Rounded to whole bytes: a rate, not a count.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                growth_bytes_per_second: Some(projection.bytes_per_s as u64),
                bytes_to_oom: Some(projection.bytes_left),
            },
        }
    }
}

/// A decision taken before its crossing (see [`Prediction`]).
#[derive(Clone, Debug, Serialize)]
pub struct PredictedFields {
    pub available_now: i64,
    pub lead_ms: u64,
    // Rounded to whole bytes: a rate, not a count.
    pub growth_bytes_per_second: u64,
}

impl PredictedFields {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    fn new(p: Prediction) -> Self {
        Self {
            available_now: p.available_now,
            lead_ms: u64::try_from(p.lead.as_millis()).unwrap_or(u64::MAX),
            growth_bytes_per_second: p.bytes_per_s as u64,
        }
    }
}

/// Inputs describing the moment of the decision.
pub struct DecisionContext<'a> {
    pub dry_run: bool,
    pub monotonic_ns: u64,
    pub wall_unix_ms: u64,
    pub event_monotonic_ns: Option<u64>,
    pub threshold: Quantity,
    pub facts: &'a PodFacts,
    pub usage: Option<&'a PodUsage>,
    pub policy: RankPolicy,
    pub cause: Cause,
    /// The route the action takes; `None` in dry-run.
    pub route: Option<Route>,
    /// The grace period the node could afford.
    pub grace: Grace,
    /// The projection the decision acted on, with `--predict`.
    pub prediction: Option<Prediction>,
    /// See [`DecisionReport::repeat`].
    pub repeat: u64,
    /// See [`DecisionReport::reclaim_first`].
    pub reclaim_first: Option<String>,
}

impl DecisionReport {
    pub fn new(eviction: &Eviction, ctx: DecisionContext<'_>) -> Self {
        Self {
            action: if ctx.dry_run { "would_evict" } else { "evict" },
            monotonic_ns: ctx.monotonic_ns,
            wall_unix_ms: ctx.wall_unix_ms,
            event_monotonic_ns: ctx.event_monotonic_ns,
            namespace: eviction.pod.namespace.clone(),
            name: eviction.pod.name.clone(),
            uid: eviction.pod.uid.clone(),
            signal: eviction.signal.as_str(),
            threshold_kind: eviction.threshold.kind,
            threshold: ctx.threshold.ceil_units(),
            observed: eviction.observed.available,
            grace_period_seconds: eviction.grace_period_seconds,
            priority: ctx.facts.priority,
            rank: ctx.policy.measure(ctx.facts, ctx.usage),
            reason: eviction.reason.clone(),
            cause: ctx.cause,
            path: ctx.route.map(Route::as_str),
            path_text: ctx.route.map(Route::describe),
            grace: GraceFields::new(ctx.grace),
            predicted: ctx.prediction.map(PredictedFields::new),
            repeat: ctx.repeat,
            reclaim_first: ctx.reclaim_first,
            grace_text: matches!(ctx.grace, Grace::Cut { .. }).then(|| ctx.grace.to_string()),
        }
    }

    /// `grace 1s -> 0s: the OOM point is ...` when the grace period was cut.
    pub fn grace_cut(&self) -> Option<&str> {
        self.grace_text.as_deref()
    }

    /// `would evict default/web-1: allocatableMemory.available 180.0Mi < 200.0Mi; exceeds
    /// request (612.0Mi > 256.0Mi), priority 0, 356.0Mi above request`
    pub fn text(&self) -> String {
        let verb = if self.action == "would_evict" {
            "would evict"
        } else {
            "evicting"
        };
        let unit = |v: i64| {
            if self.signal == "pid.available" {
                v.to_string()
            } else {
                bytes(v)
            }
        };
        let keys = match &self.rank {
            None => format!("no usage stats (ranked first), priority {}", self.priority),
            Some(m) if self.signal == "pid.available" => {
                format!(
                    "priority {}, {} processes",
                    self.priority,
                    m.usage.ceil_units()
                )
            }
            Some(m) => {
                let (usage, request) = (unit(m.usage.ceil_units()), unit(m.request.ceil_units()));
                let side = if m.exceeds_request {
                    format!("exceeds request ({usage} > {request})")
                } else {
                    format!("within request ({usage} <= {request})")
                };
                let above = m.above_request.ceil_units();
                let margin = if above >= 0 {
                    format!("{} above request", unit(above))
                } else {
                    format!("{} below request", unit(-above))
                };
                format!("{side}, priority {}, {margin}", self.priority)
            }
        };
        let predicted = self
            .predicted
            .as_ref()
            .map(|p| {
                format!(
                    " in {} ms at {:.1} GiB/s (now {}, predicted)",
                    p.lead_ms,
                    p.growth_bytes_per_second as f64 / f64::from(1u32 << 30),
                    unit(p.available_now)
                )
            })
            .unwrap_or_default();
        let repeated = if self.repeat > 1 {
            format!("; the same decision {} times in a row", self.repeat)
        } else {
            String::new()
        };
        let reclaim = self
            .reclaim_first
            .as_ref()
            .map(|r| format!("; {r}"))
            .unwrap_or_default();
        format!(
            "{verb} {}/{}{}: {} {}{predicted} < {}; {keys}{}{}{reclaim}{repeated}",
            printable(&self.namespace),
            printable(&self.name),
            self.path_text
                .map(|p| format!(" ({p})"))
                .unwrap_or_default(),
            self.signal,
            unit(self.observed),
            unit(self.threshold),
            self.cause.text(),
            self.grace_text
                .as_ref()
                .map(|g| format!("; {g}"))
                .unwrap_or_default()
        )
    }
}

/// Decisions to test what reads them, here and in the agent.
#[cfg(any(test, feature = "test-support"))]
pub mod tests {
    use super::*;
    use crate::{
        signal::Signal,
        threshold::{SignalObservation, ThresholdId},
    };

    const MI: i64 = 1 << 20;

    fn facts() -> PodFacts {
        PodFacts::named("web-1")
            .with_uid("u")
            .with_memory_request(256 * MI)
    }

    /// The decision on `default/web-1` for `signal`, with `available` observed.
    pub fn eviction(signal: Signal, available: i64) -> Eviction {
        Eviction {
            pod: facts().pod,
            signal,
            threshold: ThresholdId {
                signal,
                kind: ThresholdKind::Hard,
            },
            observed: SignalObservation {
                available,
                capacity: 8192 * MI,
            },
            grace_period_seconds: 1,
            reason: "The node was low on resource: memory.".into(),
        }
    }

    /// A decision on `default/web-1` (`dry_run`: would evict), its working set `usage`.
    pub fn report(dry_run: bool, usage: Option<u64>) -> DecisionReport {
        let facts = facts();
        let usage = usage.map(|ws| PodUsage {
            memory_working_set_bytes: ws,
            ..PodUsage::default()
        });
        DecisionReport::new(
            &eviction(Signal::AllocatableMemoryAvailable, 180 * MI),
            DecisionContext {
                dry_run,
                monotonic_ns: 5,
                wall_unix_ms: 6,
                event_monotonic_ns: Some(4),
                threshold: Quantity::from_units(200 * MI),
                facts: &facts,
                usage: usage.as_ref(),
                policy: RankPolicy::Memory,
                cause: Cause::default(),
                route: (!dry_run).then_some(Route::LocalFirst),
                grace: Grace::Full(std::time::Duration::from_secs(1)),
                prediction: None,
                repeat: 1,
                reclaim_first: None,
            },
        )
    }

    #[test]
    fn line_names_signal_threshold_and_rank_keys() {
        assert_eq!(
            report(true, Some(612 << 20)).text(),
            "would evict default/web-1: allocatableMemory.available 180.0Mi < 200.0Mi; \
             exceeds request (612.0Mi > 256.0Mi), priority 0, 356.0Mi above request"
        );
        assert!(
            report(false, Some(100 << 20))
                .text()
                .starts_with("evicting default/web-1")
        );
        assert!(
            report(false, Some(100 << 20))
                .text()
                .contains("within request (100.0Mi <= 256.0Mi)")
        );
        assert!(
            report(true, None)
                .text()
                .ends_with("no usage stats (ranked first), priority 0")
        );
    }

    #[test]
    fn what_reclaim_did_first_is_said_in_the_line_and_the_json() {
        let plain = report(true, Some(612 << 20));
        let json = serde_json::to_value(&plain).unwrap();
        assert!(
            json.get("reclaim_first").is_none(),
            "absent without the flag"
        );
        let mut first = plain;
        first.reclaim_first = Some("would reclaim file cache: 8.0Mi from default/a".into());
        assert!(
            first
                .text()
                .ends_with("above request; would reclaim file cache: 8.0Mi from default/a"),
            "{}",
            first.text()
        );
        let json = serde_json::to_value(&first).unwrap();
        assert_eq!(
            json["reclaim_first"],
            "would reclaim file cache: 8.0Mi from default/a"
        );
    }

    #[test]
    fn a_name_with_a_newline_cannot_forge_a_line() {
        let mut forged = report(true, Some(612 << 20));
        forged.name = "x\nwould evict kube-system/etcd: forged".into();
        forged.namespace = "ns\r".into();
        let line = forged.text();
        assert!(!line.contains('\n') && !line.contains('\r'), "{line}");
        assert!(
            line.starts_with("would evict ns\\r/x\\nwould evict kube-system/etcd: forged: "),
            "{line}"
        );
    }

    #[test]
    fn json_carries_both_clocks_and_the_keys() {
        let json = serde_json::to_value(report(true, Some(612 << 20))).unwrap();
        assert_eq!(json["action"], "would_evict");
        assert_eq!(json["monotonic_ns"], 5);
        assert_eq!(json["event_monotonic_ns"], 4);
        assert_eq!(json["wall_unix_ms"], 6);
        assert_eq!(json["signal"], "allocatableMemory.available");
        assert_eq!(json["rank"]["exceedsRequest"], true);
        assert!(json["path"].is_null(), "nothing is done in dry-run");
        assert_eq!(json["repeat"], 1);
    }

    #[test]
    fn a_repeated_dry_run_decision_says_how_often() {
        let mut again = report(true, Some(612 << 20));
        again.repeat = 12;
        assert!(
            again
                .text()
                .ends_with("356.0Mi above request; the same decision 12 times in a row"),
            "{}",
            again.text()
        );
        assert_eq!(serde_json::to_value(&again).unwrap()["repeat"], 12);
    }

    #[test]
    fn a_predicted_decision_says_so_with_what_is_available_now() {
        let mut predicted = report(true, Some(612 << 20));
        predicted.predicted = Some(PredictedFields::new(Prediction {
            signal: Signal::AllocatableMemoryAvailable,
            available_now: 300 * MI,
            available_then: 180 * MI,
            lead: std::time::Duration::from_millis(100),
            bytes_per_s: 1200.0 * MI as f64,
        }));
        assert!(
            predicted.text().starts_with(
                "would evict default/web-1: allocatableMemory.available 180.0Mi in 100 ms at \
                 1.2 GiB/s (now 300.0Mi, predicted) < 200.0Mi; "
            ),
            "{}",
            predicted.text()
        );
        let json = serde_json::to_value(&predicted).unwrap();
        assert_eq!(json["predicted"]["available_now"], 300 * MI);
        assert_eq!(json["predicted"]["lead_ms"], 100);
        let plain = serde_json::to_value(report(true, Some(612 << 20))).unwrap();
        assert!(plain.get("predicted").is_none(), "{plain}");
    }

    #[test]
    fn an_eviction_says_which_path_it_takes() {
        let evicting = report(false, Some(612 << 20));
        assert_eq!(
            serde_json::to_value(&evicting).unwrap()["path"],
            "kill_then_api"
        );
        assert!(
            evicting.text().starts_with(
                "evicting default/web-1 (hard threshold: killing its cgroup first, then the \
                 Eviction API records it): allocatableMemory.available"
            ),
            "{}",
            evicting.text()
        );
    }
}
