//! Writing the agent's checkpoint without ever letting a failed write stop the agent.
//!
//! A node under pressure is often a node in trouble: its disk full, its file descriptors
//! exhausted, its filesystem remounted read-only. The checkpoint only lets a restarted agent
//! keep its timers; losing a write must never cost the eviction that protects the node. So a
//! failed write is logged once per episode, counted, and retried with a growing delay while
//! the agent keeps deciding and acting; the first write that succeeds again ends the episode.
use std::time::Duration;

use tokio::time::Instant;

use super::{StateError, StateManager};
use crate::engine::checkpoint::AgentState;

/// First retry after a failed write.
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// Longest wait between retries.
const MAX_RETRY: Duration = Duration::from_secs(60);

/// Where checkpoints go: the real store, or a fake in tests.
pub(crate) trait Persister {
    /// Writes `state` unless the store already holds it; true when it wrote.
    fn save(&mut self, state: &AgentState) -> Result<bool, StateError>;
}

impl<P: Persister + ?Sized> Persister for Box<P> {
    fn save(&mut self, state: &AgentState) -> Result<bool, StateError> {
        (**self).save(state)
    }
}

impl Persister for StateManager {
    fn save(&mut self, state: &AgentState) -> Result<bool, StateError> {
        self.save_if_changed(state)
    }
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

/// What the writer can say about the checkpoint, for health and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CheckpointHealth {
    /// The last write succeeded (or nothing needed writing).
    Writable,
    /// Writes fail since `for_secs` seconds; the state is kept in memory and retried.
    Failing { for_secs: u64, error: String },
}

/// Saves the state through a [`Persister`], surviving its failures.
pub(crate) struct CheckpointWriter<P> {
    persister: P,
    episode: Option<Episode>,
    /// Whether the newest state is not on disk yet.
    pending: bool,
    failures_total: u64,
}

impl<P: Persister> CheckpointWriter<P> {
    pub(crate) fn new(persister: P) -> Self {
        Self {
            persister,
            episode: None,
            pending: false,
            failures_total: 0,
        }
    }

    /// Starts in a failure episode: the store could not be prepared or written at start.
    pub(crate) fn failing_since_start(persister: P, error: &StateError, now: Instant) -> Self {
        let mut writer = Self::new(persister);
        writer.pending = true;
        writer.fail(error, now);
        writer
    }

    /// Saves `state` now, or, while writes fail, at the next retry; never an error.
    pub(crate) fn save(&mut self, state: &AgentState, now: Instant) {
        self.pending = true;
        if self.episode.as_ref().is_some_and(|e| now < e.next_try) {
            return;
        }
        self.attempt(state, now);
    }

    /// When a failed write is to be tried again, if one is pending.
    pub(crate) fn retry_at(&self) -> Option<Instant> {
        self.episode
            .as_ref()
            .filter(|_| self.pending)
            .map(|e| e.next_try)
    }

    /// Tries a pending write again once its retry time has come.
    pub(crate) fn retry(&mut self, state: &AgentState, now: Instant) {
        if self.retry_at().is_some_and(|at| now >= at) {
            self.attempt(state, now);
        }
    }

    /// Failed writes since start.
    pub(crate) fn failures_total(&self) -> u64 {
        self.failures_total
    }

    pub(crate) fn health(&self, now: Instant) -> CheckpointHealth {
        match &self.episode {
            None => CheckpointHealth::Writable,
            Some(e) => CheckpointHealth::Failing {
                for_secs: now.saturating_duration_since(e.since).as_secs(),
                error: e.last_error.clone(),
            },
        }
    }

    fn attempt(&mut self, state: &AgentState, now: Instant) {
        match self.persister.save(state) {
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
mod tests {
    use std::{cell::RefCell, io, path::PathBuf, rc::Rc};

    use super::*;
    use crate::checkpoint::StoreError;

    /// A store whose writes fail while `failing` is set, recording each attempt.
    #[derive(Clone, Default)]
    struct FakeStore {
        failing: Rc<RefCell<bool>>,
        attempts: Rc<RefCell<u32>>,
        written: Rc<RefCell<Option<AgentState>>>,
    }

    impl Persister for FakeStore {
        fn save(&mut self, state: &AgentState) -> Result<bool, StateError> {
            *self.attempts.borrow_mut() += 1;
            if *self.failing.borrow() {
                return Err(StateError::Store(StoreError::Io {
                    action: "write temporary file",
                    path: PathBuf::from("/state/.agent_state.tmp-1"),
                    source: io::Error::from_raw_os_error(libc::ENOSPC),
                }));
            }
            *self.written.borrow_mut() = Some(state.clone());
            Ok(true)
        }
    }

    fn state(events: u64) -> AgentState {
        let mut state = AgentState::default();
        state.acting.count_events(events, 0);
        state
    }

    #[test]
    fn failed_writes_back_off_and_the_newest_state_lands_once_writable() {
        let store = FakeStore::default();
        *store.failing.borrow_mut() = true;
        let mut writer = CheckpointWriter::new(store.clone());
        let t0 = Instant::now();
        writer.save(&state(1), t0);
        assert_eq!(*store.attempts.borrow(), 1);
        assert!(matches!(
            writer.health(t0),
            CheckpointHealth::Failing { ref error, .. } if error.contains("No space left")
        ));
        // Saves before the retry time do not hammer the disk.
        writer.save(&state(2), t0 + Duration::from_millis(500));
        assert_eq!(*store.attempts.borrow(), 1);
        assert_eq!(writer.retry_at(), Some(t0 + FIRST_RETRY));
        // Each failed retry doubles the delay.
        writer.retry(&state(2), t0 + FIRST_RETRY);
        assert_eq!(*store.attempts.borrow(), 2);
        assert_eq!(writer.retry_at(), Some(t0 + FIRST_RETRY + 2 * FIRST_RETRY));
        assert_eq!(writer.failures_total(), 2);
        // The disk recovers: the next retry writes the newest state and ends the episode.
        *store.failing.borrow_mut() = false;
        let later = t0 + Duration::from_secs(10);
        writer.retry(&state(3), later);
        assert_eq!(*store.written.borrow(), Some(state(3)));
        assert_eq!(writer.health(later), CheckpointHealth::Writable);
        assert_eq!(writer.retry_at(), None, "nothing pending");
    }

    #[test]
    fn the_delay_is_capped() {
        let store = FakeStore::default();
        *store.failing.borrow_mut() = true;
        let mut writer = CheckpointWriter::new(store.clone());
        let mut now = Instant::now();
        writer.save(&state(1), now);
        for _ in 0..20 {
            now = writer.retry_at().unwrap();
            writer.retry(&state(1), now);
        }
        assert_eq!(writer.retry_at(), Some(now + MAX_RETRY));
        assert_eq!(writer.failures_total(), 21);
    }
}
