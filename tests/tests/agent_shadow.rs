//! The shadow scorecard of the real agent in a dry run (root only): its decisions on real
//! cgroups matched with the kubelet's `Evicted` Events (posted on a MOCK API server, since no
//! real one runs here, as the kubelet would post them) and with the kernel's real OOM kills;
//! read on `/debug/shadow` and `/metrics`, kept across a restart in the checkpoint directory.
use std::{
    net::SocketAddr,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use serde_json::Value;
use tests::{
    AgentScene, KubeScene, MonitorProcess, TestPod, http_get, metrics_addr, running_as_root,
    set_memory_limit,
};

/// How long a decision or an outcome may take (a slow VM included).
const WITHIN: Duration = Duration::from_secs(20);
/// The agent's flags here: a dry run whose outcomes are final 3 s after their episode, and
/// its endpoints on a free port.
const FLAGS: [&str; 5] = [
    "--dry-run",
    "--shadow-window",
    "3s",
    "--metrics-addr",
    "127.0.0.1:0",
];

fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The agent's `/debug/shadow`, as JSON.
fn scorecard(addr: SocketAddr) -> Value {
    let answer = http_get(addr, "/debug/shadow");
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{answer}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

fn count(card: &Value, outcome: &str) -> u64 {
    card["scorecard"]["counts"][outcome].as_u64().unwrap_or(0)
}

/// Waits until `outcome` is counted `n` times, and returns the scorecard.
fn wait_for(addr: SocketAddr, agent: &MonitorProcess, outcome: &str, n: u64) -> Value {
    let deadline = Instant::now() + WITHIN;
    loop {
        let card = scorecard(addr);
        if count(&card, outcome) >= n {
            assert_eq!(count(&card, outcome), n, "{outcome}: {card:#}");
            return card;
        }
        assert!(
            Instant::now() < deadline,
            "{outcome} not counted {n} times: {card:#}\n{}",
            agent.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The newest line of `outcome`.
fn line<'a>(card: &'a Value, outcome: &str) -> &'a Value {
    card["scorecard"]["lines"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|l| l["outcome"] == outcome)
        .unwrap_or_else(|| panic!("no {outcome} line: {card:#}"))
}

#[test]
fn the_kubelets_evictions_are_matched_with_the_dry_runs_decisions_and_kept_across_a_restart() {
    if !running_as_root(
        "the_kubelets_evictions_are_matched_with_the_dry_runs_decisions_and_kept_across_a_restart",
    ) {
        return;
    }
    // A dry run decides again once the pod's cleanup timeout passes: every second here, so
    // an episode lasts while the pressure does.
    let kube = KubeScene::on(
        AgentScene::new("shadow-kubelet", "1s", "1s"),
        "shadow-kubelet",
    );
    set_memory_limit(&kube.scene.kubepods.dir, 1 << 30).expect("limiting kubepods");
    let mut hog = kube.scene.run_pod(&kube.hog);
    let mut calm = kube.scene.run_pod(&kube.calm);
    let mut agent = kube
        .scene
        .start_kube_agent(&kube.kubeconfig, KubeScene::NODE, &FLAGS);
    let addr = metrics_addr(&agent);

    // Missed: the kubelet evicts a pod the agent never names (no pressure it sees). In the
    // next second: the agent's scorecard began within this one, and counts nothing before.
    let gone = TestPod::new("gone");
    let low = "The node was low on resource: memory. ";
    kube.api
        .post_kubelet_eviction(&gone, KubeScene::NODE, unix_secs() + 1, low);
    // Another node's eviction is not this node's.
    kube.api
        .post_kubelet_eviction(&kube.calm, "node-b", unix_secs() + 1, low);
    let card = wait_for(addr, &agent, "missed", 1);
    assert_eq!(
        line(&card, "missed")["acted_on"],
        "default/gone",
        "{card:#}"
    );

    // Same pod: the agent names hog; the kubelet evicts it 2 s after that second.
    hog.alloc(60);
    calm.alloc(160);
    let decision = agent.next_decision(WITHIN);
    KubeScene::assert_decides_on_hog(&decision, "would_evict");
    let decided_ms = decision["wall_unix_ms"]
        .as_u64()
        .expect("the decision's wall time");
    let evicted_secs = decided_ms / 1000 + 2;
    while unix_secs() < evicted_secs {
        std::thread::sleep(Duration::from_millis(100));
    }
    let message = decision["reason"].as_str().unwrap().to_string();
    kube.api
        .post_kubelet_eviction(&kube.hog, KubeScene::NODE, evicted_secs, &message);
    let card = wait_for(addr, &agent, "same_pod", 1);
    let lead_ms = line(&card, "same_pod")["lead_ns"].as_i64().unwrap() / 1_000_000;
    let expected_ms = i64::try_from(evicted_secs * 1000 - decided_ms).unwrap();
    assert!(
        (lead_ms - expected_ms).abs() <= 1,
        "the lead is the kubelet's eviction (whole seconds) less the decision: {lead_ms} ms, \
         expected {expected_ms} ms"
    );

    // Different pod: while the agent names hog, the kubelet evicts calm; the line says why.
    kube.api
        .post_kubelet_eviction(&kube.calm, KubeScene::NODE, unix_secs(), &message);
    let card = wait_for(addr, &agent, "different_pod", 1);
    let different = line(&card, "different_pod");
    assert_eq!(different["named"], "default/hog", "{different:#}");
    assert_eq!(
        different["verdict"]["kind"], "same_threshold",
        "{different:#}"
    );
    let detail = different["detail"].as_str().unwrap();
    assert!(
        detail.contains("the agent's pod exceeds its request")
            && detail.contains("the kubelet's pod within its request"),
        "both pods' keys: {detail}"
    );

    // Nothing happened: a new episode after the window (3 s, and room for a decision the
    // agent took before it saw the memory go), the pressure gone by itself.
    hog.free();
    std::thread::sleep(Duration::from_secs(6));
    while agent.next_line(Duration::from_millis(100)).is_some() {}
    hog.alloc(60);
    let again = agent.next_decision(WITHIN);
    KubeScene::assert_decides_on_hog(&again, "would_evict");
    hog.free();
    let card = wait_for(addr, &agent, "nothing_happened", 1);
    let metrics = http_get(addr, "/metrics");
    for (outcome, n) in [
        ("same_pod", 1),
        ("different_pod", 1),
        ("missed", 1),
        ("nothing_happened", 1),
        ("late", 0),
    ] {
        let sample = format!("monitor_shadow_outcomes_total{{outcome=\"{outcome}\"}} {n}\r\n");
        let sample_lf = sample.replace("\r\n", "\n");
        assert!(
            metrics.contains(&sample) || metrics.contains(&sample_lf),
            "{sample_lf} in the metrics"
        );
    }
    assert!(
        metrics.contains("monitor_shadow_lead_seconds_count{against=\"kubelet\"} 1"),
        "{metrics}"
    );
    agent.stop();

    // A restarted agent carries the scorecard on; the Events it lists again count nothing.
    let watches = |api: &tests::kube_api::MockKubeApi| {
        api.requests()
            .iter()
            .filter(|r| r.path() == "/api/v1/events" && r.is_watch())
            .count()
    };
    let watched_before = watches(&kube.api);
    let agent = kube
        .scene
        .start_kube_agent(&kube.kubeconfig, KubeScene::NODE, &FLAGS);
    let addr = metrics_addr(&agent);
    assert!(
        agent
            .wait_stderr(WITHIN, |l| l.contains("shadow scorecard carried on"))
            .is_some(),
        "{}",
        agent.stderr()
    );
    // It has listed the Events again (a watch follows the list) and taken them.
    kube.api
        .wait_until(WITHIN, |api| (watches(api) > watched_before).then_some(()))
        .expect("the restarted agent watches the Events");
    std::thread::sleep(Duration::from_secs(1));
    let after = scorecard(addr);
    assert_eq!(after["scorecard"], card["scorecard"], "{after:#}");
    let text = MonitorProcess::command(["shadow", "--agent", &addr.to_string()])
        .output()
        .expect("monitor shadow");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(
            "kubelet evictions 3: named first 1 (same pod), 1 different pods, 0 named \
                       late, 1 missed"
        ),
        "{text}"
    );
}

#[test]
fn kernel_oom_kills_are_foreseen_counted_aside_at_a_pods_own_limit_or_not_foreseen() {
    if !running_as_root(
        "kernel_oom_kills_are_foreseen_counted_aside_at_a_pods_own_limit_or_not_foreseen",
    ) {
        return;
    }
    // A dry run names the hog again while the pressure lasts, once its interval and the
    // named pod's grace and cleanup time are past (1 s each here): the episode stays open
    // (its window is 3 s) however slowly the hog grows to the kubepods limit in a loaded VM.
    let scene = AgentScene::new("shadow-kernel", "1s", "1s");
    // The kernel acts at 400 MiB in kubepods; the agent's threshold is met above 200 MiB.
    set_memory_limit(&scene.kubepods.dir, 400 << 20).expect("limiting kubepods");
    let mut agent = scene.start_agent(&FLAGS);
    let addr = metrics_addr(&agent);

    // Foreseen: the hog crosses the threshold (a dry-run decision), then the kubepods limit.
    let hog = TestPod::new("hog").request_mib(20);
    let mut hog_proc = scene.start_pod(&hog);
    hog_proc.alloc(150);
    hog_proc.command("alloc 100");
    let decision = agent.next_decision(WITHIN);
    assert_eq!(decision["name"], "hog", "{decision:#}");
    let before = scene.kubepods.oom_kills();
    hog_proc.command("alloc 400");
    scene.wait_until_empty(&hog, WITHIN);
    assert!(
        scene.kubepods.oom_kills() > before,
        "the kernel killed the hog"
    );
    let card = wait_for(addr, &agent, "kernel_foreseen", 1);
    let foreseen = line(&card, "kernel_foreseen");
    assert_eq!(foreseen["acted_on"], "default/hog", "{foreseen:#}");
    assert!(foreseen["lead_ns"].as_i64().unwrap() > 0, "{foreseen:#}");

    // At its own limit: a pod limited to 50 MiB allocating 80, far from every threshold.
    let limited = TestPod::new("limited").request_mib(50);
    let mut limited_proc = scene.start_pod(&limited);
    set_memory_limit(&scene.pod_dir(&limited), 50 << 20).expect("limiting the pod");
    limited_proc.command("alloc 80");
    scene.wait_until_empty(&limited, WITHIN);
    let card = wait_for(addr, &agent, "kernel_own_limit", 1);
    assert_eq!(
        line(&card, "kernel_own_limit")["acted_on"],
        "default/limited"
    );
    assert_eq!(count(&card, "kernel_foreseen"), 1, "{card:#}");
    agent.stop();

    // Not foreseen: an agent told the pods may use 4 GiB sees no pressure when the kubepods
    // limit is reached.
    let mut blind = scene.start_agent(&[&FLAGS[..], &["--allocatable-memory", "4Gi"]].concat());
    let addr = metrics_addr(&blind);
    let surprise = TestPod::new("surprise").request_mib(20);
    let mut surprise_proc = scene.start_pod(&surprise);
    surprise_proc.command("alloc 500");
    scene.wait_until_empty(&surprise, WITHIN);
    let card = wait_for(addr, &blind, "kernel_unforeseen", 1);
    assert_eq!(
        line(&card, "kernel_unforeseen")["acted_on"],
        "default/surprise"
    );
    assert!(
        blind.next_line(Duration::from_millis(100)).is_none(),
        "no decision"
    );
    blind.stop();
}
