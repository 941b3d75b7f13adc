//! Eviction thresholds (`memory.available<100Mi`, `nodefs.available<10%`) and the kubelet's
//! rule for when one is met.
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::quantity::Quantity;
use super::signal::Signal;

/// A threshold's value: an absolute quantity or a share of the signal's capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ThresholdValue {
    /// An absolute amount (bytes, inodes or processes).
    Quantity(Quantity),
    /// A fraction of capacity in `0.0..=1.0`, kept as an `f32` because the kubelet parses
    /// percentages into a `float32` and the rounding is part of its arithmetic.
    Fraction(f32),
}

impl ThresholdValue {
    /// The amount this value stands for given the signal's capacity, with the kubelet's
    /// `int64(float64(capacity) * float64(fraction))` truncation for percentages.
    pub fn resolve(self, capacity: i64) -> Quantity {
        match self {
            ThresholdValue::Quantity(quantity) => quantity,
            ThresholdValue::Fraction(fraction) => {
                Quantity::from_units((capacity as f64 * f64::from(fraction)) as i64)
            }
        }
    }
}

impl std::fmt::Display for ThresholdValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ThresholdValue::Quantity(quantity) => write!(f, "{quantity}"),
            ThresholdValue::Fraction(fraction) => {
                // Three decimals hide the float32 noise (5% is 5.0000000745 as a float32).
                let percent = format!("{:.3}", f64::from(*fraction) * 100.0);
                write!(
                    f,
                    "{}%",
                    percent.trim_end_matches('0').trim_end_matches('.')
                )
            }
        }
    }
}

/// Hard thresholds act at once; soft ones only after their grace period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThresholdKind {
    /// From `evictionHard`, or a soft threshold whose grace period is zero (the kubelet
    /// decides hardness by the grace period alone).
    Hard,
    /// From `evictionSoft` with a non-zero `evictionSoftGracePeriod`.
    Soft,
}

/// Names a threshold in remembered state: at most one hard and one soft per signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ThresholdId {
    /// The signal the threshold watches.
    pub signal: Signal,
    /// Hard or soft.
    pub kind: ThresholdKind,
}

/// One configured threshold: the signal is under pressure while `available < value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    /// The signal watched.
    pub signal: Signal,
    /// The level below which the threshold is met.
    pub value: ThresholdValue,
    /// How long the signal must stay below the value before acting; zero for hard thresholds.
    pub grace_period: Duration,
    /// Once met, the threshold stays met until `available >= value + min_reclaim`.
    pub(crate) min_reclaim: Option<ThresholdValue>,
}

impl Threshold {
    /// Hard when the grace period is zero, exactly the kubelet's `isHardEvictionThreshold`.
    pub fn kind(&self) -> ThresholdKind {
        if self.grace_period.is_zero() {
            ThresholdKind::Hard
        } else {
            ThresholdKind::Soft
        }
    }

    /// The identity used in remembered state.
    pub fn id(&self) -> ThresholdId {
        ThresholdId {
            signal: self.signal,
            kind: self.kind(),
        }
    }

    /// The kubelet's `thresholdsMet` for one threshold: met when the resolved value (plus
    /// the minimum reclaim, while reclaiming) is strictly greater than what is available.
    pub(crate) fn is_met(&self, observation: SignalObservation, enforce_min_reclaim: bool) -> bool {
        let mut level = self.value.resolve(observation.capacity);
        if enforce_min_reclaim && let Some(min_reclaim) = self.min_reclaim {
            level = level.saturating_add(min_reclaim.resolve(observation.capacity));
        }
        level > Quantity::from_units(observation.available)
    }
}

/// One measurement of a signal, in its base unit (bytes, inodes or processes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalObservation {
    /// What is left (may be negative, for example when a pid limit is already exceeded).
    pub available: i64,
    /// The total that percentages refer to.
    pub capacity: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn threshold(value: ThresholdValue, min_reclaim: Option<ThresholdValue>) -> Threshold {
        Threshold {
            signal: Signal::MemoryAvailable,
            value,
            grace_period: Duration::ZERO,
            min_reclaim,
        }
    }

    #[test]
    fn met_only_strictly_below_the_level() {
        let mib = |n: i64| n << 20;
        let hundred_mi = ThresholdValue::Quantity(Quantity::from_units(mib(100)));
        let ten_percent = ThresholdValue::Fraction(0.1);
        struct Case {
            name: &'static str,
            threshold: Threshold,
            available: i64,
            capacity: i64,
            enforce_min_reclaim: bool,
            met: bool,
        }
        let cases = [
            Case {
                name: "below an absolute level",
                threshold: threshold(hundred_mi, None),
                available: mib(100) - 1,
                capacity: mib(1000),
                enforce_min_reclaim: false,
                met: true,
            },
            Case {
                name: "exactly at the level is not met (the operator is <)",
                threshold: threshold(hundred_mi, None),
                available: mib(100),
                capacity: mib(1000),
                enforce_min_reclaim: false,
                met: false,
            },
            Case {
                name: "percentage of capacity",
                threshold: threshold(ten_percent, None),
                available: 99,
                capacity: 1000,
                enforce_min_reclaim: false,
                met: true,
            },
            Case {
                name: "percentage truncates like the kubelet",
                threshold: threshold(ten_percent, None),
                available: 100,
                capacity: 1000,
                enforce_min_reclaim: false,
                met: false,
            },
            Case {
                name: "min reclaim ignored on first crossing",
                threshold: threshold(
                    hundred_mi,
                    Some(ThresholdValue::Quantity(Quantity::from_units(mib(50)))),
                ),
                available: mib(120),
                capacity: mib(1000),
                enforce_min_reclaim: false,
                met: false,
            },
            Case {
                name: "min reclaim keeps it met until value plus reclaim",
                threshold: threshold(
                    hundred_mi,
                    Some(ThresholdValue::Quantity(Quantity::from_units(mib(50)))),
                ),
                available: mib(150) - 1,
                capacity: mib(1000),
                enforce_min_reclaim: true,
                met: true,
            },
            Case {
                name: "min reclaim satisfied at value plus reclaim",
                threshold: threshold(
                    hundred_mi,
                    Some(ThresholdValue::Quantity(Quantity::from_units(mib(50)))),
                ),
                available: mib(150),
                capacity: mib(1000),
                enforce_min_reclaim: true,
                met: false,
            },
            Case {
                name: "percentage min reclaim",
                threshold: threshold(ten_percent, Some(ThresholdValue::Fraction(0.05))),
                available: 149,
                capacity: 1000,
                enforce_min_reclaim: true,
                met: true,
            },
        ];
        for case in cases {
            let observation = SignalObservation {
                available: case.available,
                capacity: case.capacity,
            };
            assert_eq!(
                case.threshold.is_met(observation, case.enforce_min_reclaim),
                case.met,
                "case {:?}",
                case.name
            );
        }
    }
}
