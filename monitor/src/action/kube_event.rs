//! Events on evicted pods, so `kubectl describe pod` and `kubectl get events` show what the
//! agent did and why: a core/v1 Event of type Warning on the pod, reason `Evicted` (or
//! `EvictionDryRun` for a decision not carried out), with the decision's message in the
//! kubelet's words, named as the kubelet names its events (the pod's name, a dot, and the time
//! in nanoseconds in hex); of type Normal, reason `ReclaimedBeforeEviction`, on a pod whose
//! page cache reclaim took instead of an eviction (`--reclaim-first`). What concerns the agent on a node (a damaged checkpoint set aside)
//! is an Event on the Node, in the `default` namespace as the kubelet posts its own.
//!
//! They are written as the kubelet's event recorder writes its own: one at a time, off the
//! agent's loop, each through client-go's correlation rules
//! ([`crate::engine::event_correlation`]). A dry run deciding on the same pod at every interval
//! thus leaves one Event whose `count` grows (a strategic merge patch of it), similar messages
//! are combined, and a pod gets 25 Events at once and then one every 5 minutes at most.
use k8s_openapi::{
    api::core::v1::{Event, EventSource, ObjectReference},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time},
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use tokio::sync::mpsc;

use crate::engine::{
    event_correlation::{Correlated, EventCorrelator, Involved, Occurrence, Write},
    pod_facts::PodRef,
};

/// The component the Events name as their source.
pub const COMPONENT: &str = "monitor";
/// Node events go where the kubelet posts its own.
const NODE_EVENT_NAMESPACE: &str = "default";
/// Events waiting to be written, as the kubelet's broadcaster queues them; past it an Event is
/// dropped and said so, never the agent held.
const QUEUE: usize = 1000;

/// Why an Event was not written. An Event is a report, never a reason to hold an eviction.
#[derive(Debug, thiserror::Error)]
#[error(
    "writing the {reason} event on {pod}: {error} (the agent needs RBAC create and patch on events)"
)]
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
    /// `--reclaim-first`: page cache was taken back from the pod and the memory threshold
    /// was no longer met: nobody was evicted.
    ReclaimedBeforeEviction,
}

impl EventReason {
    /// The Event's type: `Normal` where the pod kept running (a spared eviction), `Warning`
    /// for the rest.
    const fn event_type(self) -> &'static str {
        match self {
            EventReason::ReclaimedBeforeEviction => "Normal",
            _ => "Warning",
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            EventReason::Evicted => "Evicted",
            EventReason::EvictionDryRun => "EvictionDryRun",
            EventReason::CheckpointDamaged => "MonitorCheckpointDamaged",
            EventReason::ReclaimedBeforeEviction => "ReclaimedBeforeEviction",
        }
    }
}

/// What an Event is about.
enum Subject {
    Pod(PodRef),
    /// The node the agent runs on.
    Node,
}

/// One Event to record.
struct Pending {
    subject: Subject,
    reason: EventReason,
    message: String,
}

/// Records Events on pods, as this node; cheap to clone, every clone feeding one writer.
#[derive(Clone)]
pub struct EventRecorder {
    queue: mpsc::Sender<Pending>,
}

impl EventRecorder {
    /// Starts the writer on the current tokio runtime; it ends once every recorder is dropped.
    pub fn spawn(client: Client, node: &str) -> Self {
        let (queue, pending) = mpsc::channel(QUEUE);
        tokio::spawn(write_each(client, node.to_string(), pending));
        Self { queue }
    }

    /// Queues an Event on `pod`; never waits.
    pub fn record(&self, pod: &PodRef, reason: EventReason, message: &str) {
        self.queue(Subject::Pod(pod.clone()), reason, message);
    }

    /// Queues an Event on this node; never waits.
    pub fn record_on_node(&self, reason: EventReason, message: &str) {
        self.queue(Subject::Node, reason, message);
    }

