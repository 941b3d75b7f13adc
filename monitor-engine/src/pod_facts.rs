//! What ranking and eviction need to know about a pod, taken once from its Pod object:
//! identity, priority, criticality, requests, grace period and local volumes.
use std::fmt;

use k8s_openapi::api::core::v1::{Pod, Volume};
use serde::{Deserialize, Serialize};

use crate::printable::printable;

use super::allocation::{AllocationSource, ResizeState, allocated_spec};
use super::pod_request::{EPHEMERAL_STORAGE, MEMORY, PodQuantityError, pod_request};
use super::qos::{QosClass, pod_qos};
use super::quantity::Quantity;

/// The kubelet's `SystemCriticalPriority` (`system-cluster-critical`); pods at or above it
/// are never evicted.
pub(crate) const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;
/// Annotation naming where the kubelet got a pod from; anything but `api` is a static pod.
pub(crate) const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// Annotation present on the API server's mirror of a static pod.
pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The uid the kubelet keys this pod by: the mirror annotation of a mirror pod (a static
/// pod runs under the kubelet's own uid, which the API server's mirror names there), else
/// `metadata.uid`.
pub fn kubelet_uid(pod: &Pod) -> Option<&str> {
    let mirror = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONFIG_MIRROR_ANNOTATION))
        .map(String::as_str)
        .filter(|uid| !uid.is_empty());
    mirror.or(pod.metadata.uid.as_deref())
}

/// A pod's identity. Ordered by namespace, then name, then uid: the documented tie-break
/// when every ranking key is equal, so the order never depends on input order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PodRef {
    /// `metadata.namespace` (`default` when absent).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// The kubelet's uid, the key its stats and cgroups are named by: `metadata.uid`, or for
    /// a mirror pod its `kubernetes.io/config.mirror` annotation (see `pods::kubelet_view`).
    pub uid: String,
}

impl fmt::Display for PodRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Escaped: logs and status lines print pods this way.
        write!(
            f,
            "{}/{}",
            printable(&self.namespace),
            printable(&self.name)
        )
    }
}

/// The rank-relevant facts of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    /// Identity.
    pub pod: PodRef,
    /// `spec.priority`, 0 when unset.
    pub priority: i32,
    /// The kubelet's `IsCriticalPod`: never evicted, the next candidate is taken instead.
    pub critical: bool,
    /// In the Guaranteed QoS class (or of a class that could not be told): its memory is
    /// what it asked for, so reclaim before eviction leaves it alone.
    pub guaranteed: bool,
    /// Memory request as the kubelet computes it, on the allocated resources.
    pub memory_request: Quantity,
    /// Ephemeral-storage request as the kubelet computes it.
    pub ephemeral_storage_request: Quantity,
    /// `spec.terminationGracePeriodSeconds`, used (capped) for soft evictions.
    pub termination_grace_period_seconds: Option<i64>,
    /// Names of volumes on local disk whose usage counts toward the pod's disk usage.
    pub local_volumes: Vec<String>,
    /// An in-place resize the status reports, or an allocation that differs from the spec.
    pub resize: Option<ResizeNote>,
}

/// Why a pod's requests are not (or may not be) the spec's: the kubelet ranks on its
/// allocation (see [`allocation`](super::allocation)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResizeNote {
    /// The resize state the status reports, if any.
    pub(crate) state: Option<ResizeState>,
    /// Where the allocation was read from; `None`: the spec's requests are the allocation.
    pub(crate) source: Option<AllocationSource>,
    /// The memory request the spec asks for (`memory_request` is the allocated one).
    pub(crate) desired_memory_request: Quantity,
}

/// A Pod object that cannot be ranked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodFactsError {
    /// No `metadata.name`.
    #[error("pod without metadata.name")]
    MissingName,
    /// No `metadata.uid`: the kubelet's stats are keyed by uid, so there is nothing to match.
    #[error("pod {0}: no metadata.uid (stats are matched by uid; use objects from the API server)")]
    MissingUid(String),
    /// No `spec`.
    #[error("pod {0}: no spec")]
    MissingSpec(String),
    /// A request or overhead that does not parse.
    #[error("pod {pod}: {error}")]
    Quantity {
        /// namespace/name.
        pod: String,
        /// The offending value.
        error: PodQuantityError,
    },
}

