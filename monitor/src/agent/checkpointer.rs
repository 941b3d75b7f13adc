//! The agent's one door to its checkpoint: what a decision, a finished action and the event
//! counters change goes into the saved state here and is written through the [`Persister`].
//! The decision step runs after every input; most evaluations change nothing worth keeping,
//! so a decision whose state `saved` already holds is not written again: `saved` is the one
//! copy of what was decided. Only the memory of the agent's own
//! mode (acting or dry run) is changed; the other mode's stays as it was.
//!
//! A failed write never stops the agent. A node under pressure is often a node in trouble:
//! its disk full, its file descriptors exhausted, its filesystem remounted read-only. The
//! checkpoint only lets a restarted agent keep its timers; losing a write must never cost the
//! eviction that protects the node. So a failed write is logged once per episode, counted,
//! and retried with a growing delay while the agent keeps deciding and acting; the first
//! write that succeeds again ends the episode.
use std::{io, time::Duration};

use tokio::time::Instant;

use crate::{
    checkpoint::{StateError, health::CheckpointHealth, persister::Persister},
    engine::{
        checkpoint::{AgentState, Memory, Mode, Now, decision_state},
        decide::EvictionState,
        pod_facts::PodRef,
        signal::{NodeCondition, Signal},
    },
};

/// First retry after a failed write.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// Longest wait between retries.
const MAX_RETRY: Duration = Duration::from_secs(60);

/// An eviction the decision step just started, as the checkpoint keeps it.
pub(super) struct Started<'a> {
    pub(super) pod: &'a PodRef,
    pub(super) signal: Signal,
    /// The grace period the pod was given.
    pub(super) grace_period_seconds: i64,
}

/// A run of failed writes.
#[derive(Debug, Clone)]
struct Episode {
    since: Instant,
    failures: u64,
    next_try: Instant,
    delay: Duration,
    last_error: String,
}

pub(super) struct Checkpointer<P> {
    persister: P,
    /// What a restart would read, once it is written.
    saved: AgentState,
    /// The agent's mode: whose memory it changes.
    mode: Mode,
    /// The checkpoint found at start could not be used and was set aside.
    damaged_at_start: bool,
    /// Kernel records received and lost since they were last added to `saved`'s counters.
    received_unsaved: u64,
    lost_unsaved: u64,
    /// Whether the newest `saved` is not on disk yet.
    pending: bool,
    /// The failed writes since the last one that succeeded.
    episode: Option<Episode>,
    failures_total: u64,
}

impl<P: Persister> Checkpointer<P> {
    /// `saved` as [`crate::engine::checkpoint::take_over`] handed it to the agent in `mode`.
    pub(super) fn new(persister: P, saved: AgentState, mode: Mode) -> Self {
        Self {
            persister,
            saved,
            mode,
            damaged_at_start: false,
            received_unsaved: 0,
            lost_unsaved: 0,
            pending: false,
            episode: None,
            failures_total: 0,
        }
    }

    /// As [`Self::new`], in a failure episode: the store could not be prepared or written at
    /// start.
    pub(super) fn failing_since_start(
        persister: P,
        saved: AgentState,
        mode: Mode,
        error: &StateError,
        now: Instant,
    ) -> Self {
        let mut checkpointer = Self::new(persister, saved, mode);
        checkpointer.pending = true;
        checkpointer.fail(error, now);
        checkpointer
    }

    /// The state as saved (or about to be, while writes fail).
    pub(super) fn saved(&self) -> &AgentState {
        &self.saved
    }

    /// Notes that the checkpoint found at start could not be used, for the metrics.
    pub(super) fn found_damaged_at_start(&mut self) {
        self.damaged_at_start = true;
    }

    pub(super) fn damaged_at_start(&self) -> bool {
        self.damaged_at_start
    }

    /// The memory of this agent's mode, as saved.
    pub(super) fn own(&self) -> &Memory {
        self.saved.memory(self.mode)
    }

    fn own_mut(&mut self) -> &mut Memory {
        self.saved.memory_mut(self.mode)
    }