    fn queue(&self, subject: Subject, reason: EventReason, message: &str) {
        let pending = Pending {
            subject,
            reason,
            message: message.to_string(),
        };
        if let Err(refused) = self.queue.try_send(pending) {
            let pending = refused.into_inner();
            tracing::warn!(
                "the {} event on {} was dropped: {QUEUE} events wait for the API server",
                reason.as_str(),
                pending.subject.describe_on("this node")
            );
        }
    }
}

/// Writes the queued Events in turn, through the correlator.
async fn write_each(client: Client, node: String, mut pending: mpsc::Receiver<Pending>) {
    let mut correlator = EventCorrelator::new(COMPONENT, &node);
    while let Some(event) = pending.recv().await {
        let now = Timestamp::now();
        let object = involved(&event.subject, &node);
        let occurrence = Occurrence {
            object: &object,
            type_: event.reason.event_type(),
            reason: event.reason.as_str(),
            message: &event.message,
        };
        let now_ns = u64::try_from(now.as_nanosecond()).unwrap_or(0);
        let correlated = correlator.correlate(&occurrence, now_ns);
        if let Err(error) = write(&client, &node, &event, correlated).await {
            tracing::warn!("{error}");
        }
    }
}

/// Creates or patches the Event the correlator chose; a patch of an Event that is gone (they
/// expire) creates it as it stands, as client-go does.
async fn write(
    client: &Client,
    node: &str,
    pending: &Pending,
    correlated: Correlated,
) -> Result<(), EventError> {
    let api: Api<Event> = Api::namespaced(client.clone(), pending.subject.namespace());
    let create = |write: &Write| event(&pending.subject, pending.reason, write, node);
    let written = match &correlated {
        Correlated::Skip => {
            tracing::debug!(
                "the {} event on {} is held back: the pod had its share of events lately \
                 (counted on its next one)",
                pending.reason.as_str(),
                pending.subject.describe_on(node)
            );
            return Ok(());
        }
        Correlated::Create(write) => api.create(&PostParams::default(), &create(write)).await,
        Correlated::Patch(write) => {
            let patch = serde_json::json!({
                "count": write.count,
                "lastTimestamp": Time(timestamp(write.last_ns)),
                "message": write.message,
            });
            let patched = api
                .patch(
                    &write.name,
                    &PatchParams::default(),
                    &Patch::Strategic(patch),
                )
                .await;
            match patched {
                Err(kube::Error::Api(status)) if status.is_not_found() => {
                    api.create(&PostParams::default(), &create(write)).await
                }
                other => other,
            }
        }
    };
    written.map(drop).map_err(|error| EventError {
        pod: pending.subject.describe_on(node),
        reason: pending.reason.as_str(),
        error,
    })
}

impl Subject {
    fn namespace(&self) -> &str {
        match self {
            Subject::Pod(pod) => &pod.namespace,
            Subject::Node => NODE_EVENT_NAMESPACE,
        }
    }

    /// The subject in a log line; `node` names the node.
    fn describe_on(&self, node: &str) -> String {
        match self {
            Subject::Pod(pod) => pod.to_string(),
            Subject::Node => format!("node {node}"),
        }
    }

    /// The Event's involved object; the kubelet names the node by its name as its uid.
    fn reference(&self, node: &str) -> ObjectReference {
        match self {
            Subject::Pod(pod) => ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                namespace: Some(pod.namespace.clone()),
                name: Some(pod.name.clone()),
                uid: Some(pod.uid.clone()),
                ..ObjectReference::default()
            },
            Subject::Node => ObjectReference {
                kind: Some("Node".into()),
                name: Some(node.into()),
                uid: Some(node.into()),
                ..ObjectReference::default()
            },
        }
    }
}

/// The subject as the correlator keys it.
fn involved(subject: &Subject, node: &str) -> Involved {
    let reference = subject.reference(node);
    Involved {
        kind: reference.kind.unwrap_or_default(),
        api_version: reference.api_version.unwrap_or_default(),
        namespace: reference.namespace.unwrap_or_default(),
        name: reference.name.unwrap_or_default(),
        uid: reference.uid.unwrap_or_default(),
    }
}

