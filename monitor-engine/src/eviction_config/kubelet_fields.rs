//! The chosen document's fields and the kubelet's rules for them, apart from how it is chosen.
use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use super::{
    ConfigError, DEFAULT_EVICTION_HARD, EvictionConfig, MAX_AGENT_WAIT, MonitorSettings, Written,
};
use crate::duration::parse_go_duration;
use crate::quantity::{Quantity, QuantityError};
use crate::signal::Signal;
use crate::threshold::{Threshold, ThresholdValue};

/// The fields of a KubeletConfiguration this agent reads; serde ignores the rest.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct KubeletConfigFile {
    // `pub(super)`: a configz answer, already defaulted, sets these three (`from_configz`).
    pub(super) eviction_hard: Option<SignalMap>,
    eviction_soft: Option<SignalMap>,
    eviction_soft_grace_period: Option<SignalMap>,
    eviction_minimum_reclaim: Option<SignalMap>,
    eviction_max_pod_grace_period: Option<i64>,
    eviction_pressure_transition_period: Option<String>,
    pub(super) merge_default_eviction_settings: Option<bool>,
    pub(super) enforce_node_allocatable: Option<Vec<String>>,
    monitor: Option<MonitorFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MonitorFile {
    eviction_interval: Option<String>,
    pod_cleanup_timeout: Option<String>,
}

/// A `map[string]string` kept as written, so repeated keys can be reported rather than
/// silently collapsed. Scalar values (numbers too) are taken as their text.
#[derive(Debug, Default)]
pub(super) struct SignalMap(Vec<(String, String)>);

impl<'de> Deserialize<'de> for SignalMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SignalMap, D::Error> {
        struct MapVisitor;
        impl<'de> Visitor<'de> for MapVisitor {
            type Value = SignalMap;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map from eviction signal to value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SignalMap, A::Error> {
                let mut entries = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, ScalarText>()? {
                    entries.push((key, value.0));
                }
                Ok(SignalMap(entries))
            }
        }
        deserializer.deserialize_map(MapVisitor)
    }
}

/// A scalar value as text.
struct ScalarText(String);

impl<'de> Deserialize<'de> for ScalarText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ScalarText, D::Error> {
        struct TextVisitor;
        impl Visitor<'_> for TextVisitor {
            type Value = ScalarText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or number")
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<ScalarText, E> {
                Ok(ScalarText(value.to_string()))
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<ScalarText, E> {
                Ok(ScalarText(value.to_string()))
            }
            fn visit_u64<E: de::Error>(self, value: u64) -> Result<ScalarText, E> {
                Ok(ScalarText(value.to_string()))
            }
            fn visit_f64<E: de::Error>(self, value: f64) -> Result<ScalarText, E> {
                Ok(ScalarText(value.to_string()))
            }
        }
        deserializer.deserialize_any(TextVisitor)
    }
}

impl SignalMap {
    /// Resolves signal names, rejecting unknown and repeated ones.
    fn signals(&self, field: &'static str) -> Result<Vec<(Signal, &str)>, ConfigError> {
        let mut seen = BTreeSet::new();
        self.0
            .iter()
            .map(|(name, value)| {
                let signal = name
                    .parse::<Signal>()
                    .map_err(|_| ConfigError::UnknownSignal {
                        field,
                        signal: name.clone(),
                    })?;
                if !seen.insert(signal) {
                    return Err(ConfigError::DuplicateSignal { field, signal });
                }
                Ok((signal, value.as_str()))
            })
            .collect()
    }
}

const EVICTION_HARD: &str = "evictionHard";
const EVICTION_SOFT: &str = "evictionSoft";
const SOFT_GRACE_PERIOD: &str = "evictionSoftGracePeriod";
const MINIMUM_RECLAIM: &str = "evictionMinimumReclaim";

impl KubeletConfigFile {
    pub(super) fn written(&self) -> Written {
        let names = |map: &Option<SignalMap>| {
            map.as_ref()
                .map(|m| m.0.iter().map(|(name, _)| name.clone()).collect::<Vec<_>>())
        };
        let monitor = self.monitor.as_ref();
        Written {
            eviction_hard: names(&self.eviction_hard),
            merge_default_eviction_settings: self.merge_default_eviction_settings == Some(true),
            eviction_minimum_reclaim: names(&self.eviction_minimum_reclaim).unwrap_or_default(),
            eviction_max_pod_grace_period: self.eviction_max_pod_grace_period.is_some(),
            eviction_pressure_transition_period: self.eviction_pressure_transition_period.clone(),
            eviction_interval: monitor.is_some_and(|m| m.eviction_interval.is_some()),
            pod_cleanup_timeout: monitor.is_some_and(|m| m.pod_cleanup_timeout.is_some()),
            overridden: Vec::new(),
        }
    }