    /// Keeps a decision's state and writes it, unless `saved` already holds it and it started
    /// no eviction. `clocks` is read only when something is written; when it fails, nothing
    /// is kept, so the next decision tries again.
    pub(super) fn record_decision(
        &mut self,
        state: &EvictionState,
        conditions: &[NodeCondition],
        started: Option<Started<'_>>,
        clocks: impl FnOnce() -> io::Result<Now>,
        at: Instant,
    ) {
        if started.is_none() && decision_state::is_saved(state, conditions, self.own()) {
            return;
        }
        let now = match clocks() {
            Ok(now) => now,
            Err(e) => {
                tracing::warn!("reading the clocks for the checkpoint: {e}");
                return;
            }
        };
        let own = self.own_mut();
        decision_state::save(state, conditions, own, &now);
        if let Some(started) = started {
            own.record_eviction(
                decision_state::saved_pod(started.pod),
                started.signal.as_str(),
                0,
                &now,
            );
            own.record_grace_period(started.grace_period_seconds);
        }
        self.write(at);
    }

    /// Keeps what a finished eviction freed and writes it.
    pub(super) fn record_freed(&mut self, uid: &str, bytes_freed: u64, at: Instant) {
        decision_state::record_freed(self.own_mut(), uid, bytes_freed);
        self.write(at);
    }

    /// Kernel records received since the last call.
    pub(super) fn count_received(&mut self, records: u64) {
        self.received_unsaved += records;
    }

    /// Kernel records lost (the ring was full) since the last call.
    pub(super) fn count_lost(&mut self, records: u64) {
        self.lost_unsaved += records;
    }

    /// Adds the records counted since the last call to the saved counters and writes them.
    pub(super) fn save_counters(&mut self, at: Instant) {
        let (received, lost) = (self.received_unsaved, self.lost_unsaved);
        self.own_mut().count_events(received, lost);
        self.received_unsaved = 0;
        self.lost_unsaved = 0;
        self.write(at);
    }

    /// When a failed write is to be tried again, if one is pending.
    pub(super) fn retry_at(&self) -> Option<Instant> {
        self.episode
            .as_ref()
            .filter(|_| self.pending)
            .map(|e| e.next_try)
    }

    /// Tries a pending write again once its retry time has come.
    pub(super) fn retry(&mut self, at: Instant) {
        if self.retry_at().is_some_and(|retry_at| at >= retry_at) {
            self.attempt(at);
        }
    }

    pub(super) fn health(&self, at: Instant) -> CheckpointHealth {
        match &self.episode {
            None => CheckpointHealth::Writable,
            Some(e) => CheckpointHealth::Failing {
                for_secs: at.saturating_duration_since(e.since).as_secs(),
                error: e.last_error.clone(),
            },
        }
    }

    /// Failed writes since start.
    pub(super) fn write_failures(&self) -> u64 {
        self.failures_total
    }

    /// Writes `saved` now, or, while writes fail, at the next retry; never an error.
    fn write(&mut self, now: Instant) {
        self.pending = true;
        if self.episode.as_ref().is_some_and(|e| now < e.next_try) {
            return;
        }
        self.attempt(now);
    }

    fn attempt(&mut self, now: Instant) {
        match self.persister.save(&self.saved) {
            Ok(_) => {
                self.pending = false;
                if let Some(episode) = self.episode.take() {
                    tracing::info!(
                        "checkpoint written again after {} failed attempts over {:?}",
                        episode.failures,
                        now.saturating_duration_since(episode.since)
                    );
                }
            }
            Err(error) => self.fail(&error, now),
        }
    }

    fn fail(&mut self, error: &StateError, now: Instant) {
        self.failures_total += 1;
        let message = error.to_string();
        if let Some(episode) = &mut self.episode {
            episode.failures += 1;
            episode.delay = (episode.delay * 2).min(MAX_RETRY);
            episode.next_try = now + episode.delay;
            // Temporary file names change with every attempt; the cause is what matters.
            if cause(&episode.last_error) != cause(&message) {
                tracing::warn!("checkpoint still not written, now: {message}");
            }
            episode.last_error = message;
        } else {
            tracing::warn!(
                "checkpoint not written: {message}; the agent keeps deciding and acting, \
                 holds its state in memory and retries (first in {FIRST_RETRY:?}, then less \
                 often, up to every {MAX_RETRY:?})"
            );
            self.episode = Some(Episode {
                since: now,
                failures: 1,
                next_try: now + FIRST_RETRY,
                delay: FIRST_RETRY,
                last_error: message,
            });
        }
    }
}

/// An error message without the paths it names, to tell a new cause from a repeated one.
fn cause(message: &str) -> &str {
    message.rsplit(": ").next().unwrap_or(message)
}

#[cfg(test)]
#[path = "checkpointer_tests.rs"]
mod tests;
