//! A pod's request for one resource, computed as the kubelet's eviction ranking computes it
//! (`GetResourceRequestQuantity` with the PodLevelResources feature on).
//!
//! * Pod-level `spec.resources` set (requests or limits naming cpu, memory or hugepages):
//!   container requests are ignored altogether; the request is the pod-level request for
//!   the resource if it is one pod-level resources support, else zero. So a pod with
//!   pod-level resources has an ephemeral-storage request of zero, exactly as in the kubelet.
//! * Otherwise: the larger of (app containers + restartable init containers, i.e. sidecars)
//!   and, for each init container in order, its request plus the sidecars started before it.
//! * `spec.overhead` for the resource is added, but only when the total is non-zero.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use super::quantity::{Quantity, QuantityError};

/// The kubelet's name for the memory resource.
pub(crate) const MEMORY: &str = "memory";
/// The kubelet's name for local ephemeral storage.
pub(crate) const EPHEMERAL_STORAGE: &str = "ephemeral-storage";

/// A quantity in a pod spec that does not parse (the API server would have refused it, so
/// this means the input was not from a real cluster).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{place}: {resource} {value:?}: {reason}")]
pub struct PodQuantityError {
    /// Where the value sits, like `container app requests` or `overhead`.
    pub(crate) place: String,
    /// The resource name.
    pub(crate) resource: String,
    /// The value as written.
    pub(crate) value: String,
    /// What is wrong with it.
    pub(crate) reason: QuantityError,
}

/// The request for `resource` (`memory` or `ephemeral-storage`) as the kubelet computes it.
pub(crate) fn pod_request(spec: &PodSpec, resource: &str) -> Result<Quantity, PodQuantityError> {
    let pod_level = spec
        .resources
        .as_ref()
        .filter(|r| sets_pod_level_resources(r));
    let mut total = match pod_level {
        Some(resources) if supports_pod_level(resource) => {
            lookup(resources.requests.as_ref(), resource, "pod-level requests")?
        }
        Some(_) => Quantity::ZERO,
        None => aggregate_container_requests(spec, resource)?,
    };
    if total != Quantity::ZERO {
        total = total.saturating_add(lookup(spec.overhead.as_ref(), resource, "overhead")?);
    }
    Ok(total)
}

/// cpu, memory and hugepages are the resources pod-level `spec.resources` may set.
fn supports_pod_level(resource: &str) -> bool {
    matches!(resource, "cpu" | "memory") || resource.starts_with("hugepages-")
}

/// The kubelet's `IsPodLevelResourcesSet`: a supported resource in requests or limits.
fn sets_pod_level_resources(resources: &ResourceRequirements) -> bool {
    [&resources.requests, &resources.limits]
        .into_iter()
        .flatten()
        .any(|list| list.keys().any(|name| supports_pod_level(name)))
}

/// Sum of app containers and sidecars, or the largest init-time footprint if bigger.
fn aggregate_container_requests(
    spec: &PodSpec,
    resource: &str,
) -> Result<Quantity, PodQuantityError> {
    let mut total = Quantity::ZERO;
    for container in &spec.containers {
        total = total.saturating_add(container_request(container, resource)?);
    }
    let mut sidecars = Quantity::ZERO;
    let mut init_peak = Quantity::ZERO;
    for container in spec.init_containers.iter().flatten() {
        let request = container_request(container, resource)?;
        let footprint = if container.restart_policy.as_deref() == Some("Always") {
            // A sidecar keeps running: it counts toward the steady state and toward every
            // init container started after it.
            total = total.saturating_add(request);
            sidecars = sidecars.saturating_add(request);
            sidecars
        } else {
            request.saturating_add(sidecars)
        };
        init_peak = init_peak.max(footprint);
    }
    Ok(total.max(init_peak))
}

fn container_request(container: &Container, resource: &str) -> Result<Quantity, PodQuantityError> {
    let requests = container
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref());
    lookup(
        requests,
        resource,
        &format!("container {} requests", container.name),
    )
}

