//! Manifests are untrusted input and bounded: a huge file or one of deeply nested brackets is
//! refused with a reason, costs the agent neither memory nor time, and a hog over a hard
//! threshold meanwhile is evicted at once. The real `monitor` binary on real cgroups and
//! processes (root only).
//!
//! The scene has 300Mi allocatable and a hard `allocatableMemory.available<100Mi` threshold,
//! so the agent sees pressure once the pods' working sets pass 200Mi.
use std::{
    fs,
    io::Write as _,
    time::{Duration, Instant},
};

use tests::{AgentScene, MonitorProcess, TestPod, running_as_root};

/// How long the decision may take once the hog's allocation is sent: the allocation itself
/// (a fraction of a second), the kernel's record, and the decision, on a busy machine.
const PROMPT: Duration = Duration::from_secs(3);
/// How long emptying the evicted pod's cgroup may take: 1 s grace, then force.
const KILL: Duration = Duration::from_secs(15);
/// The agent's peak resident memory stays below this whatever the manifests hold.
const PEAK_RSS_KIB: u64 = 96 << 10;

/// The agent's peak resident set (VmHWM) in KiB.
fn peak_rss_kib(agent: &MonitorProcess) -> u64 {
    let status = fs::read_to_string(format!("/proc/{}/status", agent.pid())).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status")
}

#[test]
fn a_hog_is_evicted_at_once_while_huge_and_deeply_nested_manifests_arrive() {
    if !running_as_root("a_hog_is_evicted_at_once_while_huge_and_deeply_nested_manifests_arrive") {
        return;
    }
    let scene = AgentScene::new("bounded-input", "10s", "10s");
    let hog = TestPod::new("hog");
    let mut hog_proc = scene.start_pod(&hog);
    let mut agent = scene.start_agent(&[]);
    agent
        .wait_stderr(Duration::from_secs(10), |l| l.contains("1 known"))
        .expect("the agent reads the hog's manifest");

    // 64 MiB: a pod, then a comment that never ends.
    let huge = scene.manifests.join("huge.yaml");
    let mut file = fs::File::create(&huge).expect("creating huge.yaml");
    let pod = TestPod::new("huge").manifest();
    file.write_all(pod.as_bytes()).unwrap();
    let line = format!("# {}\n", "x".repeat(1021));
    for _ in 0..(64 << 10) {
        file.write_all(line.as_bytes()).unwrap();
    }
    drop(file);
    // 200 KB of `[`, which the YAML tokenizer takes quadratic time over.
    fs::write(
        scene.manifests.join("nested.yaml"),
        format!(
            "{}x: {}\n",
            TestPod::new("nested").manifest(),
            "[".repeat(200_000)
        ),
    )
    .expect("writing nested.yaml");

    // Both files are being read while the hog crosses the threshold.
    let sent = Instant::now();
    hog_proc.command("alloc 220");
    let decision = agent.next_decision(PROMPT + KILL);
    let decided = sent.elapsed();
    assert_eq!(decision["name"], "hog", "{decision:#}");
    assert!(decided < PROMPT, "decided {decided:?} after the allocation");
    scene.wait_until_empty(&hog, KILL);

    for (file, reason) in [
        ("huge.yaml", "larger than 1048576 bytes"),
        ("nested.yaml", "nested deeper than 64 levels"),
    ] {
        let skipped = agent.wait_stderr(Duration::from_secs(10), |l| {
            l.contains("skipped") && l.contains(file) && l.contains(reason)
        });
        assert!(skipped.is_some(), "{file} not reported as {reason:?}");
    }
    let peak = peak_rss_kib(&agent);
    eprintln!("agent peak RSS {peak} KiB, decided {decided:?} after the allocation");
    assert!(peak < PEAK_RSS_KIB, "peak RSS {peak} KiB");
    agent.stop();
}
