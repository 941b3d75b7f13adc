//! The effective configuration and where each value came from, for `monitor config`: the
//! file, the kubelet's defaulting (including its rules that rewrite what a file says), or the
//! agent's own defaults; whether the agent acts on it; and what changed between two
//! configurations, for the log of a reload.
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::eviction_config::{EvictionConfig, Written};
use super::eviction_machine::OBSERVED_SIGNALS;
use super::signal::Signal;
use super::threshold::ThresholdKind;

/// Where an effective value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Written in the configuration file (the kubelet's, when an overlay is laid over it).
    File,
    /// Written in the overlay laid over the kubelet's configuration (`--config` with
    /// `--kubelet-config`).
    Overlay,
    /// The kubelet's default, the file being silent.
    KubeletDefault,
    /// The file's zero `evictionPressureTransitionPeriod` (kubeadm writes `0s`), which the
    /// kubelet's defaulting replaces by 5m.
    KubeadmZeroDefaulted,
    /// Copied from the hard `memory.available` threshold because `enforceNodeAllocatable`
    /// includes `pods` (the kubelet's default).
    NodeAllocatableCopy,
    /// The agent's own default (`monitor:` settings).
    AgentDefault,
}

impl Origin {
    /// The origin in words, for the text output.
    pub fn describe(self) -> &'static str {
        match self {
            Origin::File => "the file",
            Origin::Overlay => "the overlay (--config), over the kubelet's",
            Origin::KubeletDefault => "kubelet default",
            Origin::KubeadmZeroDefaulted => "the file's 0s, made 5m by the kubelet's defaulting",
            Origin::NodeAllocatableCopy => {
                "copied from memory.available (enforceNodeAllocatable includes pods)"
            }
            Origin::AgentDefault => "agent default",
        }
    }
}

/// One setting in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    /// The configuration field, with the signal for per-signal maps
    /// (`evictionHard.memory.available`).
    pub name: String,
    /// The value in force, as the kubelet writes it (`100Mi`, `10%`, `5m0s`, `0`).
    pub value: String,
    pub origin: Origin,
    /// Whether the agent acts on it: not for the disk signals (`nodefs.*`, `imagefs.*`,
    /// `containerfs.*`), which the kubelet enforces and the agent does not observe.
    pub acted_on: bool,
}

/// Why a setting of a signal the agent does not observe is not acted on.
pub const NOT_ACTED_ON: &str = "not acted on: this agent observes memory.available, \
     allocatableMemory.available and pid.available only; the kubelet enforces the disk signals";

/// Whether the agent acts on the setting `name`: per-signal settings are named
/// `field.signal`, and a signal the agent does not compute can never be met here.
fn acts_on(name: &str) -> bool {
    name.split_once('.')
        .and_then(|(_, signal)| signal.parse::<Signal>().ok())
        .is_none_or(|signal| OBSERVED_SIGNALS.contains(&signal))
}

/// Every setting in force, hard thresholds first, then soft ones with their grace periods,
/// minimum reclaims, and the single-valued settings.
pub fn effective_settings(config: &EvictionConfig, written: &Written) -> Vec<Setting> {
    let mut settings = file_settings(config, written);
    for setting in &mut settings {
        if setting.origin == Origin::File && written.overridden.contains(&setting.name) {
            setting.origin = Origin::Overlay;
        }
        setting.acted_on = acts_on(&setting.name);
    }
    settings
}

