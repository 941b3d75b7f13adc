//! Manifests are untrusted input and bounded: a huge file or one of deeply nested brackets or
//! dashes is refused with a reason, costs the agent neither memory nor time, and a hog over a
//! hard threshold meanwhile is evicted at once. The real `monitor` binary on real cgroups and
//! processes (root only).
//!
//! The scene has 300Mi allocatable and a hard `allocatableMemory.available<100Mi` threshold,
//! so the agent sees pressure once the pods' working sets pass 200Mi.
use std::{
    fs,
    io::Write as _,
    time::{Duration, Instant},
};

use tests::{
    AgentScene, MonitorProcess, TestPod, oom_kills_in, process_alive, running_as_root,
    set_memory_limit,
};

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

/// The agent's memory cgroup limit in the costly-manifests test: what a DaemonSet might give
/// it.
const AGENT_LIMIT: u64 = 128 << 20;

#[test]
fn manifests_costly_to_parse_are_refused_by_an_agent_limited_to_128_mib() {
    if !running_as_root("manifests_costly_to_parse_are_refused") {
        return;
    }
    let scene = AgentScene::new("bounded-blocks", "10s", "10s");
    let hog = TestPod::new("hog");
    let calm = TestPod::new("calm").request_mib(100);
    let mut hog_proc = scene.start_pod(&hog);
    let _calm_proc = scene.start_pod(&calm);
    let agent_cgroup = scene.cgroup.child("agent");
    set_memory_limit(&agent_cgroup, AGENT_LIMIT).expect("limiting the agent's cgroup");
    let mut agent = scene.start_agent_in(&[], &agent_cgroup);
    agent
        .wait_stderr(Duration::from_secs(10), |l| l.contains("2 known"))
        .expect("the agent reads the two pods' manifests");

    // Each a valid pod, then what costs the parser far more than the file's size: 1 MiB of
    // `- - - ...` (520,000 block levels), 1 MiB of `1,` (a million tokens), 60 KB of aliases
    // to one anchor (each a copy of its list). Each renamed into place whole.
    let files = [
        ("deep.yaml", "nested deeper than 64 levels"),
        ("flat.yaml", "more than 131072 YAML tokens"),
        ("aliases.yaml", "aliases are not accepted"),
    ];
    for (file, _) in files {
        let pod = TestPod::new(file.trim_end_matches(".yaml")).manifest();
        let room = (1 << 20) - pod.len() - 16;
        let text = match file {
            "deep.yaml" => format!("{pod}x:\n{}x\n", "- ".repeat(room / 2)),
            "flat.yaml" => format!("{pod}x: [{}1]\n", "1,".repeat(room / 2)),
            _ => format!(
                "{pod}x: &a [{}1]\ny: [{}*a]\n",
                "1,".repeat(1000),
                "*a,".repeat(20_000)
            ),
        };
        assert!(text.len() <= 1 << 20, "{file}: {} bytes", text.len());
        let hidden = scene.manifests.join(&format!(".{file}.tmp"));
        fs::write(&hidden, text).expect("writing a costly manifest");
        fs::rename(&hidden, scene.manifests.join(file)).expect("renaming it into place");
    }

    for (file, reason) in files {
        let skipped = agent.wait_stderr(Duration::from_secs(20), |l| {
            l.contains("skipped") && l.contains(file) && l.contains(reason)
        });
        assert!(
            skipped.is_some(),
            "{file} not refused as {reason:?} (agent running: {}); stderr:\n{}",
            agent.running(),
            agent.stderr()
        );
    }
    // The hog over the threshold is still the one evicted, by the same agent.
    hog_proc.command("alloc 220");
    let decision = agent.next_decision(PROMPT + KILL);
    assert_eq!(decision["name"], "hog", "{decision:#}");
    assert_eq!(decision["action"], "evict", "{decision:#}");
    scene.wait_until_empty(&hog, KILL);
    assert!(process_alive(agent.pid()), "the agent is gone");
    assert_eq!(
        oom_kills_in(&agent_cgroup).expect("the agent cgroup's OOM kills"),
        0,
        "OOM kills in the agent's cgroup"
    );
    let peak = peak_rss_kib(&agent);
    eprintln!("agent peak RSS {peak} KiB under a {AGENT_LIMIT}-byte limit");
    assert!(peak < PEAK_RSS_KIB, "peak RSS {peak} KiB");
    agent.stop();
}
