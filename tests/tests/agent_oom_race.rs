//! The race the agent exists to win (root only): a pod allocating as fast as one process
//! can, inside a kubepods cgroup with a real memory limit; the agent must stop it before the
//! kernel's OOM killer fires. Runs on the host and in the VM on each kernel, with whichever
//! per-cgroup source the kernel offers (tracepoints, fentry). Margins and win rates per
//! source are the benchmark's job; this test takes a margin the eBPF path wins every time on
//! the host (field notes: 8 of 8 at 48 MiB) and polling every 100 ms does not.
use std::time::Duration;

use tests::{
    AgentScene, Reason, TestPod, cannot_run, oom_kills, process_alive, running_as_root,
    set_memory_limit,
};

/// Kubepods working set at which the scene's threshold is met.
const PRESSURE_AT_MIB: u64 = AgentScene::PRESSURE_ABOVE_MIB;
/// How far above that the kubepods cgroup's limit lies: what the agent has to act in.
const MARGIN_MIB: u64 = 64;
const TRIALS: usize = 3;

#[test]
fn the_agent_stops_a_fast_allocating_pod_before_the_oom_killer() {
    if !running_as_root("the_agent_stops_a_fast_allocating_pod_before_the_oom_killer") {
        return;
    }
    let scene = AgentScene::new("oom-race", "1s", "5s");
    set_memory_limit(&scene.kubepods.dir, (PRESSURE_AT_MIB + MARGIN_MIB) << 20)
        .expect("limiting kubepods");
    let mut agent = scene.start_agent(&[]);
    let source = agent
        .stderr()
        .lines()
        .find_map(|l| l.split(" source ").nth(1).map(ToString::to_string))
        .unwrap_or_default();
    if !source.starts_with("ebpf (") {
        cannot_run(
            Reason::MemcgPrograms,
            &format!("the agent's source is {source}"),
        );
        agent.stop();
        return;
    }
    // Under qemu's TCG (the VM tests) code runs only once qemu has translated it, and the
    // first eviction's path is translated during the race itself, the likeliest reason why one
    // first trial in CI on 6.1 lost (later trials, and the same test run again twice, won):
    // a VM run starts with one trial that must decide and stop the hog but is not scored.
    let warm_up = usize::from(std::env::var_os("MONITOR_VM").is_some());
    for trial in 0..TRIALS + warm_up {
        let hog = TestPod::new(&format!("hog-{trial}"));
        let before = oom_kills();
        let mut hog_proc = scene.start_pod(&hog);
        // Far past the limit, in one go: only the agent can stop it short of the OOM killer.
        hog_proc.command("alloc 1024");
        let decision = agent.next_decision(Duration::from_secs(20));
        assert_eq!(decision["name"], hog.name.as_str(), "{decision:#}");
        scene.wait_until_empty(&hog, Duration::from_secs(15));
        assert!(!process_alive(hog_proc.pid()));
        if trial < warm_up {
            let lost = oom_kills() != before;
            eprintln!("warm-up trial (not scored): the OOM killer fired: {lost}");
        } else {
            assert_eq!(
                oom_kills(),
                before,
                "trial {trial}: the kernel's OOM killer fired before the agent acted ({source})"
            );
        }
        scene.remove_manifest(&hog);
        scene.kubepods.remove_pod(hog.qos(), &hog.uid);
        // One eviction per interval (1 s), as the kubelet: the next trial starts after it.
        std::thread::sleep(Duration::from_millis(1500));
    }
    agent.stop();
}
