//! The kubelet's evictions on this node, from its `Evicted` Events (with `--kube`, in a dry
//! run): what the shadow scorecard matches the agent's decisions with.
//!
//! The watch asks the API server for `reason=Evicted,source=kubelet` (both are selectable
//! fields of core/v1 Events); an Event's node is not, so [`eviction_of`] keeps those whose
//! `source.host` is this node and that are about a Pod, and checks the selector's fields
//! again (an API server, or a proxy, that ignores a selector must not make the agent count
//! another node's evictions or its own Events). The kubelet's Events carry no `eventTime`:
//! the time is `firstTimestamp` (whole seconds), else `eventTime`, else the Event's creation.
use std::pin::Pin;

use futures::{Stream, StreamExt as _};
use k8s_openapi::{api::core::v1::Event, jiff::Timestamp};
use kube::{
    Api, Config,
    runtime::{WatchStreamExt as _, watcher},
};

use crate::engine::{pod_facts::PodRef, shadow::KubeletEviction};

/// The Events' field selector.
pub(crate) const FIELD_SELECTOR: &str = "reason=Evicted,source=kubelet";

type EventStream =
    Pin<Box<dyn Stream<Item = Result<watcher::Event<Event>, watcher::Error>> + Send>>;

/// Watches the kubelet's `Evicted` Events of one node.
pub(crate) struct KubeletEvictions {
    node: String,
    events: EventStream,
}

impl KubeletEvictions {
    /// Starts the watch (it lists first, then watches, re-listing with backoff after errors).
    pub(crate) fn start(config: Config, node: &str) -> Result<Self, kube::Error> {
        let client = crate::kube_client::client(config)?;
        let config = watcher::Config::default().fields(FIELD_SELECTOR);
        let events = watcher(Api::<Event>::all(client), config)
            .default_backoff()
            .boxed();
        Ok(Self {
            node: node.to_string(),
            events,
        })
    }

    /// The next eviction on this node. A failing watch is logged once per failure and
    /// retried with backoff: the scorecard waits, the agent runs on. Cancel-safe.
    pub(crate) async fn next(&mut self) -> KubeletEviction {
        loop {
            // The watcher retries for ever; were it to end, nothing more would come.
            let Some(next) = self.events.next().await else {
                return std::future::pending().await;
            };
            match next {
                Ok(watcher::Event::Apply(event) | watcher::Event::InitApply(event)) => {
                    if let Some(eviction) = eviction_of(&event, &self.node) {
                        return eviction;
                    }
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(
                    "watching the kubelet's Evicted Events (for the shadow scorecard): {error}; \
                     retrying"
                ),
            }
        }
    }
}

/// The kubelet's eviction an Event tells of, if it is one on `node`.
pub(crate) fn eviction_of(event: &Event, node: &str) -> Option<KubeletEviction> {
    eviction_anywhere(event)
        .filter(|(on, _)| on == node)
        .map(|(_, eviction)| eviction)
}

/// The kubelet's eviction an Event tells of, with the node it was on.
pub(crate) fn eviction_anywhere(event: &Event) -> Option<(String, KubeletEviction)> {
    let source = event.source.as_ref()?;
    if event.reason.as_deref() != Some("Evicted") || source.component.as_deref() != Some("kubelet")
    {
        return None;
    }
    let node = source.host.clone()?;
    let (pod, at_ns) = pod_and_time(event, event.first_timestamp.as_ref().map(|t| t.0))?;
    Some((
        node,
        KubeletEviction {
            pod,
            at_ns,
            message: event.message.clone().unwrap_or_default(),
            keys: None,
        },
    ))
}

/// The Pod an Event is about, and `first` (else its `eventTime`, else its creation) in unix
/// nanoseconds.
pub(crate) fn pod_and_time(event: &Event, first: Option<Timestamp>) -> Option<(PodRef, u64)> {
    let object = &event.involved_object;
    if object.kind.as_deref() != Some("Pod") {
        return None;
    }
    let time = first
        .or_else(|| event.event_time.as_ref().map(|t| t.0))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))?;
    let pod = PodRef {
        namespace: object.namespace.clone().unwrap_or_else(|| "default".into()),
        name: object.name.clone()?,
        uid: object.uid.clone()?,
    };
    Some((pod, u64::try_from(time.as_nanosecond()).ok()?))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(change: impl FnOnce(&mut serde_json::Value)) -> Event {
        let mut value = json!({
            "metadata": {"name": "hog.1", "namespace": "shop",
                         "creationTimestamp": "2026-12-06T10:00:09Z"},
            "involvedObject": {"kind": "Pod", "namespace": "shop", "name": "hog", "uid": "u-1"},
            "reason": "Evicted",
            "message": "The node was low on resource: memory. ",
            "source": {"component": "kubelet", "host": "node-1"},
            "firstTimestamp": "2026-12-06T10:00:07Z",
            "lastTimestamp": "2026-12-06T10:00:08Z",
        });
        change(&mut value);
        serde_json::from_value(value).unwrap()
    }

    /// What a case changes in the kubelet's Event.
    type Change = fn(&mut serde_json::Value);

    const AT_7: u64 = 1_796_551_207_000_000_000;

    #[test]
    fn only_the_kubelets_evictions_of_pods_on_this_node_count() {
        let ours = eviction_of(&event(|_| {}), "node-1").expect("the kubelet's eviction");
        assert_eq!(ours.pod.to_string(), "shop/hog");
        assert_eq!(ours.pod.uid, "u-1");
        assert_eq!(ours.at_ns, AT_7, "firstTimestamp");
        let cases: [(&str, Change); 7] = [
            ("another node", |e| {
                e["source"]["host"] = json!("node-2");
            }),
            ("the agent's own Event", |e| {
                e["source"]["component"] = json!("monitor");
            }),
            ("another reason", |e| {
                e["reason"] = json!("EvictionDryRun");
            }),
            ("not a pod", |e| {
                e["involvedObject"]["kind"] = json!("Node");
            }),
            ("no uid", |e| {
                e["involvedObject"].as_object_mut().unwrap().remove("uid");
            }),
            ("no source", |e| {
                e.as_object_mut().unwrap().remove("source");
            }),
            ("no time at all", |e| {
                let e = e.as_object_mut().unwrap();
                e.remove("firstTimestamp");
                e["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("creationTimestamp");
            }),
        ];
        for (name, change) in cases {
            assert_eq!(eviction_of(&event(change), "node-1"), None, "{name}");
        }
    }

    #[test]
    fn the_time_falls_back_to_event_time_then_creation() {
        let micro = event(|e| {
            e.as_object_mut().unwrap().remove("firstTimestamp");
            e["eventTime"] = json!("2026-12-06T10:00:07.250000Z");
        });
        assert_eq!(
            eviction_of(&micro, "node-1").unwrap().at_ns,
            AT_7 + 250_000_000
        );
        let created = event(|e| {
            e.as_object_mut().unwrap().remove("firstTimestamp");
        });
        assert_eq!(
            eviction_of(&created, "node-1").unwrap().at_ns,
            AT_7 + 2_000_000_000
        );
    }
}
