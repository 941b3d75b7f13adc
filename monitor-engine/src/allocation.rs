//! A pod's resources as the kubelet allocated them, for an in-place resize (GA in 1.35).
//!
//! The kubelet's eviction manager ranks `getAllocatedPods`: each active pod passed through
//! the allocation manager's `UpdatePodFromAllocation`, which puts every container's (and
//! init container's) allocated `resources` in place of the spec's. A pod whose spec asks
//! more than was allocated (resize Deferred, Infeasible, or not yet taken by the kubelet) is
//! therefore ranked on the allocation. The allocation itself is the kubelet's checkpoint;
//! what it publishes of it differs by version:
//!
//! * 1.27-1.31 (and 1.32, 1.33-1.35 with the `InPlacePodVerticalScalingAllocatedStatus`
//!   gate, and 1.36 on): `status.containerStatuses[].allocatedResources`, the allocated
//!   requests. Taken whenever present, whatever the resize state.
//! * 1.27-1.32: the resize state in `status.resize` (`Proposed`, `InProgress`, `Deferred`,
//!   `Infeasible`).
//! * 1.33 on: the conditions `PodResizePending` (reason `Deferred` or `Infeasible`) and
//!   `PodResizeInProgress`; `status.resize` is no longer set, and by default no
//!   `allocatedResources` either (1.33-1.35). Then `status.containerStatuses[].resources`
//!   stands in while a resize is pending: the kubelet fills it from the allocation (the
//!   runtime reports no memory request), and a pending resize has not been allocated.
//!
//! Without a pending resize and without `allocatedResources`, the kubelet has allocated the
//! spec (it allocates a resize it can admit at once), so the spec is taken. One case stays
//! approximate: a resize pending while an earlier one is still in progress; the status's
//! resources are then taken, which may be the earlier allocation.
use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use serde::Serialize;

/// What the kubelet reports of a pod's resize.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum ResizeState {
    /// `status.resize: Proposed` (1.27-1.32): the kubelet has not looked at it yet.
    Proposed,
    /// Allocated, not yet actuated (`PodResizeInProgress`, or `status.resize: InProgress`).
    InProgress,
    /// Not allocated now, retried later (reason or `status.resize` `Deferred`).
    Deferred,
    /// Never allocatable on this node (reason or `status.resize` `Infeasible`).
    Infeasible,
    /// `PodResizePending` with another reason.
    Pending,
}

impl ResizeState {
    /// Whether the new resources are not allocated yet.
    pub(crate) fn is_pending(self) -> bool {
        !matches!(self, ResizeState::InProgress)
    }
}

/// Where allocated requests were read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum AllocationSource {
    /// `status.containerStatuses[].allocatedResources` (or the pod-level one).
    AllocatedResources,
    /// `status.containerStatuses[].resources.requests`, while a resize is pending.
    StatusResources,
}

/// A pod spec with the kubelet's allocation in place of the desired resources.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AllocatedSpec<'a> {
    /// The spec, a copy only when the allocation differs.
    pub(crate) spec: Cow<'a, PodSpec>,
    /// The resize state the status reports, if any.
    pub(crate) resize: Option<ResizeState>,
    /// Where the replaced requests came from; `None` when the spec's stand.
    pub(crate) source: Option<AllocationSource>,
}

