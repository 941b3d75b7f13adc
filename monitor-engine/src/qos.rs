//! A pod's QoS class as the kubelet computes it (`GetPodQOS` and `ComputePodQOS` in
//! kubernetes' `pkg/apis/core/v1/helper/qos`), which decides the pod's cgroup parent.
//!
//! * `status.qosClass`, when set, is taken as is: the kubelet reads it first.
//! * With pod-level `spec.resources` present (even empty; the PodLevelResources feature is on
//!   by default), only the pod-level requests and limits count. Otherwise requests and limits
//!   of app and init containers are summed; ephemeral containers have no resources.
//! * Only cpu and memory count, and only positive values.
//! * BestEffort: nothing counted. Guaranteed: every counted set of limits names both cpu and
//!   memory, and the summed requests equal the summed limits for each resource. Otherwise
//!   Burstable.
use std::{collections::BTreeMap, fmt};

use k8s_openapi::{
    api::core::v1::{Pod, PodSpec, ResourceRequirements},
    apimachinery::pkg::api::resource::Quantity as ApiQuantity,
};

use crate::{pod_request::PodQuantityError, quantity::Quantity};

/// The three QoS classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    /// The API spelling, as in `status.qosClass`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }

    fn from_api(text: &str) -> Option<Self> {
        [
            QosClass::Guaranteed,
            QosClass::Burstable,
            QosClass::BestEffort,
        ]
        .into_iter()
        .find(|class| class.as_str() == text)
    }
}

impl fmt::Display for QosClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The pod's QoS class: `status.qosClass` when it names a class, else computed from the spec.
pub fn pod_qos(pod: &Pod) -> Result<QosClass, PodQuantityError> {
    let recorded = pod.status.as_ref().and_then(|s| s.qos_class.as_deref());
    match recorded.and_then(QosClass::from_api) {
        Some(class) => Ok(class),
        None => compute_qos(pod.spec.as_ref()),
    }
}

/// The class computed from the spec alone (`ComputePodQOS`); a pod without a spec has no
/// resources and is BestEffort.
pub(crate) fn compute_qos(spec: Option<&PodSpec>) -> Result<QosClass, PodQuantityError> {
    let mut requests = Totals::new();
    let mut limits = Totals::new();
    let mut limits_name_cpu_and_memory = true;
    let mut count = |resources: &ResourceRequirements, place: &str| {
        requests.add(resources.requests.as_ref(), &format!("{place} requests"))?;
        let found = limits.add(resources.limits.as_ref(), &format!("{place} limits"))?;
        // The kubelet skips this check for absent pod-level limits, which changes nothing:
        // requests then differ from the empty limits unless both are empty (BestEffort).
        if !(found.contains(&"cpu") && found.contains(&"memory")) {
            limits_name_cpu_and_memory = false;
        }
        Ok::<_, PodQuantityError>(())
    };
    if let Some(spec) = spec {
        if let Some(pod_level) = &spec.resources {
            count(pod_level, "pod-level")?;
        } else {
            let init = spec.init_containers.iter().flatten();
            for container in spec.containers.iter().chain(init) {
                let empty = ResourceRequirements::default();
                let resources = container.resources.as_ref().unwrap_or(&empty);
                count(resources, &format!("container {}", container.name))?;
            }
        }
    }
    Ok(if requests.0.is_empty() && limits.0.is_empty() {
        QosClass::BestEffort
    } else if limits_name_cpu_and_memory && requests.0 == limits.0 {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    })
}

