//! The node agent end to end, on the pod side: pods and cgroups coming and going while it
//! runs, and input it has to skip or cannot resolve (root only).
//!
//! Every scene has 300Mi allocatable and a hard `allocatableMemory.available<100Mi`
//! threshold, so the agent sees pressure once the pods' working sets pass 200Mi.
use std::{
    fs,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use tests::{AgentScene, MonitorProcess, TestPod, process_alive, running_as_root};

/// How long a decision may take to show up once it is due (a slow VM included).
const DECIDE: Duration = Duration::from_secs(20);
/// How long the agent may take to notice a change of the manifests or the cgroups.
const NOTICE: Duration = Duration::from_secs(10);
const MIB: i64 = 1 << 20;

/// Waits for a stderr line containing every one of `parts`.
fn expect_log(agent: &MonitorProcess, within: Duration, parts: &[&str]) -> String {
    agent
        .wait_stderr(within, |l| parts.iter().all(|p| l.contains(p)))
        .unwrap_or_else(|| panic!("no log line with {parts:?}; stderr:\n{}", agent.stderr()))
}

#[test]
fn pods_and_cgroups_coming_and_going_are_followed_without_a_restart() {
    if !running_as_root("pods_and_cgroups_coming_and_going_are_followed_without_a_restart") {
        return;
    }
    let scene = AgentScene::new("agent-churn", "500ms", "5s");
    let early = TestPod::new("early").request_mib(50);
    let late = TestPod::new("late").request_mib(20);
    let blink = TestPod::new("blink").request_mib(20);
    let mut early_proc = scene.start_pod(&early);
    early_proc.alloc(20);
    let mut agent = scene.start_agent(&["--dry-run", "--duration", "15s"]);
    let started = Instant::now();
    expect_log(&agent, NOTICE, &["pods: 1 added, 0 removed, 1 known"]);

    // A manifest before its cgroup: known at once, without stats until the cgroup exists.
    scene.write_manifest(&late);
    expect_log(&agent, NOTICE, &["pods: 1 added, 0 removed, 2 known"]);
    expect_log(&agent, NOTICE, &["pod late", "not a candidate"]);

    // Cgroups created and removed while the agent reads them: unrelated ones in kubepods,
    // containers inside a pod, and the cgroup of a listed pod.
    scene.write_manifest(&blink);
    expect_log(&agent, NOTICE, &["pods: 1 added, 0 removed, 3 known"]);
    let mut late_proc = scene.run_pod(&late);
    late_proc.alloc(30);
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let stop = stop.clone();
        let besteffort = scene.kubepods.dir.join("besteffort");
        let late_pod = scene.pod_dir(&late);
        let blink_pod = scene.pod_dir(&blink);
        std::thread::spawn(move || {
            let mut rounds = 0;
            while !stop.load(Ordering::Relaxed) {
                let dirs = [
                    besteffort.join(format!("podchurn-{rounds}")),
                    late_pod.join(format!("sidecar-{rounds}")),
                    blink_pod.clone(),
                ];
                for dir in &dirs {
                    fs::create_dir(dir).unwrap();
                }
                std::thread::sleep(Duration::from_millis(5));
                for dir in dirs.iter().rev() {
                    fs::remove_dir(dir).unwrap();
                }
                rounds += 1;
            }
            rounds
        })
    };
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    let rounds = churn.join().expect("churn thread");
    assert!(rounds > 10, "only {rounds} rounds of cgroup churn");
    assert!(
        agent.wait(Duration::ZERO).is_none(),
        "the agent stopped during the churn:\n{}",
        agent.stderr()
    );

    // A pod leaving: manifest removed, processes gone, cgroup removed.
    scene.remove_manifest(&early);
    drop(early_proc);
    scene.kubepods.remove_pod(early.qos(), &early.uid);
    expect_log(&agent, NOTICE, &["pods: 0 added, 1 removed, 2 known"]);
    scene.remove_manifest(&blink);
    expect_log(&agent, NOTICE, &["pods: 0 added, 1 removed, 1 known"]);

    // The pod whose cgroup came after its manifest is measured: pressure names it, with
    // its usage, not as a pod without stats.
    late_proc.alloc(200);
    let decision = agent.next_decision(DECIDE);
    assert_eq!(decision["action"], "would_evict", "{decision:#}");
    assert_eq!(decision["name"], "late", "{decision:#}");
    let usage = decision["rank"]["usage"].as_i64().unwrap_or(0);
    assert!(
        usage > 150 * MIB,
        "the late pod's working set was followed: {decision:#}"
    );
    assert_eq!(decision["rank"]["exceedsRequest"], true, "{decision:#}");

    let status = agent
        .wait(Duration::from_secs(30))
        .expect("the agent stops at --duration");
    assert!(
        status.success(),
        "exit status {status}:\n{}",
        agent.stderr()
    );
    assert!(
        started.elapsed() >= Duration::from_secs(14),
        "stopped early"
    );
    let stderr = agent.stderr();
    for line in stderr.lines() {
        assert!(
            !line.contains("ERROR") && !line.starts_with("Error"),
            "{line}\n{stderr}"
        );
        // Cgroups vanishing between listing and reading are expected, not worth a warning;
        // a listed pod whose cgroup is missing is, and so is a kernel without some hooks, or
        // a host that withholds what the agent's self-protection needs (CAP_SYS_RESOURCE for
        // its oom_score_adj, CAP_IPC_LOCK for mlockall).
        if line.contains("WARN") {
            assert!(
                line.contains("not a candidate")
                    || line.contains("not attached:")
                    || line.contains("could not set oom_score_adj")
                    || line.contains("could not lock memory"),
                "unexpected warning: {line}\n{stderr}"
            );
        }
    }
    assert!(process_alive(late_proc.pid()), "dry-run");
}