impl PodFacts {
    /// Extracts the facts from a Pod as served by the API server.
    pub fn from_pod(pod: &Pod) -> Result<PodFacts, PodFactsError> {
        let meta = &pod.metadata;
        let name = meta.name.clone().ok_or(PodFactsError::MissingName)?;
        let namespace = meta
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_string());
        let display = format!("{namespace}/{name}");
        let uid = kubelet_uid(pod)
            .map(str::to_string)
            .ok_or_else(|| PodFactsError::MissingUid(display.clone()))?;
        let spec = pod
            .spec
            .as_ref()
            .ok_or_else(|| PodFactsError::MissingSpec(display.clone()))?;
        let request = |spec, resource| {
            pod_request(spec, resource).map_err(|error| PodFactsError::Quantity {
                pod: display.clone(),
                error,
            })
        };
        let allocated = allocated_spec(spec, pod.status.as_ref());
        let memory_request = request(&allocated.spec, MEMORY)?;
        let desired_memory_request = match allocated.source {
            Some(_) => request(spec, MEMORY)?,
            None => memory_request,
        };
        let resize = (allocated.resize.is_some() || desired_memory_request != memory_request)
            .then_some(ResizeNote {
                state: allocated.resize,
                source: allocated.source,
                desired_memory_request,
            });
        Ok(PodFacts {
            memory_request,
            ephemeral_storage_request: request(&allocated.spec, EPHEMERAL_STORAGE)?,
            resize,
            priority: spec.priority.unwrap_or(0),
            critical: is_critical(pod),
            guaranteed: !matches!(pod_qos(pod), Ok(QosClass::Burstable | QosClass::BestEffort)),
            termination_grace_period_seconds: spec.termination_grace_period_seconds,
            local_volumes: spec
                .volumes
                .iter()
                .flatten()
                .filter(|v| is_local(v))
                .map(|v| v.name.clone())
                .collect(),
            pod: PodRef {
                namespace,
                name,
                uid,
            },
        })
    }
}

/// The kubelet's `kubetypes.IsCriticalPod`: a static pod (config source annotation present
/// and not `api`), a mirror pod (mirror annotation present), or priority at or above
/// [`SYSTEM_CRITICAL_PRIORITY`].
pub(crate) fn is_critical(pod: &Pod) -> bool {
    let annotations = pod.metadata.annotations.as_ref();
    let is_static = annotations
        .and_then(|a| a.get(CONFIG_SOURCE_ANNOTATION))
        .is_some_and(|source| source != "api");
    let is_mirror = annotations.is_some_and(|a| a.contains_key(CONFIG_MIRROR_ANNOTATION));
    let priority = pod.spec.as_ref().and_then(|s| s.priority);
    is_static || is_mirror || priority.is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY)
}

/// The kubelet's `localVolumeNames`: hostPath volumes and local ephemeral ones (gitRepo,
/// configMap, and emptyDir on the default medium).
fn is_local(volume: &Volume) -> bool {
    volume.host_path.is_some()
        || volume.git_repo.is_some()
        || volume.config_map.is_some()
        || volume
            .empty_dir
            .as_ref()
            .is_some_and(|e| e.medium.as_deref().unwrap_or("").is_empty())
}

/// Facts for unit tests, built from a pod's name: namespace `default`, uid the name,
/// priority 0, not critical, no requests, no grace period, no local volumes; the `with_`
/// methods change one field each.
#[cfg(any(test, feature = "test-support"))]
impl PodFacts {
    pub fn named(name: &str) -> Self {
        Self {
            pod: PodRef {
                namespace: "default".into(),
                name: name.into(),
                uid: name.into(),
            },
            priority: 0,
            critical: false,
            guaranteed: false,
            memory_request: Quantity::ZERO,
            ephemeral_storage_request: Quantity::ZERO,
            termination_grace_period_seconds: None,
            local_volumes: vec![],
            resize: None,
        }
    }

    pub fn with_uid(mut self, uid: &str) -> Self {
        self.pod.uid = uid.into();
        self
    }

    /// The memory request, in bytes.
    pub fn with_memory_request(mut self, bytes: i64) -> Self {
        self.memory_request = Quantity::from_units(bytes);
        self
    }
}

/// Builders only the engine's own tests use.
#[cfg(test)]
impl PodFacts {
    pub(crate) fn with_namespace(mut self, namespace: &str) -> Self {
        self.pod.namespace = namespace.into();
        self
    }

    pub(crate) fn with_priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    pub(crate) fn with_critical(mut self, critical: bool) -> Self {
        self.critical = critical;
        self
    }

    pub(crate) fn with_guaranteed(mut self, guaranteed: bool) -> Self {
        self.guaranteed = guaranteed;
        self
    }