/// [`effective_settings`], before the overlay's are told from the kubelet file's.
fn file_settings(config: &EvictionConfig, written: &Written) -> Vec<Setting> {
    let wrote_hard = |signal: Signal| {
        written
            .eviction_hard
            .as_ref()
            .is_some_and(|names| names.iter().any(|n| n == signal.as_str()))
    };
    let mut settings = Vec::new();
    for threshold in &config.thresholds {
        let signal = threshold.signal;
        let (field, origin) = match threshold.kind() {
            ThresholdKind::Soft => ("evictionSoft", Origin::File),
            ThresholdKind::Hard if wrote_hard(signal) => ("evictionHard", Origin::File),
            ThresholdKind::Hard if signal == Signal::AllocatableMemoryAvailable => {
                ("evictionHard", Origin::NodeAllocatableCopy)
            }
            ThresholdKind::Hard => ("evictionHard", Origin::KubeletDefault),
        };
        settings.push(Setting {
            acted_on: true,
            name: format!("{field}.{signal}"),
            value: threshold.value.to_string(),
            origin,
        });
        if threshold.kind() == ThresholdKind::Soft {
            settings.push(Setting {
                acted_on: true,
                name: format!("evictionSoftGracePeriod.{signal}"),
                value: go_duration(threshold.grace_period),
                origin: Origin::File,
            });
        }
    }
    // A written signal without a threshold was turned off (`0%` or `100%`, as the kubelet
    // drops them).
    for name in written.eviction_hard.iter().flatten() {
        let hard = config
            .thresholds
            .iter()
            .any(|t| t.kind() == ThresholdKind::Hard && t.signal.as_str() == name);
        if !hard {
            settings.push(Setting {
                acted_on: true,
                name: format!("evictionHard.{name}"),
                value: "off".into(),
                origin: Origin::File,
            });
        }
    }
    for threshold in &config.thresholds {
        let Some(min_reclaim) = threshold.min_reclaim else {
            continue;
        };
        let signal = threshold.signal;
        let own = written
            .eviction_minimum_reclaim
            .iter()
            .any(|n| n == signal.as_str());
        let name = format!("evictionMinimumReclaim.{signal}");
        if settings.iter().any(|s| s.name == name) {
            continue;
        }
        settings.push(Setting {
            acted_on: true,
            name,
            value: min_reclaim.to_string(),
            origin: if own {
                Origin::File
            } else {
                Origin::NodeAllocatableCopy
            },
        });
    }
    settings.push(Setting {
        acted_on: true,
        name: "evictionMaxPodGracePeriod".into(),
        value: config.max_pod_grace_period_seconds.to_string(),
        origin: if written.eviction_max_pod_grace_period {
            Origin::File
        } else {
            Origin::KubeletDefault
        },
    });
    settings.push(Setting {
        acted_on: true,
        name: "evictionPressureTransitionPeriod".into(),
        value: go_duration(config.pressure_transition_period),
        origin: match &written.eviction_pressure_transition_period {
            None => Origin::KubeletDefault,
            Some(_) if config.pressure_transition_period == Duration::from_secs(300) => {
                transition_origin(written)
            }
            Some(_) => Origin::File,
        },
    });
    for (name, value, wrote) in [
        (
            "monitor.evictionInterval",
            config.monitor.eviction_interval,
            written.eviction_interval,
        ),
        (
            "monitor.podCleanupTimeout",
            config.monitor.pod_cleanup_timeout,
            written.pod_cleanup_timeout,
        ),
    ] {
        settings.push(Setting {
            acted_on: true,
            name: name.into(),
            value: go_duration(value),
            origin: if wrote {
                Origin::File
            } else {
                Origin::AgentDefault
            },
        });
    }
    settings
}

/// One setting that differs between two configurations; `None` where one has no such
/// setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingChange {
    pub(crate) name: String,
    pub(crate) old: Option<String>,
    pub(crate) new: Option<String>,
}

impl fmt::Display for SettingChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = |value: &Option<String>| value.clone().unwrap_or_else(|| "(none)".into());
        write!(
            f,
            "{} {} -> {}",
            self.name,
            shown(&self.old),
            shown(&self.new)
        )
    }
}

/// What differs from `old` to `new`, in `new`'s order, then the settings `new` no longer has.
pub fn changes(old: &[Setting], new: &[Setting]) -> Vec<SettingChange> {
    let value_in = |settings: &[Setting], name: &str| {
        settings
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.value.clone())
    };
    let mut changed: Vec<SettingChange> = new
        .iter()
        .filter_map(|setting| {
            let before = value_in(old, &setting.name);
            (before.as_ref() != Some(&setting.value)).then(|| SettingChange {
                name: setting.name.clone(),
                old: before,
                new: Some(setting.value.clone()),
            })
        })
        .collect();
    changed.extend(
        old.iter()
            .filter(|setting| value_in(new, &setting.name).is_none())
            .map(|setting| SettingChange {
                name: setting.name.clone(),
                old: Some(setting.value.clone()),
                new: None,
            }),
    );
    changed
}