    pub(super) fn into_config(self) -> Result<EvictionConfig, ConfigError> {
        let mut hard = match &self.eviction_hard {
            Some(map) => threshold_values(map, EVICTION_HARD)?,
            None => Vec::new(),
        };
        if self.eviction_hard.is_none() || self.merge_default_eviction_settings == Some(true) {
            let defaults = SignalMap(
                DEFAULT_EVICTION_HARD
                    .map(|(s, v)| (s.as_str().into(), v.into()))
                    .to_vec(),
            );
            for (signal, value) in threshold_values(&defaults, EVICTION_HARD)? {
                if !hard.iter().any(|(configured, _)| *configured == signal) {
                    hard.push((signal, value));
                }
            }
        }
        let soft = match &self.eviction_soft {
            Some(map) => threshold_values(map, EVICTION_SOFT)?,
            None => Vec::new(),
        };
        let grace_periods = match &self.eviction_soft_grace_period {
            Some(map) => map
                .signals(SOFT_GRACE_PERIOD)?
                .into_iter()
                .map(|(signal, value)| {
                    let field = format!("{SOFT_GRACE_PERIOD}.{signal}");
                    Ok((signal, duration(field, value)?))
                })
                .collect::<Result<Vec<_>, ConfigError>>()?,
            None => Vec::new(),
        };
        let min_reclaims = match &self.eviction_minimum_reclaim {
            Some(map) => map
                .signals(MINIMUM_RECLAIM)?
                .into_iter()
                .map(|(signal, value)| Ok((signal, min_reclaim_value(signal, value)?)))
                .collect::<Result<Vec<_>, ConfigError>>()?,
            None => Vec::new(),
        };
        let min_reclaim_for = |signal: Signal| {
            min_reclaims
                .iter()
                .find(|(s, _)| *s == signal)
                .map(|(_, value)| *value)
        };

        let mut thresholds: Vec<Threshold> = hard
            .iter()
            .map(|&(signal, value)| Threshold {
                signal,
                value,
                grace_period: Duration::ZERO,
                min_reclaim: min_reclaim_for(signal),
            })
            .collect();
        let enforces_pods = match &self.enforce_node_allocatable {
            Some(list) => list.iter().any(|key| key == "pods"),
            None => true,
        };
        let has_hard_allocatable = hard
            .iter()
            .any(|(signal, _)| *signal == Signal::AllocatableMemoryAvailable);
        if enforces_pods && !has_hard_allocatable {
            let copies: Vec<Threshold> = thresholds
                .iter()
                .filter(|t| t.signal == Signal::MemoryAvailable)
                .map(|t| Threshold {
                    signal: Signal::AllocatableMemoryAvailable,
                    ..t.clone()
                })
                .collect();
            thresholds.extend(copies);
        }
        for (signal, value) in soft {
            let grace_period = grace_periods
                .iter()
                .find(|(s, _)| *s == signal)
                .map(|(_, period)| *period)
                .ok_or(ConfigError::MissingGracePeriod { signal })?;
            thresholds.push(Threshold {
                signal,
                value,
                grace_period,
                min_reclaim: min_reclaim_for(signal),
            });
        }
        thresholds.sort_by_key(|t| (t.kind(), t.signal));

        let max_pod_grace_period_seconds = self.eviction_max_pod_grace_period.unwrap_or(0);
        if max_pod_grace_period_seconds < 0 {
            return Err(ConfigError::NegativeMaxPodGracePeriod {
                value: max_pod_grace_period_seconds,
            });
        }
        let optional_duration = |field: &str, value: &Option<String>, default: Duration| match value
        {
            Some(text) => duration(field.to_string(), text),
            None => Ok(default),
        };
        // The kubelet's defaulting replaces a zero transition period (kubeadm writes `0s`
        // into every node's configuration) by the default.
        let default_transition = Duration::from_secs(300);
        let pressure_transition_period = Some(optional_duration(
            "evictionPressureTransitionPeriod",
            &self.eviction_pressure_transition_period,
            default_transition,
        )?)
        .filter(|period| !period.is_zero())
        .unwrap_or(default_transition);
        let monitor_file = self.monitor.unwrap_or_default();
        let defaults = MonitorSettings::default();
        Ok(EvictionConfig {
            thresholds,
            max_pod_grace_period_seconds,
            pressure_transition_period,
            monitor: MonitorSettings {
                eviction_interval: agent_wait(
                    "monitor.evictionInterval",
                    &monitor_file.eviction_interval,
                    defaults.eviction_interval,
                )?,
                pod_cleanup_timeout: agent_wait(
                    "monitor.podCleanupTimeout",
                    &monitor_file.pod_cleanup_timeout,
                    defaults.pod_cleanup_timeout,
                )?,
            },
        })
    }
}

