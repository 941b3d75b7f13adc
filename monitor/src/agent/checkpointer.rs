//! The agent's one door to its checkpoint: what a decision, a finished action and the event
//! counters change goes into the saved state here and is written through the
//! [`CheckpointWriter`]. The decision step runs after every input; most evaluations change
//! nothing worth keeping, so an unchanged decision state is not written again. Only the memory
//! of the agent's own mode (acting or dry run) is changed; the other mode's stays as it was.
use std::io;

use tokio::time::Instant;

use crate::{
    checkpoint::writer::{CheckpointHealth, CheckpointWriter, Persister},
    engine::{
        checkpoint::{AgentState, Memory, Mode, Now, decision_state},
        decide::EvictionState,
        pod_facts::PodRef,
        signal::{NodeCondition, Signal},
    },
};

/// An eviction the decision step just started, as the checkpoint keeps it.
pub(super) struct Started<'a> {
    pub(super) pod: &'a PodRef,
    pub(super) signal: Signal,
    /// The grace period the pod was given.
    pub(super) grace_period_seconds: i64,
}

pub(super) struct Checkpointer<P> {
    writer: CheckpointWriter<P>,
    /// What a restart would read, once the writer has written it.
    saved: AgentState,
    /// The agent's mode: whose memory it changes.
    mode: Mode,
    /// The checkpoint found at start could not be used and was set aside.
    damaged_at_start: bool,
    /// Decision state and node conditions as last put into `saved`.
    written_decision: Option<(EvictionState, Vec<NodeCondition>)>,
    /// Kernel records received and lost since they were last added to `saved`'s counters.
    received_unsaved: u64,
    lost_unsaved: u64,
}

