//! A dry run on a node that stays under pressure decides on the same pod at every eviction
//! interval, since it evicts nothing (root only, real cgroups and processes): each decision is
//! counted apart from evictions, printed whole for programs (`--output json`, numbered), said
//! once for people and in the log, kept as one entry of the recent decisions, and its Events
//! (with a MOCK Kubernetes API server, since no real one can run here) are one Event whose
//! count grows, as the kubelet's recorder keeps them.
use std::{
    path::Path,
    time::{Duration, Instant},
};

use serde_json::Value;
use tests::{
    AgentScene, KubeScene, MonitorProcess, TempDir, TestPod, http_get, metrics_addr, process_alive,
    running_as_root, uid_for,
};

/// How long a decision may take once the threshold is crossed (a slow VM included).
const WITHIN: Duration = Duration::from_secs(20);
/// Decisions a second apart for this long: several repeats, well within a summary's minute.
const REPEATING: Duration = Duration::from_secs(6);
const SIGNAL: &str = "allocatableMemory.available";

/// A scene deciding every second.
fn scene(name: &str) -> AgentScene {
    AgentScene::new(name, "1s", "1s")
}

/// The value of the `eviction_signal="allocatableMemory.available"` sample of `family`.
fn counted(exposition: &str, family: &str) -> Option<u64> {
    let prefix = format!("{family}{{eviction_signal=\"{SIGNAL}\"}} ");
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.parse().ok())
}

/// Starts an agent in dry run with `output` on `scene`, with a checkpoint directory of its
/// own and its endpoints on a free port; the pod `over` pushes the node over the threshold.
fn dry_run(scene: &AgentScene, state: &Path, output: &str) -> MonitorProcess {
    scene.start_agent(&[
        "--dry-run",
        "--output",
        output,
        "--checkpoint-dir",
        state.to_str().unwrap(),
        "--metrics-addr",
        "127.0.0.1:0",
    ])
}

#[test]
fn a_repeated_dry_run_decision_is_counted_apart_and_said_once() {
    if !running_as_root("a_repeated_dry_run_decision_is_counted_apart_and_said_once") {
        return;
    }
    let scene = scene("dry-run-repeats");
    let state = TempDir::new("dry-run-repeats-state");
    let over = TestPod::new("over").request_mib(20);
    let mut over_proc = scene.start_pod(&over);

    // For programs: every decision, numbered in its series.
    let agent = dry_run(&scene, &state.join("json"), "json");
    over_proc.alloc(230);
    let mut repeats = Vec::new();
    let until = Instant::now() + REPEATING;
    while Instant::now() < until || repeats.len() < 3 {
        let decision = agent.next_decision(WITHIN);
        assert_eq!(decision["uid"], over.uid.as_str(), "{decision:#}");
        assert_eq!(decision["action"], "would_evict", "{decision:#}");
        repeats.push(decision["repeat"].as_u64().expect("repeat"));
    }
    let expected: Vec<u64> = (1..=repeats.len() as u64).collect();
    assert_eq!(repeats, expected, "each decision, numbered");
    drop(agent);

    // For people: said once; counted apart from evictions; one entry among the recent.
    let mut agent = dry_run(&scene, &state.join("text"), "text");
    let addr = metrics_addr(&agent);
    let first = agent.next_line(WITHIN).expect("the decision line");
    assert!(first.starts_with("would evict default/over: "), "{first}");
    std::thread::sleep(REPEATING);
    let metrics = http_get(addr, "/metrics");
    let decided = counted(&metrics, "monitor_dry_run_decisions_total").expect("dry-run decisions");
    assert!(
        decided >= 4,
        "a decision each second: {decided}\n{metrics}\n{}",
        agent.stderr()
    );
    assert_eq!(
        counted(&metrics, "monitor_evictions_total"),
        Some(0),
        "a dry run evicts nothing: {metrics}"
    );
    let ranking = http_get(addr, "/debug/ranking");
    let body: Value = serde_json::from_str(ranking.split_once("\r\n\r\n").unwrap().1).unwrap();
    let recent = body["decisions"].as_array().expect("decisions");
    assert_eq!(recent.len(), 1, "the series is one entry: {recent:#?}");
    assert!(recent[0]["repeat"].as_u64() >= Some(4), "{:#}", recent[0]);
    assert!(
        recent[0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("times in a row")),
        "{:#}",
        recent[0]
    );
    agent.stop();
    assert_eq!(agent.stdout_lines().len(), 1, "{:?}", agent.stdout_lines());
    let said = agent
        .stderr()
        .lines()
        .filter(|l| l.contains("would evict default/over"))
        .count();
    assert_eq!(said, 1, "once in the log:\n{}", agent.stderr());
    assert!(process_alive(over_proc.pid()), "a dry run signals nothing");
}

#[test]
fn the_events_of_a_repeated_dry_run_decision_add_up_as_the_kubelets_do() {
    if !running_as_root("the_events_of_a_repeated_dry_run_decision_add_up_as_the_kubelets_do") {
        return;
    }
    let name = "dry-run-events-counted";
    let kube = KubeScene::on(scene(name), name);
    let mut hog = kube.scene.run_pod(&kube.hog);
    let mut calm = kube.scene.run_pod(&kube.calm);
    let agent = kube.scene.start_kube_agent(
        &kube.kubeconfig,
        KubeScene::NODE,
        &["--dry-run", "--dry-run-events"],
    );
    hog.alloc(60);
    calm.alloc(160);
    // More decisions than the distinct messages after which the kubelet's recorder combines
    // them (each message names what was available, which moves a little).
    let decisions: u64 = 12;
    for _ in 0..decisions {
        KubeScene::assert_decides_on_hog(&agent.next_decision(WITHIN), "would_evict");
    }
    let on_hog = |api: &tests::kube_api::MockKubeApi| -> Vec<Value> {
        api.events()
            .into_iter()
            .filter(|e| e["involvedObject"]["uid"] == uid_for("hog"))
            .collect()
    };
    let counted = |events: &[Value]| -> u64 {
        events
            .iter()
            .map(|e| e["count"].as_u64().unwrap_or(0))
            .sum()
    };
    // Written in turn, off the agent's loop: every decision is counted once all are written.
    let events = kube
        .api
        .wait_until(WITHIN, |api| {
            Some(on_hog(api)).filter(|events| counted(events) >= decisions)
        })
        .unwrap_or_else(|| panic!("{decisions} decisions: {:#?}", on_hog(&kube.api)));
    assert!(
        events.len() <= 10,
        "at most nine messages alone, then one Event for the rest: {events:#?}"
    );
    assert!(
        events.iter().any(|e| e["count"].as_u64() > Some(1)),
        "a repeat is counted, not posted anew: {events:#?}"
    );
    for event in &events {
        assert_eq!(event["reason"], "EvictionDryRun", "{event:#}");
    }
    let (mut posts, mut patches) = (0, 0);
    for request in kube.api.requests() {
        match (request.method.as_str(), request.path().contains("/events")) {
            ("POST", true) => posts += 1,
            ("PATCH", true) => patches += 1,
            _ => {}
        }
    }
    assert_eq!(posts, events.len(), "one create per Event");
    assert!(patches >= 1, "{patches} patches");
    assert!(process_alive(hog.pid()), "nothing evicted");
}