/// One of the agent's own waits: a duration of at most [`MAX_AGENT_WAIT`].
fn agent_wait(
    field: &'static str,
    value: &Option<String>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    let Some(text) = value else {
        return Ok(default);
    };
    let wait = duration(field.to_string(), text)?;
    if wait > MAX_AGENT_WAIT {
        return Err(ConfigError::WaitTooLong {
            field,
            value: text.clone(),
        });
    }
    Ok(wait)
}

fn duration(field: String, value: &str) -> Result<Duration, ConfigError> {
    parse_go_duration(value).map_err(|reason| ConfigError::InvalidDuration {
        field,
        value: value.into(),
        reason,
    })
}

/// Parses `evictionHard`/`evictionSoft` values the kubelet's way, dropping `0%` and `100%`.
fn threshold_values(
    map: &SignalMap,
    field: &'static str,
) -> Result<Vec<(Signal, ThresholdValue)>, ConfigError> {
    let mut values = Vec::new();
    for (signal, text) in map.signals(field)? {
        if text == "0%" || text == "100%" {
            continue;
        }
        let value = parse_value(field, signal, text)?;
        let positive = match value {
            ThresholdValue::Quantity(quantity) => quantity > Quantity::ZERO,
            ThresholdValue::Fraction(_) => true,
        };
        if !positive {
            return Err(ConfigError::NotPositive {
                field,
                signal,
                value: text.into(),
            });
        }
        values.push((signal, value));
    }
    Ok(values)
}

/// Parses an `evictionMinimumReclaim` value: a non-negative quantity or a percentage in
/// `(0%, 100%]`.
fn min_reclaim_value(signal: Signal, text: &str) -> Result<ThresholdValue, ConfigError> {
    let value = parse_value(MINIMUM_RECLAIM, signal, text)?;
    match value {
        ThresholdValue::Fraction(fraction) if fraction <= 0.0 => {
            Err(ConfigError::PercentageOutOfRange {
                field: MINIMUM_RECLAIM,
                signal,
                value: text.into(),
            })
        }
        ThresholdValue::Quantity(quantity) if quantity.is_negative() => {
            Err(ConfigError::NotPositive {
                field: MINIMUM_RECLAIM,
                signal,
                value: text.into(),
            })
        }
        _ => Ok(value),
    }
}

