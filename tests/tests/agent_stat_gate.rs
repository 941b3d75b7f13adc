//! The stat gate end to end (`--attach-within`): the real agent takes its memcg stat
//! programs off their hooks while every memory threshold is far, reads the node's memory
//! every 100ms meanwhile, and puts them back before a threshold is met, so the right pod
//! still goes in time (root only). The victims drain on SIGTERM, as servers do.
use std::time::{Duration, Instant};

use tests::{
    AgentScene, Allocator, MonitorProcess, TestPod, attach_distance_bound_mib, http_get,
    in_own_network_namespace, metrics_addr, online_cpus, running_as_root,
    scene_decisions::{DECIDE, KILL, MIB, alive, assert_decision, assert_no_decision},
    set_memory_limit,
};

/// The log lines of the stat gate's moves.
const DETACHED: &str = "memory stat programs detached";
const ATTACHED: &str = "memory stat programs attached";

/// Waits for the stat programs to come off their hooks; the log line that says so.
fn wait_detached(agent: &MonitorProcess) -> String {
    agent
        .wait_stderr(Duration::from_secs(10), |l| l.contains(DETACHED))
        .unwrap_or_else(|| panic!("the programs were not detached: {}", agent.stderr()))
}

/// Allocates `mib` in `pod`, which keeps the node beyond the distance: after `settle`, the
/// programs are still off. Paced at about 1 GiB/s, below the 2 GiB/s a CPU is assumed to
/// fault in: faster growth (huge pages fault faster) would rightly widen the distance the
/// agent derives, and then this growth would no longer be beyond it.
fn grow_beyond_the_distance(
    agent: &MonitorProcess,
    pod: &mut Allocator,
    mib: u64,
    settle: Duration,
) {
    const STEP_MIB: u64 = 32;
    let mut left = mib;
    while left > 0 {
        let step = left.min(STEP_MIB);
        pod.alloc(step as usize);
        left -= step;
        std::thread::sleep(Duration::from_millis(30));
    }
    std::thread::sleep(settle);
    assert!(
        agent
            .wait_stderr(Duration::ZERO, |l| l.contains(ATTACHED))
            .is_none(),
        "attached while beyond the distance: {}",
        agent.stderr()
    );
}

/// Allocates `mib` in `pod`, which brings the node within the distance but not to the
/// threshold: the guard read attaches the programs, and nothing is decided yet.
fn grow_within_the_distance(agent: &MonitorProcess, pod: &mut Allocator, mib: usize) {
    pod.alloc(mib);
    agent
        .wait_stderr(Duration::from_secs(10), |l| l.contains(ATTACHED))
        .unwrap_or_else(|| panic!("the programs were not attached: {}", agent.stderr()));
    assert_no_decision(agent, Duration::from_secs(1), "no threshold is met yet");
}

#[test]
fn stat_programs_detached_far_from_the_threshold_attach_in_time_and_the_right_pod_goes() {
    if !running_as_root("stat_programs_detached_far_from_the_threshold_attach_in_time") {
        return;
    }
    let scene = AgentScene::new("agent-gate", "10s", "10s");
    // The agent serves its metrics on loopback in a network namespace of the test's own.
    in_own_network_namespace(|| {
        let over = TestPod::new("over").request_mib(20).priority(1000);
        let small = TestPod::new("small").request_mib(50);
        let big = TestPod::new("big").request_mib(200);
        // 200Mi from the threshold at start, beyond twice 60Mi: the stat programs come off.
        let mut agent = scene.start_agent(&[
            "--source",
            "ebpf",
            "--attach-within",
            "60Mi",
            "--resync-interval",
            "1s",
            "--metrics-addr",
            "127.0.0.1:0",
        ]);
        wait_detached(&agent);
        let addr = metrics_addr(&agent);
        // The metrics are refreshed at least every second.
        let gauge_becomes = |value: &str| {
            let line = format!("monitor_stat_programs_attached {value}");
            let deadline = Instant::now() + Duration::from_secs(5);
            while !http_get(addr, "/metrics").contains(&line) {
                assert!(Instant::now() < deadline, "no {line:?} in /metrics");
                std::thread::sleep(Duration::from_millis(100));
            }
        };
        gauge_becomes("0");
        let mut over_proc = scene.start_pod(&over);
        let mut small_proc = scene.start_pod(&small);
        let mut big_proc = scene.start_pod(&big);

        // The victim drains as a server would: only SIGKILL returns its memory in time.
        over_proc.drain_after_term(60_000);
        // 110Mi from the threshold: still more than 60Mi, so nothing is attached, and what the
        // pods take is seen only by reading cgroupfs.
        over_proc.alloc(60);
        grow_beyond_the_distance(&agent, &mut small_proc, 30, Duration::from_secs(2));
        // 50Mi from it: the guard read sees it within 100ms and attaches before the threshold.
        grow_within_the_distance(&agent, &mut big_proc, 60);
        gauge_becomes("1");
        big_proc.alloc(80);

        // The pods read after attaching, plus the kernel's records since: over's 60Mi counted
        // once, small within its request.
        let decision = agent.next_decision(DECIDE);
        assert_decision(&decision, "evict", &over);
        let usage = decision["rank"]["usage"].as_i64().unwrap();
        assert!((40 * MIB..=70 * MIB).contains(&usage), "{decision:#}");
        scene.wait_until_empty(&over, KILL);
        assert!(alive(&small_proc) && alive(&big_proc));

        // Far again once big frees its memory: detached at a resync.
        big_proc.free();
        small_proc.free();
        let detaches = || {
            agent
                .stderr()
                .lines()
                .filter(|l| l.contains(DETACHED))
                .count()
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        while detaches() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
        }
        assert_eq!(detaches(), 2, "not detached again: {}", agent.stderr());
        agent.stop();
    });
}

