//! The node agent end to end: the real `monitor` binary as a subprocess, watching a kubepods
//! tree of real cgroups in which real processes allocate real memory, deciding and carrying
//! out evictions the way the kubelet's eviction manager does (root only).
//!
//! Every scene has 300Mi allocatable and a hard `allocatableMemory.available<100Mi`
//! threshold, so the agent sees pressure once the pods' working sets pass 200Mi.
use std::time::{Duration, Instant};

use tests::{
    AgentScene, Allocator, MonitorProcess, TempDir, TermIgnorer, TestPod, http_get,
    in_own_network_namespace, metrics_addr, process_alive, running_as_root,
    scene_decisions::{DECIDE, KILL, MIB, alive, assert_decision, assert_no_decision},
    set_memory_limit,
};

#[test]
fn the_pod_over_its_request_is_evicted_first_despite_top_priority_and_less_memory() {
    if !running_as_root("the_pod_over_its_request_is_evicted_first") {
        return;
    }
    let scene = AgentScene::new("agent-order", "10s", "10s");
    let big = TestPod::new("big").request_mib(200);
    let over = TestPod::new("over").request_mib(20).priority(1000);
    let small = TestPod::new("small").request_mib(50);
    let mut agent = scene.start_agent(&[]);
    let mut over_proc = scene.start_pod(&over);
    let mut small_proc = scene.start_pod(&small);
    let mut big_proc = scene.start_pod(&big);

    // 60Mi over a 20Mi request, then 30Mi within 50Mi; the largest pod, within its 200Mi
    // request, pushes the node over the threshold.
    over_proc.alloc(60);
    small_proc.alloc(30);
    big_proc.alloc(140);

    let decision = agent.next_decision(DECIDE);
    assert_decision(&decision, "evict", &over);
    assert_eq!(decision["priority"], 1000, "{decision:#}");
    let rank = &decision["rank"];
    assert_eq!(rank["exceedsRequest"], true, "{decision:#}");
    assert_eq!(rank["request"], 20 * MIB, "{decision:#}");
    let usage = rank["usage"].as_i64().unwrap();
    // Counted once: records that waited in the ring past a cgroupfs read are not added again.
    assert!((40 * MIB..=70 * MIB).contains(&usage), "{decision:#}");
    assert!(rank["aboveRequest"].as_i64().unwrap() > 0, "{decision:#}");
    assert!(
        decision["reason"].as_str().unwrap().contains("memory"),
        "{decision:#}"
    );

    scene.wait_until_empty(&over, KILL);
    assert!(!alive(&over_proc), "the evicted pod's process is gone");
    assert!(
        alive(&big_proc) && alive(&small_proc),
        "the other pods run on"
    );
    // 170Mi are left: no pressure, so no further eviction.
    assert_no_decision(&agent, Duration::from_secs(2), "the pressure is gone");
    agent.stop();
    assert!(alive(&big_proc) && alive(&small_proc));
}

#[test]
fn memory_read_while_its_kernel_records_wait_in_the_ring_counts_once() {
    if !running_as_root("memory_read_while_its_kernel_records_wait_in_the_ring_counts_once") {
        return;
    }
    let scene = AgentScene::new("agent-reread", "10s", "10s");
    let over = TestPod::new("over").request_mib(20).priority(1000);
    let small = TestPod::new("small").request_mib(50);
    let big = TestPod::new("big").request_mib(200);
    let mut agent = scene.start_agent(&[]);
    let mut over_proc = scene.start_pod(&over);
    let mut small_proc = scene.start_pod(&small);
    let mut big_proc = scene.start_pod(&big);
    agent
        .wait_stderr(Duration::from_secs(10), |l| l.contains("3 known"))
        .expect("the agent reads the three pods");

    // Far below the threshold, the kernel's records of these allocations wait in the ring
    // (up to a second) instead of waking the agent.
    over_proc.alloc(60);
    small_proc.alloc(30);
    // A new manifest makes the agent re-read every pod's memory at once, while they wait.
    // (The static pod is critical, so it is never a candidate itself.)
    scene.write_manifest(&TestPod::new("bystander").static_pod());
    agent
        .wait_stderr(Duration::from_secs(10), |l| l.contains("4 known"))
        .expect("the agent reloads the manifests");
    big_proc.alloc(140);

    // Counted twice, small's 30Mi would look like 60Mi, over its 50Mi request, and as the
    // lower priority it would go before over.
    let decision = agent.next_decision(DECIDE);
    assert_decision(&decision, "evict", &over);
    scene.wait_until_empty(&over, KILL);
    assert!(alive(&small_proc) && alive(&big_proc));
    agent.stop();
}