/// A quantity, or a percentage parsed as the kubelet does: a `float32`, divided by 100.
fn parse_value(
    field: &'static str,
    signal: Signal,
    text: &str,
) -> Result<ThresholdValue, ConfigError> {
    let invalid = |reason| ConfigError::InvalidQuantity {
        field,
        signal,
        value: text.into(),
        reason,
    };
    match text.strip_suffix('%') {
        Some(number) => {
            let percent: f32 = number
                .trim()
                .parse()
                .map_err(|_| invalid(QuantityError::Malformed))?;
            if !(0.0..=100.0).contains(&percent) {
                return Err(ConfigError::PercentageOutOfRange {
                    field,
                    signal,
                    value: text.into(),
                });
            }
            Ok(ThresholdValue::Fraction(percent / 100.0))
        }
        None => text.parse().map(ThresholdValue::Quantity).map_err(invalid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::duration::DurationError;
    use crate::eviction_config::tests::summary;

    #[test]
    fn reads_thresholds_like_the_kubelet() {
        struct Case {
            name: &'static str,
            yaml: &'static str,
            thresholds: &'static [&'static str],
        }
        let cases = [
            Case {
                name: "empty document gives the Linux defaults plus the allocatable copy",
                yaml: "",
                thresholds: &[
                    "hard memory.available<100Mi",
                    "hard allocatableMemory.available<100Mi",
                    "hard nodefs.available<10%",
                    "hard nodefs.inodesFree<5%",
                    "hard imagefs.available<15%",
                    "hard imagefs.inodesFree<5%",
                ],
            },
            Case {
                name: "setting evictionHard replaces the defaults",
                yaml: "evictionHard: {memory.available: 200Mi}\nenforceNodeAllocatable: []",
                thresholds: &["hard memory.available<200Mi"],
            },
            Case {
                name: "an empty evictionHard removes every hard threshold",
                yaml: "evictionHard: {}",
                thresholds: &[],
            },
            Case {
                name: "mergeDefaultEvictionSettings fills unnamed signals",
                yaml: "evictionHard: {nodefs.available: 20%}\nmergeDefaultEvictionSettings: true\nenforceNodeAllocatable: [system-reserved]",
                thresholds: &[
                    "hard memory.available<100Mi",
                    "hard nodefs.available<20%",
                    "hard nodefs.inodesFree<5%",
                    "hard imagefs.available<15%",
                    "hard imagefs.inodesFree<5%",
                ],
            },
            Case {
                name: "soft threshold with grace and min reclaim on both kinds",
                yaml: "evictionHard: {memory.available: 100Mi}\nevictionSoft: {memory.available: 1Gi}\n\
                       evictionSoftGracePeriod: {memory.available: 1m30s, pid.available: 10s}\n\
                       evictionMinimumReclaim: {memory.available: 500M}\nenforceNodeAllocatable: []",
                thresholds: &[
                    "hard memory.available<100Mi reclaim 500000000",
                    "soft 90s memory.available<1Gi reclaim 500000000",
                ],
            },
            Case {
                name: "a zero grace period makes a soft threshold hard, as in the kubelet",
                yaml: "evictionHard: {}\nevictionSoft: {pid.available: 100}\nevictionSoftGracePeriod: {pid.available: 0s}",
                thresholds: &["hard pid.available<100"],
            },
            Case {
                name: "0% and 100% are dropped",
                yaml: "evictionHard: {nodefs.available: 0%, imagefs.available: 100%, memory.available: 1G}\nenforceNodeAllocatable: []",
                thresholds: &["hard memory.available<1000000000"],
            },
            Case {
                name: "numbers are read as their text",
                yaml: "evictionHard: {pid.available: 1000}",
                thresholds: &["hard pid.available<1000"],
            },
        ];
        for case in cases {
            let config = EvictionConfig::from_yaml(case.yaml)
                .unwrap_or_else(|e| panic!("case {:?}: {e}", case.name));
            assert_eq!(summary(&config), case.thresholds, "case {:?}", case.name);
        }
    }

    #[test]
    fn applies_the_kubelets_defaulting() {
        struct Case {
            name: &'static str,
            yaml: &'static str,
            transition: Duration,
            thresholds: &'static [&'static str],
        }
        let cases = [
            Case {
                name: "kubeadm's 0s transition period becomes the default 5m",
                yaml: "evictionPressureTransitionPeriod: 0s\nenforceNodeAllocatable: []",
                transition: Duration::from_secs(300),
                thresholds: &[
                    "hard memory.available<100Mi",
                    "hard nodefs.available<10%",
                    "hard nodefs.inodesFree<5%",
                    "hard imagefs.available<15%",
                    "hard imagefs.inodesFree<5%",
                ],
            },
            Case {
                name: "a zero transition period written as 0",
                yaml: "evictionPressureTransitionPeriod: \"0\"\nevictionHard: {memory.available: 1Gi}\nenforceNodeAllocatable: []",
                transition: Duration::from_secs(300),
                thresholds: &["hard memory.available<1Gi"],
            },
            Case {
                name: "null maps and lists are absent ones",
                yaml: "evictionHard: null\nevictionSoft: null\nevictionSoftGracePeriod: null\nevictionMinimumReclaim: null\nenforceNodeAllocatable: null\nevictionPressureTransitionPeriod: 1m",
                transition: Duration::from_secs(60),
                thresholds: &[
                    "hard memory.available<100Mi",
                    "hard allocatableMemory.available<100Mi",
                    "hard nodefs.available<10%",
                    "hard nodefs.inodesFree<5%",
                    "hard imagefs.available<15%",
                    "hard imagefs.inodesFree<5%",
                ],
            },
            Case {
                name: "kubeadm's --config file: the KubeletConfiguration among other kinds",
                yaml: "apiVersion: kubeadm.k8s.io/v1beta3\nkind: InitConfiguration\nnodeRegistration: {criSocket: unix:///run/containerd/containerd.sock}\n\
                       ---\napiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\nkubernetesVersion: v1.29.0\n\
                       ---\napiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n\
                       evictionHard: {memory.available: 250Mi}\nevictionPressureTransitionPeriod: 0s\n---\n",
                transition: Duration::from_secs(300),
                thresholds: &[
                    "hard memory.available<250Mi",
                    "hard allocatableMemory.available<250Mi",
                ],
            },
        ];
        for case in cases {
            let config = EvictionConfig::from_yaml(case.yaml)
                .unwrap_or_else(|e| panic!("case {:?}: {e}", case.name));
            assert_eq!(summary(&config), case.thresholds, "case {:?}", case.name);
            assert_eq!(
                config.pressure_transition_period, case.transition,
                "case {:?}",
                case.name
            );
        }
    }

    #[test]
    fn rejects_bad_configuration_naming_field_and_value() {
        struct Case {
            name: &'static str,
            yaml: &'static str,
            error: ConfigError,
        }
        let cases = [
            Case {
                name: "unknown signal",
                yaml: "evictionHard: {memory.free: 100Mi}",
                error: ConfigError::UnknownSignal {
                    field: "evictionHard",
                    signal: "memory.free".into(),
                },
            },
            Case {
                name: "unknown signal in grace periods",
                yaml: "evictionSoftGracePeriod: {disk.available: 1m}",
                error: ConfigError::UnknownSignal {
                    field: "evictionSoftGracePeriod",
                    signal: "disk.available".into(),
                },
            },
            Case {
                name: "duplicate signal",
                yaml: "evictionSoft:\n  memory.available: 1Gi\n  memory.available: 2Gi\n",
                error: ConfigError::DuplicateSignal {
                    field: "evictionSoft",
                    signal: Signal::MemoryAvailable,
                },
            },
            Case {
                name: "soft threshold without grace period",
                yaml: "evictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {nodefs.available: 1m}",
                error: ConfigError::MissingGracePeriod {
                    signal: Signal::MemoryAvailable,
                },
            },
            Case {
                name: "negative quantity",
                yaml: "evictionHard: {memory.available: -100Mi}",
                error: ConfigError::NotPositive {
                    field: "evictionHard",
                    signal: Signal::MemoryAvailable,
                    value: "-100Mi".into(),
                },
            },
            Case {
                name: "zero quantity",
                yaml: "evictionHard: {memory.available: \"0\"}",
                error: ConfigError::NotPositive {
                    field: "evictionHard",
                    signal: Signal::MemoryAvailable,
                    value: "0".into(),
                },
            },
            Case {
                name: "unparsable quantity",
                yaml: "evictionHard: {memory.available: 100MB}",
                error: ConfigError::InvalidQuantity {
                    field: "evictionHard",
                    signal: Signal::MemoryAvailable,
                    value: "100MB".into(),
                    reason: QuantityError::UnknownSuffix("MB".into()),
                },
            },
            Case {
                name: "unparsable percentage",
                yaml: "evictionHard: {nodefs.available: ten%}",
                error: ConfigError::InvalidQuantity {
                    field: "evictionHard",
                    signal: Signal::NodeFsAvailable,
                    value: "ten%".into(),
                    reason: QuantityError::Malformed,
                },
            },
            Case {
                name: "percentage over 100",
                yaml: "evictionHard: {nodefs.available: 150%}",
                error: ConfigError::PercentageOutOfRange {
                    field: "evictionHard",
                    signal: Signal::NodeFsAvailable,
                    value: "150%".into(),
                },
            },
            Case {
                name: "negative percentage",
                yaml: "evictionSoft: {nodefs.available: -5%}",
                error: ConfigError::PercentageOutOfRange {
                    field: "evictionSoft",
                    signal: Signal::NodeFsAvailable,
                    value: "-5%".into(),
                },
            },
            Case {
                name: "zero percent minimum reclaim",
                yaml: "evictionMinimumReclaim: {nodefs.available: 0%}",
                error: ConfigError::PercentageOutOfRange {
                    field: "evictionMinimumReclaim",
                    signal: Signal::NodeFsAvailable,
                    value: "0%".into(),
                },
            },
            Case {
                name: "negative minimum reclaim",
                yaml: "evictionMinimumReclaim: {memory.available: -1Mi}",
                error: ConfigError::NotPositive {
                    field: "evictionMinimumReclaim",
                    signal: Signal::MemoryAvailable,
                    value: "-1Mi".into(),
                },
            },
            Case {
                name: "bad grace period",
                yaml: "evictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: 90}",
                error: ConfigError::InvalidDuration {
                    field: "evictionSoftGracePeriod.memory.available".into(),
                    value: "90".into(),
                    reason: DurationError::Malformed,
                },
            },
            Case {
                name: "negative grace period",
                yaml: "evictionSoft: {memory.available: 1Gi}\nevictionSoftGracePeriod: {memory.available: -1m}",
                error: ConfigError::InvalidDuration {
                    field: "evictionSoftGracePeriod.memory.available".into(),
                    value: "-1m".into(),
                    reason: DurationError::Negative,
                },
            },
            Case {
                name: "bad transition period",
                yaml: "evictionPressureTransitionPeriod: soon",
                error: ConfigError::InvalidDuration {
                    field: "evictionPressureTransitionPeriod".into(),
                    value: "soon".into(),
                    reason: DurationError::Malformed,
                },
            },
            Case {
                name: "negative max pod grace period",
                yaml: "evictionMaxPodGracePeriod: -5",
                error: ConfigError::NegativeMaxPodGracePeriod { value: -5 },
            },
            Case {
                name: "cleanup timeout longer than an hour",
                yaml: "monitor: {podCleanupTimeout: 2h}",
                error: ConfigError::WaitTooLong {
                    field: "monitor.podCleanupTimeout",
                    value: "2h".into(),
                },
            },
            Case {
                name: "eviction interval longer than an hour",
                yaml: "monitor: {evictionInterval: 61m}",
                error: ConfigError::WaitTooLong {
                    field: "monitor.evictionInterval",
                    value: "61m".into(),
                },
            },
            Case {
                name: "two configurations in one file",
                yaml: "kind: KubeletConfiguration\n---\nkind: KubeletConfiguration\n",
                error: ConfigError::SeveralConfigurations,
            },
            Case {
                name: "a file without a KubeletConfiguration",
                yaml: "kind: InitConfiguration\n---\nkind: ClusterConfiguration\n",
                error: ConfigError::NoKubeletConfiguration {
                    kinds: vec!["InitConfiguration".into(), "ClusterConfiguration".into()],
                },
            },
            Case {
                name: "bad monitor interval",
                yaml: "monitor: {evictionInterval: 10}",
                error: ConfigError::InvalidDuration {
                    field: "monitor.evictionInterval".into(),
                    value: "10".into(),
                    reason: DurationError::Malformed,
                },
            },
        ];
        for case in cases {
            assert_eq!(
                EvictionConfig::from_yaml(case.yaml),
                Err(case.error),
                "case {:?}",
                case.name
            );
        }
    }

    #[test]
    fn reports_shape_errors_with_the_field_name() {
        struct Case {
            name: &'static str,
            yaml: &'static str,
            mentions: &'static str,
        }
        let cases = [
            Case {
                name: "list instead of map",
                yaml: "evictionHard: [memory.available<100Mi]",
                mentions: "evictionHard",
            },
            Case {
                name: "typo under monitor",
                yaml: "monitor: {evictionIntervall: 5s}",
                mentions: "evictionIntervall",
            },
            Case {
                name: "not YAML",
                yaml: "evictionHard: {",
                mentions: "invalid configuration",
            },
        ];
        for case in cases {
            let error = EvictionConfig::from_yaml(case.yaml)
                .expect_err(case.name)
                .to_string();
            assert!(
                error.contains(case.mentions),
                "case {:?}: {error}",
                case.name
            );
        }
    }
}
