//! The decision step's memory ([`EvictionState`], on the boot-time clock) carried into and out
//! of the checkpointed [`Memory`] of the agent's mode (wall clock, plus boot-clock marks for
//! the same boot).
//!
//! After a restart inside a soft grace period the timer keeps its first-observed instant, and
//! the last eviction keeps blocking the next one for the rest of the eviction interval.
use crate::{
    checkpoint::{Memory, Now, SavedPod},
    decide::{EvictionState, PendingCleanup, ThresholdObservedAt},
    instant::MonoInstant,
    pod_facts::PodRef,
    signal::{NodeCondition, Signal},
    threshold::{ThresholdId, ThresholdKind},
};

/// Node conditions in the order they are reported.
const CONDITIONS: [NodeCondition; 3] = [
    NodeCondition::MemoryPressure,
    NodeCondition::DiskPressure,
    NodeCondition::PidPressure,
];

/// Copies what must survive a restart from the decision state into the checkpoint.
pub fn save(state: &EvictionState, conditions: &[NodeCondition], saved: &mut Memory, now: &Now) {
    for signal in Signal::ALL {
        match soft_first_observed(state, signal) {
            Some(observed) => saved.observe_soft_threshold(signal.as_str(), &at(now, observed.at)),
            None => saved.clear_soft_threshold(signal.as_str()),
        }
    }
    for condition in CONDITIONS {
        saved.set_condition(
            condition_name(condition),
            status(conditions, condition),
            now,
        );
    }
    if state.awaiting_cleanup.is_none() {
        saved.finish_cleanup();
    }
}

/// Whether [`save`] would leave `saved` as it is: then nothing needs writing, nor the clocks
/// reading.
pub fn is_saved(state: &EvictionState, conditions: &[NodeCondition], saved: &Memory) -> bool {
    let timers_kept = Signal::ALL.into_iter().all(|signal| {
        let name = signal.as_str();
        let kept = saved
            .v1
            .soft_threshold_first_observed_unix_ms
            .contains_key(name);
        let marked = saved
            .boot
            .as_ref()
            .is_some_and(|b| b.soft_threshold_first_observed_ms.contains_key(name));
        match soft_first_observed(state, signal) {
            Some(_) => kept,
            None => !kept && !marked,
        }
    });
    let conditions_kept = CONDITIONS.into_iter().all(|condition| {
        saved
            .v1
            .node_conditions
            .get(condition_name(condition))
            .is_some_and(|kept| kept.status == status(conditions, condition))
    });
    let cleanup_kept = state.awaiting_cleanup.is_some()
        || (saved.v1.awaiting_cleanup.is_none() && saved.pending.is_none());
    timers_kept && conditions_kept && cleanup_kept
}

/// When `signal`'s soft threshold was first met, while it is.
fn soft_first_observed(state: &EvictionState, signal: Signal) -> Option<&ThresholdObservedAt> {
    let soft = ThresholdId {
        signal,
        kind: ThresholdKind::Soft,
    };
    state
        .thresholds_first_observed
        .iter()
        .find(|o| o.threshold == soft)
}

/// A node condition's status as the checkpoint spells it.
fn status(conditions: &[NodeCondition], condition: NodeCondition) -> &'static str {
    if conditions.contains(&condition) {
        "True"
    } else {
        "False"
    }
}

/// Rebuilds the decision state from a checkpoint read at start.
pub fn restore(saved: &Memory, now: &Now) -> EvictionState {
    let same_boot = saved.boot.as_ref().filter(|b| b.boot_id == now.boot_id);
    let instant = |unix_ms: u64, boot_ms: Option<u64>| match boot_ms {
        Some(ms) => MonoInstant::from_millis(ms),
        // Another boot: carry the elapsed wall-clock time over; a clock that went back
        // counts as no time passed, so grace periods never end early.
        None => MonoInstant::from_millis(
            now.boot_ms
                .saturating_sub(now.unix_ms.saturating_sub(unix_ms)),
        ),
    };
    let thresholds_first_observed = saved
        .v1
        .soft_threshold_first_observed_unix_ms
        .iter()
        .filter_map(|(name, unix_ms)| {
            let signal: Signal = name.parse().ok()?;
            let boot_ms =
                same_boot.and_then(|b| b.soft_threshold_first_observed_ms.get(name).copied());
            Some(ThresholdObservedAt {
                threshold: ThresholdId {
                    signal,
                    kind: ThresholdKind::Soft,
                },
                at: instant(*unix_ms, boot_ms),
            })
        })
        .collect();
    let last_eviction = saved.v1.last_eviction.as_ref().map(|record| {
        instant(
            record.evicted_at_unix_ms,
            same_boot.and_then(|b| b.last_eviction_ms),
        )
    });
    let awaiting_cleanup = saved
        .v1
        .awaiting_cleanup
        .as_ref()
        .map(|record| PendingCleanup {
            pod: pod_ref(&record.pod),
            evicted_at: instant(
                record.evicted_at_unix_ms,
                same_boot.and_then(|b| b.last_eviction_ms),
            ),
            // Unknown from a file of version 2 or older: the wait is then the cleanup
            // timeout from the decision, and a restarted eviction starts a new grace period.
            grace_period_seconds: saved.pending_grace_period_seconds().unwrap_or(0),
        });
    EvictionState {
        thresholds_first_observed,
        thresholds_acting: Vec::new(),
        conditions_last_observed: Vec::new(),
        last_eviction,
        awaiting_cleanup,
    }
}

