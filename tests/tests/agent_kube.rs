//! `--kube` against a MOCK Kubernetes API server ([`MockKubeApi`]), since no real one can run
//! here. Without root: the pod watch and the Eviction client through kube-rs, pointed at the
//! mock by a kubeconfig the test writes. With root: the real `monitor` binary with `--kube`
//! on a kubepods tree of real cgroups, its pods served by the mock.
use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use monitor::{
    action::{
        EvictError, KubeEvictor,
        kube_event::{EventPoster, EventReason},
    },
    engine::pod_facts::PodRef,
    pods::{KubeWatchError, KubeWatcher, Loaded, NodePod, kube_watch},
};
use serde_json::Value;
use tests::{
    AgentScene, MonitorProcess, TempDir, TestPod, kube_api::MockKubeApi, oom_kills, process_alive,
    running_as_root, set_memory_limit, stand_in_kubelet::StandInKubelet, uid_for,
};

/// The node the mock's pods are bound to.
const NODE: &str = "node-a";
/// How long a change or a decision may take (a slow VM included).
const WITHIN: Duration = Duration::from_secs(20);

/// A kubeconfig pointing at `api`, in a directory removed on drop.
fn kubeconfig(api: &MockKubeApi, name: &str) -> (TempDir, PathBuf) {
    let files = TempDir::new(name);
    let path = files.join("kubeconfig");
    api.write_kubeconfig(&path);
    (files, path)
}

fn names(loaded: &Loaded<NodePod>) -> Vec<String> {
    loaded
        .pods
        .iter()
        .map(|p| p.facts.as_ref().expect("facts").pod.name.clone())
        .collect()
}

async fn change(watcher: &mut KubeWatcher) -> Loaded<NodePod> {
    tokio::time::timeout(WITHIN, watcher.next_change())
        .await
        .expect("a change within the timeout")
        .expect("watching")
}

/// The node-name part of a field selector, which may hold further terms.
fn selects_node(selector: &str) -> bool {
    selector
        .split(',')
        .any(|term| term == format!("spec.nodeName={NODE}"))
}

fn hog() -> PodRef {
    PodRef {
        namespace: "default".into(),
        name: "hog".into(),
        uid: uid_for("hog"),
    }
}

#[tokio::test]
async fn the_watch_lists_the_nodes_pods_then_follows_added_and_deleted_pods() {
    let api = MockKubeApi::start(NODE);
    let a = TestPod::new("a").request_mib(10);
    let b = TestPod::new("b");
    api.apply_pod(&a);
    let (_files, kubeconfig) = kubeconfig(&api, "kube-watch");
    let config = kube_watch::api_config(Some(&kubeconfig))
        .await
        .expect("a configuration for the mock");

    let (mut watcher, first) = KubeWatcher::start(config, NODE)
        .await
        .expect("the first list");
    assert_eq!(names(&first), ["a"]);
    assert_eq!(
        first.pods[0].facts.as_ref().map(|f| f.pod.uid.as_str()),
        Ok(uid_for("a").as_str())
    );
    let list = api
        .requests()
        .into_iter()
        .find(|r| r.path() == "/api/v1/pods" && !r.is_watch())
        .expect("a list of pods");
    let selector = list.query("fieldSelector").expect("a field selector");
    assert!(selects_node(&selector), "list selector {selector:?}");

    api.apply_pod(&b);
    assert_eq!(names(&change(&mut watcher).await), ["a", "b"], "ADDED");
    let watch = api
        .requests()
        .into_iter()
        .find(tests::kube_api::Request::is_watch)
        .expect("a watch of pods");
    let selector = watch.query("fieldSelector").expect("a field selector");
    assert!(selects_node(&selector), "watch selector {selector:?}");
    // The list answered with version 2 (one pod added to the empty mock); the watch goes on
    // from there instead of listing again.
    assert_eq!(watch.query("resourceVersion").as_deref(), Some("2"));

    api.delete_pod(&a);
    let after = change(&mut watcher).await;
    assert_eq!(names(&after), ["b"], "DELETED");
    assert_eq!(after.pods[0].node_name.as_deref(), Some(NODE));
}