/// A written 5m transition period is the file's own; a written zero became 5m.
fn transition_origin(written: &Written) -> Origin {
    let zero = written
        .eviction_pressure_transition_period
        .as_deref()
        .and_then(|text| super::duration::parse_go_duration(text).ok())
        .is_some_and(|d| d.is_zero());
    if zero {
        Origin::KubeadmZeroDefaulted
    } else {
        Origin::File
    }
}

/// A duration as Go prints it (`5m0s`, `1m30s`, `10s`, `1.5s`, `0s`), the form kubelet
/// configurations use.
fn go_duration(duration: Duration) -> String {
    let total_ms = duration.as_millis();
    if total_ms == 0 {
        return "0s".into();
    }
    let hours = total_ms / 3_600_000;
    let minutes = total_ms / 60_000 % 60;
    let millis = total_ms % 60_000;
    let seconds = if millis.is_multiple_of(1000) {
        format!("{}s", millis / 1000)
    } else {
        format!("{}s", millis as f64 / 1000.0)
    };
    match (hours, minutes) {
        (0, 0) => seconds,
        (0, m) => format!("{m}m{seconds}"),
        (h, m) => format!("{h}h{m}m{seconds}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(yaml: &str) -> Vec<(String, String, Origin)> {
        let (config, written) = EvictionConfig::from_yaml_explained(yaml).expect(yaml);
        effective_settings(&config, &written)
            .into_iter()
            .map(|s| (s.name, s.value, s.origin))
            .collect()
    }

    fn find(all: &[(String, String, Origin)], name: &str) -> Option<(String, Origin)> {
        all.iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, v, o)| (v.clone(), *o))
    }

    #[test]
    fn each_setting_names_where_it_came_from() {
        struct Case {
            name: &'static str,
            yaml: &'static str,
            expect: &'static [(&'static str, Option<(&'static str, Origin)>)],
        }
        let cases = [
            Case {
                name: "an empty file: the kubelet's defaults, the copy for allocatable, the agent's waits",
                yaml: "",
                expect: &[
                    (
                        "evictionHard.memory.available",
                        Some(("100Mi", Origin::KubeletDefault)),
                    ),
                    (
                        "evictionHard.nodefs.available",
                        Some(("10%", Origin::KubeletDefault)),
                    ),
                    (
                        "evictionHard.allocatableMemory.available",
                        Some(("100Mi", Origin::NodeAllocatableCopy)),
                    ),
                    (
                        "evictionMaxPodGracePeriod",
                        Some(("0", Origin::KubeletDefault)),
                    ),
                    (
                        "evictionPressureTransitionPeriod",
                        Some(("5m0s", Origin::KubeletDefault)),
                    ),
                    (
                        "monitor.evictionInterval",
                        Some(("10s", Origin::AgentDefault)),
                    ),
                    (
                        "monitor.podCleanupTimeout",
                        Some(("30s", Origin::AgentDefault)),
                    ),
                ],
            },
            Case {
                name: "kubeadm's 0s transition period is made 5m and said so",
                yaml: "evictionPressureTransitionPeriod: 0s\n",
                expect: &[(
                    "evictionPressureTransitionPeriod",
                    Some(("5m0s", Origin::KubeadmZeroDefaulted)),
                )],
            },
            Case {
                name: "a written 5m is the file's",
                yaml: "evictionPressureTransitionPeriod: 5m\n",
                expect: &[(
                    "evictionPressureTransitionPeriod",
                    Some(("5m0s", Origin::File)),
                )],
            },
            Case {
                name: "evictionHard replaces the defaults; soft thresholds with their grace periods",
                yaml: "evictionHard:\n  memory.available: 200Mi\nevictionSoft:\n  memory.available: 1Gi\n\
                       evictionSoftGracePeriod:\n  memory.available: 1m30s\n\
                       evictionMinimumReclaim:\n  memory.available: 50Mi\nevictionMaxPodGracePeriod: 60\n\
                       monitor:\n  evictionInterval: 2s\n",
                expect: &[
                    (
                        "evictionHard.memory.available",
                        Some(("200Mi", Origin::File)),
                    ),
                    ("evictionHard.nodefs.available", None),
                    (
                        "evictionHard.allocatableMemory.available",
                        Some(("200Mi", Origin::NodeAllocatableCopy)),
                    ),
                    ("evictionSoft.memory.available", Some(("1Gi", Origin::File))),
                    (
                        "evictionSoftGracePeriod.memory.available",
                        Some(("1m30s", Origin::File)),
                    ),
                    (
                        "evictionMinimumReclaim.memory.available",
                        Some(("50Mi", Origin::File)),
                    ),
                    ("evictionMaxPodGracePeriod", Some(("60", Origin::File))),
                    ("monitor.evictionInterval", Some(("2s", Origin::File))),
                    (
                        "monitor.podCleanupTimeout",
                        Some(("30s", Origin::AgentDefault)),
                    ),
                ],
            },
            Case {
                name: "a hard allocatable threshold of the file's own is not a copy",
                yaml: "evictionHard:\n  memory.available: 100Mi\n  allocatableMemory.available: 300Mi\n",
                expect: &[(
                    "evictionHard.allocatableMemory.available",
                    Some(("300Mi", Origin::File)),
                )],
            },
            Case {
                name: "merged defaults: the file's own and the kubelet's side by side",
                yaml: "mergeDefaultEvictionSettings: true\nevictionHard:\n  memory.available: 1Gi\n",
                expect: &[
                    ("evictionHard.memory.available", Some(("1Gi", Origin::File))),
                    (
                        "evictionHard.imagefs.available",
                        Some(("15%", Origin::KubeletDefault)),
                    ),
                ],
            },
            Case {
                name: "0% turns a threshold off, as in the kubelet, and says so",
                yaml: "evictionHard:\n  memory.available: 0%\n",
                expect: &[
                    ("evictionHard.memory.available", Some(("off", Origin::File))),
                    ("evictionHard.allocatableMemory.available", None),
                ],
            },
        ];
        for case in cases {
            let all = settings(case.yaml);
            for (name, expected) in case.expect {
                let got = find(&all, name);
                let expected = expected.map(|(v, o)| (v.to_string(), o));
                assert_eq!(got, expected, "{}: {name} in {all:?}", case.name);
            }
        }
    }

    /// The kubelet's default disk thresholds are listed, each marked as not acted on.
    #[test]
    fn settings_of_signals_the_agent_does_not_observe_are_marked() {
        let yaml = "evictionSoft:\n  nodefs.available: 15%\n  memory.available: 1Gi\n\
                    evictionSoftGracePeriod:\n  nodefs.available: 1m\n  memory.available: 1m\n\
                    evictionMinimumReclaim:\n  imagefs.available: 1Gi\n";
        let (config, written) = EvictionConfig::from_yaml_explained(yaml).unwrap();
        let not_acted: Vec<String> = effective_settings(&config, &written)
            .into_iter()
            .filter(|s| !s.acted_on)
            .map(|s| s.name)
            .collect();
        assert_eq!(
            not_acted,
            [
                "evictionHard.nodefs.available",
                "evictionHard.nodefs.inodesFree",
                "evictionHard.imagefs.available",
                "evictionHard.imagefs.inodesFree",
                "evictionSoft.nodefs.available",
                "evictionSoftGracePeriod.nodefs.available",
                "evictionMinimumReclaim.imagefs.available",
            ]
        );
    }

    #[test]
    fn changes_name_each_setting_old_and_new() {
        let all = |yaml: &str| {
            let (config, written) = EvictionConfig::from_yaml_explained(yaml).unwrap();
            effective_settings(&config, &written)
        };
        let old = all("evictionHard:\n  memory.available: 100Mi\n  pid.available: 10%\n");
        let new =
            all("evictionHard:\n  memory.available: 200Mi\nmonitor:\n  evictionInterval: 5s\n");
        let said: Vec<String> = changes(&old, &new)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            said,
            [
                "evictionHard.memory.available 100Mi -> 200Mi",
                "evictionHard.allocatableMemory.available 100Mi -> 200Mi",
                "monitor.evictionInterval 10s -> 5s",
                "evictionHard.pid.available 10% -> (none)",
            ]
        );
        assert!(changes(&new, &new).is_empty());
    }

    #[test]
    fn durations_print_as_go_prints_them() {
        for (ms, text) in [
            (0, "0s"),
            (1_500, "1.5s"),
            (10_000, "10s"),
            (90_000, "1m30s"),
            (300_000, "5m0s"),
            (3_600_000, "1h0m0s"),
        ] {
            assert_eq!(go_duration(Duration::from_millis(ms)), text);
        }
    }
}
