//! The eviction configuration, read from a KubeletConfiguration YAML document.
//!
//! A whole `kubelet.config.k8s.io/v1beta1` `KubeletConfiguration` is accepted as it is:
//! the eviction fields are read with the kubelet's names and meaning, every other field is
//! ignored. The agent's own settings sit beside them under `monitor:`:
//!
//! ```yaml
//! apiVersion: kubelet.config.k8s.io/v1beta1
//! kind: KubeletConfiguration
//! evictionHard: {memory.available: "100Mi", nodefs.available: "10%"}
//! evictionSoft: {memory.available: "500Mi"}
//! evictionSoftGracePeriod: {memory.available: "1m30s"}
//! evictionMinimumReclaim: {memory.available: "200Mi"}
//! evictionMaxPodGracePeriod: 60
//! evictionPressureTransitionPeriod: 5m
//! monitor:
//!   evictionInterval: 10s     # at most one eviction per interval (kubelet: 10s)
//!   podCleanupTimeout: 30s    # after its grace period, wait this long for an evicted pod
//!                             # to go before the next eviction (kubelet: 30s); the pod is
//!                             # always force-killed once its grace period is over
//! ```
//!
//! Defaults follow the kubelet on Linux. When `evictionHard` is absent (or null) the
//! defaults `memory.available<100Mi, nodefs.available<10%, nodefs.inodesFree<5%,
//! imagefs.available<15%, imagefs.inodesFree<5%` apply. When it is present at all, even as
//! `{}`, it *replaces* the defaults: signals it does not name get no hard threshold, which is
//! what the kubelet's v1beta1 defaulting does. `mergeDefaultEvictionSettings: true` makes
//! unnamed signals inherit their default instead, as in the kubelet. As in the kubelet,
//! `enforceNodeAllocatable` (default `[pods]`) containing `pods` copies each hard
//! `memory.available` threshold to `allocatableMemory.available`, unless the file already
//! sets a hard `allocatableMemory.available` itself. Thresholds of exactly `0%` or `100%`
//! are dropped, like the kubelet drops them. A zero `evictionPressureTransitionPeriod`
//! (kubeadm writes `0s`) means the default 5m, as the kubelet's defaulting makes it; a null
//! map or list is the same as an absent one. A file of several YAML documents (kubeadm's
//! `--config` file) is read for its `KubeletConfiguration` document.
//!
//! A configuration file is read with [`EvictionConfig::decode`], which refuses what the
//! kubelet's decoder refuses: a document without `kind` or `apiVersion` (an empty file too),
//! a `KubeletConfiguration` of another `apiVersion` than `kubelet.config.k8s.io/v1beta1`. The
//! one other form it takes is the kubelet's `configz` answer (`kubectl get --raw
//! /api/v1/nodes/NODE/proxy/configz`: `{"kubeletconfig": {...}}`), the node's effective
//! configuration: already defaulted, so no default is applied again (an absent `evictionHard`
//! or `enforceNodeAllocatable` is one the kubelet holds empty, since its JSON omits empty
//! maps and lists) and `0%` still means off.
//!
//! Two rules are stricter than the kubelet, which would accept the value and misbehave:
//! a negative `evictionMaxPodGracePeriod`, and a minimum reclaim over 100%.
//!
//! A configuration may come in two layers, as the kubelet's own does: the node's kubelet
//! configuration and an overlay laid over it by the kubelet's drop-in rules (`layers`). A
//! field the kubelet does not know is ignored and reported, as the kubelet's lenient decoding
//! warns about it (`known_fields`).
//!
//! Which document of a file is read, and in which form, is decided here; the fields read from
//! it, and the kubelet's rules that turn them into an [`EvictionConfig`], are in
//! `kubelet_fields`.
use std::time::Duration;

use serde::Deserialize;

use super::duration::DurationError;
use super::quantity::QuantityError;
use super::signal::Signal;
use super::threshold::Threshold;
use crate::yaml_bounds::{self, Unbounded};

mod known_fields;
mod kubelet_fields;
mod layers;

use kubelet_fields::KubeletConfigFile;
pub use layers::{ConfigLayer, UnknownField};

/// The kubelet's Linux `DefaultEvictionHard`.
pub(crate) const DEFAULT_EVICTION_HARD: [(Signal, &str); 5] = [
    (Signal::MemoryAvailable, "100Mi"),
    (Signal::NodeFsAvailable, "10%"),
    (Signal::NodeFsInodesFree, "5%"),
    (Signal::ImageFsAvailable, "15%"),
    (Signal::ImageFsInodesFree, "5%"),
];