#[tokio::test]
async fn an_unreachable_api_server_stops_the_start_with_the_reason() {
    let api = MockKubeApi::start(NODE);
    let (_files, kubeconfig) = kubeconfig(&api, "kube-unreachable");
    drop(api);
    let config = kube_watch::api_config(Some(&kubeconfig))
        .await
        .expect("a configuration (connecting comes later)");
    let started = tokio::time::timeout(WITHIN, KubeWatcher::start(config, NODE))
        .await
        .expect("an answer within the timeout");
    let Err(error) = started else {
        panic!("started without an API server")
    };
    assert!(
        matches!(error, KubeWatchError::InitialList { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains(NODE) && message.contains("list and watch on pods"),
        "{message}"
    );
}

#[tokio::test]
async fn an_eviction_is_a_policy_v1_eviction_with_the_grace_period_and_the_pods_uid() {
    let api = MockKubeApi::start(NODE);
    let (_files, kubeconfig) = kubeconfig(&api, "kube-evict");
    let config = kube_watch::api_config(Some(&kubeconfig))
        .await
        .expect("config");

    KubeEvictor::new(config)
        .expect("a client")
        .evict(&hog(), 7)
        .await
        .expect("the mock accepts the eviction");

    let posts: Vec<_> = api
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .collect();
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert_eq!(
        posts[0].path(),
        "/api/v1/namespaces/default/pods/hog/eviction"
    );
    let body: Value = serde_json::from_str(&posts[0].body).expect("a JSON body");
    assert_eq!(body["apiVersion"], "policy/v1", "{body:#}");
    assert_eq!(body["kind"], "Eviction", "{body:#}");
    assert_eq!(body["metadata"]["name"], "hog", "{body:#}");
    assert_eq!(body["metadata"]["namespace"], "default", "{body:#}");
    assert_eq!(body["deleteOptions"]["gracePeriodSeconds"], 7, "{body:#}");
    assert_eq!(
        body["deleteOptions"]["preconditions"]["uid"],
        uid_for("hog"),
        "{body:#}"
    );
}

#[tokio::test]
async fn a_pdb_refusal_and_a_missing_pod_are_reported_each_after_one_request() {
    let api = MockKubeApi::start(NODE);
    let (_files, kubeconfig) = kubeconfig(&api, "kube-refused");
    let config = kube_watch::api_config(Some(&kubeconfig))
        .await
        .expect("config");
    let evictor = KubeEvictor::new(config).expect("a client");

    api.answer_evictions_with(429);
    // Bounded: a client that retried 429 would take minutes.
    let refused = tokio::time::timeout(WITHIN, evictor.evict(&hog(), 1))
        .await
        .expect("answered at once")
        .expect_err("429 refuses");
    assert!(
        matches!(refused, EvictError::DisruptionBudget { .. }),
        "{refused:?}"
    );
    let message = refused.to_string();
    assert!(
        message.contains("default/hog")
            && message.contains("PodDisruptionBudget")
            && message.contains("hog-pdb needs 1 healthy pods"),
        "the budget and its cause are named: {message}"
    );

    api.answer_evictions_with(404);
    let missing = evictor.evict(&hog(), 1).await.expect_err("404 refuses");
    assert!(
        matches!(missing, EvictError::NotFound { .. }),
        "{missing:?}"
    );

    let posts = api.requests().iter().filter(|r| r.method == "POST").count();
    assert_eq!(posts, 2, "each eviction is one request, never retried");
}

#[tokio::test]
async fn ignoring_budgets_deletes_the_pod_with_the_grace_period_and_its_uid() {
    let api = MockKubeApi::start(NODE);
    api.apply_pod(&TestPod::new("hog"));
    // A budget would refuse; a deletion does not ask it.
    api.answer_evictions_with(429);
    let (_files, kubeconfig) = kubeconfig(&api, "kube-delete");
    let config = kube_watch::api_config(Some(&kubeconfig))
        .await
        .expect("config");
    KubeEvictor::new(config)
        .expect("a client")
        .deleting()
        .evict(&hog(), 7)
        .await
        .expect("the mock deletes the pod");
    let requests: Vec<_> = api
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].method, "DELETE");
    assert_eq!(requests[0].path(), "/api/v1/namespaces/default/pods/hog");
    let body: Value = serde_json::from_str(&requests[0].body).expect("DeleteOptions");
    assert_eq!(body["gracePeriodSeconds"], 7, "{body:#}");
    assert_eq!(body["preconditions"]["uid"], uid_for("hog"), "{body:#}");
}

