//! A Pod object as the node's kubelet sees it: under which uid it keeps the pod
//! ([`kubelet_uid`](crate::pod_facts::kubelet_uid), pure, beside the other pod facts),
//! and whether the pod is one of its active pods.
//!
//! The two differ from the API's view in ways that decide what gets ranked:
//! - A static pod (from a manifest file on the node) runs under the kubelet's own uid, a
//!   hash of the manifest. The API server only holds its mirror pod, whose `metadata.uid` is
//!   the API server's; the kubelet's uid is in the mirror's `kubernetes.io/config.mirror`
//!   annotation. The Summary API and the pod's cgroup are both named after the kubelet's uid.
//! - The kubelet ranks only its active pods: bound to it and not finished (phase Succeeded or
//!   Failed). A pending pod the scheduler has not placed yet is no node's pod.
use k8s_openapi::api::core::v1::Pod;

/// Where a pod stands from the point of view of one node's kubelet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Bound to the node (or the node is not known) and not finished: ranked.
    Active,
    /// Phase Succeeded or Failed: its containers are done.
    Finished,
    /// No `spec.nodeName`: not scheduled yet.
    Unscheduled,
    /// Bound to another node.
    OtherNode,
}

/// How `pod` stands for the kubelet of `node` (`None`: the node is not known, so any node
/// counts as this one).
pub fn standing(pod: &Pod, node: Option<&str>) -> Standing {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    standing_of(
        matches!(phase, Some("Succeeded" | "Failed")),
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        node,
    )
}

/// [`standing`] from its two inputs: whether the pod finished, and its `spec.nodeName`.
pub fn standing_of(finished: bool, node_name: Option<&str>, node: Option<&str>) -> Standing {
    if finished {
        return Standing::Finished;
    }
    match node_name {
        None | Some("") => Standing::Unscheduled,
        Some(bound) if node.is_some_and(|node| node != bound) => Standing::OtherNode,
        Some(_) => Standing::Active,
    }
}

/// The pods in a manifests directory the kubelet of `node` would run: as [`standing`], but a
/// manifest without `spec.nodeName` counts as this node's, the way the kubelet's own static
/// pod manifests carry no node name.
pub fn runs_here(pod: &Pod, node: Option<&str>) -> bool {
    matches!(
        standing(pod, node),
        Standing::Active | Standing::Unscheduled
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod_facts::kubelet_uid;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).expect("test pod")
    }

    #[test]
    fn the_kubelet_uid_of_a_mirror_pod_is_its_mirror_annotation() {
        struct Case {
            name: &'static str,
            metadata: serde_json::Value,
            uid: Option<&'static str>,
        }
        let cases = [
            Case {
                name: "ordinary pod",
                metadata: json!({"uid": "api-1"}),
                uid: Some("api-1"),
            },
            Case {
                name: "mirror pod",
                metadata: json!({"uid": "api-2", "annotations": {
                    "kubernetes.io/config.mirror": "9b2c0c6e1d4f", "kubernetes.io/config.source": "file"}}),
                uid: Some("9b2c0c6e1d4f"),
            },
            Case {
                name: "empty mirror annotation keeps the api uid",
                metadata: json!({"uid": "api-3", "annotations": {"kubernetes.io/config.mirror": ""}}),
                uid: Some("api-3"),
            },
            Case {
                name: "static pod manifest from the node's file has no mirror annotation",
                metadata: json!({"uid": "file-4", "annotations": {"kubernetes.io/config.source": "file"}}),
                uid: Some("file-4"),
            },
            Case {
                name: "no uid at all",
                metadata: json!({}),
                uid: None,
            },
        ];
        for case in cases {
            let pod = pod(json!({"metadata": case.metadata}));
            assert_eq!(kubelet_uid(&pod), case.uid, "case {:?}", case.name);
        }
    }

    #[test]
    fn only_bound_unfinished_pods_of_the_node_are_active() {
        struct Case {
            name: &'static str,
            node_name: Option<&'static str>,
            phase: Option<&'static str>,
            node: Option<&'static str>,
            standing: Standing,
            runs_here: bool,
        }
        let cases = [
            Case {
                name: "running on this node",
                node_name: Some("n1"),
                phase: Some("Running"),
                node: Some("n1"),
                standing: Standing::Active,
                runs_here: true,
            },
            Case {
                name: "bound, phase not reported yet",
                node_name: Some("n1"),
                phase: None,
                node: Some("n1"),
                standing: Standing::Active,
                runs_here: true,
            },
            Case {
                name: "bound, node unknown",
                node_name: Some("n2"),
                phase: Some("Pending"),
                node: None,
                standing: Standing::Active,
                runs_here: true,
            },
            Case {
                name: "another node's pod",
                node_name: Some("n2"),
                phase: Some("Running"),
                node: Some("n1"),
                standing: Standing::OtherNode,
                runs_here: false,
            },
            Case {
                name: "pending, not scheduled",
                node_name: None,
                phase: Some("Pending"),
                node: Some("n1"),
                standing: Standing::Unscheduled,
                runs_here: true,
            },
            Case {
                name: "empty node name is not scheduled",
                node_name: Some(""),
                phase: Some("Pending"),
                node: None,
                standing: Standing::Unscheduled,
                runs_here: true,
            },
            Case {
                name: "succeeded",
                node_name: Some("n1"),
                phase: Some("Succeeded"),
                node: Some("n1"),
                standing: Standing::Finished,
                runs_here: false,
            },
            Case {
                name: "failed (evicted) on another node",
                node_name: Some("n2"),
                phase: Some("Failed"),
                node: Some("n1"),
                standing: Standing::Finished,
                runs_here: false,
            },
        ];
        for case in cases {
            let pod = pod(json!({
                "metadata": {"name": "p", "uid": "u"},
                "spec": {"containers": [], "nodeName": case.node_name},
                "status": {"phase": case.phase},
            }));
            assert_eq!(
                standing(&pod, case.node),
                case.standing,
                "case {:?}",
                case.name
            );
            assert_eq!(
                runs_here(&pod, case.node),
                case.runs_here,
                "case {:?}",
                case.name
            );
        }
    }
}
