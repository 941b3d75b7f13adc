//! The checkpointer: what it keeps of each change, and how it outlives failed writes.
use std::{cell::RefCell, rc::Rc};

use super::*;
use crate::{
    checkpoint::StoreError,
    engine::{checkpoint::decode, instant::MonoInstant},
};

/// The states written, in order, and every attempt counted; `failing` makes each write fail
/// with ENOSPC.
#[derive(Clone, Default)]
struct Disk {
    written: Rc<RefCell<Vec<AgentState>>>,
    failing: Rc<RefCell<bool>>,
    attempts: Rc<RefCell<u32>>,
}

impl Persister for Disk {
    fn save(&mut self, state: &AgentState) -> Result<bool, StateError> {
        *self.attempts.borrow_mut() += 1;
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
    (
        Checkpointer::new(disk.clone(), AgentState::default(), Mode::Acting),
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
    let mut c = Checkpointer::new(disk.clone(), saved, Mode::DryRun);
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

fn state(events: u64) -> AgentState {
    let mut state = AgentState::default();
    state.acting.count_events(events, 0);
    state
}

/// Puts `state` into the checkpointer and writes it, as its changes do.
fn save(c: &mut Checkpointer<Disk>, state: AgentState, at: Instant) {
    c.saved = state;
    c.write(at);
}

#[test]
fn failed_writes_back_off_and_the_newest_state_lands_once_writable() {
    let (mut c, disk) = checkpointer();
    *disk.failing.borrow_mut() = true;
    let t0 = Instant::now();
    save(&mut c, state(1), t0);
    assert_eq!(*disk.attempts.borrow(), 1);
    assert!(matches!(
        c.health(t0),
        CheckpointHealth::Failing { ref error, .. } if error.contains("No space left")
    ));
    // Saves before the retry time do not hammer the disk.
    save(&mut c, state(2), t0 + Duration::from_millis(500));
    assert_eq!(*disk.attempts.borrow(), 1);
    assert_eq!(c.retry_at(), Some(t0 + FIRST_RETRY));
    // Each failed retry doubles the delay.
    c.retry(t0 + FIRST_RETRY);
    assert_eq!(*disk.attempts.borrow(), 2);
    assert_eq!(c.retry_at(), Some(t0 + FIRST_RETRY + 2 * FIRST_RETRY));
    assert_eq!(c.write_failures(), 2);
    // The disk recovers: the next retry writes the newest state and ends the episode.
    *disk.failing.borrow_mut() = false;
    let later = t0 + Duration::from_secs(10);
    c.saved = state(3);
    c.retry(later);
    assert_eq!(disk.written.borrow().last(), Some(&state(3)));
    assert_eq!(c.health(later), CheckpointHealth::Writable);
    assert_eq!(c.retry_at(), None, "nothing pending");
}

#[test]
fn the_delay_is_capped() {
    let (mut c, disk) = checkpointer();
    *disk.failing.borrow_mut() = true;
    let mut now = Instant::now();
    save(&mut c, state(1), now);
    for _ in 0..20 {
        now = c.retry_at().unwrap();
        c.retry(now);
    }
    assert_eq!(c.retry_at(), Some(now + MAX_RETRY));
    assert_eq!(c.write_failures(), 21);
}