#[tokio::test]
async fn an_event_is_a_core_v1_warning_on_the_pod() {
    let api = MockKubeApi::start(NODE);
    let (_files, kubeconfig) = kubeconfig(&api, "kube-event");
    let config = kube_watch::api_config(Some(&kubeconfig))
        .await
        .expect("config");
    let client = KubeEvictor::new(config).expect("a client").client();
    EventPoster::new(client, NODE)
        .post(
            &hog(),
            EventReason::EvictionDryRun,
            "The node was low on resource: memory.",
        )
        .await
        .expect("the mock takes the event");
    let post = api
        .requests()
        .into_iter()
        .find(|r| r.method == "POST")
        .expect("a post");
    assert_eq!(post.path(), "/api/v1/namespaces/default/events");
    let events = api.events();
    assert_eq!(events.len(), 1);
    let event = &events[0];
    assert_eq!(event["kind"], "Event", "{event:#}");
    assert_eq!(event["type"], "Warning", "{event:#}");
    assert_eq!(event["reason"], "EvictionDryRun", "{event:#}");
    assert_eq!(event["involvedObject"]["uid"], uid_for("hog"), "{event:#}");
    assert_eq!(event["source"]["host"], NODE, "{event:#}");
}

/// The agent's flags for `scene` with its pods from the mock instead of the manifests
/// directory, started and ready (its pods loaded).
fn start_kube_agent(scene: &AgentScene, kubeconfig: &Path, extra: &[&str]) -> MonitorProcess {
    scene.start_kube_agent(kubeconfig, NODE, extra)
}

fn next_decision(agent: &MonitorProcess) -> Value {
    let line = agent
        .next_line(WITHIN)
        .unwrap_or_else(|| panic!("no decision; stderr:\n{}", agent.stderr()));
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("decision {line:?} is not JSON: {e}"))
}

/// Pods on the mock and in real cgroups: `hog` over its request, `calm` within its own;
/// the two together pass the scene's threshold once allocated.
struct KubeScene {
    scene: AgentScene,
    api: Arc<MockKubeApi>,
    kubeconfig: PathBuf,
    hog: TestPod,
    calm: TestPod,
    _files: TempDir,
}

impl KubeScene {
    fn new(name: &str) -> Self {
        Self::on(AgentScene::new(name, "10s", "30s"), name)
    }

    /// The pods on `scene`, which is named `name`.
    fn on(scene: AgentScene, name: &str) -> Self {
        let api = Arc::new(MockKubeApi::start(NODE));
        let hog = TestPod::new("hog").request_mib(20);
        let calm = TestPod::new("calm").request_mib(300);
        api.apply_pod(&hog);
        api.apply_pod(&calm);
        let (files, kubeconfig) = kubeconfig(&api, &format!("{name}-kubeconfig"));
        Self {
            scene,
            api,
            kubeconfig,
            hog,
            calm,
            _files: files,
        }
    }

    /// Eviction requests so far.
    fn posts(&self) -> usize {
        self.api
            .requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path().ends_with("/eviction"))
            .count()
    }
}

fn assert_decides_on_hog(decision: &Value, action: &str) {
    assert_eq!(decision["action"], action, "{decision:#}");
    assert_eq!(decision["name"], "hog", "{decision:#}");
    assert_eq!(decision["uid"], uid_for("hog"), "{decision:#}");
    assert_eq!(decision["namespace"], "default", "{decision:#}");
}

#[test]
fn dry_run_decides_on_the_pod_the_api_server_serves() {
    if !running_as_root("dry_run_decides_on_the_pod_the_api_server_serves") {
        return;
    }
    let kube = KubeScene::new("kube-dry-run");
    let mut hog = kube.scene.run_pod(&kube.hog);
    let mut calm = kube.scene.run_pod(&kube.calm);
    let agent = start_kube_agent(&kube.scene, &kube.kubeconfig, &["--dry-run"]);

    hog.alloc(60);
    calm.alloc(160);
    // The manifests directory is empty and unused: the pods come from the API alone.
    assert_decides_on_hog(&next_decision(&agent), "would_evict");
    let list = kube
        .api
        .requests()
        .into_iter()
        .find(|r| r.path() == "/api/v1/pods")
        .expect("the agent listed pods");
    assert!(selects_node(
        &list.query("fieldSelector").unwrap_or_default()
    ));
    std::thread::sleep(Duration::from_secs(2));
    let writes: Vec<_> = kube
        .api
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect();
    assert!(
        writes.is_empty(),
        "dry-run writes nothing to the cluster: {writes:?}"
    );
    assert!(process_alive(hog.pid()));
}

