//! The part of a Pod object the agent keeps: what ranking and eviction need, the QoS class
//! that places its cgroup, and where the pod stands for this node's kubelet.
//!
//! A whole `Pod` holds every container's image, command, environment, probes and status, a
//! few KiB each; at 10,000 pods those copies were most of the agent's memory. The pod sources
//! ([`ManifestWatcher`](super::ManifestWatcher), [`KubeWatcher`](super::KubeWatcher)) turn
//! each validated Pod into a [`NodePod`] as it is read and drop the Pod, so no list of whole
//! Pods is ever held. Two `NodePod`s are equal exactly when every fact the agent acts on is,
//! so a change of anything else (an image, a condition) is no change of the pod set.
use k8s_openapi::api::core::v1::Pod;

use crate::engine::kubelet_view::{Standing, standing_of};
use crate::engine::rank_report::{LeftOut, LeftOutReason};
use crate::engine::{
    pod_facts::{PodFacts, PodFactsError},
    pod_request::PodQuantityError,
    qos::{QosClass, pod_qos},
};

/// One pod as the agent keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePod {
    /// What ranking and eviction need, or why the pod cannot be ranked (then it is skipped).
    pub facts: Result<PodFacts, PodFactsError>,
    /// Its QoS class, which names its cgroup's parent, or why none can be computed (then
    /// its cgroup cannot be found and it is ranked as a pod without stats).
    pub qos: Result<QosClass, PodQuantityError>,
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    /// Phase Succeeded or Failed: its containers are done.
    pub finished: bool,
}

impl NodePod {
    /// Takes what the agent keeps of `pod`.
    pub fn from_pod(pod: &Pod) -> Self {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        Self {
            facts: PodFacts::from_pod(pod),
            qos: pod_qos(pod),
            node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            finished: matches!(phase, Some("Succeeded" | "Failed")),
        }
    }

    /// How the pod stands for the kubelet of `node`, as [`standing`](crate::engine::kubelet_view::standing).
    pub fn standing(&self, node: Option<&str>) -> Standing {
        standing_of(self.finished, self.node_name.as_deref(), node)
    }
}

/// Splits `pods` into the ones the kubelet of `node` runs and the ones it does not, each
/// with the reason. `unscheduled_here`: a pod without `spec.nodeName` is this node's, as a
/// manifest file is (the kubelet's own static pod manifests carry none).
pub fn split_by_standing(
    pods: impl IntoIterator<Item = NodePod>,
    node: Option<&str>,
    unscheduled_here: bool,
) -> (Vec<NodePod>, Vec<LeftOut>) {
    let mut kept = Vec::new();
    let mut left_out = Vec::new();
    for pod in pods {
        let reason = match pod.standing(node) {
            Standing::Active => None,
            Standing::Unscheduled if unscheduled_here => None,
            Standing::Unscheduled => Some(LeftOutReason::NotScheduled),
            Standing::Finished => Some(LeftOutReason::Finished),
            Standing::OtherNode => Some(LeftOutReason::OtherNode),
        };
        let Some(reason) = reason else {
            kept.push(pod);
            continue;
        };
        let (namespace, name) = match &pod.facts {
            Ok(facts) => (facts.pod.namespace.clone(), facts.pod.name.clone()),
            // Named in its own warning when it is read.
            Err(_) => (String::new(), "(a pod that cannot be ranked)".into()),
        };
        left_out.push(LeftOut {
            namespace,
            name,
            reason,
            node: pod.node_name.filter(|_| reason == LeftOutReason::OtherNode),
        });
    }
    (kept, left_out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::kubelet_view::{runs_here, standing};
    use serde_json::json;

    /// The compact form answers every question the agent asks exactly as the Pod it came
    /// from: facts, QoS class, standing and whether it runs on a node.
    #[test]
    fn keeps_the_answers_of_the_whole_pod() {
        struct Case {
            name: &'static str,
            pod: serde_json::Value,
        }
        let uid = "0f1e2d3c-aaaa-4bbb-8ccc-123456789abc";
        let cases = [
            Case {
                name: "burstable pod running on n1",
                pod: json!({
                    "metadata": {"name": "web", "namespace": "shop", "uid": uid},
                    "spec": {"nodeName": "n1", "priority": 7, "containers": [
                        {"name": "a", "image": "web:1", "resources": {"requests": {"memory": "64Mi"}}}
                    ]},
                    "status": {"phase": "Running"},
                }),
            },
            Case {
                name: "guaranteed by status, finished",
                pod: json!({
                    "metadata": {"name": "job", "uid": uid},
                    "spec": {"nodeName": "n1", "containers": []},
                    "status": {"phase": "Succeeded", "qosClass": "Guaranteed"},
                }),
            },
            Case {
                name: "mirror pod of a static pod, unscheduled",
                pod: json!({
                    "metadata": {"name": "etcd", "uid": uid, "annotations": {
                        "kubernetes.io/config.mirror": "8ac8c3a9ee4d182b8d934f20e971ada7"}},
                    "spec": {"containers": [], "volumes": [{"name": "data", "hostPath": {"path": "/var"}}]},
                }),
            },
            Case {
                name: "bad cpu limit: facts but no QoS class",
                pod: json!({
                    "metadata": {"name": "odd", "uid": uid},
                    "spec": {"nodeName": "n2", "containers": [
                        {"name": "a", "resources": {"limits": {"cpu": "lots"}}}
                    ]},
                }),
            },
            Case {
                name: "bad memory request: neither",
                pod: json!({
                    "metadata": {"name": "bad", "uid": uid},
                    "spec": {"containers": [
                        {"name": "a", "resources": {"requests": {"memory": "x"}}}
                    ]},
                }),
            },
            Case {
                name: "no spec",
                pod: json!({"metadata": {"name": "bare", "uid": uid}, "status": {"phase": "Failed"}}),
            },
        ];
        for case in cases {
            let pod: Pod = serde_json::from_value(case.pod).expect(case.name);
            let kept = NodePod::from_pod(&pod);
            assert_eq!(kept.facts, PodFacts::from_pod(&pod), "{}", case.name);
            assert_eq!(kept.qos, pod_qos(&pod), "{}", case.name);
            for node in [None, Some("n1"), Some("n2")] {
                assert_eq!(
                    kept.standing(node),
                    standing(&pod, node),
                    "{}: {node:?}",
                    case.name
                );
                let (here, _) = split_by_standing([kept.clone()], node, true);
                assert_eq!(
                    here.len() == 1,
                    runs_here(&pod, node),
                    "{}: {node:?}",
                    case.name
                );
            }
        }
    }
}
