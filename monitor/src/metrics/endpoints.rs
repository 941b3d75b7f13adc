//! The answers of the agent's HTTP endpoints, rendered from a [`Snapshot`]: pure, so each
//! can be tested without a server.
//!
//! * `/metrics`: the Prometheus exposition, the loop's metrics then the endpoint's own.
//! * `/healthz`: 200 while the event loop turned within [`STALE_AFTER`], else 503 saying
//!   how long ago it last did. The loop turns at least every second even when idle.
//! * `/readyz`: 200 once an event source runs, the pods are known, the checkpoint is
//!   writable and the metrics address is served (when asked for); else 503 naming each
//!   part missing.
//! * `/debug/ranking`: the signals, the head of each ranking, the last decisions and the
//!   source, as JSON.
//! * `/debug/config`: the configuration in force, its files and checksum, since when, and a
//!   change refused, as JSON.
//! * `/debug/shadow`: a dry run's shadow scorecard (its decisions against the kubelet's
//!   evictions and the kernel's OOM kills), as JSON; 404 from an acting agent.
use std::time::Duration;

use hyper::StatusCode;

use super::{
    endpoint_stats::EndpointStats,
    snapshot::{Readiness, Snapshot},
};
use crate::checkpoint::health::CheckpointHealth;

/// How long the event loop may go without turning before `/healthz` fails.
pub(crate) const STALE_AFTER: Duration = Duration::from_secs(5);

/// One endpoint's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Answer {
    pub status: StatusCode,
    pub content_type: &'static str,
    pub body: String,
}

const TEXT: &str = "text/plain; charset=utf-8";

impl Answer {
    fn text(status: StatusCode, body: String) -> Self {
        Self {
            status,
            content_type: TEXT,
            body,
        }
    }
}

/// The answer for `path`, or `None` when no endpoint has that path. `last_turn_ns` and
/// `now_ns` are CLOCK_MONOTONIC nanoseconds (0: the loop has not turned yet).
pub(crate) fn answer(
    path: &str,
    snapshot: &Snapshot,
    last_turn_ns: u64,
    now_ns: u64,
    endpoint: &EndpointStats,
) -> Option<Answer> {
    Some(match path {
        "/metrics" => {
            let mut body = snapshot.metrics.render();
            endpoint.render(&mut body);
            Answer {
                status: StatusCode::OK,
                content_type: "text/plain; version=0.0.4",
                body,
            }
        }
        "/healthz" => healthz(last_turn_ns, now_ns),
        "/readyz" => readyz(&snapshot.readiness, endpoint.not_listening()),
        "/debug/ranking" => Answer {
            status: StatusCode::OK,
            content_type: "application/json",
            body: serde_json::to_string_pretty(&snapshot.ranking)
                .expect("the ranking view serializes"),
        },
        "/debug/config" => match &snapshot.config {
            Some(config) => Answer {
                status: StatusCode::OK,
                content_type: "application/json",
                body: serde_json::to_string_pretty(config).expect("the config view serializes"),
            },
            None => Answer::text(
                StatusCode::SERVICE_UNAVAILABLE,
                "no configuration in force yet\n".into(),
            ),
        },
        "/debug/shadow" => match &snapshot.shadow {
            Some(report) => Answer {
                status: StatusCode::OK,
                content_type: "application/json",
                body: serde_json::to_string_pretty(report).expect("the scorecard serializes"),
            },
            None => Answer::text(
                StatusCode::NOT_FOUND,
                "no shadow scorecard: this agent acts (the scorecard is a dry run's, --dry-run)\n"
                    .into(),
            ),
        },
        _ => return None,
    })
}

fn healthz(last_turn_ns: u64, now_ns: u64) -> Answer {
    if last_turn_ns == 0 {
        return Answer::text(
            StatusCode::SERVICE_UNAVAILABLE,
            "event loop not started yet\n".into(),
        );
    }
    let since = Duration::from_nanos(now_ns.saturating_sub(last_turn_ns));
    if since > STALE_AFTER {
        Answer::text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "event loop stuck: last turned {:.1}s ago (limit {}s)\n",
                since.as_secs_f64(),
                STALE_AFTER.as_secs()
            ),
        )
    } else {
        Answer::text(
            StatusCode::OK,
            format!("ok: event loop turned {}ms ago\n", since.as_millis()),
        )
    }
}