#[test]
fn dry_run_events_show_each_decision_on_its_pod() {
    if !running_as_root("dry_run_events_show_each_decision_on_its_pod") {
        return;
    }
    let kube = KubeScene::new("kube-dry-run-events");
    let mut hog = kube.scene.run_pod(&kube.hog);
    let mut calm = kube.scene.run_pod(&kube.calm);
    let agent = start_kube_agent(
        &kube.scene,
        &kube.kubeconfig,
        &["--dry-run", "--dry-run-events"],
    );
    hog.alloc(60);
    calm.alloc(160);
    let decision = next_decision(&agent);
    assert_decides_on_hog(&decision, "would_evict");
    let event = kube
        .api
        .wait_until(WITHIN, |api| api.events().into_iter().next())
        .unwrap_or_else(|| panic!("no event; {}", agent.stderr()));
    assert_eq!(event["reason"], "EvictionDryRun", "{event:#}");
    assert_eq!(event["message"], decision["reason"], "{event:#}");
    assert_eq!(event["involvedObject"]["uid"], uid_for("hog"), "{event:#}");
    assert!(
        !kube
            .api
            .requests()
            .iter()
            .any(|r| r.path().ends_with("/eviction")),
        "nothing evicted"
    );
    assert!(process_alive(hog.pid()));
}

#[test]
fn a_refused_eviction_moves_on_to_the_next_pod_at_once() {
    if !running_as_root("a_refused_eviction_moves_on_to_the_next_pod_at_once") {
        return;
    }
    // The scene's eviction interval is 10 s and its cleanup timeout 30 s: waiting for either
    // would show.
    let kube = KubeScene::new("kube-refused");
    kube.api.answer_evictions_of_with("hog", 429);
    let mut hog = kube.scene.run_pod(&kube.hog);
    let mut calm = kube.scene.run_pod(&kube.calm);
    let agent = start_kube_agent(
        &kube.scene,
        &kube.kubeconfig,
        &["--kube-hard-action", "api"],
    );

    hog.alloc(60);
    calm.alloc(160);
    let refused = next_decision(&agent);
    assert_decides_on_hog(&refused, "evict");
    let next = next_decision(&agent);
    assert_eq!(next["name"], "calm", "the next candidate: {next:#}");
    let decided_ns = |d: &Value| d["monotonic_ns"].as_u64().expect("monotonic_ns");
    let after = Duration::from_nanos(decided_ns(&next) - decided_ns(&refused));
    assert!(
        after < Duration::from_secs(3),
        "moved on after {after:?}, not after the 10 s interval"
    );
    kube.api
        .wait_for_request(WITHIN, |r| r.path().ends_with("/calm/eviction"))
        .expect("calm's eviction request");
    let posts: Vec<_> = kube
        .api
        .requests()
        .into_iter()
        .filter(|r| r.path().ends_with("/eviction"))
        .map(|r| r.path().to_string())
        .collect();
    assert_eq!(
        posts,
        [
            "/api/v1/namespaces/default/pods/hog/eviction",
            "/api/v1/namespaces/default/pods/calm/eviction"
        ]
    );
    // Only the accepted eviction is reported to Kubernetes.
    let events = kube
        .api
        .wait_until(WITHIN, |api| Some(api.events()).filter(|e| !e.is_empty()))
        .unwrap_or_default();
    let evicted: Vec<_> = events
        .iter()
        .map(|e| e["involvedObject"]["name"].clone())
        .collect();
    assert_eq!(evicted, ["calm"], "{events:#?}");
    assert!(
        agent.stderr().contains("PodDisruptionBudget"),
        "the refusal is logged: {}",
        agent.stderr()
    );
}