    /// The ephemeral-storage request, in bytes.
    pub(crate) fn with_ephemeral_storage_request(mut self, bytes: i64) -> Self {
        self.ephemeral_storage_request = Quantity::from_units(bytes);
        self
    }

    pub(crate) fn with_grace_period(mut self, seconds: Option<i64>) -> Self {
        self.termination_grace_period_seconds = seconds;
        self
    }

    pub(crate) fn with_local_volumes(mut self, names: &[&str]) -> Self {
        self.local_volumes = names.iter().map(ToString::to_string).collect();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).expect("test pod")
    }

    #[test]
    fn detects_critical_pods_like_the_kubelet() {
        struct Case {
            name: &'static str,
            metadata: serde_json::Value,
            priority: Option<i32>,
            critical: bool,
        }
        let cases = [
            Case {
                name: "ordinary pod",
                metadata: json!({}),
                priority: Some(1000),
                critical: false,
            },
            Case {
                name: "no priority",
                metadata: json!({}),
                priority: None,
                critical: false,
            },
            Case {
                name: "system-cluster-critical priority",
                metadata: json!({}),
                priority: Some(2_000_000_000),
                critical: true,
            },
            Case {
                name: "just below critical",
                metadata: json!({}),
                priority: Some(1_999_999_999),
                critical: false,
            },
            Case {
                name: "static pod from a file",
                metadata: json!({"annotations": {"kubernetes.io/config.source": "file"}}),
                priority: None,
                critical: true,
            },
            Case {
                name: "api source is not static",
                metadata: json!({"annotations": {"kubernetes.io/config.source": "api"}}),
                priority: None,
                critical: false,
            },
            Case {
                name: "mirror pod",
                metadata: json!({"annotations": {"kubernetes.io/config.mirror": "abc"}}),
                priority: None,
                critical: true,
            },
        ];
        for case in cases {
            let mut metadata = case.metadata;
            metadata["name"] = json!("p");
            metadata["uid"] = json!("u");
            let pod = pod(
                json!({"metadata": metadata, "spec": {"containers": [], "priority": case.priority}}),
            );
            assert_eq!(is_critical(&pod), case.critical, "case {:?}", case.name);
        }
    }

    #[test]
    fn extracts_facts_from_a_pod() {
        let facts = PodFacts::from_pod(&pod(json!({
            "metadata": {"name": "web", "uid": "u1"},
            "spec": {
                "containers": [{"name": "a", "resources": {"requests": {"memory": "1Gi", "ephemeral-storage": "2Gi"}}}],
                "terminationGracePeriodSeconds": 45,
                "volumes": [
                    {"name": "scratch", "emptyDir": {}},
                    {"name": "shm", "emptyDir": {"medium": "Memory"}},
                    {"name": "host", "hostPath": {"path": "/var/log"}},
                    {"name": "conf", "configMap": {"name": "c"}},
                    {"name": "token", "secret": {"secretName": "s"}}
                ]
            }
        })))
        .expect("valid pod");
        assert_eq!(
            facts.pod,
            PodRef {
                namespace: "default".into(),
                name: "web".into(),
                uid: "u1".into()
            }
        );
        assert_eq!(facts.priority, 0);
        assert_eq!(facts.memory_request, Quantity::from_units(1 << 30));
        assert_eq!(
            facts.ephemeral_storage_request,
            Quantity::from_units(2 << 30)
        );
        assert_eq!(facts.termination_grace_period_seconds, Some(45));
        assert_eq!(facts.local_volumes, ["scratch", "host", "conf"]);
        assert!(!facts.guaranteed, "requests without limits: Burstable");

        for (name, resources, status, guaranteed) in [
            (
                "limits equal to requests",
                json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}),
                json!({}),
                true,
            ),
            ("no resources", json!({}), json!({}), false),
            (
                "the status's class first",
                json!({}),
                json!({"qosClass": "Guaranteed"}),
                true,
            ),
        ] {
            let facts = PodFacts::from_pod(&pod(json!({
                "metadata": {"name": "db", "uid": "u2"},
                "spec": {"containers": [{"name": "a", "resources": resources}]},
                "status": status
            })))
            .expect("valid pod");
            assert_eq!(facts.guaranteed, guaranteed, "{name}");
        }

        let no_uid = pod(json!({"metadata": {"name": "web"}, "spec": {"containers": []}}));
        assert_eq!(
            PodFacts::from_pod(&no_uid),
            Err(PodFactsError::MissingUid("default/web".into()))
        );
    }
}