/// Summed positive cpu and memory quantities.
struct Totals(BTreeMap<&'static str, Quantity>);

impl Totals {
    fn new() -> Self {
        Self(BTreeMap::new())
    }

    /// Adds the positive cpu and memory entries of `list`; returns the names added.
    fn add(
        &mut self,
        list: Option<&BTreeMap<String, ApiQuantity>>,
        place: &str,
    ) -> Result<Vec<&'static str>, PodQuantityError> {
        let mut found = Vec::new();
        for resource in ["cpu", "memory"] {
            let Some(ApiQuantity(text)) = list.and_then(|l| l.get(resource)) else {
                continue;
            };
            let value: Quantity = text.parse().map_err(|reason| PodQuantityError {
                place: place.to_string(),
                resource: resource.to_string(),
                value: text.clone(),
                reason,
            })?;
            if value > Quantity::ZERO {
                let total = self.0.entry(resource).or_insert(Quantity::ZERO);
                *total = total.saturating_add(value);
                found.push(resource);
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod from YAML, the way tests read best.
    fn pod(yaml: &str) -> Pod {
        serde_norway::from_str(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
    }

    #[test]
    fn classes_match_the_kubelet() {
        struct Case {
            name: &'static str,
            pod: &'static str,
            class: QosClass,
        }
        use QosClass::*;
        let cases = [
            Case {
                name: "no containers",
                pod: "spec: {containers: []}",
                class: BestEffort,
            },
            Case {
                name: "no spec",
                pod: "metadata: {name: a}",
                class: BestEffort,
            },
            Case {
                name: "no resources",
                pod: "spec: {containers: [{name: a}, {name: b, resources: {}}]}",
                class: BestEffort,
            },
            Case {
                name: "only other resources",
                pod: "spec: {containers: [{name: a, resources: {requests: {nvidia.com/gpu: 1}, limits: {nvidia.com/gpu: 1}}}]}",
                class: BestEffort,
            },
            Case {
                name: "zero requests do not count",
                pod: "spec: {containers: [{name: a, resources: {requests: {cpu: 0, memory: 0Mi}}}]}",
                class: BestEffort,
            },
            Case {
                name: "limits equal requests",
                pod: "spec: {containers: [{name: a, resources: {requests: {cpu: 1, memory: 1Gi}, limits: {cpu: 1, memory: 1Gi}}}]}",
                class: Guaranteed,
            },
            Case {
                name: "equal in different units",
                pod: "spec: {containers: [{name: a, resources: {requests: {cpu: 1000m, memory: 1024Mi}, limits: {cpu: '1', memory: 1Gi}}}]}",
                class: Guaranteed,
            },
            Case {
                name: "only limits (requests default to them in the API, not here)",
                pod: "spec: {containers: [{name: a, resources: {limits: {cpu: 1, memory: 1Gi}}}]}",
                class: Burstable,
            },
            Case {
                name: "memory limit missing",
                pod: "spec: {containers: [{name: a, resources: {requests: {cpu: 1}, limits: {cpu: 1}}}]}",
                class: Burstable,
            },
            Case {
                name: "request below limit",
                pod: "spec: {containers: [{name: a, resources: {requests: {cpu: 1, memory: 1Gi}, limits: {cpu: 1, memory: 2Gi}}}]}",
                class: Burstable,
            },
            Case {
                name: "one guaranteed container and one without resources",
                pod: "spec: {containers: [{name: a, resources: {requests: {cpu: 1, memory: 1Gi}, limits: {cpu: 1, memory: 1Gi}}}, {name: b}]}",
                class: Burstable,
            },
            Case {
                name: "init containers count",
                pod: "spec: {initContainers: [{name: i, resources: {requests: {memory: 1Mi}}}], containers: [{name: a}]}",
                class: Burstable,
            },
            Case {
                name: "guaranteed app and init containers",
                pod: "spec: {initContainers: [{name: i, resources: {requests: {cpu: 1, memory: 1Mi}, limits: {cpu: 1, memory: 1Mi}}}], containers: [{name: a, resources: {requests: {cpu: 2, memory: 2Mi}, limits: {cpu: 2, memory: 2Mi}}}]}",
                class: Guaranteed,
            },
            Case {
                name: "pod-level resources override containers",
                pod: "spec: {resources: {requests: {cpu: 1, memory: 1Gi}, limits: {cpu: 1, memory: 1Gi}}, containers: [{name: a, resources: {requests: {memory: 1Mi}}}]}",
                class: Guaranteed,
            },
            Case {
                name: "pod-level requests without limits",
                pod: "spec: {resources: {requests: {memory: 1Gi}}, containers: [{name: a, resources: {requests: {cpu: 1, memory: 1Gi}, limits: {cpu: 1, memory: 1Gi}}}]}",
                class: Burstable,
            },
            Case {
                name: "empty pod-level resources hide container resources",
                pod: "spec: {resources: {}, containers: [{name: a, resources: {requests: {cpu: 1}}}]}",
                class: BestEffort,
            },
            Case {
                name: "pod-level limits without cpu",
                pod: "spec: {resources: {requests: {memory: 1Gi}, limits: {memory: 1Gi}}, containers: [{name: a}]}",
                class: Burstable,
            },
            Case {
                name: "recorded status wins",
                pod: "spec: {containers: [{name: a}]}\nstatus: {qosClass: Guaranteed}",
                class: Guaranteed,
            },
            Case {
                name: "unknown recorded status is recomputed",
                pod: "spec: {containers: [{name: a}]}\nstatus: {qosClass: Platinum}",
                class: BestEffort,
            },
        ];
        for case in cases {
            let got = pod_qos(&pod(case.pod)).unwrap_or_else(|e| panic!("{}: {e}", case.name));
            assert_eq!(got, case.class, "{}", case.name);
        }
    }

    #[test]
    fn malformed_quantity_names_its_place() {
        let bad = pod("spec: {containers: [{name: web, resources: {limits: {memory: lots}}}]}");
        let error = pod_qos(&bad).unwrap_err();
        assert_eq!(
            (error.place.as_str(), error.resource.as_str()),
            ("container web limits", "memory")
        );
        assert_eq!(error.value, "lots");
    }
}
