//! What readers of the agent see: metrics and the snapshot behind the HTTP endpoints, the
//! status lines on stderr, and the event counters in the checkpoint.

use tokio::time::Instant;

use super::{components::Agent, publish};
use crate::{
    checkpoint::health::CheckpointHealth,
    engine::units::bytes,
    engine::{decide::Eviction, signal::Signal, threshold::ThresholdKind},
    logging,
    metrics::snapshot::{DebugRanking, Readiness, SignalView, Snapshot, SourceView},
    system_clock::{monotonic_ns, unix_ns_now},
};

impl Agent {
    /// Brings the metrics up to date and publishes a snapshot for readers.
    pub(super) fn update_metrics(&mut self, eviction: Option<&Eviction>, trigger_ns: Option<u64>) {
        let attach_within = self.attach_within();
        let m = &mut self.visibility.metrics;
        m.reclaim = self.reclaim_first.as_ref().map(|r| r.totals().clone());
        for (signal, observed) in self.core.observations() {
            m.signal_observations
                .insert(signal.as_str(), observed.available as f64);
        }
        m.threshold_met.clear();
        for threshold in &self.core.config().thresholds {
            let met = self
                .core
                .state()
                .thresholds_first_observed
                .iter()
                .any(|o| o.threshold == threshold.id());
            *m.threshold_met
                .entry(threshold.signal.as_str())
                .or_default() |= met;
            // A counter born at 1 hides its first increase from `increase()`: each signal
            // that can evict is exported at 0 from the start, in both families.
            for counts in [
                &mut m.evictions_by_signal,
                &mut m.dry_run_decisions_by_signal,
            ] {
                counts.entry(threshold.signal.as_str()).or_insert(0);
            }
        }
        // Levels only for the signals observed: a percentage needs the signal's capacity.
        // The same views are published for /debug/ranking, so they are built once.
        let signals = publish::signals(&self.core);
        m.threshold_levels.clear();
        for view in &signals {
            for threshold in &view.thresholds {
                let kind = match threshold.kind {
                    ThresholdKind::Hard => "hard",
                    ThresholdKind::Soft => "soft",
                };
                let level = m
                    .threshold_levels
                    .entry((view.signal.as_str(), kind))
                    .or_insert(f64::MIN);
                *level = level.max(threshold.value as f64);
            }
        }
        m.pods_ranked = self.core.pod_count() as u64;
        m.stat_programs_attached = self.source.memory_from_kernel();
        m.stat_programs_attach_within = attach_within;
        m.source_fallback = self.source.fallback.is_some();
        m.pod_read_failures = self.core.read_failures();
        m.action_failures = self.actions.failures();
        for (cause, n) in self.actions.stuck() {
            m.evictions_stuck.insert(cause, *n);
        }
        m.log_write_failures = logging::log_write_failures();
        m.checkpoint_write_failures = self.checkpoint.write_failures();
        m.checkpoint_writable =
            self.checkpoint.health(Instant::now()) == CheckpointHealth::Writable;
        m.config = Some(self.config.metrics());
        m.checkpoint_damaged_at_start = self.checkpoint.damaged_at_start();
        if let Some(eviction) = eviction {
            let counts = if self.decisions.dry_run {
                &mut m.dry_run_decisions_by_signal
            } else {
                &mut m.evictions_by_signal
            };
            *counts.entry(eviction.signal.as_str()).or_default() += 1;
            if let Some(ts) = trigger_ns {
                m.decision_latency_seconds
                    .observe(monotonic_ns().saturating_sub(ts) as f64 / 1e9);
            }
        }
        self.publish(signals);
    }

    /// Reads the agent's own memory charge for `/metrics`, saying loudly when it nears the
    /// limit.
    pub(super) fn check_own_memory(&mut self) {
        let charge = self.own_memory.check(&self.hierarchy, &self.own_pod);
        self.visibility.metrics.own_memory_charged = charge.map(|c| c.charged);
        self.visibility.metrics.own_memory_limit = charge.and_then(|c| c.limit);
    }

    /// Publishes what readers see, with the signal views just built; never waits for them.
    pub(super) fn publish(&self, signals: Vec<SignalView>) {
        let description = self.source.describe(self.timers.poll_interval);
        let snapshot = Snapshot {
            metrics: self.visibility.metrics.clone(),
            readiness: Readiness {
                source: Some(description.clone()),
                pods: match &self.pods.source_down {
                    None => Ok(self.core.pod_count()),
                    Some(why) => Err(why.clone()),
                },
                checkpoint: Some(self.checkpoint.health(Instant::now())),
            },
            ranking: DebugRanking {
                signals,
                rankings: publish::rankings(&self.core),
                decisions: self.visibility.decisions.to_vec(),
                source: SourceView {
                    description,
                    events_received: self.visibility.metrics.events_received,
                    events_lost: self.visibility.metrics.events_lost,
                    events_undecodable: self.visibility.metrics.events_undecodable,
                },
            },
            config: Some(self.config.view()),
            shadow: self.shadow.as_ref().map(|s| s.report(unix_ns_now())),
        };
        self.visibility.publisher.publish(snapshot);
    }

    pub(super) fn print_status(&self) {
        let observed = self.core.observations();
        let signals: Vec<String> = observed
            .iter()
            .map(|(s, o)| match s {
                Signal::PidAvailable => format!("{} {}", s.as_str(), o.available),
                _ => format!("{} {}", s.as_str(), bytes(o.available)),
            })
            .collect();
        logging::stderr_line(format_args!("status: {}", signals.join(", ")));
        let ranking = self.core.ranking(Signal::AllocatableMemoryAvailable);
        for (i, (facts, usage)) in ranking.iter().take(5).enumerate() {
            let ws = usage.map_or("no stats".to_string(), |u| {
                bytes(u.memory_working_set_bytes as i64)
            });
            logging::stderr_line(format_args!(
                "  {:>2}. {:<40} ws {:>9}  request {:>9}  priority {}{}",
                i + 1,
                facts.pod.to_string(),
                ws,
                bytes(facts.memory_request.ceil_units()),
                facts.priority,
                if facts.critical { "  (critical)" } else { "" }
            ));
        }
    }

    /// Adds the events seen and lost since the last call to the checkpoint's counters.
    pub(super) fn save_counters(&mut self) {
        self.checkpoint.save_counters(Instant::now());
    }
}