/// `spec` with each container's requests replaced by what the kubelet allocated, as its
/// `UpdatePodFromAllocation` does for the eviction manager.
pub(crate) fn allocated_spec<'a>(
    spec: &'a PodSpec,
    status: Option<&PodStatus>,
) -> AllocatedSpec<'a> {
    let resize = status.and_then(resize_state);
    let pending = resize.is_some_and(ResizeState::is_pending);
    let mut allocated = AllocatedSpec {
        spec: Cow::Borrowed(spec),
        resize,
        source: None,
    };
    let Some(status) = status else {
        return allocated;
    };
    let lists = [
        (false, status.container_statuses.as_deref()),
        (true, status.init_container_statuses.as_deref()),
    ];
    for (init, statuses) in lists {
        let containers = if init {
            spec.init_containers.as_deref().unwrap_or_default()
        } else {
            &spec.containers
        };
        for (index, container) in containers.iter().enumerate() {
            let Some((requests, source)) = container_allocation(statuses, container, pending)
            else {
                continue;
            };
            if container_requests(container) == Some(requests) {
                continue;
            }
            let spec = allocated.spec.to_mut();
            let target = if init {
                &mut spec.init_containers.get_or_insert_default()[index]
            } else {
                &mut spec.containers[index]
            };
            target.resources.get_or_insert_default().requests = Some(requests.clone());
            allocated.source = Some(source);
        }
    }
    if let Some((requests, source)) = pod_level_allocation(spec, status, pending) {
        allocated
            .spec
            .to_mut()
            .resources
            .get_or_insert_default()
            .requests = Some(requests.clone());
        allocated.source = Some(source);
    }
    allocated
}

/// The resize state: the 1.33+ conditions first, else the 1.27-1.32 `status.resize`.
fn resize_state(status: &PodStatus) -> Option<ResizeState> {
    let condition = |kind: &str| {
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == kind && c.status == "True")
    };
    if let Some(pending) = condition("PodResizePending") {
        return Some(match pending.reason.as_deref() {
            Some("Deferred") => ResizeState::Deferred,
            Some("Infeasible") => ResizeState::Infeasible,
            _ => ResizeState::Pending,
        });
    }
    if condition("PodResizeInProgress").is_some() {
        return Some(ResizeState::InProgress);
    }
    match status.resize.as_deref()? {
        "Proposed" => Some(ResizeState::Proposed),
        "InProgress" => Some(ResizeState::InProgress),
        "Deferred" => Some(ResizeState::Deferred),
        "Infeasible" => Some(ResizeState::Infeasible),
        _ => None,
    }
}

type ResourceList = BTreeMap<String, ApiQuantity>;

fn container_requests(container: &Container) -> Option<&ResourceList> {
    container.resources.as_ref()?.requests.as_ref()
}

/// The allocated requests of one container, when the status publishes them.
fn container_allocation<'s>(
    statuses: Option<&'s [ContainerStatus]>,
    container: &Container,
    pending: bool,
) -> Option<(&'s ResourceList, AllocationSource)> {
    let status = statuses?.iter().find(|s| s.name == container.name)?;
    if let Some(allocated) = &status.allocated_resources {
        return Some((allocated, AllocationSource::AllocatedResources));
    }
    let running_with = status.resources.as_ref()?.requests.as_ref()?;
    pending.then_some((running_with, AllocationSource::StatusResources))
}