#[test]
fn the_agent_posts_an_eviction_and_leaves_the_processes_to_the_kubelet() {
    if !running_as_root("the_agent_posts_an_eviction_and_leaves_the_processes_to_the_kubelet") {
        return;
    }
    let kube = KubeScene::new("kube-evict");
    let mut hog = kube.scene.run_pod(&kube.hog);
    let mut calm = kube.scene.run_pod(&kube.calm);
    let mut agent = start_kube_agent(
        &kube.scene,
        &kube.kubeconfig,
        &["--kube-hard-action", "api"],
    );

    hog.alloc(60);
    calm.alloc(160);
    let decision = next_decision(&agent);
    assert_decides_on_hog(&decision, "evict");
    assert_eq!(decision["path"], "api", "{decision:#}");
    let post = kube
        .api
        .wait_for_request(WITHIN, |r| r.path().ends_with("/eviction"))
        .expect("an eviction request");
    assert_eq!(post.path(), "/api/v1/namespaces/default/pods/hog/eviction");
    let body: Value = serde_json::from_str(&post.body).expect("a JSON body");
    assert_eq!(body["kind"], "Eviction", "{body:#}");
    assert_eq!(
        body["deleteOptions"]["gracePeriodSeconds"], decision["grace_period_seconds"],
        "{body:#}"
    );
    assert!(
        agent
            .wait_stderr(WITHIN, |l| l.contains("eviction of default/hog accepted"))
            .is_some(),
        "{}",
        agent.stderr()
    );
    // Kubernetes sees it: an Evicted event on the pod, with the decision's message, and the
    // agent's own condition on the node (the kubelet's MemoryPressure untouched).
    let events = kube.api.events();
    assert_eq!(events.len(), 1, "one event for one eviction: {events:#?}");
    let event = &events[0];
    assert_eq!(event["reason"], "Evicted", "{event:#}");
    assert_eq!(event["type"], "Warning", "{event:#}");
    assert_eq!(event["involvedObject"]["kind"], "Pod", "{event:#}");
    assert_eq!(event["involvedObject"]["name"], "hog", "{event:#}");
    assert_eq!(event["involvedObject"]["uid"], uid_for("hog"), "{event:#}");
    assert_eq!(
        event["message"], decision["reason"],
        "{event:#}\n{decision:#}"
    );
    let message = event["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("The node was low on resource: memory. Threshold quantity: ")
            && message.contains("Pod hog was using "),
        "{message}"
    );
    let condition = kube
        .api
        .wait_until(WITHIN, |api| {
            api.condition("MonitorMemoryPressure")
                .filter(|c| c["status"] == "True")
        })
        .unwrap_or_else(|| panic!("no MonitorMemoryPressure=True; {}", agent.stderr()));
    assert_eq!(
        condition["reason"], "MemoryPressureThresholdMet",
        "{condition:#}"
    );
    assert!(kube.api.condition("MemoryPressure").is_none());
    assert_eq!(
        kube.api
            .condition("MonitorPIDPressure")
            .map(|c| c["status"].clone()),
        Some("False".into())
    );

    // The grace period is 1 s; a cgroup kill would have ended the process by now.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        process_alive(hog.pid()) && !kube.scene.pod_pids(&kube.hog).is_empty(),
        "the agent leaves stopping the pod to the kubelet"
    );

    // The kubelet's part: the pod stops and the API server deletes it.
    kube.scene
        .kubepods
        .remove_pod(kube.hog.qos(), &kube.hog.uid);
    kube.api.delete_pod(&kube.hog);
    assert!(
        agent
            .wait_stderr(WITHIN, |l| l.contains("1 removed"))
            .is_some(),
        "the agent sees the pod leave the watch: {}",
        agent.stderr()
    );
    assert_eq!(kube.posts(), 1, "one eviction for one decision");
    agent.terminate();
    let status = agent
        .wait(Duration::from_secs(10))
        .expect("stops on SIGTERM");
    assert!(status.success(), "{status}; {}", agent.stderr());
}

#[test]
fn ignoring_budgets_the_agent_deletes_the_pod_a_budget_would_keep() {
    if !running_as_root("ignoring_budgets_the_agent_deletes_the_pod_a_budget_would_keep") {
        return;
    }
    let kube = KubeScene::new("kube-ignore-pdb");
    kube.api.answer_evictions_with(429);
    let mut hog = kube.scene.run_pod(&kube.hog);
    let mut calm = kube.scene.run_pod(&kube.calm);
    let agent = start_kube_agent(
        &kube.scene,
        &kube.kubeconfig,
        &["--ignore-disruption-budgets"],
    );
    hog.alloc(60);
    calm.alloc(160);
    assert_decides_on_hog(&next_decision(&agent), "evict");
    let deletion = kube
        .api
        .wait_for_request(WITHIN, |r| r.method == "DELETE")
        .unwrap_or_else(|| panic!("no deletion; {}", agent.stderr()));
    assert_eq!(deletion.path(), "/api/v1/namespaces/default/pods/hog");
    let body: Value = serde_json::from_str(&deletion.body).expect("DeleteOptions");
    assert_eq!(body["gracePeriodSeconds"], 1, "{body:#}");
    assert_eq!(
        kube.posts(),
        0,
        "no Eviction asked: {:?}",
        kube.api.requests()
    );
    let event = kube
        .api
        .wait_until(WITHIN, |api| api.events().into_iter().next())
        .unwrap_or_else(|| panic!("no event; {}", agent.stderr()));
    assert_eq!(event["reason"], "Evicted", "{event:#}");
    assert_eq!(event["involvedObject"]["name"], "hog", "{event:#}");
}

