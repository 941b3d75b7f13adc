//! How far the signals are from their thresholds, for the kernel's wake-ups.
//!
//! The kernel programs send working-set changes without waking the agent until the summed
//! growth reaches the memory headroom (see `monitor_common::WakeSlot`): below it, no memory
//! signal can cross a threshold, so the records only refresh the ranking and can wait. The
//! fork counter is armed the same way at the PID headroom: `pid.available` falls by at most
//! one per task created.
use std::collections::BTreeMap;

use super::quantity::Quantity;
use super::signal::{NodeCondition, Signal};
use super::threshold::{SignalObservation, Threshold};

/// The least growth in bytes of the working sets after which a memory threshold could be met:
/// the smallest `available - level` over memory thresholds, where the level includes the
/// minimum reclaim (the higher of the two levels a threshold can have). `None` when no
/// threshold watches memory; `Some(0)` when one is met or its signal is not observed.
pub(crate) fn memory_headroom(
    thresholds: &[Threshold],
    observations: &BTreeMap<Signal, SignalObservation>,
) -> Option<u64> {
    thresholds
        .iter()
        .filter(|t| t.signal.node_condition() == NodeCondition::MemoryPressure)
        .map(|t| observations.get(&t.signal).map_or(0, |o| distance(t, *o)))
        .min()
}

/// The least number of tasks whose creation could meet a pid threshold (one more than the
/// distance to its level: it is met strictly below). `None` when no pid threshold is
/// observed, or when one is met already: that reading has been decided on, and a wake-up at
/// every fork while the pressure lasts would only read the same pressure again.
pub(crate) fn pid_headroom(
    thresholds: &[Threshold],
    observations: &BTreeMap<Signal, SignalObservation>,
) -> Option<u64> {
    let mut met = false;
    let nearest = thresholds
        .iter()
        .filter(|t| t.signal.node_condition() == NodeCondition::PidPressure)
        .filter_map(|t| {
            let observed = *observations.get(&t.signal)?;
            met |= t.is_met(observed, false);
            Some(distance(t, observed).saturating_add(1))
        })
        .min();
    nearest.filter(|_| !met)
}