fn readyz(readiness: &Readiness, not_listening: Option<String>) -> Answer {
    let mut missing = Vec::new();
    let mut have = Vec::new();
    match &readiness.source {
        Some(source) => have.push(format!("source {source}")),
        None => missing.push("no event source running yet".to_string()),
    }
    match &readiness.pods {
        Ok(n) => have.push(format!("{n} pods known")),
        Err(why) => missing.push(format!("pods not known: {why}")),
    }
    match &readiness.checkpoint {
        Some(CheckpointHealth::Writable) => have.push("checkpoint writable".into()),
        Some(CheckpointHealth::Failing { for_secs, error }) => missing.push(format!(
            "checkpoint not writable for {for_secs}s: {error} (retried with backoff)"
        )),
        None => missing.push("checkpoint not written yet".into()),
    }
    if let Some(why) = not_listening {
        missing.push(format!(
            "metrics address not served: {why} (retried with backoff; the agent protects \
             the node meanwhile)"
        ));
    }
    if missing.is_empty() {
        Answer::text(StatusCode::OK, format!("ready: {}\n", have.join("; ")))
    } else {
        Answer::text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", missing.join("; ")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{signal::Signal, threshold::ThresholdKind};
    use crate::metrics::snapshot::{RankingView, SignalView, ThresholdView};

    const S: u64 = 1_000_000_000;

    #[test]
    fn healthz_follows_the_last_turn() {
        let cases = [
            ("loop never turned", 0, 10 * S, 503, "not started"),
            (
                "turned just now",
                10 * S,
                10 * S + 1_000_000,
                200,
                "turned 1ms ago",
            ),
            ("turned at the limit", 10 * S, 15 * S, 200, "ok"),
            ("stuck", 10 * S, 17 * S, 503, "last turned 7.0s ago"),
        ];
        for (name, last, now, status, text) in cases {
            let got = answer(
                "/healthz",
                &Snapshot::default(),
                last,
                now,
                &EndpointStats::default(),
            )
            .unwrap();
            assert_eq!(got.status.as_u16(), status, "{name}: {got:?}");
            assert!(got.body.contains(text), "{name}: {got:?}");
        }
    }

    #[test]
    fn readyz_names_what_is_missing() {
        let ready = Readiness {
            source: Some("poll".into()),
            pods: Ok(3),
            checkpoint: Some(CheckpointHealth::Writable),
        };
        let full_disk = Readiness {
            checkpoint: Some(CheckpointHealth::Failing {
                for_secs: 4,
                error: "No space left on device".into(),
            }),
            ..ready.clone()
        };
        let source_lost = Readiness {
            pods: Err("pod source failed: gone".into()),
            ..ready.clone()
        };
        let cases = [
            (
                "all there",
                ready,
                200,
                vec!["ready: source poll; 3 pods known"],
            ),
            (
                "starting",
                Readiness::default(),
                503,
                vec![
                    "no event source",
                    "has not been read yet",
                    "checkpoint not written yet",
                ],
            ),
            (
                "checkpoint disk full",
                full_disk,
                503,
                vec!["checkpoint not writable for 4s: No space left on device"],
            ),
            (
                "pod source failed",
                source_lost,
                503,
                vec!["pods not known: pod source failed"],
            ),
        ];
        for (name, readiness, status, texts) in cases {
            let snapshot = Snapshot {
                readiness,
                ..Snapshot::default()
            };
            let got = answer("/readyz", &snapshot, 1, 1, &EndpointStats::default()).unwrap();
            assert_eq!(got.status.as_u16(), status, "{name}: {got:?}");
            for text in texts {
                assert!(got.body.contains(text), "{name}: {text:?} not in {got:?}");
            }
        }
    }

    #[test]
    fn readyz_says_while_the_metrics_address_is_not_served() {
        let snapshot = Snapshot {
            readiness: Readiness {
                source: Some("poll".into()),
                pods: Ok(1),
                checkpoint: Some(CheckpointHealth::Writable),
            },
            ..Snapshot::default()
        };
        let stats = EndpointStats::default();
        stats.bind_failed("0.0.0.0:9753: Address already in use (os error 98)".into());
        let got = answer("/readyz", &snapshot, 1, 1, &stats).unwrap();
        assert_eq!(got.status.as_u16(), 503, "{got:?}");
        assert!(
            got.body.contains(
                "metrics address not served: 0.0.0.0:9753: Address already in use (os error 98)"
            ),
            "{got:?}"
        );
        stats.listening();
        let got = answer("/readyz", &snapshot, 1, 1, &stats).unwrap();
        assert_eq!(got.status.as_u16(), 200, "{got:?}");
    }

    #[test]
    fn debug_ranking_is_json_with_signals_and_rankings() {
        let mut snapshot = Snapshot::default();
        snapshot.ranking.signals.push(SignalView {
            signal: Signal::MemoryAvailable,
            available: 1000,
            capacity: 4000,
            thresholds: vec![ThresholdView {
                kind: ThresholdKind::Hard,
                value: 2000,
                met: true,
                grace_period_seconds: 0,
            }],
        });
        snapshot.ranking.rankings.push(RankingView {
            signal: Signal::MemoryAvailable,
            pods_total: 0,
            head: vec![],
        });
        snapshot.ranking.source.events_lost = 2;
        let got = answer("/debug/ranking", &snapshot, 1, 1, &EndpointStats::default()).unwrap();
        assert_eq!(got.content_type, "application/json");
        let json: serde_json::Value = serde_json::from_str(&got.body).unwrap();
        assert_eq!(json["signals"][0]["signal"], "memory.available");
        assert_eq!(json["signals"][0]["thresholds"][0]["kind"], "hard");
        assert_eq!(json["signals"][0]["thresholds"][0]["met"], true);
        assert_eq!(json["rankings"][0]["podsTotal"], 0);
        assert_eq!(json["source"]["eventsLost"], 2);
        assert!(json["decisions"].as_array().unwrap().is_empty());
    }

    #[test]
    fn other_paths_have_no_answer() {
        let stats = EndpointStats::default();
        assert!(answer("/", &Snapshot::default(), 1, 1, &stats).is_none());
        assert!(answer("/metrics/", &Snapshot::default(), 1, 1, &stats).is_none());
    }
}