/// Whether the request posts an Eviction.
fn is_eviction(request: &tests::kube_api::Request) -> bool {
    request.method == "POST" && request.path().ends_with("/eviction")
}

#[test]
fn a_hard_threshold_stops_the_pod_on_the_node_before_the_api_answers() {
    if !running_as_root("a_hard_threshold_stops_the_pod_on_the_node_before_the_api_answers") {
        return;
    }
    let kube = KubeScene::new("kube-hard-kill");
    // A slow API server: each Eviction is answered 3 s after it arrives.
    kube.api.answer_evictions_after(Duration::from_secs(3));
    let mut hog = kube.scene.run_pod(&kube.hog);
    let mut calm = kube.scene.run_pod(&kube.calm);
    let agent = start_kube_agent(&kube.scene, &kube.kubeconfig, &[]);

    hog.alloc(60);
    calm.alloc(160);
    let decision = next_decision(&agent);
    assert_decides_on_hog(&decision, "evict");
    assert_eq!(decision["path"], "kill_then_api", "{decision:#}");
    kube.scene
        .wait_until_empty(&kube.hog, Duration::from_secs(5));
    assert!(!process_alive(hog.pid()));
    let post = kube
        .api
        .wait_for_request(WITHIN, is_eviction)
        .unwrap_or_else(|| panic!("the Eviction is still posted; {}", agent.stderr()));
    assert_eq!(post.path(), "/api/v1/namespaces/default/pods/hog/eviction");
    assert!(
        kube.api.accepted_evictions().is_empty(),
        "the pod was stopped before the API server answered"
    );
    let event = kube
        .api
        .wait_until(WITHIN, |api| api.events().into_iter().next())
        .unwrap_or_else(|| panic!("no Event; {}", agent.stderr()));
    assert_eq!(event["reason"], "Evicted", "{event:#}");
    let message = event["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(decision["reason"].as_str().unwrap_or("?"))
            && message.contains("stopped on the node at once"),
        "the Event says the pod was stopped on the node: {message}"
    );
    assert!(
        agent
            .wait_stderr(WITHIN, |l| l
                .contains("stopped on the node, then recorded by the API server"))
            .is_some(),
        "{}",
        agent.stderr()
    );
    assert!(process_alive(calm.pid()), "one pod for one decision");
    assert_eq!(kube.posts(), 1);
}

#[test]
fn a_refused_eviction_after_the_kill_does_not_leave_the_node_to_the_oom_killer() {
    if !running_as_root(
        "a_refused_eviction_after_the_kill_does_not_leave_the_node_to_the_oom_killer",
    ) {
        return;
    }
    let kube = KubeScene::new("kube-hard-refused");
    // Every pod's budget refuses.
    kube.api.answer_evictions_with(429);
    set_memory_limit(
        &kube.scene.kubepods.dir,
        (AgentScene::PRESSURE_ABOVE_MIB + 64) << 20,
    )
    .expect("limiting kubepods");
    let mut hog = kube.scene.run_pod(&kube.hog);
    let mut calm = kube.scene.run_pod(&kube.calm);
    let agent = start_kube_agent(&kube.scene, &kube.kubeconfig, &[]);

    calm.alloc(160);
    let before = oom_kills();
    // Far past the limit, in one go: only a kill on the node stops it short of the OOM killer.
    hog.command("alloc 1024");
    let decision = next_decision(&agent);
    assert_decides_on_hog(&decision, "evict");
    kube.scene
        .wait_until_empty(&kube.hog, Duration::from_secs(5));
    assert_eq!(
        oom_kills(),
        before,
        "the kernel's OOM killer fired: {}",
        agent.stderr()
    );
    assert!(
        agent
            .wait_stderr(WITHIN, |l| l
                .contains("PodDisruptionBudget refused the Eviction"))
            .is_some(),
        "{}",
        agent.stderr()
    );
    // The refusal is not taken back: the pod is stopped and the node has its memory, so
    // the next candidate is left alone.
    assert_eq!(agent.next_line(Duration::from_secs(3)), None);
    assert!(process_alive(calm.pid()));
    assert_eq!(kube.posts(), 1);
    assert!(
        kube.api.events().is_empty(),
        "no Event for a refused eviction"
    );
}