/// Pod-level resources (`spec.resources`, resizable in place from 1.35 as an alpha): the
/// pod-level `status.allocatedResources`, or `status.resources` while a resize is pending.
fn pod_level_allocation<'s>(
    spec: &PodSpec,
    status: &'s PodStatus,
    pending: bool,
) -> Option<(&'s ResourceList, AllocationSource)> {
    let desired = spec.resources.as_ref()?;
    let allocation = match &status.allocated_resources {
        Some(allocated) => (allocated, AllocationSource::AllocatedResources),
        None if pending => (
            status.resources.as_ref()?.requests.as_ref()?,
            AllocationSource::StatusResources,
        ),
        None => return None,
    };
    (desired.requests.as_ref() != Some(allocation.0)).then_some(allocation)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod_facts::PodFacts;
    use crate::quantity::Quantity;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::{Value, json};

    const MI: i64 = 1 << 20;

    /// A pod resized from 512Mi to 1Gi (spec), with `status` as each version publishes it.
    fn resized(status: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "uid": "u1"},
            "spec": {"nodeName": "n1", "containers": [{"name": "app", "resources": {
                "requests": {"memory": "1Gi", "cpu": "100m"},
                "limits": {"memory": "1Gi"}}}]},
            "status": status,
        }))
        .expect("test pod")
    }

    /// `status.containerStatuses[0]` of the app container running with 512Mi.
    fn running_512(extra: Value) -> Value {
        let mut status = json!({
            "name": "app",
            "ready": true,
            "restartCount": 0,
            "image": "web:1",
            "imageID": "",
            "state": {"running": {"startedAt": "2026-01-02T03:04:05Z"}},
            "resources": {"requests": {"memory": "512Mi", "cpu": "100m"}, "limits": {"memory": "512Mi"}},
        });
        for (key, value) in extra.as_object().expect("object") {
            status[key] = value.clone();
        }
        status
    }

    fn condition(kind: &str, reason: Option<&str>) -> Value {
        let mut condition = json!({"type": kind, "status": "True",
            "lastProbeTime": null, "lastTransitionTime": "2026-01-02T03:04:06Z"});
        if let Some(reason) = reason {
            condition["reason"] = json!(reason);
            condition["message"] = json!("Node didn't have enough resource: memory");
        }
        condition
    }

    /// Each version's shape of a pending resize ranks on the allocation; the shapes of a
    /// resize the kubelet has allocated rank on the spec.
    #[test]
    fn ranks_on_the_allocation_in_each_versions_status_shape() {
        struct Case {
            name: &'static str,
            status: Value,
            request_mi: i64,
            state: Option<ResizeState>,
            source: Option<AllocationSource>,
        }
        let allocated_512 = json!({"allocatedResources": {"memory": "512Mi", "cpu": "100m"}});
        let cases = [
            Case {
                name: "1.27-1.31: status.resize Deferred, allocatedResources",
                status: json!({"phase": "Running", "resize": "Deferred",
                    "containerStatuses": [running_512(allocated_512.clone())]}),
                request_mi: 512,
                state: Some(ResizeState::Deferred),
                source: Some(AllocationSource::AllocatedResources),
            },
            Case {
                name: "1.27-1.31: status.resize Proposed, not looked at yet",
                status: json!({"phase": "Running", "resize": "Proposed",
                    "containerStatuses": [running_512(allocated_512.clone())]}),
                request_mi: 512,
                state: Some(ResizeState::Proposed),
                source: Some(AllocationSource::AllocatedResources),
            },
            Case {
                name: "1.27-1.31: status.resize InProgress, allocatedResources already the spec",
                status: json!({"phase": "Running", "resize": "InProgress",
                    "containerStatuses": [running_512(json!({"allocatedResources": {"memory": "1Gi", "cpu": "100m"}}))]}),
                request_mi: 1024,
                state: Some(ResizeState::InProgress),
                source: None,
            },
            Case {
                name: "1.32: status.resize Infeasible, allocatedResources behind its alpha gate",
                status: json!({"phase": "Running", "resize": "Infeasible",
                    "containerStatuses": [running_512(json!({}))]}),
                request_mi: 512,
                state: Some(ResizeState::Infeasible),
                source: Some(AllocationSource::StatusResources),
            },
            Case {
                name: "1.33-1.35: PodResizePending Deferred, no allocatedResources",
                status: json!({"phase": "Running",
                    "conditions": [condition("Ready", None), condition("PodResizePending", Some("Deferred"))],
                    "containerStatuses": [running_512(json!({}))]}),
                request_mi: 512,
                state: Some(ResizeState::Deferred),
                source: Some(AllocationSource::StatusResources),
            },
            Case {
                name: "1.33-1.35: PodResizePending Infeasible",
                status: json!({"phase": "Running",
                    "conditions": [condition("PodResizePending", Some("Infeasible"))],
                    "containerStatuses": [running_512(json!({}))]}),
                request_mi: 512,
                state: Some(ResizeState::Infeasible),
                source: Some(AllocationSource::StatusResources),
            },
            Case {
                name: "1.33-1.35: PodResizeInProgress: allocated, not actuated: the spec",
                status: json!({"phase": "Running",
                    "conditions": [condition("PodResizeInProgress", None)],
                    "containerStatuses": [running_512(json!({}))]}),
                request_mi: 1024,
                state: Some(ResizeState::InProgress),
                source: None,
            },
            Case {
                name: "1.33-1.35: a false PodResizePending is no resize",
                status: json!({"phase": "Running",
                    "conditions": [{"type": "PodResizePending", "status": "False"}],
                    "containerStatuses": [running_512(json!({}))]}),
                request_mi: 1024,
                state: None,
                source: None,
            },
            Case {
                name: "1.36: PodResizePending Deferred with allocatedResources again",
                status: json!({"phase": "Running",
                    "conditions": [condition("PodResizePending", Some("Deferred"))],
                    "containerStatuses": [running_512(allocated_512.clone())]}),
                request_mi: 512,
                state: Some(ResizeState::Deferred),
                source: Some(AllocationSource::AllocatedResources),
            },
            Case {
                name: "1.36: allocatedResources differ without a condition: still the allocation",
                status: json!({"phase": "Running",
                    "containerStatuses": [running_512(allocated_512.clone())]}),
                request_mi: 512,
                state: None,
                source: Some(AllocationSource::AllocatedResources),
            },
            Case {
                name: "no resize, status resources differ: the spec (nothing pending)",
                status: json!({"phase": "Running", "containerStatuses": [running_512(json!({}))]}),
                request_mi: 1024,
                state: None,
                source: None,
            },
            Case {
                name: "no status at all (a manifest file)",
                status: Value::Null,
                request_mi: 1024,
                state: None,
                source: None,
            },
        ];
        for case in cases {
            let facts = PodFacts::from_pod(&resized(case.status)).expect(case.name);
            assert_eq!(
                facts.memory_request,
                Quantity::from_units(case.request_mi * MI),
                "{}",
                case.name
            );
            let note = facts.resize;
            assert_eq!(note.and_then(|n| n.state), case.state, "{}", case.name);
            assert_eq!(note.and_then(|n| n.source), case.source, "{}", case.name);
            if let Some(note) = note {
                assert_eq!(
                    note.desired_memory_request,
                    Quantity::from_units(1024 * MI),
                    "{}",
                    case.name
                );
            }
        }
    }

    /// Sidecars are resizable too: their allocation sits in `initContainerStatuses`. A
    /// pod-level resize (1.35 alpha) publishes the pod-level `status.allocatedResources`.
    #[test]
    fn takes_sidecar_and_pod_level_allocations() {
        let sidecar: Pod = serde_json::from_value(json!({
            "metadata": {"name": "mesh", "uid": "u2"},
            "spec": {
                "containers": [{"name": "app", "resources": {"requests": {"memory": "100Mi"}}}],
                "initContainers": [{"name": "proxy", "restartPolicy": "Always",
                    "resources": {"requests": {"memory": "300Mi"}}}]
            },
            "status": {
                "conditions": [condition("PodResizePending", Some("Deferred"))],
                "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "a", "imageID": "",
                    "resources": {"requests": {"memory": "100Mi"}}}],
                "initContainerStatuses": [{"name": "proxy", "ready": true, "restartCount": 0, "image": "p", "imageID": "",
                    "resources": {"requests": {"memory": "50Mi"}}}]
            }
        }))
        .unwrap();
        let facts = PodFacts::from_pod(&sidecar).unwrap();
        assert_eq!(facts.memory_request, Quantity::from_units(150 * MI));

        let pod_level: Pod = serde_json::from_value(json!({
            "metadata": {"name": "whole", "uid": "u3"},
            "spec": {
                "containers": [{"name": "app"}],
                "resources": {"requests": {"memory": "2Gi"}}
            },
            "status": {
                "conditions": [condition("PodResizePending", Some("Infeasible"))],
                "allocatedResources": {"memory": "1Gi"}
            }
        }))
        .unwrap();
        let facts = PodFacts::from_pod(&pod_level).unwrap();
        assert_eq!(facts.memory_request, Quantity::from_units(1024 * MI));
    }
}