/// Records the bytes an eviction freed, once the pod is gone, on its history entries.
pub fn record_freed(saved: &mut Memory, uid: &str, bytes_freed: u64) {
    let v1 = &mut saved.v1;
    if v1
        .awaiting_cleanup
        .as_ref()
        .is_some_and(|r| r.pod.uid == uid)
    {
        v1.awaiting_cleanup = None;
    }
    for record in v1
        .last_eviction
        .iter_mut()
        .chain(v1.recent_evictions.last_mut())
    {
        if record.pod.uid == uid {
            record.bytes_freed = bytes_freed;
        }
    }
}

/// The checkpoint's form of a pod reference.
pub fn saved_pod(pod: &PodRef) -> SavedPod {
    SavedPod {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
    }
}

fn pod_ref(pod: &SavedPod) -> PodRef {
    PodRef {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
        uid: pod.uid.clone(),
    }
}

/// `now` moved back to a boot-clock instant in the past.
fn at(now: &Now, instant: MonoInstant) -> Now {
    let ago = now.boot_ms.saturating_sub(instant.as_millis());
    Now {
        unix_ms: now.unix_ms.saturating_sub(ago),
        boot_id: now.boot_id.clone(),
        boot_ms: instant.as_millis(),
    }
}

fn condition_name(condition: NodeCondition) -> &'static str {
    match condition {
        NodeCondition::MemoryPressure => "MemoryPressure",
        NodeCondition::DiskPressure => "DiskPressure",
        NodeCondition::PidPressure => "PIDPressure",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now(unix_ms: u64, boot_id: &str, boot_ms: u64) -> Now {
        Now {
            unix_ms,
            boot_id: boot_id.into(),
            boot_ms,
        }
    }

    fn pod() -> PodRef {
        PodRef {
            namespace: "default".into(),
            name: "web-1".into(),
            uid: "u1".into(),
        }
    }

    fn soft_memory_since(ms: u64) -> EvictionState {
        EvictionState {
            thresholds_first_observed: vec![ThresholdObservedAt {
                threshold: ThresholdId {
                    signal: Signal::MemoryAvailable,
                    kind: ThresholdKind::Soft,
                },
                at: MonoInstant::from_millis(ms),
            }],
            ..EvictionState::default()
        }
    }

    #[test]
    fn soft_grace_timer_survives_a_restart_in_the_same_boot() {
        let mut saved = Memory::default();
        save(
            &soft_memory_since(40_000),
            &[NodeCondition::MemoryPressure],
            &mut saved,
            &now(1_000_000, "b", 50_000),
        );
        assert_eq!(
            saved.v1.soft_threshold_first_observed_unix_ms["memory.available"],
            990_000
        );
        assert_eq!(saved.v1.node_conditions["MemoryPressure"].status, "True");
        assert_eq!(saved.v1.node_conditions["DiskPressure"].status, "False");
        let restored = restore(&saved, &now(1_005_000, "b", 55_000));
        assert_eq!(
            restored.thresholds_first_observed,
            soft_memory_since(40_000).thresholds_first_observed
        );
    }

    #[test]
    fn another_boot_carries_wall_clock_time_over() {
        let mut saved = Memory::default();
        save(
            &soft_memory_since(40_000),
            &[],
            &mut saved,
            &now(1_000_000, "old", 50_000),
        );
        // Rebooted: 20 s of wall time later, 3 s into the new boot.
        let restored = restore(&saved, &now(1_020_000, "new", 3_000));
        assert_eq!(
            restored.thresholds_first_observed[0].at,
            MonoInstant::from_millis(0),
            "30 s ago saturates at boot"
        );
        // A wall clock set back means no time passed, never more.
        let restored = restore(&saved, &now(900_000, "new", 3_000));
        assert_eq!(
            restored.thresholds_first_observed[0].at,
            MonoInstant::from_millis(3_000)
        );
    }

    #[test]
    fn the_boot_clock_measures_in_the_same_boot_and_the_wall_clock_without_marks() {
        let mut saved = Memory::default();
        save(
            &soft_memory_since(40_000),
            &[],
            &mut saved,
            &now(1_000_000, "b", 50_000),
        );
        // Same boot: a wall clock stepped an hour ahead or ten minutes back during the restart
        // changes nothing.
        for unix_ms in [1_000_000 + 3_600_000, 1_000_000 - 600_000] {
            let restored = restore(&saved, &now(unix_ms, "b", 55_000));
            assert_eq!(
                restored.thresholds_first_observed,
                soft_memory_since(40_000).thresholds_first_observed
            );
        }
        // No boot marks (a state migrated from version 1): the wall clock measures, and a
        // wall clock behind the observation counts as no time passed.
        saved.boot = None;
        let restored = restore(&saved, &now(1_005_000, "b", 55_000));
        assert_eq!(
            restored.thresholds_first_observed[0].at,
            MonoInstant::from_millis(40_000)
        );
        let restored = restore(&saved, &now(900_000, "b", 55_000));
        assert_eq!(
            restored.thresholds_first_observed[0].at,
            MonoInstant::from_millis(55_000)
        );
    }

    #[test]
    fn last_eviction_and_pending_cleanup_are_restored() {
        let mut saved = Memory::default();
        saved.record_eviction(
            saved_pod(&pod()),
            "memory.available",
            0,
            &now(1_000_000, "b", 70_000),
        );
        let restored = restore(&saved, &now(1_004_000, "b", 74_000));
        assert_eq!(
            restored.last_eviction,
            Some(MonoInstant::from_millis(70_000))
        );
        assert_eq!(
            restored.awaiting_cleanup.as_ref().map(|p| p.pod.clone()),
            Some(pod())
        );
        // Once cleanup finished, saving clears it in the checkpoint.
        save(
            &EvictionState::default(),
            &[],
            &mut saved,
            &now(1_005_000, "b", 75_000),
        );
        assert!(
            restore(&saved, &now(1_006_000, "b", 76_000))
                .awaiting_cleanup
                .is_none()
        );
    }

    #[test]
    fn freed_bytes_land_on_the_eviction_records() {
        let mut saved = Memory::default();
        saved.record_eviction(saved_pod(&pod()), "memory.available", 0, &now(1, "b", 1));
        record_freed(&mut saved, "other", 5);
        assert_eq!(saved.v1.last_eviction.as_ref().unwrap().bytes_freed, 0);
        record_freed(&mut saved, "u1", 300 << 20);
        assert_eq!(
            saved.v1.last_eviction.as_ref().unwrap().bytes_freed,
            300 << 20
        );
        assert_eq!(saved.v1.recent_evictions[0].bytes_freed, 300 << 20);
        assert!(saved.v1.awaiting_cleanup.is_none());
    }

    #[test]
    fn is_saved_tells_whether_saving_would_change_the_checkpoint() {
        let mut saved = Memory::default();
        let soft = soft_memory_since(40_000);
        let pressure = [NodeCondition::MemoryPressure];
        assert!(!is_saved(&soft, &pressure, &saved), "nothing saved yet");
        save(&soft, &pressure, &mut saved, &now(1_000_000, "b", 50_000));
        assert!(is_saved(&soft, &pressure, &saved));
        // The timer keeps its first instant: a later one changes nothing saved.
        assert!(is_saved(&soft_memory_since(45_000), &pressure, &saved));
        assert!(!is_saved(&soft, &[], &saved), "a condition changed");
        assert!(
            !is_saved(&EvictionState::default(), &pressure, &saved),
            "a timer stopped"
        );
        saved.record_eviction(saved_pod(&pod()), "memory.available", 0, &now(1, "b", 1));
        assert!(!is_saved(&soft, &pressure, &saved), "the cleanup ended");
    }

    #[test]
    fn cleared_soft_thresholds_leave_the_checkpoint() {
        let mut saved = Memory::default();
        save(&soft_memory_since(1), &[], &mut saved, &now(10, "b", 5));
        save(
            &EvictionState::default(),
            &[],
            &mut saved,
            &now(20, "b", 15),
        );
        assert!(saved.v1.soft_threshold_first_observed_unix_ms.is_empty());
    }
}