/// Everything the decision step needs to know from configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct EvictionConfig {
    /// Hard and soft thresholds, hard ones first, each group in signal order.
    pub thresholds: Vec<Threshold>,
    /// `evictionMaxPodGracePeriod`: the cap on a pod's own grace period for soft evictions.
    pub(crate) max_pod_grace_period_seconds: i64,
    /// `evictionPressureTransitionPeriod`: how long a node condition stays set after the
    /// last time its threshold was met (kubelet default 5m).
    pub pressure_transition_period: Duration,
    /// The agent's own settings (`monitor:`).
    pub monitor: MonitorSettings,
}

/// The agent's settings, under `monitor:` in the configuration file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MonitorSettings {
    /// `evictionInterval`: at most one eviction per interval (default 10s, the kubelet's
    /// eviction monitoring period).
    pub eviction_interval: Duration,
    /// `podCleanupTimeout`: no new eviction while the previous pod is still going away, for
    /// at most its grace period plus this long (default 30s, the kubelet's
    /// `podCleanupTimeout`). It never shortens the pod's kill: force comes at the end of its
    /// grace period whatever this is.
    pub(crate) pod_cleanup_timeout: Duration,
}

impl Default for MonitorSettings {
    fn default() -> MonitorSettings {
        MonitorSettings {
            eviction_interval: Duration::from_secs(10),
            pod_cleanup_timeout: Duration::from_secs(30),
        }
    }
}

/// A configuration the agent refuses, naming the field and the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The text is not YAML, or a field has the wrong shape (a list where a map belongs, an
    /// unknown key under `monitor:`).
    #[error("invalid configuration: {0}")]
    Yaml(String),
    /// The text is longer than [`MAX_CONFIG_BYTES`]; not parsed.
    #[error("larger than {MAX_CONFIG_BYTES} bytes; not parsed")]
    TooLarge,
    /// The text holds more than [`yaml_bounds::LIMITS`] allow, or an alias; not parsed.
    #[error("{0}; not parsed")]
    Unbounded(Unbounded),
    /// A signal name the kubelet does not know.
    #[error("{field}: unknown eviction signal {signal:?} (expected one of {known})", known = Signal::ALL.map(Signal::as_str).join(", "))]
    UnknownSignal {
        /// The configuration field, like `evictionHard`.
        field: &'static str,
        /// The name as written.
        signal: String,
    },
    /// The same signal twice in one map.
    #[error("{field}: signal {signal} is given more than once")]
    DuplicateSignal {
        /// The configuration field.
        field: &'static str,
        /// The repeated signal.
        signal: Signal,
    },
    /// A value that is neither a quantity nor a percentage.
    #[error("{field}: {signal}: {value:?} is not a quantity or percentage: {reason}")]
    InvalidQuantity {
        /// The configuration field.
        field: &'static str,
        /// The signal the value belongs to.
        signal: Signal,
        /// The value as written.
        value: String,
        /// What is wrong with it.
        reason: QuantityError,
    },
    /// A negative quantity, or a zero threshold (the kubelet wants thresholds positive).
    #[error("{field}: {signal}: {value:?} must be positive")]
    NotPositive {
        /// The configuration field.
        field: &'static str,
        /// The signal the value belongs to.
        signal: Signal,
        /// The value as written.
        value: String,
    },
    /// A percentage below 0% or above 100% (or a minimum reclaim of 0% or less).
    #[error("{field}: {signal}: percentage {value:?} must be between 0% and 100%")]
    PercentageOutOfRange {
        /// The configuration field.
        field: &'static str,
        /// The signal the value belongs to.
        signal: Signal,
        /// The value as written.
        value: String,
    },
    /// A soft threshold without an `evictionSoftGracePeriod` entry for its signal.
    #[error("evictionSoft: {signal} needs a grace period in evictionSoftGracePeriod")]
    MissingGracePeriod {
        /// The signal of the soft threshold.
        signal: Signal,
    },
    /// A duration that does not parse or is negative.
    #[error("{field}: {value:?}: {reason}")]
    InvalidDuration {
        /// The configuration field, with the signal for grace periods
        /// (`evictionSoftGracePeriod.memory.available`).
        field: String,
        /// The value as written.
        value: String,
        /// What is wrong with it.
        reason: DurationError,
    },
    /// A file of several documents with more than one KubeletConfiguration (or document
    /// without a kind): which one the kubelet would be given is not known.
    #[error("more than one KubeletConfiguration document in the file")]
    SeveralConfigurations,
    /// Documents were found, but none is a KubeletConfiguration.
    #[error("no KubeletConfiguration in the file (found kind {})", kinds.join(", "))]
    NoKubeletConfiguration {
        /// The kinds that were found instead.
        kinds: Vec<String>,
    },
    /// A document the kubelet's decoder refuses: no `kind` or no `apiVersion`.
    #[error(
        "document {document}: no {missing}: the kubelet refuses a configuration document \
         without kind and apiVersion (kind: KubeletConfiguration, apiVersion: \
         {KUBELET_API_VERSION}); a configz answer ({{\"kubeletconfig\": ...}}) is read as it is"
    )]
    MissingTypeMeta {
        /// The document's position in the file, from 1.
        document: usize,
        /// `kind`, `apiVersion`, or both.
        missing: &'static str,
    },
    /// No document at all.
    #[error(
        "the file holds no document: the kubelet refuses a configuration without kind and \
         apiVersion"
    )]
    Empty,
    /// A KubeletConfiguration of a version the kubelet does not decode.
    #[error("KubeletConfiguration of apiVersion {0:?}: the kubelet decodes {KUBELET_API_VERSION}")]
    UnknownVersion(String),
    /// A configz answer whose `kubeletconfig` is not a KubeletConfiguration object.
    #[error("configz answer: kubeletconfig {0}")]
    BadConfigz(String),
    /// A configz answer given as the overlay: it is a whole effective configuration, not
    /// the few fields laid over the kubelet's.
    #[error(
        "a configz answer is the kubelet's whole effective configuration: give it as the \
         kubelet's configuration, not as the overlay"
    )]
    ConfigzOverlay,
    /// `evictionMaxPodGracePeriod` below zero.
    #[error("evictionMaxPodGracePeriod: {value} must not be negative")]
    NegativeMaxPodGracePeriod {
        /// The value as written.
        value: i64,
    },
    /// One of the agent's waits is so long that the node would stay unprotected for it.
    #[error(
        "{field}: {value:?} is longer than {MAX_AGENT_WAIT:?}: the agent would let the node \
         fill that long before it evicts another pod"
    )]
    WaitTooLong {
        /// The configuration field.
        field: &'static str,
        /// The value as written.
        value: String,
    },
}