#[test]
fn a_polling_agent_reads_memory_at_once_when_tasks_stall_on_it() {
    if !running_as_root("a_polling_agent_reads_memory_at_once_when_tasks_stall_on_it") {
        return;
    }
    let scene = AgentScene::new("agent-psi", "10s", "10s");
    // A real limit on kubepods, so that filling it makes tasks stall in reclaim; the agent
    // still sees the scene's 300Mi allocatable.
    set_memory_limit(&scene.kubepods.dir, 400 * MIB as u64).expect("limiting kubepods");
    let files = TempDir::new("agent-psi-cache");
    let hog = TestPod::new("hog").request_mib(20);
    // Memory is read once a minute, the agent stops after one: only PSI can bring it a
    // decision in between.
    let mut agent = scene.start_agent(&[
        "--source",
        "poll",
        "--poll-interval",
        "60s",
        "--psi-stall",
        "1ms",
    ]);
    let psi = agent
        .wait_stderr(Duration::from_secs(10), |l| {
            l.contains("no PSI") || l.contains("at once when tasks stall")
        })
        .expect("the agent says whether it has PSI wake-ups");
    if psi.contains("no PSI") {
        tests::cannot_run(tests::Reason::Psi, &psi);
        return;
    }
    // The pod reaches the node before its cgroup exists, as from the kubelet; no kernel
    // event announces the cgroup when polling.
    scene.write_manifest(&hog);
    agent
        .wait_stderr(Duration::from_secs(10), |l| l.contains("1 known"))
        .expect("the agent reads the manifest");
    let mut hog_proc = scene.run_pod(&hog);

    // 160Mi of clean page cache (not working set), then 270Mi of anonymous memory: past the
    // 400Mi limit, so reclaim takes back cache while the allocation waits for it. Tasks
    // stall only once the working set is near 240Mi, well past the 200Mi of the threshold.
    hog_proc.cache(160, &files.join("cache"));
    // No answer to wait for: the eviction may end the helper before the allocation does.
    hog_proc.command("alloc 270");
    let decision = agent.next_decision(DECIDE);
    assert_decision(&decision, "evict", &hog);
    let usage = decision["rank"]["usage"].as_i64();
    assert!(
        usage.is_some_and(|u| u > 200 * MIB),
        "the pod's cgroup was found and read: {decision:#}"
    );
    scene.wait_until_empty(&hog, KILL);
    agent.stop();
}

#[test]
fn one_eviction_per_interval_while_the_signal_stays_met() {
    if !running_as_root("one_eviction_per_interval_while_the_signal_stays_met") {
        return;
    }
    let interval = Duration::from_secs(3);
    let scene = AgentScene::new("agent-interval", "3s", "10s");
    let first = TestPod::new("first").request_mib(10);
    let second = TestPod::new("second").request_mib(50);
    let steady = TestPod::new("steady").request_mib(300);
    let mut agent = scene.start_agent(&[]);
    let mut first_proc = scene.start_pod(&first);
    let mut second_proc = scene.start_pod(&second);
    let mut steady_proc = scene.start_pod(&steady);

    // 50Mi and 30Mi over their requests; the pod within its request crosses the threshold.
    first_proc.alloc(60);
    second_proc.alloc(80);
    steady_proc.alloc(160);

    let one = agent.next_decision(DECIDE);
    assert_decision(&one, "evict", &first);
    scene.wait_until_empty(&first, KILL);
    // The second may already be going where the first took longer than the interval to go
    // (a slow VM): the gap between the decisions below says it waited.
    assert!(alive(&steady_proc));

    // 240Mi are still in use: the signal stays met, and the next pod goes one interval later.
    let two = agent.next_decision(DECIDE);
    assert_decision(&two, "evict", &second);
    let gap = Duration::from_nanos(
        two["monotonic_ns"].as_u64().unwrap() - one["monotonic_ns"].as_u64().unwrap(),
    );
    // The agent's interval runs on the boot clock, the report's stamp on the monotonic
    // clock; they differ only across a suspend, so allow a few milliseconds.
    assert!(
        gap + Duration::from_millis(20) >= interval,
        "second eviction only {gap:?} after the first"
    );
    assert!(
        gap < interval + Duration::from_secs(8),
        "the second eviction came late: {gap:?}"
    );
    scene.wait_until_empty(&second, KILL);
    assert!(alive(&steady_proc), "the pod within its request runs on");

    // 160Mi left: no pressure, nothing more in the next interval.
    assert_no_decision(
        &agent,
        interval + Duration::from_secs(1),
        "the pressure is gone",
    );
    agent.stop();
    assert!(alive(&steady_proc));
}

