//! Pod identifiers are untrusted input: a crafted uid must not point the agent at another
//! cgroup (to attribute its memory, or to kill its processes), and a crafted name must not
//! forge an output line. The real `monitor` binary on real cgroups and processes (root only),
//! and the API watch against the mock API server.
//!
//! Every scene has 300Mi allocatable and a hard `allocatableMemory.available<100Mi`
//! threshold, so the agent sees pressure once the pods' working sets pass 200Mi.
use std::{fs, process::Command, time::Duration};

use monitor::pods::{KubeWatcher, kube_watch};
use tests::{
    AgentScene, MonitorProcess, TempDir, TestPod, kube_api::MockKubeApi, monitor_bin,
    process_alive, running_as_root, set_memory_limit,
};

/// How long a decision may take once the threshold is crossed (a slow VM included).
const DECIDE: Duration = Duration::from_secs(20);
/// How long emptying the evicted pod's cgroup may take: 1 s grace, then force.
const KILL: Duration = Duration::from_secs(15);

/// A pod like `like` under another name, with the uid given.
fn crafted(name: &str, uid: String, like: TestPod) -> TestPod {
    TestPod {
        name: name.into(),
        uid,
        ..like
    }
}

/// Waits for the agent's report that `file` was skipped, naming `reason`.
fn assert_skipped(agent: &MonitorProcess, file: &str, reason: &str) {
    let line = agent.wait_stderr(Duration::from_secs(5), |l| {
        l.contains("skipped") && l.contains(file) && l.contains(reason)
    });
    assert!(
        line.is_some(),
        "no report that {file} was skipped for {reason:?}; stderr:\n{}",
        agent.stderr()
    );
}

#[test]
fn a_uid_climbing_out_of_kubepods_is_refused_and_the_real_hog_dies() {
    if !running_as_root("a_uid_climbing_out_of_kubepods_is_refused") {
        return;
    }
    let scene = AgentScene::new("untrusted-dots", "10s", "10s");
    // A cgroup outside kubepods whose memory the crafted pod would claim: 150Mi, more above
    // its request than the hog has, so whoever counts it as a pod's ranks that pod first.
    let outside = scene.cgroup.child("outside");
    set_memory_limit(&outside, 300 << 20).expect("limiting the outside cgroup");
    let mut outsider = tests::Allocator::start_in(&outside);
    outsider.alloc(150);
    let hog = TestPod::new("hog").request_mib(100);
    let mut hog_proc = scene.run_pod(&hog);
    // Resolves (burstable/pod<hog uid>/../../..) to the outside cgroup.
    let intruder = crafted(
        "intruder",
        format!("{}/../../../outside", hog.uid),
        TestPod::new("intruder").request_mib(1),
    );
    scene.write_manifest(&intruder);
    scene.write_manifest(&hog);

    let mut agent = scene.start_agent(&[]);
    // No answer to wait for: the eviction may end the helper before the allocation does.
    hog_proc.command("alloc 210");
    let decision = agent.next_decision(DECIDE);
    assert_eq!(decision["name"], "hog", "{decision:#}");
    assert_eq!(decision["action"], "evict", "{decision:#}");
    scene.wait_until_empty(&hog, KILL);
    assert!(process_alive(outsider.pid()), "the outside process runs on");
    assert_skipped(&agent, "intruder.yaml", "is not a UUID");
    agent.stop();
}

#[test]
fn a_uid_naming_another_pods_container_cannot_kill_that_pod() {
    if !running_as_root("a_uid_naming_another_pods_container_cannot_kill_that_pod") {
        return;
    }
    let scene = AgentScene::new("untrusted-child", "10s", "10s");
    // Priority 1000 and within its request: the last pod the kubelet would pick.
    let victim = TestPod::new("victim").request_mib(200).priority(1000);
    let hog = TestPod::new("hog").request_mib(100).priority(100);
    let mut victim_proc = scene.start_pod(&victim);
    let mut hog_proc = scene.start_pod(&hog);
    // Resolves to the victim's container cgroup; priority 0 would rank it before the hog.
    let intruder = crafted(
        "intruder",
        format!("{}/container", victim.uid),
        TestPod::new("intruder").request_mib(1).priority(0),
    );
    scene.write_manifest(&intruder);

    let mut agent = scene.start_agent(&[]);
    victim_proc.alloc(60);
    hog_proc.command("alloc 170");
    let decision = agent.next_decision(DECIDE);
    assert_eq!(decision["name"], "hog", "{decision:#}");
    scene.wait_until_empty(&hog, KILL);
    // Past the grace period of any kill the decision could have started.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        process_alive(victim_proc.pid()),
        "the victim's process was killed; stderr:\n{}",
        agent.stderr()
    );
    assert_eq!(scene.pod_pids(&victim).len(), 1, "the victim runs on");
    assert_skipped(&agent, "intruder.yaml", "is not a UUID");
    agent.stop();
}