/// The largest configuration parsed; a KubeletConfiguration is a few KiB. The caller reads
/// at most one byte more.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The longest `monitor.evictionInterval` and `monitor.podCleanupTimeout` accepted.
pub(crate) const MAX_AGENT_WAIT: Duration = Duration::from_secs(3600);

impl Default for EvictionConfig {
    /// The kubelet's Linux defaults.
    fn default() -> EvictionConfig {
        EvictionConfig::from_yaml("").expect("the built-in defaults are valid")
    }
}

impl EvictionConfig {
    /// The thresholds in one line for the log: `memory.available<100Mi (Hard), ...`.
    pub fn thresholds_line(&self) -> String {
        self.thresholds
            .iter()
            .map(|t| format!("{}<{} ({:?})", t.signal.as_str(), t.value, t.kind()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Parses a KubeletConfiguration YAML file (the caller reads it). An empty file yields
    /// the defaults. A file of several documents, like the one given to `kubeadm init
    /// --config`, is read for its one `KubeletConfiguration`; documents of other kinds are
    /// skipped, and a document without `kind` counts as the configuration.
    pub fn from_yaml(text: &str) -> Result<EvictionConfig, ConfigError> {
        Self::from_yaml_explained(text).map(|(config, _)| config)
    }

    /// As [`Self::from_yaml`], with what the chosen document wrote itself, from which
    /// [`super::config_origin`] says where each effective value came from.
    pub fn from_yaml_explained(text: &str) -> Result<(EvictionConfig, Written), ConfigError> {
        // Bounded before parsing, as every YAML the agent reads: the parser holds a whole
        // document's events, so its memory grows with the size and the nesting.
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(ConfigError::TooLarge);
        }
        yaml_bounds::check(text, yaml_bounds::LIMITS).map_err(ConfigError::Unbounded)?;
        let yaml_error = |err: serde_norway::Error| ConfigError::Yaml(err.to_string());
        let mut chosen = None;
        let mut other_kinds = Vec::new();
        for (index, document) in serde_norway::Deserializer::from_str(text).enumerate() {
            let Some(header) = Option::<DocumentKind>::deserialize(document).map_err(yaml_error)?
            else {
                continue;
            };
            match header.kind {
                Some(kind) if kind != KUBELET_CONFIGURATION => other_kinds.push(kind),
                _ if chosen.is_some() => return Err(ConfigError::SeveralConfigurations),
                _ => chosen = Some(index),
            }
        }
        let file = match chosen {
            Some(index) => serde_norway::Deserializer::from_str(text)
                .nth(index)
                .map(KubeletConfigFile::deserialize)
                .transpose()
                .map_err(yaml_error)?
                .unwrap_or_default(),
            None if other_kinds.is_empty() => KubeletConfigFile::default(),
            None => return Err(ConfigError::NoKubeletConfiguration { kinds: other_kinds }),
        };
        let written = file.written();
        Ok((file.into_config()?, written))
    }
}

/// The eviction settings a configuration document wrote itself, by name; what it left out
/// was defaulted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Written {
    /// The signals `evictionHard` named, or `None` when it was absent.
    pub eviction_hard: Option<Vec<String>>,
    /// `mergeDefaultEvictionSettings: true`.
    pub(crate) merge_default_eviction_settings: bool,
    /// The signals `evictionMinimumReclaim` named.
    pub(crate) eviction_minimum_reclaim: Vec<String>,
    /// `evictionMaxPodGracePeriod` was set.
    pub(crate) eviction_max_pod_grace_period: bool,
    /// `evictionPressureTransitionPeriod` as written.
    pub(crate) eviction_pressure_transition_period: Option<String>,
    /// `monitor.evictionInterval` was set.
    pub(crate) eviction_interval: bool,
    /// `monitor.podCleanupTimeout` was set.
    pub(crate) pod_cleanup_timeout: bool,
    /// The settings an overlay laid over the kubelet's configuration wrote, named as
    /// [`super::config_origin`] names them (`evictionHard.memory.available`,
    /// `evictionMaxPodGracePeriod`, `monitor.evictionInterval`).
    pub overridden: Vec<String>,
}

const KUBELET_CONFIGURATION: &str = "KubeletConfiguration";
const KUBELET_API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
/// The one key of a configz answer.
const CONFIGZ_KEY: &str = "kubeletconfig";

/// The form a configuration file had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigForm {
    /// A KubeletConfiguration document (alone or among kubeadm's), defaulted as the kubelet
    /// defaults its file.
    Document,
    /// A configz answer: the kubelet's effective configuration, taken as it is.
    Configz,
}