#[test]
fn the_next_eviction_waits_until_the_evicted_pod_is_gone() {
    if !running_as_root("the_next_eviction_waits_until_the_evicted_pod_is_gone") {
        return;
    }
    // The interval is short; what holds the second eviction back is the first pod, which
    // ignores SIGTERM and so lives through the 1 s grace period until it is killed.
    let scene = AgentScene::new("agent-cleanup", "300ms", "20s");
    let stubborn = TestPod::new("stubborn").request_mib(10);
    let next = TestPod::new("next").request_mib(20);
    let steady = TestPod::new("steady").request_mib(300);
    let mut agent = scene.start_agent(&[]);
    let mut stubborn_proc = scene.start_pod(&stubborn);
    let ignorer = TermIgnorer::start_in(&scene.pod_dir(&stubborn).join("container"));
    let mut next_proc = scene.start_pod(&next);
    let mut steady_proc = scene.start_pod(&steady);

    stubborn_proc.alloc(80);
    next_proc.alloc(60);
    steady_proc.alloc(160);

    let one = agent.next_decision(DECIDE);
    assert_decision(&one, "evict", &stubborn);
    let two = agent.next_decision(DECIDE);
    assert_decision(&two, "evict", &next);
    assert!(
        scene.pod_pids(&stubborn).is_empty(),
        "the next eviction came while the first pod still ran: {:?}",
        scene.pod_pids(&stubborn)
    );
    assert!(
        !process_alive(ignorer.pid()),
        "killed after ignoring SIGTERM"
    );
    let gap = Duration::from_nanos(
        two["monotonic_ns"].as_u64().unwrap() - one["monotonic_ns"].as_u64().unwrap(),
    );
    assert!(
        gap >= Duration::from_millis(980),
        "the grace period of 1 s had not passed: {gap:?}"
    );
    let stopped = agent.wait_stderr(Duration::from_secs(2), |l| {
        l.contains(&format!("pod default/{} stopped", stubborn.name))
    });
    assert!(
        stopped.as_deref().is_some_and(|l| l.contains("forced")),
        "the kill of the pod ignoring SIGTERM is logged as forced: {stopped:?}"
    );
    scene.wait_until_empty(&next, KILL);
    assert!(alive(&steady_proc));
    agent.stop();
}

#[test]
fn critical_pods_are_never_evicted_even_as_the_biggest_offenders() {
    if !running_as_root("critical_pods_are_never_evicted_even_as_the_biggest_offenders") {
        return;
    }
    let scene = AgentScene::new("agent-critical", "500ms", "5s");
    let normal = TestPod::new("normal").request_mib(100);
    let system = TestPod::new("system")
        .request_mib(10)
        .priority(2_000_000_000);
    let static_pod = TestPod::new("static").request_mib(10).static_pod();
    let mut agent = scene.start_agent(&[]);
    let mut normal_proc = scene.start_pod(&normal);
    let mut static_proc = scene.start_pod(&static_pod);
    let mut system_proc = scene.start_pod(&system);

    // The critical pods are far over their requests; the normal pod is small and within.
    normal_proc.alloc(20);
    static_proc.alloc(70);
    system_proc.alloc(170);

    let decision = agent.next_decision(DECIDE);
    assert_decision(&decision, "evict", &normal);
    assert_eq!(decision["rank"]["exceedsRequest"], false, "{decision:#}");
    scene.wait_until_empty(&normal, KILL);

    // 240Mi stay in use by critical pods only: the threshold stays met for many intervals,
    // and nothing may be evicted.
    assert_no_decision(
        &agent,
        Duration::from_secs(3),
        "only critical pods are left",
    );
    assert!(
        alive(&system_proc),
        "a system-critical priority pod is never killed"
    );
    assert!(alive(&static_proc), "a static pod is never killed");
    assert_eq!(scene.pod_pids(&system).len(), 1);
    assert_eq!(scene.pod_pids(&static_pod).len(), 1);
    agent.stop();
}