fn lookup(
    list: Option<&BTreeMap<String, ApiQuantity>>,
    resource: &str,
    place: &str,
) -> Result<Quantity, PodQuantityError> {
    match list.and_then(|list| list.get(resource)) {
        None => Ok(Quantity::ZERO),
        Some(ApiQuantity(text)) => text.parse().map_err(|reason| PodQuantityError {
            place: place.to_string(),
            resource: resource.to_string(),
            value: text.clone(),
            reason,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod spec from compact JSON, the way such specs appear in `kubectl get -o json`.
    fn spec(json: serde_json::Value) -> PodSpec {
        serde_json::from_value(json).expect("test pod spec")
    }

    fn mi(n: i64) -> Quantity {
        Quantity::from_units(n << 20)
    }

    #[test]
    fn computes_requests_like_the_kubelet() {
        use serde_json::json;
        let c = |name: &str, memory: &str| json!({"name": name, "resources": {"requests": {"memory": memory}}});
        let sidecar = |name: &str, memory: &str| json!({"name": name, "restartPolicy": "Always", "resources": {"requests": {"memory": memory}}});
        struct Case {
            name: &'static str,
            spec: serde_json::Value,
            resource: &'static str,
            request: Quantity,
        }
        let cases = [
            Case {
                name: "no requests at all",
                spec: json!({"containers": [{"name": "a"}]}),
                resource: MEMORY,
                request: Quantity::ZERO,
            },
            Case {
                name: "sum of app containers",
                spec: json!({"containers": [c("a", "100Mi"), c("b", "50Mi")]}),
                resource: MEMORY,
                request: mi(150),
            },
            Case {
                name: "a big init container dominates",
                spec: json!({"containers": [c("a", "100Mi")], "initContainers": [c("init", "300Mi")]}),
                resource: MEMORY,
                request: mi(300),
            },
            Case {
                name: "a small init container does not",
                spec: json!({"containers": [c("a", "100Mi")], "initContainers": [c("init", "60Mi")]}),
                resource: MEMORY,
                request: mi(100),
            },
            Case {
                name: "sidecars add to the steady state",
                spec: json!({"containers": [c("a", "100Mi")], "initContainers": [sidecar("proxy", "50Mi")]}),
                resource: MEMORY,
                request: mi(150),
            },
            Case {
                name: "an init container after a sidecar runs beside it",
                spec: json!({
                    "containers": [c("a", "100Mi")],
                    "initContainers": [sidecar("proxy", "50Mi"), c("migrate", "120Mi")]
                }),
                resource: MEMORY,
                request: mi(170),
            },
            Case {
                name: "an init container before a sidecar does not run beside it",
                spec: json!({
                    "containers": [c("a", "100Mi")],
                    "initContainers": [c("migrate", "120Mi"), sidecar("proxy", "50Mi")]
                }),
                resource: MEMORY,
                request: mi(150),
            },
            Case {
                name: "overhead is added to a non-zero request",
                spec: json!({"containers": [c("a", "100Mi")], "overhead": {"memory": "10Mi"}}),
                resource: MEMORY,
                request: mi(110),
            },
            Case {
                name: "overhead is not added to a zero request",
                spec: json!({"containers": [{"name": "a"}], "overhead": {"memory": "10Mi"}}),
                resource: MEMORY,
                request: Quantity::ZERO,
            },
            Case {
                name: "pod-level requests override container sums",
                spec: json!({
                    "containers": [c("a", "100Mi"), c("b", "100Mi")],
                    "resources": {"requests": {"memory": "150Mi"}},
                    "overhead": {"memory": "10Mi"}
                }),
                resource: MEMORY,
                request: mi(160),
            },
            Case {
                name: "pod-level limits alone still switch off container requests",
                spec: json!({"containers": [c("a", "100Mi")], "resources": {"limits": {"memory": "1Gi"}}}),
                resource: MEMORY,
                request: Quantity::ZERO,
            },
            Case {
                name: "pod-level resources zero the ephemeral-storage request",
                spec: json!({
                    "containers": [{"name": "a", "resources": {"requests": {"ephemeral-storage": "1Gi"}}}],
                    "resources": {"requests": {"cpu": "1"}}
                }),
                resource: EPHEMERAL_STORAGE,
                request: Quantity::ZERO,
            },
            Case {
                name: "pod-level resources naming only unsupported resources are ignored",
                spec: json!({
                    "containers": [{"name": "a", "resources": {"requests": {"ephemeral-storage": "1Gi"}}}],
                    "resources": {"requests": {"ephemeral-storage": "5Gi"}}
                }),
                resource: EPHEMERAL_STORAGE,
                request: Quantity::from_units(1 << 30),
            },
            Case {
                name: "decimal and binary units mix exactly",
                spec: json!({"containers": [c("a", "1G"), c("b", "1Gi")]}),
                resource: MEMORY,
                request: Quantity::from_units(1_000_000_000 + (1 << 30)),
            },
        ];
        for case in cases {
            let got = pod_request(&spec(case.spec), case.resource);
            assert_eq!(got, Ok(case.request), "case {:?}", case.name);
        }
    }

    #[test]
    fn names_the_container_with_a_bad_quantity() {
        let bad = spec(
            serde_json::json!({"containers": [{"name": "web", "resources": {"requests": {"memory": "lots"}}}]}),
        );
        let error = pod_request(&bad, MEMORY).expect_err("bad quantity");
        assert_eq!(error.place, "container web requests");
        assert_eq!(error.value, "lots");
    }
}