#[test]
fn bad_manifests_are_skipped_and_a_pod_without_a_cgroup_is_passed_over() {
    if !running_as_root("bad_manifests_are_skipped_and_a_pod_without_a_cgroup_is_passed_over") {
        return;
    }
    let scene = AgentScene::new("agent-bad-input", "500ms", "30s");
    fs::write(
        scene.manifests.join("broken.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: [name: oops\n",
    )
    .unwrap();
    fs::write(
        scene.manifests.join("no-uid.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: anonymous}\nspec: {containers: [{name: c}]}\n",
    )
    .unwrap();
    // Listed, but its cgroup is nowhere: the kubelet would rank it first as a pod without
    // stats, yet it has nothing on this node to reclaim.
    let ghost = TestPod::new("ghost").request_mib(500).priority(1000);
    let real = TestPod::new("real").request_mib(10);
    let extra = TestPod::new("extra").request_mib(100);
    scene.write_manifest(&ghost);
    let mut real_proc = scene.start_pod(&real);
    let mut agent = scene.start_agent(&[]);
    expect_log(&agent, NOTICE, &["skipped", "broken.yaml"]);
    expect_log(&agent, NOTICE, &["skipped", "no-uid.yaml", "metadata.uid"]);
    expect_log(&agent, NOTICE, &["pod ghost", "not a candidate"]);
    expect_log(&agent, NOTICE, &["pods: 2 added, 0 removed, 2 known"]);

    // A broken file arriving while the agent runs, along with a good one.
    fs::write(
        scene.manifests.join("broken-late.json"),
        "{\"kind\": \"Pod\", ",
    )
    .unwrap();
    let mut extra_proc = scene.start_pod(&extra);
    expect_log(&agent, NOTICE, &["skipped", "broken-late.json"]);
    expect_log(&agent, NOTICE, &["pods: 1 added, 0 removed, 3 known"]);
    extra_proc.alloc(10);

    // No answer to wait for: the eviction may end the helper before the allocation does.
    real_proc.command("alloc 220");
    let one = agent.next_decision(DECIDE);
    assert_eq!(one["action"], "evict", "{one:#}");
    assert_eq!(
        one["name"], "real",
        "the pod without a cgroup is passed over at once: {one:#}"
    );
    assert_eq!(one["rank"]["exceedsRequest"], true, "{one:#}");
    scene.wait_until_empty(&real, Duration::from_secs(15));
    assert!(
        process_alive(extra_proc.pid()),
        "the pod within its request runs on"
    );
    agent.stop();
}

/// `--pods` a symbolic link swapped to another directory, as Kubernetes' atomic writer and
/// release tools switch directories: the agent follows the path. Before, it stayed on the
/// directory the link first named, so a hog listed only in the new one was unknown and the
/// pods it knew were evicted for it.
#[test]
fn a_pods_symlink_swapped_to_another_directory_is_followed() {
    if !running_as_root("a_pods_symlink_swapped_to_another_directory_is_followed") {
        return;
    }
    let scene = AgentScene::new("agent-pods-symlink", "1s", "5s");
    let releases = scene.manifests.join("releases");
    let (old, new) = (releases.join("1"), releases.join("2"));
    let link = scene.manifests.join("current");
    for dir in [&old, &new] {
        fs::create_dir_all(dir).unwrap();
    }
    std::os::unix::fs::symlink(&old, &link).unwrap();
    let calm: Vec<TestPod> = (0..2)
        .map(|i| TestPod::new(&format!("calm-{i}")).request_mib(10))
        .collect();
    let hog = TestPod::new("hog").request_mib(10);
    for pod in &calm {
        pod.write_to(&old);
        pod.write_to(&new);
    }
    hog.write_to(&new);
    let mut calm_procs: Vec<_> = calm.iter().map(|pod| scene.run_pod(pod)).collect();
    for process in &mut calm_procs {
        process.alloc(30);
    }
    let link_arg = link.display().to_string();
    let mut agent = scene.start_agent(&["--pods", &link_arg]);
    expect_log(&agent, NOTICE, &["pods: 2 added, 0 removed, 2 known"]);

    // The release switch: a new link renamed over the old one, in one step.
    let staged = scene.manifests.join("current.new");
    std::os::unix::fs::symlink(&new, &staged).unwrap();
    fs::rename(&staged, &link).unwrap();
    // Well past the agent's 1 s check of the path, well before the kubelet's 20 s re-list.
    std::thread::sleep(Duration::from_secs(3));

    let mut hog_proc = scene.run_pod(&hog);
    // Killed before it answers, when the agent knows it.
    hog_proc.command("alloc 220");
    let decision = agent.next_decision(DECIDE);
    assert_eq!(
        decision["name"],
        "hog",
        "the pod listed in the directory the link names now: {decision:#}\n{}",
        agent.stderr()
    );
    assert!(
        agent
            .stderr()
            .contains("names another directory now: watching and reading that one"),
        "{}",
        agent.stderr()
    );
    for (pod, process) in calm.iter().zip(&calm_procs) {
        assert!(process_alive(process.pid()), "{} was killed", pod.name);
    }
    agent.stop();
}