#[test]
fn dry_run_reports_decisions_and_kills_nothing() {
    if !running_as_root("dry_run_reports_decisions_and_kills_nothing") {
        return;
    }
    let scene = AgentScene::new("agent-dry-run", "500ms", "1s");
    let big = TestPod::new("big").request_mib(200);
    let over = TestPod::new("over").request_mib(20).priority(1000);
    let mut agent = scene.start_agent(&["--dry-run"]);
    assert!(
        agent
            .stderr()
            .contains("dry-run: no process will be signalled"),
        "{}",
        agent.stderr()
    );
    let mut over_proc = scene.start_pod(&over);
    let mut big_proc = scene.start_pod(&big);
    over_proc.alloc(60);
    big_proc.alloc(160);
    let pids_before = (scene.pod_pids(&over), scene.pod_pids(&big));

    let one = agent.next_decision(DECIDE);
    assert_decision(&one, "would_evict", &over);
    // Nothing goes away, so once the cleanup timeout and the interval have passed the same
    // pod is reported again, and it still runs.
    let two = agent.next_decision(DECIDE);
    assert_decision(&two, "would_evict", &over);
    let gap = two["monotonic_ns"].as_u64().unwrap() - one["monotonic_ns"].as_u64().unwrap();
    assert!(
        Duration::from_nanos(gap) + Duration::from_millis(20) >= Duration::from_secs(1),
        "reported again before the cleanup timeout: {gap} ns"
    );
    agent.stop();
    assert!(
        alive(&over_proc) && alive(&big_proc),
        "dry-run signals no process"
    );
    assert_eq!((scene.pod_pids(&over), scene.pod_pids(&big)), pids_before);
    assert!(!agent.stderr().contains("stopped:"), "{}", agent.stderr());
}

/// Runs an agent that evicts `victim` (50Mi over its 10Mi request) beside `keeper`, whose
/// 230Mi within its 300Mi request keep the threshold met on their own, waits until the kill
/// is finished and recorded, and stops the agent. Returns both pods, the keeper's process and
/// when the eviction was decided.
fn victim_killed_beside_a_keeper(scene: &AgentScene) -> (TestPod, TestPod, Allocator, Instant) {
    let victim = TestPod::new("victim").request_mib(10);
    let keeper = TestPod::new("keeper").request_mib(300);
    let mut victim_proc = scene.start_pod(&victim);
    let mut keeper_proc = scene.start_pod(&keeper);
    victim_proc.alloc(60);
    keeper_proc.alloc(230);

    let mut agent = scene.start_agent(&[]);
    let decision = agent.next_decision(DECIDE);
    let evicted_at = Instant::now();
    assert_decision(&decision, "evict", &victim);
    scene.wait_until_empty(&victim, KILL);
    agent
        .wait_stderr(Duration::from_secs(5), |l| {
            l.contains(&format!("pod default/{} stopped", victim.name))
        })
        .expect("the kill is finished and recorded");
    agent.stop();
    (victim, keeper, keeper_proc, evicted_at)
}

#[test]
fn a_restart_within_the_interval_does_not_evict_again() {
    if !running_as_root("a_restart_within_the_interval_does_not_evict_again") {
        return;
    }
    // An interval long enough for an emulated arm64 guest under the whole suite's load,
    // where the restarted agent took 13 s to attach its programs; nothing waits it out.
    let interval = Duration::from_secs(60);
    let scene = AgentScene::new("agent-restart", "60s", "5s");
    let (victim, keeper, keeper_proc, evicted_at) = victim_killed_beside_a_keeper(&scene);
    // The evicted pod goes away, as the kubelet would remove it; the keeper's 230Mi keep
    // the threshold met.
    scene.remove_manifest(&victim);
    scene.kubepods.remove_pod(victim.qos(), &victim.uid);

    let mut restarted = scene.start_agent(&["--duration", "4s"]);
    assert!(
        restarted.stderr().contains("checkpoint"),
        "{}",
        restarted.stderr()
    );
    let status = restarted
        .wait(Duration::from_secs(20))
        .expect("stops at --duration");
    assert!(status.success(), "{}", restarted.stderr());
    assert!(
        evicted_at.elapsed() < interval,
        "the test was too slow to check within the interval"
    );
    assert_eq!(
        restarted.stdout_lines(),
        Vec::<String>::new(),
        "no eviction within the interval across a restart"
    );
    assert!(alive(&keeper_proc));

    // Control: without the checkpoint the same node is evicted from at once.
    let fresh = TempDir::new("agent-restart-fresh");
    let mut args = scene.agent_args(&["--dry-run"]);
    let at = args.iter().position(|a| a == "--checkpoint-dir").unwrap();
    args[at + 1] = fresh.path.display().to_string();
    let control = MonitorProcess::start(args);
    let decision = control.next_decision(DECIDE);
    assert_decision(&decision, "would_evict", &keeper);
}