#[test]
fn a_failing_api_server_after_the_kill_is_logged_not_waited_for() {
    if !running_as_root("a_failing_api_server_after_the_kill_is_logged_not_waited_for") {
        return;
    }
    let kube = KubeScene::new("kube-hard-500");
    kube.api.answer_evictions_with(500);
    let mut hog = kube.scene.run_pod(&kube.hog);
    let mut calm = kube.scene.run_pod(&kube.calm);
    let agent = start_kube_agent(&kube.scene, &kube.kubeconfig, &[]);

    hog.alloc(60);
    calm.alloc(160);
    assert_decides_on_hog(&next_decision(&agent), "evict");
    kube.scene
        .wait_until_empty(&kube.hog, Duration::from_secs(5));
    assert!(
        agent
            .wait_stderr(WITHIN, |l| l
                .contains("stopped on the node, but the Eviction was not recorded"))
            .is_some(),
        "{}",
        agent.stderr()
    );
    assert_eq!(agent.next_line(Duration::from_secs(2)), None);
    assert!(process_alive(calm.pid()));
}

#[test]
fn a_soft_threshold_goes_through_the_api_alone() {
    if !running_as_root("a_soft_threshold_goes_through_the_api_alone") {
        return;
    }
    let name = "kube-soft";
    // Met once kubepods hold 150 MiB; the defaulted hard thresholds (100Mi available,
    // 200 MiB held) stay unmet.
    let scene = AgentScene::with_config(
        name,
        "evictionSoft:\n  allocatableMemory.available: 150Mi\n\
         evictionSoftGracePeriod:\n  allocatableMemory.available: 1s\n\
         evictionMaxPodGracePeriod: 1\n\
         monitor:\n  evictionInterval: 10s\n  podCleanupTimeout: 30s\n",
    );
    let kube = KubeScene::on(scene, name);
    let mut hog = kube.scene.run_pod(&kube.hog);
    let mut calm = kube.scene.run_pod(&kube.calm);
    let reaction = Duration::from_millis(1500);
    let kubelet = StandInKubelet::start(
        kube.api.clone(),
        vec![(kube.hog.clone(), kube.scene.pod_dir(&kube.hog))],
        reaction,
    );
    let agent = start_kube_agent(&kube.scene, &kube.kubeconfig, &[]);

    hog.alloc(60);
    calm.alloc(100);
    let decision = next_decision(&agent);
    assert_decides_on_hog(&decision, "evict");
    assert_eq!(decision["threshold_kind"], "soft", "{decision:#}");
    assert_eq!(decision["path"], "api", "{decision:#}");
    kube.api
        .wait_until(WITHIN, |api| {
            Some(()).filter(|()| !api.accepted_evictions().is_empty())
        })
        .unwrap_or_else(|| panic!("no accepted Eviction; {}", agent.stderr()));
    let accepted = Instant::now();
    std::thread::sleep(reaction / 2);
    assert!(
        process_alive(hog.pid()),
        "the agent leaves a soft threshold's pod to the kubelet"
    );
    kube.scene.wait_until_empty(&kube.hog, WITHIN);
    let stopped = kubelet.finish();
    assert_eq!(
        stopped.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["hog"]
    );
    assert!(stopped[0].1 >= accepted, "stopped by the stand-in kubelet");
    assert!(
        agent
            .wait_stderr(WITHIN, |l| l.contains("1 removed"))
            .is_some(),
        "the agent sees the pod leave the watch: {}",
        agent.stderr()
    );
}

/// With `--kube-hard-action api` the agent cannot stop a pod in time for a node racing to its
/// OOM point: it says so, with the projection, instead of losing in silence.
#[test]
fn the_api_only_path_says_when_the_oom_point_is_nearer_than_the_kubelet_can_act() {
    if !running_as_root("the_api_only_path_says_when_the_oom_point_is_nearer") {
        return;
    }
    let kube = KubeScene::new("kube-api-race");
    // The kernel's OOM point 48 MiB past the threshold.
    set_memory_limit(
        &kube.scene.kubepods.dir,
        (AgentScene::PRESSURE_ABOVE_MIB + 48) << 20,
    )
    .expect("limiting kubepods");
    let mut hog = kube.scene.run_pod(&kube.hog);
    let agent = start_kube_agent(
        &kube.scene,
        &kube.kubeconfig,
        &["--kube-hard-action", "api"],
    );
    if !agent.stderr().contains(" source ebpf (") {
        tests::cannot_run(
            tests::Reason::MemcgPrograms,
            "the projection needs the kernel programs' growth records",
        );
        return;
    }
    // Far past the limit at full speed: the kernel's OOM killer ends it, the mock's pod stays.
    hog.command("alloc 1024");
    let decision = next_decision(&agent);
    assert_decides_on_hog(&decision, "evict");
    assert_eq!(decision["path"], "api", "{decision:#}");
    let line = agent
        .wait_stderr(WITHIN, |l| l.contains("through the API alone"))
        .unwrap_or_else(|| panic!("no word of the race: {}", agent.stderr()));
    assert!(line.contains("the OOM point is "), "{line}");
    assert!(line.contains("--kube-hard-action kill"), "{line}");
    let _ = hog.wait();
}