impl<P: Persister> Checkpointer<P> {
    /// `saved` as [`crate::engine::checkpoint::take_over`] handed it to the agent in `mode`.
    pub(super) fn new(writer: CheckpointWriter<P>, saved: AgentState, mode: Mode) -> Self {
        Self {
            writer,
            saved,
            mode,
            damaged_at_start: false,
            written_decision: None,
            received_unsaved: 0,
            lost_unsaved: 0,
        }
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

    /// Keeps a decision's state and writes it, unless it equals the last one kept and
    /// started no eviction. `clocks` is read only when something is written; when it fails,
    /// nothing is kept, so the next decision tries again.
    pub(super) fn record_decision(
        &mut self,
        state: &EvictionState,
        conditions: &[NodeCondition],
        started: Option<Started<'_>>,
        clocks: impl FnOnce() -> io::Result<Now>,
        at: Instant,
    ) {
        let unchanged = self
            .written_decision
            .as_ref()
            .is_some_and(|(s, c)| s == state && c.as_slice() == conditions);
        if started.is_none() && unchanged {
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
        self.written_decision = Some((state.clone(), conditions.to_vec()));
        self.writer.save(&self.saved, at);
    }

    /// Keeps what a finished eviction freed and writes it.
    pub(super) fn record_freed(&mut self, uid: &str, bytes_freed: u64, at: Instant) {
        decision_state::record_freed(self.own_mut(), uid, bytes_freed);
        self.writer.save(&self.saved, at);
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
        self.writer.save(&self.saved, at);
    }

    /// When a failed write is to be tried again.
    pub(super) fn retry_at(&self) -> Option<Instant> {
        self.writer.retry_at()
    }

    pub(super) fn retry(&mut self, at: Instant) {
        self.writer.retry(&self.saved, at);
    }

    pub(super) fn health(&self, at: Instant) -> CheckpointHealth {
        self.writer.health(at)
    }

    pub(super) fn write_failures(&self) -> u64 {
        self.writer.failures_total()
    }
}

#[cfg(test)]
mod tests {
    use std::{cell::RefCell, rc::Rc};

    use super::*;
    use crate::{
        checkpoint::{StateError, StoreError},
        engine::{checkpoint::decode, instant::MonoInstant},
    };

    /// The states written, in order; `failing` makes each write fail with ENOSPC.
    #[derive(Clone, Default)]
    struct Disk {
        written: Rc<RefCell<Vec<AgentState>>>,
        failing: Rc<RefCell<bool>>,
    }

    impl Persister for Disk {
        fn save(&mut self, state: &AgentState) -> Result<bool, StateError> {
            if *self.failing.borrow() {
                return Err(StateError::Store(StoreError::Io {
                    action: "write temporary file",
                    path: "/checkpoints/.agent_state.tmp-1".into(),
                    source: io::Error::from_raw_os_error(libc::ENOSPC),
                }));
            }
            self.written.borrow_mut().push(state.clone());
            Ok(true)
        }
    }

    fn checkpointer() -> (Checkpointer<Disk>, Disk) {
        let disk = Disk::default();
        let writer = CheckpointWriter::new(disk.clone());
        (
            Checkpointer::new(writer, AgentState::default(), Mode::Acting),
            disk,
        )
    }

    fn now() -> io::Result<Now> {
        Ok(Now {
            unix_ms: 1_700_000_000_000,
            boot_id: "boot-a".into(),
            boot_ms: 5_000,
        })
    }

    fn pod() -> PodRef {
        PodRef {
            namespace: "default".into(),
            name: "web-1".into(),
            uid: "u1".into(),
        }
    }

    fn evicted_at(ms: u64) -> EvictionState {
        EvictionState {
            last_eviction: Some(MonoInstant::from_millis(ms)),
            ..EvictionState::default()
        }
    }

    #[test]
    fn an_unchanged_decision_is_not_written_again_and_a_change_or_an_eviction_is() {
        let (mut c, disk) = checkpointer();
        let calm = EvictionState::default();
        let at = Instant::now();
        c.record_decision(&calm, &[], None, now, at);
        c.record_decision(&calm, &[], None, || panic!("clocks read for nothing"), at);
        assert_eq!(disk.written.borrow().len(), 1);
        let pressure = [NodeCondition::MemoryPressure];
        c.record_decision(&calm, &pressure, None, now, at);
        assert_eq!(disk.written.borrow().len(), 2, "a condition changed");
        let state = evicted_at(5_000);
        let started = Started {
            pod: &pod(),
            signal: Signal::MemoryAvailable,
            grace_period_seconds: 30,
        };
        c.record_decision(&state, &pressure, Some(started), now, at);
        let written = disk.written.borrow();
        assert_eq!(written.len(), 3);
        let kept = &written.last().unwrap().acting;
        let last = kept
            .v1
            .last_eviction
            .as_ref()
            .expect("the eviction is kept");
        assert_eq!(last.pod.uid, "u1");
        assert_eq!(kept.pending_grace_period_seconds(), Some(30));
        assert_eq!(kept.v1.node_conditions["MemoryPressure"].status, "True");
    }

    #[test]
    fn a_dry_run_writes_its_own_memory_and_leaves_the_acting_eviction_in_flight() {
        let disk = Disk::default();
        let mut saved = AgentState::default();
        saved.acting.record_eviction(
            decision_state::saved_pod(&pod()),
            "memory.available",
            0,
            &now().unwrap(),
        );
        saved.acting.record_grace_period(8);
        let acting_before = saved.acting.clone();
        let mut c = Checkpointer::new(CheckpointWriter::new(disk.clone()), saved, Mode::DryRun);
        let at = Instant::now();
        // The dry run's decision state knows nothing in flight, and it decides an eviction.
        c.record_decision(&EvictionState::default(), &[], None, now, at);
        let started = Started {
            pod: &PodRef {
                name: "other".into(),
                uid: "u2".into(),
                ..pod()
            },
            signal: Signal::MemoryAvailable,
            grace_period_seconds: 1,
        };
        c.record_decision(&evicted_at(5_000), &[], Some(started), now, at);
        let written = disk.written.borrow();
        let last = written.last().unwrap();
        assert_eq!(last.acting, acting_before, "the acting memory is untouched");
        let dry = last.dry_run.v1.last_eviction.as_ref().expect("its own");
        assert_eq!(dry.pod.uid, "u2");
    }

    #[test]
    fn a_decision_whose_clocks_cannot_be_read_is_kept_at_the_next_one() {
        let (mut c, disk) = checkpointer();
        let state = EvictionState::default();
        let pressure = [NodeCondition::MemoryPressure];
        let at = Instant::now();
        c.record_decision(
            &state,
            &pressure,
            None,
            || Err(io::Error::other("EMFILE")),
            at,
        );
        assert!(disk.written.borrow().is_empty());
        c.record_decision(&state, &pressure, None, now, at);
        assert_eq!(
            disk.written.borrow().len(),
            1,
            "the same state, not written before, is written now"
        );
    }

    #[test]
    fn records_counted_are_added_once_and_a_failed_write_is_retried_with_the_newest_state() {
        let (mut c, disk) = checkpointer();
        let at = Instant::now();
        c.count_received(5);
        c.count_lost(2);
        c.count_received(1);
        *disk.failing.borrow_mut() = true;
        c.save_counters(at);
        assert!(c.retry_at().is_some());
        assert!(matches!(c.health(at), CheckpointHealth::Failing { .. }));
        c.save_counters(at);
        *disk.failing.borrow_mut() = false;
        c.retry(c.retry_at().unwrap());
        assert_eq!(c.health(at), CheckpointHealth::Writable);
        assert_eq!(
            c.write_failures(),
            1,
            "the second save waited for the retry"
        );
        let written = disk.written.borrow();
        let counters = &written.last().unwrap().acting.v1.counters;
        assert_eq!((counters.events_received, counters.events_lost), (6, 2));
        // What was written decodes as the agent reads it at start.
        let bytes = crate::engine::checkpoint::encode(written.last().unwrap()).unwrap();
        assert!(decode(&bytes).is_ok());
    }
}
