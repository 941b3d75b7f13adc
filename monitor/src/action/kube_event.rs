//! Events on evicted pods, so `kubectl describe pod` and `kubectl get events` show what the
//! agent did and why: a core/v1 Event of type Warning on the pod, reason `Evicted` (or
//! `EvictionDryRun` for a decision not carried out), with the decision's message in the
//! kubelet's words. Named as the kubelet names its events: the pod's name, a dot, and the
//! time in nanoseconds in hex. What concerns the agent on a node (a damaged checkpoint set
//! aside) is an Event on the Node, in the `default` namespace as the kubelet posts its own.
use k8s_openapi::{
    api::core::v1::{Event, EventSource, ObjectReference},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time},
    jiff::Timestamp,
};
use kube::{Api, Client, api::PostParams};

use crate::engine::pod_facts::PodRef;

/// The component the Events name as their source.
pub const COMPONENT: &str = "monitor";

/// Why an Event was not posted. An Event is a report, never a reason to hold an eviction.
#[derive(Debug, thiserror::Error)]
#[error("posting the {reason} event on {pod}: {error} (the agent needs RBAC create on events)")]
pub struct EventError {
    pod: String,
    reason: &'static str,
    error: kube::Error,
}

/// What an Event reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventReason {
    /// The pod was evicted (the API accepted the eviction, or the pod was deleted).
    Evicted,
    /// `--dry-run`: the pod would have been evicted.
    EvictionDryRun,
    /// On the node: the agent's checkpoint could not be used and was set aside.
    CheckpointDamaged,
}

impl EventReason {
    pub const fn as_str(self) -> &'static str {
        match self {
            EventReason::Evicted => "Evicted",
            EventReason::EvictionDryRun => "EvictionDryRun",
            EventReason::CheckpointDamaged => "MonitorCheckpointDamaged",
        }
    }
}

/// Node events go where the kubelet posts its own.
const NODE_EVENT_NAMESPACE: &str = "default";

/// Posts Events on pods, as this node.
#[derive(Clone)]
pub struct EventPoster {
    client: Client,
    node: String,
}

impl EventPoster {
    pub fn new(client: Client, node: &str) -> Self {
        Self {
            client,
            node: node.to_string(),
        }
    }

    /// Posts one Event on `pod`.
    pub async fn post(
        &self,
        pod: &PodRef,
        reason: EventReason,
        message: &str,
    ) -> Result<(), EventError> {
        let event = event(pod, reason, message, &self.node, Timestamp::now());
        self.create(event, pod.to_string(), reason).await
    }

    /// Posts one Event on this node.
    pub async fn post_on_node(&self, reason: EventReason, message: &str) -> Result<(), EventError> {
        let event = node_event(reason, message, &self.node, Timestamp::now());
        self.create(event, format!("node {}", self.node), reason)
            .await
    }

    async fn create(
        &self,
        event: Event,
        subject: String,
        reason: EventReason,
    ) -> Result<(), EventError> {
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        api.create(&PostParams::default(), &event)
            .await
            .map(drop)
            .map_err(|error| EventError {
                pod: subject,
                reason: reason.as_str(),
                error,
            })
    }
}

/// The Event for `pod` at `now`.
fn event(pod: &PodRef, reason: EventReason, message: &str, node: &str, now: Timestamp) -> Event {
    let involved = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(pod.namespace.clone()),
        name: Some(pod.name.clone()),
        uid: Some(pod.uid.clone()),
        ..ObjectReference::default()
    };
    about(involved, &pod.namespace, reason, message, node, now)
}

/// The Event on the node `node` at `now`; the kubelet names the node by its name as its uid.
fn node_event(reason: EventReason, message: &str, node: &str, now: Timestamp) -> Event {
    let involved = ObjectReference {
        kind: Some("Node".into()),
        name: Some(node.into()),
        uid: Some(node.into()),
        ..ObjectReference::default()
    };
    about(involved, NODE_EVENT_NAMESPACE, reason, message, node, now)
}

/// An Event on `involved`, posted in `namespace`.
fn about(
    involved: ObjectReference,
    namespace: &str,
    reason: EventReason,
    message: &str,
    node: &str,
    now: Timestamp,
) -> Event {
    let name = involved.name.clone().unwrap_or_default();
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{name}.{:x}", now.as_nanosecond())),
            namespace: Some(namespace.into()),
            ..ObjectMeta::default()
        },
        involved_object: involved,
        reason: Some(reason.as_str().into()),
        message: Some(message.into()),
        type_: Some("Warning".into()),
        source: Some(EventSource {
            component: Some(COMPONENT.into()),
            host: Some(node.into()),
        }),
        reporting_component: Some(COMPONENT.into()),
        reporting_instance: Some(node.into()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: Some(MicroTime(now)),
        action: Some(
            match reason {
                EventReason::Evicted => "Evict",
                EventReason::EvictionDryRun | EventReason::CheckpointDamaged => "None",
            }
            .into(),
        ),
        count: Some(1),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_names_the_pod_the_node_and_the_kubelets_message() {
        let pod = PodRef {
            namespace: "jobs".into(),
            name: "batch-4".into(),
            uid: "00000000-0000-4000-8000-000000000004".into(),
        };
        let now: Timestamp = "2026-12-01T08:00:00Z".parse().unwrap();
        let json = serde_json::to_value(event(
            &pod,
            EventReason::Evicted,
            "The node was low on resource: memory.",
            "node-a",
            now,
        ))
        .unwrap();
        let expected = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": format!("batch-4.{:x}", now.as_nanosecond()), "namespace": "jobs"},
            "involvedObject": {
                "apiVersion": "v1", "kind": "Pod", "namespace": "jobs", "name": "batch-4",
                "uid": "00000000-0000-4000-8000-000000000004"
            },
            "reason": "Evicted",
            "message": "The node was low on resource: memory.",
            "type": "Warning",
            "action": "Evict",
            "source": {"component": "monitor", "host": "node-a"},
            "reportingComponent": "monitor",
            "reportingInstance": "node-a",
            "firstTimestamp": "2026-12-01T08:00:00Z",
            "lastTimestamp": "2026-12-01T08:00:00Z",
            "eventTime": "2026-12-01T08:00:00.000000Z",
            "count": 1,
        });
        assert_eq!(json, expected);
    }

    #[test]
    fn a_node_event_is_on_the_node_in_the_default_namespace() {
        let now: Timestamp = "2026-12-01T08:00:00Z".parse().unwrap();
        let json = serde_json::to_value(node_event(
            EventReason::CheckpointDamaged,
            "set aside",
            "node-a",
            now,
        ))
        .unwrap();
        assert_eq!(json["metadata"]["namespace"], "default");
        assert_eq!(
            json["metadata"]["name"],
            format!("node-a.{:x}", now.as_nanosecond())
        );
        assert_eq!(
            json["involvedObject"],
            serde_json::json!({"kind": "Node", "name": "node-a", "uid": "node-a"})
        );
        assert_eq!(json["reason"], "MonitorCheckpointDamaged");
        assert_eq!(json["type"], "Warning");
    }
}