/// `available - level` of one threshold, in the signal's units, 0 when met.
fn distance(threshold: &Threshold, observed: SignalObservation) -> u64 {
    let mut level = threshold.value.resolve(observed.capacity);
    if let Some(min_reclaim) = threshold.min_reclaim {
        level = level.saturating_add(min_reclaim.resolve(observed.capacity));
    }
    let left = Quantity::from_units(observed.available).millis() - level.millis();
    u64::try_from(left / 1000).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::threshold::ThresholdValue;

    const MIB: i64 = 1 << 20;

    fn threshold(signal: Signal, value: ThresholdValue, min_reclaim: Option<i64>) -> Threshold {
        Threshold {
            signal,
            value,
            grace_period: Duration::ZERO,
            min_reclaim: min_reclaim.map(|b| ThresholdValue::Quantity(Quantity::from_units(b))),
        }
    }

    fn mib(n: i64) -> ThresholdValue {
        ThresholdValue::Quantity(Quantity::from_units(n * MIB))
    }

    fn observed(available_mib: i64, capacity_mib: i64) -> SignalObservation {
        SignalObservation {
            available: available_mib * MIB,
            capacity: capacity_mib * MIB,
        }
    }

    #[test]
    fn headroom_per_case() {
        struct Case {
            name: &'static str,
            thresholds: Vec<Threshold>,
            observations: Vec<(Signal, SignalObservation)>,
            headroom_mib: Option<u64>,
        }
        let node = Signal::MemoryAvailable;
        let pods = Signal::AllocatableMemoryAvailable;
        let cases = [
            Case {
                name: "no thresholds",
                thresholds: vec![],
                observations: vec![(node, observed(500, 1000))],
                headroom_mib: None,
            },
            Case {
                name: "only a pid threshold",
                thresholds: vec![threshold(
                    Signal::PidAvailable,
                    ThresholdValue::Quantity(Quantity::from_units(100)),
                    None,
                )],
                observations: vec![],
                headroom_mib: None,
            },
            Case {
                name: "distance to an absolute level",
                thresholds: vec![threshold(node, mib(100), None)],
                observations: vec![(node, observed(500, 1000))],
                headroom_mib: Some(400),
            },
            Case {
                // 25% is exact as a float32; the kubelet's rounding of others is its own test.
                name: "a percentage of capacity",
                thresholds: vec![threshold(node, ThresholdValue::Fraction(0.25), None)],
                observations: vec![(node, observed(500, 1000))],
                headroom_mib: Some(250),
            },
            Case {
                name: "min-reclaim counts as if reclaiming",
                thresholds: vec![threshold(node, mib(100), Some(50 * MIB))],
                observations: vec![(node, observed(500, 1000))],
                headroom_mib: Some(350),
            },
            Case {
                name: "the nearest of several signals",
                thresholds: vec![
                    threshold(node, mib(100), None),
                    threshold(pods, mib(100), None),
                ],
                observations: vec![(node, observed(500, 1000)), (pods, observed(150, 800))],
                headroom_mib: Some(50),
            },
            Case {
                name: "already met",
                thresholds: vec![threshold(node, mib(100), None)],
                observations: vec![(node, observed(80, 1000))],
                headroom_mib: Some(0),
            },
            Case {
                name: "exactly at the level",
                thresholds: vec![threshold(node, mib(100), None)],
                observations: vec![(node, observed(100, 1000))],
                headroom_mib: Some(0),
            },
            Case {
                name: "a watched signal that is not observed",
                thresholds: vec![threshold(pods, mib(100), None)],
                observations: vec![(node, observed(500, 1000))],
                headroom_mib: Some(0),
            },
        ];
        for case in cases {
            let observations = case.observations.into_iter().collect();
            assert_eq!(
                memory_headroom(&case.thresholds, &observations),
                case.headroom_mib.map(|m| m * MIB as u64),
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn pid_headroom_per_case() {
        let pids = |n: i64| ThresholdValue::Quantity(Quantity::from_units(n));
        let observed = |available: i64| SignalObservation {
            available,
            capacity: 32768,
        };
        let pid = Signal::PidAvailable;
        let cases = [
            ("no thresholds", vec![], vec![(pid, observed(350))], None),
            (
                "only a memory threshold",
                vec![threshold(Signal::MemoryAvailable, mib(100), None)],
                vec![(pid, observed(350))],
                None,
            ),
            (
                "not observed: nothing to arm against",
                vec![threshold(pid, pids(100), None)],
                vec![],
                None,
            ),
            (
                "250 tasks to the level, met at the 251st",
                vec![threshold(pid, pids(100), None)],
                vec![(pid, observed(350))],
                Some(251),
            ),
            (
                "at the level, not met: the next task meets it",
                vec![threshold(pid, pids(100), None)],
                vec![(pid, observed(100))],
                Some(1),
            ),
            (
                "met: decided on already",
                vec![threshold(pid, pids(100), None)],
                vec![(pid, observed(99))],
                None,
            ),
            (
                "a percentage of pid_max, min-reclaim counted",
                vec![threshold(pid, ThresholdValue::Fraction(0.5), Some(100))],
                vec![(pid, observed(20000))],
                Some(20000 - 16384 - 100 + 1),
            ),
        ];
        for (name, thresholds, observations, want) in cases {
            let observations = observations.into_iter().collect();
            assert_eq!(pid_headroom(&thresholds, &observations), want, "{name}");
        }
    }

    /// Creating the pid headroom's tasks meets the threshold, one task fewer does not.
    #[test]
    fn creating_the_pid_headroom_meets_the_threshold() {
        let t = threshold(
            Signal::PidAvailable,
            ThresholdValue::Quantity(Quantity::from_units(1000)),
            None,
        );
        let before = SignalObservation {
            available: 4321,
            capacity: 32768,
        };
        let tasks = pid_headroom(
            std::slice::from_ref(&t),
            &BTreeMap::from([(Signal::PidAvailable, before)]),
        )
        .unwrap() as i64;
        let after = |created: i64| SignalObservation {
            available: before.available - created,
            ..before
        };
        assert!(!t.is_met(after(tasks - 1), false));
        assert!(t.is_met(after(tasks), false));
    }

    /// Growth by the headroom is the least that meets the threshold, one byte less is not.
    #[test]
    fn growing_by_the_headroom_meets_the_threshold() {
        let t = threshold(
            Signal::MemoryAvailable,
            ThresholdValue::Fraction(0.05),
            None,
        );
        let before = SignalObservation {
            available: 700_000_123,
            capacity: 8_000_000_000,
        };
        let headroom = memory_headroom(
            std::slice::from_ref(&t),
            &BTreeMap::from([(Signal::MemoryAvailable, before)]),
        )
        .unwrap() as i64;
        let after = |growth: i64| SignalObservation {
            available: before.available - growth,
            ..before
        };
        assert!(!t.is_met(after(headroom - 1), false));
        assert!(!t.is_met(after(headroom), false), "met only strictly below");
        assert!(t.is_met(after(headroom + 1), false));
    }
}
