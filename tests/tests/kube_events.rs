//! The agent's Event recorder against a MOCK Kubernetes API server ([`MockKubeApi`]), since no
//! real one can run here, without root: Events are core/v1 Warnings on the pod, and a repeated
//! one is counted as the kubelet's recorder counts it (one Event, patched with its count and
//! last time; created again once it expired), similar messages are combined after ten, and a
//! pod gets 25 writes at once. The agent's dry-run Events on real cgroups are in
//! `agent_kube.rs`.
use std::time::{Duration, Instant};

use monitor::{
    action::{
        KubeEvictor,
        kube_event::{EventReason, EventRecorder},
    },
    engine::pod_facts::PodRef,
    pods::kube_watch,
};
use serde_json::Value;
use tests::{TempDir, kube_api::MockKubeApi, uid_for};

/// The node the mock serves.
const NODE: &str = "node-a";
/// How long the writes may take.
const WITHIN: Duration = Duration::from_secs(20);
const MESSAGE: &str = "The node was low on resource: memory. Threshold quantity: 100Mi.";

fn pod(name: &str) -> PodRef {
    PodRef {
        namespace: "default".into(),
        name: name.into(),
        uid: uid_for(name),
    }
}

/// A recorder writing to `api`, with the kubeconfig's directory to keep.
async fn recorder(api: &MockKubeApi) -> (EventRecorder, TempDir) {
    let (files, kubeconfig) = api.kubeconfig_in("kube-events");
    let config = kube_watch::api_config(Some(&kubeconfig))
        .await
        .expect("config");
    let client = KubeEvictor::new(config).expect("a client").client();
    (EventRecorder::spawn(client, NODE), files)
}

/// Waits, without holding the runtime the recorder writes on, until `look` finds something.
async fn wait_for<T>(api: &MockKubeApi, what: &str, look: impl Fn(&MockKubeApi) -> Option<T>) -> T {
    let deadline = Instant::now() + WITHIN;
    loop {
        if let Some(found) = look(api) {
            return found;
        }
        assert!(Instant::now() < deadline, "{what}: {:#?}", api.events());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The Events on the pod named `name`.
fn events_on(api: &MockKubeApi, name: &str) -> Vec<Value> {
    api.events()
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == name)
        .collect()
}

/// The Event writes (creates and patches) the mock took.
fn writes(api: &MockKubeApi) -> Vec<(String, String)> {
    api.requests()
        .into_iter()
        .filter(|r| r.path().contains("/events"))
        .map(|r| (r.method.clone(), r.path().to_string()))
        .collect()
}

#[tokio::test]
async fn a_repeated_event_is_one_core_v1_event_whose_count_grows() {
    let api = MockKubeApi::start(NODE);
    let (events, _files) = recorder(&api).await;
    for _ in 0..3 {
        events.record(&pod("hog"), EventReason::EvictionDryRun, MESSAGE);
    }
    let event = wait_for(&api, "one event counted 3", |api| {
        let on_hog = events_on(api, "hog");
        (on_hog.len() == 1 && on_hog[0]["count"] == 3).then(|| on_hog[0].clone())
    })
    .await;
    assert_eq!(event["kind"], "Event", "{event:#}");
    assert_eq!(event["type"], "Warning", "{event:#}");
    assert_eq!(event["reason"], "EvictionDryRun", "{event:#}");
    assert_eq!(event["message"], MESSAGE, "{event:#}");
    assert_eq!(event["involvedObject"]["uid"], uid_for("hog"), "{event:#}");
    assert_eq!(event["source"]["host"], NODE, "{event:#}");
    let name = event["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_string();
    assert!(name.starts_with("hog."), "{name}");
    let (first, last) = (&event["firstTimestamp"], &event["lastTimestamp"]);
    assert!(first.as_str() <= last.as_str(), "{event:#}");
    let path = format!("/api/v1/namespaces/default/events/{name}");
    assert_eq!(
        writes(&api),
        [
            ("POST".into(), "/api/v1/namespaces/default/events".into()),
            ("PATCH".into(), path.clone()),
            ("PATCH".into(), path.clone()),
        ]
    );
    let patch = api
        .requests()
        .into_iter()
        .find(|r| r.method == "PATCH")
        .expect("a patch");
    assert!(
        patch.content_type.contains("strategic-merge-patch"),
        "{}",
        patch.content_type
    );
    let body: Value = serde_json::from_str(&patch.body).expect("JSON");
    let mut fields: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    assert_eq!(fields, ["count", "lastTimestamp", "message"], "{body:#}");

    // Expired on the server, the Event is created again under its name with its count.
    api.expire_events();
    events.record(&pod("hog"), EventReason::EvictionDryRun, MESSAGE);
    let again = wait_for(&api, "the event created again", |api| {
        events_on(api, "hog").into_iter().next()
    })
    .await;
    assert_eq!(again["metadata"]["name"], name.as_str(), "{again:#}");
    assert_eq!(again["count"], 4, "{again:#}");
    assert_eq!(again["firstTimestamp"], *first, "{again:#}");
    let tail: Vec<String> = writes(&api).into_iter().skip(3).map(|w| w.0).collect();
    assert_eq!(
        tail,
        ["PATCH", "POST"],
        "the patch found nothing, then the create"
    );
}

#[tokio::test]
async fn similar_messages_are_combined_and_a_pod_gets_25_writes_at_once() {
    let api = MockKubeApi::start(NODE);
    let (events, _files) = recorder(&api).await;
    for i in 0..11 {
        let message = format!("{MESSAGE} Available: {i}Mi.");
        events.record(&pod("grower"), EventReason::EvictionDryRun, &message);
    }
    for _ in 0..30 {
        events.record(&pod("hog"), EventReason::EvictionDryRun, MESSAGE);
    }
    // Written in turn: once this one is there, every earlier one was handled.
    events.record(&pod("calm"), EventReason::EvictionDryRun, MESSAGE);
    wait_for(&api, "the last event", |api| {
        events_on(api, "calm").into_iter().next()
    })
    .await;

    let grower = events_on(&api, "grower");
    assert_eq!(
        grower.len(),
        10,
        "nine alone, then one combined: {grower:#?}"
    );
    let combined = &grower[9];
    assert_eq!(combined["count"], 2, "{combined:#}");
    assert_eq!(
        combined["message"],
        format!("(combined from similar events): {MESSAGE} Available: 10Mi."),
        "{combined:#}"
    );

    let hog = events_on(&api, "hog");
    assert_eq!(hog.len(), 1, "{hog:#?}");
    assert_eq!(
        hog[0]["count"], 25,
        "the 26th to 30th held back: {:#}",
        hog[0]
    );
    let on_hog = writes(&api)
        .into_iter()
        .filter(|(method, path)| method == "PATCH" && path.contains("/hog."))
        .count();
    assert_eq!(on_hog, 24, "one create and 24 patches");
}