impl EvictionConfig {
    /// Reads a configuration file as the kubelet decodes its `--config`, or a configz answer
    /// as the effective configuration (see the module's documentation).
    pub fn decode(text: &str) -> Result<(EvictionConfig, ConfigForm), ConfigError> {
        Self::decode_explained(text).map(|(config, _, form)| (config, form))
    }

    /// As [`Self::decode`], with what the file wrote itself (see [`Written`]).
    pub(crate) fn decode_explained(
        text: &str,
    ) -> Result<(EvictionConfig, Written, ConfigForm), ConfigError> {
        let layer = ConfigLayer::parse(text)?;
        let (config, written) = EvictionConfig::from_layers(&layer, None)?;
        Ok((config, written, layer.form()))
    }
}

/// The `kubeletconfig` object of a configz answer: a map whose only key it is.
fn configz_body(document: &serde_norway::Value) -> Option<&serde_norway::Value> {
    let map = document.as_mapping()?;
    (map.len() == 1).then(|| map.get(CONFIGZ_KEY)).flatten()
}

/// The `kind` and `apiVersion` of one YAML document; every other field is ignored.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DocumentKind {
    kind: Option<String>,
    api_version: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::threshold::ThresholdKind;

    pub(super) fn summary(config: &EvictionConfig) -> Vec<String> {
        config
            .thresholds
            .iter()
            .map(|t| {
                let kind = match t.kind() {
                    ThresholdKind::Hard => "hard".to_string(),
                    ThresholdKind::Soft => format!("soft {:?}", t.grace_period),
                };
                let reclaim = t
                    .min_reclaim
                    .map(|r| format!(" reclaim {r}"))
                    .unwrap_or_default();
                format!("{kind} {}<{}{reclaim}", t.signal, t.value)
            })
            .collect()
    }

    #[test]
    fn accepts_a_whole_kubelet_configuration() {
        let yaml = r#"
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true, cacheTTL: 0s}
  x509: {clientCAFile: /etc/kubernetes/pki/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: systemd
clusterDNS: [10.96.0.10]
clusterDomain: cluster.local
containerRuntimeEndpoint: ""
cpuManagerReconcilePeriod: 0s
evictionHard:
  memory.available: "300Mi"
  nodefs.available: "10%"
evictionSoft:
  memory.available: "500Mi"
evictionSoftGracePeriod:
  memory.available: "1m30s"
evictionMaxPodGracePeriod: 60
evictionPressureTransitionPeriod: 30s
featureGates: {PodLevelResources: true}
kubeReserved: {cpu: 100m, memory: 256Mi}
maxPods: 110
rotateCertificates: true
staticPodPath: /etc/kubernetes/manifests
monitor:
  evictionInterval: 5s
  podCleanupTimeout: 1m
"#;
        let config = EvictionConfig::from_yaml(yaml).expect("a real KubeletConfiguration");
        assert_eq!(
            summary(&config),
            [
                "hard memory.available<300Mi",
                "hard allocatableMemory.available<300Mi",
                "hard nodefs.available<10%",
                "soft 90s memory.available<500Mi",
            ]
        );
        assert_eq!(config.max_pod_grace_period_seconds, 60);
        assert_eq!(config.pressure_transition_period, Duration::from_secs(30));
        assert_eq!(
            config.monitor,
            MonitorSettings {
                eviction_interval: Duration::from_secs(5),
                pod_cleanup_timeout: Duration::from_secs(60)
            }
        );
        let defaults = EvictionConfig::default();
        assert_eq!(defaults.monitor, MonitorSettings::default());
        assert_eq!(
            defaults.pressure_transition_period,
            Duration::from_secs(300)
        );
        assert_eq!(defaults.max_pod_grace_period_seconds, 0);
    }

    #[test]
    fn refuses_unbounded_text_unparsed() {
        let config = "kind: KubeletConfiguration\nevictionHard:\n  memory.available: 1Gi\n";
        let cases = [
            (
                "block sequences nested too deep",
                format!("{config}x:\n  {}x\n", "- ".repeat(520_000)),
                ConfigError::Unbounded(Unbounded::TooDeep(64)),
            ),
            (
                "flow nested too deep",
                format!("{config}x: {}\n", "[".repeat(100_000)),
                ConfigError::Unbounded(Unbounded::TooDeep(64)),
            ),
            (
                "indentation nested too deep",
                (0..=yaml_bounds::LIMITS.nesting)
                    .map(|i| format!("{}a:\n", " ".repeat(i)))
                    .collect(),
                ConfigError::Unbounded(Unbounded::TooDeep(64)),
            ),
            (
                "too many tokens",
                format!("{config}x: [{}1]\n", "1,".repeat(100_000)),
                ConfigError::Unbounded(Unbounded::TooManyTokens(1 << 17)),
            ),
            (
                "an alias",
                format!("{config}monitor: &m {{evictionInterval: 5s}}\nx: *m\n"),
                ConfigError::Unbounded(Unbounded::Alias(5)),
            ),
            (
                "larger than the limit",
                format!("{config}# {}\n", "x".repeat(MAX_CONFIG_BYTES as usize)),
                ConfigError::TooLarge,
            ),
        ];
        for (name, yaml, error) in cases {
            assert_eq!(EvictionConfig::from_yaml(&yaml), Err(error), "{name}");
        }
    }

    /// What the kubelet's decoder refuses is refused, naming what is missing; a configz
    /// answer is the effective configuration, taken without defaulting again.
    #[test]
    fn decodes_files_as_the_kubelet_and_configz_as_effective() {
        struct Case {
            name: &'static str,
            text: &'static str,
            /// The thresholds, or the error's text.
            expect: Result<(&'static [&'static str], ConfigForm), &'static str>,
        }
        const HEAD: &str =
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
        let cases = [
            Case {
                name: "a KubeletConfiguration document",
                text: "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                       evictionHard: {memory.available: 200Mi}\n",
                expect: Ok((
                    &[
                        "hard memory.available<200Mi",
                        "hard allocatableMemory.available<200Mi",
                    ],
                    ConfigForm::Document,
                )),
            },
            Case {
                name: "no kind, no apiVersion",
                text: "evictionHard: {memory.available: 200Mi}\n",
                expect: Err("document 1: no kind and apiVersion"),
            },
            Case {
                name: "no apiVersion",
                text: "kind: KubeletConfiguration\nevictionHard: {memory.available: 200Mi}\n",
                expect: Err("document 1: no apiVersion"),
            },
            Case {
                name: "no kind",
                text: "apiVersion: kubelet.config.k8s.io/v1beta1\n",
                expect: Err("document 1: no kind"),
            },
            Case {
                name: "an empty file",
                text: "# nothing\n",
                expect: Err("the file holds no document"),
            },
            Case {
                name: "a kubeadm file whose second document has no apiVersion",
                text: "apiVersion: kubeadm.k8s.io/v1beta3\nkind: InitConfiguration\n---\n\
                       kind: KubeletConfiguration\n",
                expect: Err("document 2: no apiVersion"),
            },
            Case {
                name: "a KubeletConfiguration of another version",
                text: "apiVersion: kubelet.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n",
                expect: Err("apiVersion \"kubelet.config.k8s.io/v1alpha1\""),
            },
            Case {
                name: "configz of Kubernetes 1.16: defaulted evictionHard, no kind",
                text: r#"{"kubeletconfig":{"staticPodPath":"/etc/kubernetes/manifests","evictionHard":{"imagefs.available":"15%","memory.available":"100Mi","nodefs.available":"10%","nodefs.inodesFree":"5%"},"evictionPressureTransitionPeriod":"5m0s","enforceNodeAllocatable":["pods"]}}"#,
                expect: Ok((
                    &[
                        "hard memory.available<100Mi",
                        "hard allocatableMemory.available<100Mi",
                        "hard nodefs.available<10%",
                        "hard nodefs.inodesFree<5%",
                        "hard imagefs.available<15%",
                    ],
                    ConfigForm::Configz,
                )),
            },
            Case {
                name: "configz with kind and apiVersion, memory only",
                text: r#"{"kubeletconfig":{"evictionHard":{"memory.available":"300Mi"},"enforceNodeAllocatable":["pods"],"kind":"KubeletConfiguration","apiVersion":"kubelet.config.k8s.io/v1beta1"}}"#,
                expect: Ok((
                    &[
                        "hard memory.available<300Mi",
                        "hard allocatableMemory.available<300Mi",
                    ],
                    ConfigForm::Configz,
                )),
            },
            Case {
                name: "configz without evictionHard: the kubelet holds it empty, no defaults",
                text: r#"{"kubeletconfig":{"maxPods":110,"enforceNodeAllocatable":["pods"]}}"#,
                expect: Ok((&[], ConfigForm::Configz)),
            },
            Case {
                name: "configz: 0% is still off",
                text: r#"{"kubeletconfig":{"evictionHard":{"memory.available":"0%","nodefs.available":"10%"}}}"#,
                expect: Ok((&["hard nodefs.available<10%"], ConfigForm::Configz)),
            },
            Case {
                name: "configz without enforceNodeAllocatable: no allocatable copy",
                text: r#"{"kubeletconfig":{"evictionHard":{"memory.available":"100Mi"}}}"#,
                expect: Ok((&["hard memory.available<100Mi"], ConfigForm::Configz)),
            },
            Case {
                name: "configz answer in YAML, mergeDefaultEvictionSettings already applied",
                text: "kubeletconfig:\n  mergeDefaultEvictionSettings: true\n  evictionHard:\n    memory.available: 1Gi\n",
                expect: Ok((&["hard memory.available<1Gi"], ConfigForm::Configz)),
            },
            Case {
                name: "a configz answer of another kind",
                text: r#"{"kubeletconfig":{"kind":"KubeProxyConfiguration"}}"#,
                expect: Err("configz answer: kubeletconfig is of kind \"KubeProxyConfiguration\""),
            },
            Case {
                name: "configz beside other keys is no configz answer",
                text: r#"{"kubeletconfig":{},"other":1}"#,
                expect: Err("document 1: no kind and apiVersion"),
            },
        ];
        for case in cases {
            let got = EvictionConfig::decode(case.text);
            match (case.expect, got) {
                (Ok((thresholds, form)), Ok((config, got_form))) => {
                    assert_eq!(summary(&config), thresholds, "{}", case.name);
                    assert_eq!(got_form, form, "{}", case.name);
                }
                (Err(text), Err(error)) => {
                    assert!(
                        error.to_string().contains(text),
                        "{}: {error} lacks {text:?}",
                        case.name
                    );
                }
                (expect, got) => panic!("{}: expected {expect:?}, got {got:?}", case.name),
            }
        }
        // The same fields as a file decode as the kubelet defaults them.
        let (defaulted, _) = EvictionConfig::decode(&format!("{HEAD}maxPods: 110\n")).unwrap();
        assert_eq!(defaulted, EvictionConfig::default());
    }
}