/// The value of an unlabelled gauge in /metrics.
fn gauge(addr: std::net::SocketAddr, name: &str) -> Option<u64> {
    http_get(addr, "/metrics").lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|v| v.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
    })
}

#[test]
fn by_default_the_stat_programs_detach_beyond_the_derived_distance_and_attach_in_time() {
    if !running_as_root("by_default_the_stat_programs_detach_beyond_the_derived_distance")
        || !tests::outside_the_vm(
            "by_default_the_stat_programs_detach_beyond_the_derived_distance allocates several \
             times the node's default distance, too much for the test VM",
        )
    {
        return;
    }
    // The default distance is the CPUs at 2 GiB/s over the 100ms guard read and a read of
    // every pod (a few ms here): allocatable leaves three times 200ms of it above the
    // threshold, so the programs come off at start.
    let cpus = online_cpus();
    let estimate_mib = attach_distance_bound_mib();
    assert!(
        cpus <= 4,
        "this test allocates about {} MiB on {cpus} CPUs; it is sized for nodes of 4 CPUs \
         at most",
        3 * estimate_mib
    );
    let allocatable = format!("{}Mi", 100 + 3 * estimate_mib);
    let scene = AgentScene::new("agent-auto-gate", "10s", "10s");
    set_memory_limit(&scene.cgroup.dir, (3 * estimate_mib + 512) << 20)
        .expect("limiting the scene's memory");
    in_own_network_namespace(|| {
        let over = TestPod::new("over").request_mib(20).priority(1000);
        let big = TestPod::new("big").request_mib(3 * estimate_mib);
        let mut agent = scene.start_agent(&[
            "--source",
            "ebpf",
            "--allocatable-memory",
            &allocatable,
            "--resync-interval",
            "1s",
            "--metrics-addr",
            "127.0.0.1:0",
        ]);
        let line = wait_detached(&agent);
        assert!(
            line.contains(&format!("{cpus} CPUs at 2.0Gi/s")) && line.contains("guard read"),
            "the log names the distance and why: {line}"
        );
        let addr = metrics_addr(&agent);
        let distance_mib = gauge(addr, "monitor_stat_programs_attach_within_bytes")
            .expect("the distance in /metrics")
            >> 20;
        assert!(
            (estimate_mib / 2..=estimate_mib).contains(&distance_mib),
            "{distance_mib} MiB for {cpus} CPUs"
        );
        assert_eq!(gauge(addr, "monitor_stat_programs_attached"), Some(0));
        let headroom_mib = 3 * estimate_mib;
        let mut over_proc = scene.start_pod(&over);
        let mut big_proc = scene.start_pod(&big);
        // The victim drains as a server would: only SIGKILL returns its memory in time.
        over_proc.drain_after_term(60_000);
        over_proc.alloc(60);
        // Still 200 MiB beyond the distance (the distance follows the time a read of every
        // pod takes, a few MiB per ms here): nothing attaches.
        let first = headroom_mib - 60 - distance_mib - 200;
        grow_beyond_the_distance(&agent, &mut big_proc, first, Duration::from_secs(1));
        // Within it: the guard read attaches the programs before the threshold.
        grow_within_the_distance(&agent, &mut big_proc, 300);
        big_proc.alloc((distance_mib - 100 + 32) as usize);
        // over is past its request, big within its own: over goes, as the kubelet's order says.
        let decision = agent.next_decision(DECIDE);
        assert_decision(&decision, "evict", &over);
        scene.wait_until_empty(&over, KILL);
        assert!(alive(&big_proc), "only the pod over its request died");
        agent.stop();
    });
}