#[test]
fn a_name_with_a_newline_cannot_forge_a_decision_line() {
    if !running_as_root("a_name_with_a_newline_cannot_forge_a_decision_line") {
        return;
    }
    let scene = AgentScene::new("untrusted-name", "10s", "10s");
    let forger = TestPod::new("forger");
    let hog = TestPod::new("hog");
    // The largest pod, so it would be the one decided on.
    fs::write(
        scene.manifests.join("forger.yaml"),
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: \"forger\\nwould evict \
             kube-system/etcd: forged\"\n  namespace: default\n  uid: {}\nspec:\n  \
             containers:\n  - name: main\n    image: registry.k8s.io/pause:3.9\n",
            forger.uid
        ),
    )
    .expect("writing the forger's manifest");
    let mut forger_proc = scene.run_pod(&forger);
    let mut hog_proc = scene.start_pod(&hog);

    // Text decisions, in dry-run so nothing is killed and both pods stay in the ranking.
    let mut args = scene.agent_args(&["--dry-run"]);
    let format = args.iter().position(|a| a == "--output").expect("--output") + 1;
    args[format] = "text".into();
    let mut agent = MonitorProcess::start(args);
    agent
        .wait_stderr(DECIDE, |l| l.contains(" thresholds "))
        .unwrap_or_else(|| panic!("the agent did not start: {}", agent.stderr()));
    forger_proc.alloc(150);
    hog_proc.command("alloc 80");

    let first = agent.next_line(DECIDE).expect("a decision");
    // Anything a forged line would add comes right after the decision.
    std::thread::sleep(Duration::from_secs(1));
    let lines = agent.stdout_lines();
    assert!(
        lines
            .iter()
            .all(|l| !l.starts_with("would evict kube-system")),
        "a line was forged: {lines:#?}"
    );
    assert!(first.starts_with("would evict default/hog: "), "{first}");
    assert_skipped(&agent, "forger.yaml", "is not a DNS-1123 subdomain");
    agent.stop();
}

#[tokio::test]
async fn the_api_watch_leaves_out_a_pod_with_a_crafted_uid() {
    let api = MockKubeApi::start("node-a");
    let real = TestPod::new("real");
    api.apply_pod(&real);
    api.apply_pod(&crafted(
        "intruder",
        format!("{}/container", real.uid),
        TestPod::new("intruder"),
    ));
    let files = TempDir::new("untrusted-kube");
    let kubeconfig = files.join("kubeconfig");
    api.write_kubeconfig(&kubeconfig);
    let config = kube_watch::api_config(Some(&kubeconfig))
        .await
        .expect("a configuration for the mock");
    let (_watcher, first) = tokio::time::timeout(DECIDE, KubeWatcher::start(config, "node-a"))
        .await
        .expect("the first list within the timeout")
        .expect("the first list");
    let names: Vec<_> = first
        .pods
        .iter()
        .map(|p| p.facts.as_ref().expect("facts").pod.name.clone())
        .collect();
    assert_eq!(names, ["real"]);
}

/// A `--kubepods-cgroup` that could name another directory than the one spelled is refused
/// when the command line is parsed, by every command taking it, before anything is read.
#[test]
fn a_kubepods_cgroup_that_is_not_a_plain_relative_path_is_refused_with_the_reason() {
    let dir = TempDir::new("untrusted-kubepods-flag");
    let pods = dir.path.to_str().expect("a UTF-8 temporary path");
    let cases = [
        (
            "climbing out",
            "/kubepods/../system.slice",
            "\"..\" component",
        ),
        (
            "a current-directory step",
            "/kubepods/./burstable",
            "\".\" component",
        ),
        (
            "the mount point",
            "/sys/fs/cgroup/memory/kubepods",
            "filesystem path",
        ),
        (
            "a 4 KiB path",
            &"/k".repeat(2048),
            "longer than the kernel's limit",
        ),
    ];
    for (name, flag, reason) in cases {
        for command in [
            &["--dry-run", "--pods", pods][..],
            &["trace", "--pods", pods][..],
            &["doctor"][..],
        ] {
            let out = Command::new(monitor_bin())
                .args(command)
                .args(["--kubepods-cgroup", flag])
                .output()
                .expect("running monitor");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{name}, {command:?}: {stderr}");
            assert!(
                stderr.contains("--kubepods-cgroup") && stderr.contains(reason),
                "{name}, {command:?}: {stderr}"
            );
        }
    }
}