#[test]
fn a_pod_killed_before_a_restart_is_not_chosen_again() {
    if !running_as_root("a_pod_killed_before_a_restart_is_not_chosen_again") {
        return;
    }
    // An interval longer than the first agent lives after its kill: with 1 s, a loaded VM
    // took longer to stop it, and it began the keeper's eviction too. The restarted agent
    // decides once the interval since the kill is over.
    let scene = AgentScene::new("agent-killed-restart", "6s", "5s");
    let (_victim, keeper, _keeper_proc, _) = victim_killed_beside_a_keeper(&scene);

    // The victim's manifest and empty cgroup stay, as in a manifest directory nobody tidies;
    // the keeper's 230Mi keep the threshold met. Within its request and with an empty cgroup,
    // the victim would rank first again ("less above its request") if it were a candidate.
    std::thread::sleep(Duration::from_secs(1));
    let restarted = scene.start_agent(&["--dry-run"]);
    restarted
        .wait_stderr(Duration::from_secs(10), |l| {
            l.contains("default/victim was evicted before the restart")
        })
        .expect("the restarted agent takes the victim as stopped");
    let decision = restarted.next_decision(DECIDE);
    assert_decision(&decision, "would_evict", &keeper);
}

#[test]
fn metrics_count_evictions_and_kernel_events() {
    if !running_as_root("metrics_count_evictions_and_kernel_events") {
        return;
    }
    let scene = AgentScene::new("agent-metrics", "10s", "5s");
    let over = TestPod::new("over").request_mib(20);
    // The agent serves on loopback in a network namespace of the test's own.
    in_own_network_namespace(|| {
        let mut agent = scene.start_agent(&["--dry-run", "--metrics-addr", "127.0.0.1:0"]);
        let addr = metrics_addr(&agent);

        // Created after the start, so the kernel reports the pod's cgroup.
        let mut over_proc = scene.start_pod(&over);
        over_proc.alloc(230);
        let decision = agent.next_decision(DECIDE);
        assert_decision(&decision, "would_evict", &over);

        let answer = http_get(addr, "/metrics");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let sample = |prefix: &str| -> f64 {
            answer
                .lines()
                .find(|l| l.starts_with(prefix))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no sample {prefix} in\n{answer}"))
        };
        // A dry run's decision, counted apart from evictions.
        assert!(
            sample(
                "monitor_dry_run_decisions_total{eviction_signal=\"allocatableMemory.available\"}"
            ) >= 1.0,
            "{answer}"
        );
        assert_eq!(
            sample("monitor_evictions_total{eviction_signal=\"allocatableMemory.available\"}"),
            0.0,
            "{answer}"
        );
        // The poll tier (5.8-5.10) has no kernel programs, and so no kernel events.
        if agent.stderr().contains(", source poll (") {
            tests::cannot_run(
                tests::Reason::MemcgPrograms,
                "the agent polls here: no kernel events to count",
            );
        } else {
            assert!(sample("monitor_events_received_total") > 0.0, "{answer}");
        }
        agent.stop();
    });
}

#[test]
fn a_pod_whose_containers_restart_after_its_kill_is_a_candidate_again() {
    if !running_as_root("a_pod_whose_containers_restart_after_its_kill_is_a_candidate_again") {
        return;
    }
    let scene = AgentScene::new("agent-comeback", "1s", "5s");
    let hog = TestPod::new("hog").request_mib(20);
    let calm = TestPod::new("calm").request_mib(100);
    let mut agent = scene.start_agent(&[]);
    let calm_proc = scene.start_pod(&calm);
    let mut hog_proc = scene.start_pod(&hog);
    // No answer to wait for: the eviction may end the helper before the allocation does.
    hog_proc.command("alloc 230");
    assert_decision(&agent.next_decision(DECIDE), "evict", &hog);
    scene.wait_until_empty(&hog, KILL);
    agent
        .wait_stderr(Duration::from_secs(5), |l| {
            l.contains("pod default/hog stopped")
        })
        .expect("the kill is finished");

    // The kubelet restarts the pod's container (restartPolicy: Always) in a new container
    // cgroup, and it grows again.
    let restarted = scene.pod_dir(&hog).join("restarted");
    std::fs::create_dir(&restarted).expect("the restarted container's cgroup");
    let mut again = Allocator::start_in(&restarted);
    again.command("alloc 230");
    let decision = agent.next_decision(DECIDE);
    assert_decision(&decision, "evict", &hog);
    assert!(
        agent.stderr().contains("runs again after its eviction"),
        "{}",
        agent.stderr()
    );
    scene.wait_until_empty(&hog, KILL);
    assert!(process_alive(calm_proc.pid()), "only the hog died");
    agent.stop();
}