/// A Summary API answer for `node` with each pod's working set in MiB.
fn summary_json(node: &str, pods: &[(&TestPod, u64)]) -> String {
    let pods: Vec<Value> = pods
        .iter()
        .map(|(pod, mib)| {
            serde_json::json!({
                "podRef": {"name": pod.name, "namespace": "default", "uid": pod.uid},
                "memory": {"workingSetBytes": mib << 20, "usageBytes": mib << 20},
            })
        })
        .collect();
    serde_json::json!({"node": {"nodeName": node}, "pods": pods}).to_string()
}

fn run_rank(args: &[&str]) -> std::process::Output {
    std::process::Command::new(tests::monitor_bin())
        .arg("rank")
        .args(args)
        .output()
        .expect("running monitor rank")
}

#[test]
fn rank_kube_ranks_the_api_servers_answers_like_rank_with_their_files() {
    let api = MockKubeApi::start(NODE);
    let pods = [
        (TestPod::new("within").request_mib(300), 100),
        (TestPod::new("over").request_mib(20), 60),
        (
            TestPod::new("important").request_mib(10).priority(1000),
            200,
        ),
        (TestPod::new("unmeasured").request_mib(10), 0),
    ];
    for (pod, _) in &pods {
        api.apply_pod(pod);
    }
    let measured: Vec<(&TestPod, u64)> = pods[..3].iter().map(|(p, mib)| (p, *mib)).collect();
    let summary = summary_json(NODE, &measured);
    api.serve_summary(&summary);
    let (files, kubeconfig) = kubeconfig(&api, "kube-rank");
    std::fs::write(files.join("pods.json"), api.pod_list()).expect("pods file");
    std::fs::write(files.join("summary.json"), &summary).expect("summary file");
    let kubeconfig = kubeconfig.display().to_string();
    let pods_file = files.join("pods.json").display().to_string();
    let summary_file = files.join("summary.json").display().to_string();

    for output in ["json", "text"] {
        let live = run_rank(&[
            "--kube",
            "--node-name",
            NODE,
            "--kubeconfig",
            &kubeconfig,
            "--output",
            output,
        ]);
        let stderr = String::from_utf8_lossy(&live.stderr);
        assert!(live.status.success(), "{}: {stderr}", live.status);
        let from_files = run_rank(&[
            "--pods",
            &pods_file,
            "--summary",
            &summary_file,
            "--output",
            output,
        ]);
        assert!(from_files.status.success());
        assert_eq!(
            String::from_utf8_lossy(&live.stdout),
            String::from_utf8_lossy(&from_files.stdout),
            "--output {output}"
        );
        if output == "json" {
            let ranked: Value = serde_json::from_slice(&live.stdout).expect("a JSON object");
            let names: Vec<&str> = ranked["pods"]
                .as_array()
                .expect("an array of pods")
                .iter()
                .filter_map(|p| p["name"].as_str())
                .collect();
            assert_eq!(names, ["unmeasured", "over", "important", "within"]);
        }
    }
    let asked: Vec<String> = api
        .requests()
        .iter()
        .map(|r| r.path().to_string())
        .collect();
    assert!(
        asked.contains(&format!("/api/v1/nodes/{NODE}/proxy/stats/summary")),
        "{asked:?}"
    );
}

#[test]
fn rank_kube_names_what_it_could_not_read() {
    let api = MockKubeApi::start(NODE);
    let (_files, kubeconfig) = kubeconfig(&api, "kube-rank-missing");
    let kubeconfig = kubeconfig.display().to_string();
    // No Summary served: the proxy answers 404.
    let out = run_rank(&["--kube", "--node-name", NODE, "--kubeconfig", &kubeconfig]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("Summary API of node node-a") && stderr.contains("nodes/proxy"),
        "{stderr}"
    );
    let out = run_rank(&["--kube", "--node-name", "../x", "--kubeconfig", &kubeconfig]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a DNS-1123 subdomain"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