fn timestamp(unix_ns: u64) -> Timestamp {
    Timestamp::from_nanosecond(i128::from(unix_ns)).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// The Event `write` describes for `subject`.
fn event(subject: &Subject, reason: EventReason, write: &Write, node: &str) -> Event {
    let (first, last) = (timestamp(write.first_ns), timestamp(write.last_ns));
    Event {
        metadata: ObjectMeta {
            name: Some(write.name.clone()),
            namespace: Some(subject.namespace().into()),
            ..ObjectMeta::default()
        },
        involved_object: subject.reference(node),
        reason: Some(reason.as_str().into()),
        message: Some(write.message.clone()),
        type_: Some(reason.event_type().into()),
        source: Some(EventSource {
            component: Some(COMPONENT.into()),
            host: Some(node.into()),
        }),
        reporting_component: Some(COMPONENT.into()),
        reporting_instance: Some(node.into()),
        first_timestamp: Some(Time(first)),
        last_timestamp: Some(Time(last)),
        event_time: Some(MicroTime(last)),
        action: Some(
            match reason {
                EventReason::Evicted => "Evict",
                EventReason::ReclaimedBeforeEviction => "Reclaim",
                EventReason::EvictionDryRun | EventReason::CheckpointDamaged => "None",
            }
            .into(),
        ),
        count: Some(i32::try_from(write.count).unwrap_or(i32::MAX)),
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
        let first: Timestamp = "2026-12-01T08:00:00Z".parse().unwrap();
        let last: Timestamp = "2026-12-01T08:05:00Z".parse().unwrap();
        let ns = |t: Timestamp| u64::try_from(t.as_nanosecond()).unwrap();
        let write = Write {
            name: format!("batch-4.{:x}", first.as_nanosecond()),
            message: "The node was low on resource: memory.".into(),
            count: 3,
            first_ns: ns(first),
            last_ns: ns(last),
        };
        let json = serde_json::to_value(event(
            &Subject::Pod(pod),
            EventReason::Evicted,
            &write,
            "node-a",
        ))
        .unwrap();
        let expected = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": format!("batch-4.{:x}", first.as_nanosecond()), "namespace": "jobs"},
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
            "lastTimestamp": "2026-12-01T08:05:00Z",
            "eventTime": "2026-12-01T08:05:00.000000Z",
            "count": 3,
        });
        assert_eq!(json, expected);
    }

    #[test]
    fn a_node_event_is_on_the_node_in_the_default_namespace() {
        let now: Timestamp = "2026-12-01T08:00:00Z".parse().unwrap();
        let ns = u64::try_from(now.as_nanosecond()).unwrap();
        let mut correlator = EventCorrelator::new(COMPONENT, "node-a");
        let object = involved(&Subject::Node, "node-a");
        let occurrence = Occurrence {
            object: &object,
            type_: EventReason::CheckpointDamaged.event_type(),
            reason: EventReason::CheckpointDamaged.as_str(),
            message: "set aside",
        };
        let Correlated::Create(write) = correlator.correlate(&occurrence, ns) else {
            panic!("the first node event is created");
        };
        let json = serde_json::to_value(event(
            &Subject::Node,
            EventReason::CheckpointDamaged,
            &write,
            "node-a",
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

    #[test]
    fn a_spared_eviction_is_a_normal_event_of_reclaim() {
        let pod = PodRef {
            namespace: "shop".into(),
            name: "cache".into(),
            uid: "u1".into(),
        };
        let write = Write {
            name: "cache.1".into(),
            message: "64.0Mi of the pod's page cache taken back".into(),
            count: 1,
            first_ns: 0,
            last_ns: 0,
        };
        let reason = EventReason::ReclaimedBeforeEviction;
        let json =
            serde_json::to_value(event(&Subject::Pod(pod), reason, &write, "node-a")).unwrap();
        assert_eq!(json["reason"], "ReclaimedBeforeEviction");
        assert_eq!(json["type"], "Normal");
        assert_eq!(json["action"], "Reclaim");
    }
}
