//! The `--kube` clients against a MOCK Kubernetes API server ([`MockKubeApi`]), since no real
//! one can run here, without root: the pod watch and the Eviction client through kube-rs (the
//! Events in `kube_events.rs`), and `monitor rank --kube`, pointed at the mock by a kubeconfig
//! the test writes.
//! The agent with `--kube` on real cgroups is tested in `agent_kube.rs`.
use std::time::Duration;

use monitor::{
    action::{EvictError, KubeEvictor},
    engine::pod_facts::PodRef,
    pods::{KubeWatchError, KubeWatcher, Loaded, NodePod, kube_watch},
};
use serde_json::Value;
use tests::{
    TestPod,
    kube_api::{MockKubeApi, summary_json},
    uid_for,
};

/// The node the mock's pods are bound to.
const NODE: &str = "node-a";
/// How long a change may take (a slow VM included).
const WITHIN: Duration = Duration::from_secs(20);

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
    let (_files, kubeconfig) = api.kubeconfig_in("kube-watch");
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
    assert!(
        list.selects_node(NODE),
        "list selector {:?}",
        list.query("fieldSelector")
    );

    api.apply_pod(&b);
    assert_eq!(names(&change(&mut watcher).await), ["a", "b"], "ADDED");
    let watch = api
        .requests()
        .into_iter()
        .find(tests::kube_api::Request::is_watch)
        .expect("a watch of pods");
    assert!(
        watch.selects_node(NODE),
        "watch selector {:?}",
        watch.query("fieldSelector")
    );
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
    let (_files, kubeconfig) = api.kubeconfig_in("kube-unreachable");
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
    let (_files, kubeconfig) = api.kubeconfig_in("kube-evict");
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
    let (_files, kubeconfig) = api.kubeconfig_in("kube-refused");
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
    let (_files, kubeconfig) = api.kubeconfig_in("kube-delete");
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
    let (files, kubeconfig) = api.kubeconfig_in("kube-rank");
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
    let (_files, kubeconfig) = api.kubeconfig_in("kube-rank-missing");
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
