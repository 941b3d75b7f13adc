//! The real `monitor` binary with `--kube` on a kubepods tree of real cgroups, its pods
//! served by a MOCK Kubernetes API server ([`MockKubeApi`]), since no real one can run here;
//! a STAND-IN kubelet stops the pods the API evicts (root only). The API clients alone are
//! tested in `kube_clients.rs`.
use std::{
    path::Path,
    time::{Duration, Instant},
};

use serde_json::Value;
use tests::{
    AgentScene, KubeScene, MonitorProcess, oom_kills, process_alive, running_as_root,
    set_memory_limit, stand_in_kubelet::StandInKubelet, uid_for,
};

/// The node the mock's pods are bound to.
const NODE: &str = KubeScene::NODE;
/// How long a change or a decision may take (a slow VM included).
const WITHIN: Duration = Duration::from_secs(20);

/// The agent's flags for `scene` with its pods from the mock instead of the manifests
/// directory, started and ready (its pods loaded).
fn start_kube_agent(scene: &AgentScene, kubeconfig: &Path, extra: &[&str]) -> MonitorProcess {
    scene.start_kube_agent(kubeconfig, NODE, extra)
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
    KubeScene::assert_decides_on_hog(&agent.next_decision(WITHIN), "would_evict");
    let list = kube
        .api
        .requests()
        .into_iter()
        .find(|r| r.path() == "/api/v1/pods")
        .expect("the agent listed pods");
    assert!(list.selects_node(NODE), "{:?}", list.query("fieldSelector"));
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
    let decision = agent.next_decision(WITHIN);
    KubeScene::assert_decides_on_hog(&decision, "would_evict");
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
    let refused = agent.next_decision(WITHIN);
    KubeScene::assert_decides_on_hog(&refused, "evict");
    let next = agent.next_decision(WITHIN);
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
    let decision = agent.next_decision(WITHIN);
    KubeScene::assert_decides_on_hog(&decision, "evict");
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
    // agent's own condition on the node (the kubelet's MemoryPressure untouched). Events are
    // written off the agent's loop, as the kubelet's recorder writes them: awaited.
    let events = kube
        .api
        .wait_until(WITHIN, |api| Some(api.events()).filter(|e| !e.is_empty()))
        .unwrap_or_default();
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
    KubeScene::assert_decides_on_hog(&agent.next_decision(WITHIN), "evict");
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
    let decision = agent.next_decision(WITHIN);
    KubeScene::assert_decides_on_hog(&decision, "evict");
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
    let decision = agent.next_decision(WITHIN);
    KubeScene::assert_decides_on_hog(&decision, "evict");
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
    KubeScene::assert_decides_on_hog(&agent.next_decision(WITHIN), "evict");
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
    let decision = agent.next_decision(WITHIN);
    KubeScene::assert_decides_on_hog(&decision, "evict");
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
    let decision = agent.next_decision(WITHIN);
    KubeScene::assert_decides_on_hog(&decision, "evict");
    assert_eq!(decision["path"], "api", "{decision:#}");
    let line = agent
        .wait_stderr(WITHIN, |l| l.contains("through the API alone"))
        .unwrap_or_else(|| panic!("no word of the race: {}", agent.stderr()));
    assert!(line.contains("the OOM point is "), "{line}");
    assert!(line.contains("--kube-hard-action kill"), "{line}");
    let _ = hog.wait();
}
