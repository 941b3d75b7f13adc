//! A frozen victim, end to end with the real binary, real cgroups, a real freezer and real
//! processes holding real memory (root only): the agent thaws what it kills, and when it
//! cannot, it says why and moves to the next pod in the kubelet's order at the next interval,
//! never evicting the frozen pod a second time.
//!
//! The scenes have 600Mi allocatable and the hard `allocatableMemory.available<100Mi`
//! threshold: pressure once the pods' working sets pass 500Mi.
use std::{
    fs,
    path::Path,
    time::{Duration, Instant},
};

use monitor::cgroupfs::CgroupVersion;
use tests::{
    AgentScene, Allocator, Freezer, TestPod, V1_FREEZER, http_get, metrics_addr, running_as_root,
    scene_decisions::{DECIDE, KILL, assert_decision, assert_no_decision},
    set_memory_limit,
};

const ALLOCATABLE: &str = "600Mi";
/// How long the victim drains after SIGTERM: within its 1 s grace period.
const DRAIN_MS: u64 = 500;
/// The hard threshold's grace period.
const GRACE: Duration = Duration::from_secs(1);
/// How long force is repeated before processes are reported as outliving it (the agent's).
const FORCE_FOR: Duration = Duration::from_secs(5);
const MIB: u64 = 1 << 20;

/// A scene whose cgroup is limited, with the given interval.
fn scene(name: &str, interval: &str) -> AgentScene {
    let scene = AgentScene::new(name, interval, "30s");
    set_memory_limit(&scene.cgroup.dir, 1536 * MIB).expect("limiting the scene");
    scene
}

/// Starts `pod` holding `mib` MiB of private memory.
fn start(scene: &AgentScene, pod: &TestPod, mib: usize) -> Allocator {
    let mut process = scene.start_pod(pod);
    process.alloc(mib);
    process
}

/// Starts the victim: 300 MiB of shared memory (a database's shared buffers, which
/// `process_mrelease` cannot take back: only its exit frees them), draining for
/// [`DRAIN_MS`] after SIGTERM.
fn start_victim(scene: &AgentScene, pod: &TestPod) -> Allocator {
    let mut process = scene.start_pod(pod);
    process.drain_after_term(DRAIN_MS);
    process.alloc_shared(300);
    process
}

/// The pod's container cgroup, where its process runs.
fn container(scene: &AgentScene, pod: &TestPod) -> std::path::PathBuf {
    scene.pod_dir(pod).join("container")
}

/// Bytes charged to the pod's memory cgroup.
fn charged(scene: &AgentScene, pod: &TestPod) -> u64 {
    let dir = scene.pod_dir(pod);
    fs::read_to_string(dir.join("memory.usage_in_bytes"))
        .or_else(|_| fs::read_to_string(dir.join("memory.current")))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_frozen_victim_is_thawed_and_its_memory_comes_back_within_its_grace_period() {
    if !running_as_root("a_frozen_victim_is_thawed_and_its_memory_comes_back") {
        return;
    }
    let scene = scene("agent-frozen", "10s");
    let victim = TestPod::new("victim").request_mib(10);
    let steady = TestPod::new("steady").request_mib(400);
    let mut agent = scene.start_agent(&["--allocatable-memory", ALLOCATABLE]);
    let mut victim_proc = start_victim(&scene, &victim);
    let freezer = Freezer::create(&scene.cgroup.hierarchy, "agent-frozen");
    // Frozen before the eviction, as a checkpoint or a pause leaves it.
    freezer.freeze_memory_cgroup(&container(&scene, &victim));
    let _steady_proc = start(&scene, &steady, 250);

    let decision = agent.next_decision(DECIDE);
    let decided = Instant::now();
    assert_decision(&decision, "evict", &victim);
    scene.wait_until_empty(&victim, GRACE + Duration::from_secs(3));
    assert!(
        decided.elapsed() < GRACE + Duration::from_secs(2),
        "gone {:?} after the decision",
        decided.elapsed()
    );
    assert!(
        victim_proc.wait().success(),
        "thawed right after SIGTERM, it drained and exited by itself"
    );
    assert!(
        charged(&scene, &victim) < 64 * MIB,
        "its memory is back: {} bytes charged",
        charged(&scene, &victim)
    );
    let log = agent.stderr();
    assert!(
        log.lines()
            .any(|l| l.contains("thawed") && l.contains(&victim.uid)),
        "the log says it thawed the victim's freezer:\n{log}"
    );
    assert_no_decision(&agent, Duration::from_secs(3), "the pressure is gone");
    agent.stop();
}

/// The agent's freezer hierarchy mounted read-only, as in a container that mounts cgroupfs
/// read-only: it can read the victim's freezer but neither thaw it nor move the victim out.
#[test]
fn a_victim_that_cannot_be_thawed_is_passed_over_for_the_next_pod_and_never_evicted_again() {
    if !running_as_root("a_victim_that_cannot_be_thawed_is_passed_over") {
        return;
    }
    let scene = scene("agent-frozen-stuck", "3s");
    if scene.cgroup.hierarchy.version != CgroupVersion::V1
        || !Path::new(V1_FREEZER).join("cgroup.procs").exists()
    {
        // On cgroup v2 a frozen task dies of SIGKILL: nothing stays frozen past force.
        tests::cannot_run(
            tests::Reason::FreezerV1,
            "the pods' processes are frozen by no cgroup v1 freezer here",
        );
        return;
    }
    let victim = TestPod::new("victim").request_mib(10);
    let next = TestPod::new("next").request_mib(20);
    let steady = TestPod::new("steady").request_mib(400);
    let mut agent = scene.start_agent_with(
        &[
            "--allocatable-memory",
            ALLOCATABLE,
            "--metrics-addr",
            "127.0.0.1:0",
            "--resync-interval",
            "1s",
        ],
        |command| {
            use std::os::unix::process::CommandExt as _;
            // SAFETY: unshare and mount with constant arguments between fork and exec.
            unsafe { command.pre_exec(read_only_freezer) };
        },
    );
    let mut victim_proc = start_victim(&scene, &victim);
    let freezer = Freezer::create(&scene.cgroup.hierarchy, "agent-frozen-stuck");
    freezer.freeze_memory_cgroup(&container(&scene, &victim));
    let _next_proc = start(&scene, &next, 120);
    // 650 MiB: after `next` still 530, so a third pod must go, by the kubelet's order.
    let _steady_proc = start(&scene, &steady, 230);

    let first = agent.next_decision(DECIDE);
    assert_decision(&first, "evict", &victim);
    // The victim holds its memory past its grace period and force; the agent says why and
    // takes the next pod at once, the interval having passed.
    let second = agent.next_decision(DECIDE);
    assert_decision(&second, "evict", &next);
    let gap = Duration::from_nanos(
        second["monotonic_ns"].as_u64().unwrap() - first["monotonic_ns"].as_u64().unwrap(),
    );
    assert!(
        gap >= GRACE + FORCE_FOR && gap < GRACE + FORCE_FOR + Duration::from_secs(3),
        "the next pod {gap:?} after the frozen one"
    );
    let log = agent.stderr();
    let stuck = log
        .lines()
        .find(|l| l.contains("outlived force"))
        .unwrap_or_else(|| panic!("no word of the processes outliving force:\n{log}"));
    for word in [
        "victim",
        &victim_proc.pid().to_string(),
        "frozen in cgroup",
        "FROZEN",
        "Read-only file system",
    ] {
        assert!(stuck.contains(word), "{word:?} in {stuck}");
    }
    assert!(
        held_mib(&log).is_some_and(|mib| mib > 250.0),
        "the agent says the victim still holds its memory and passes it over:\n{log}"
    );
    let metrics = http_get(metrics_addr(&agent), "/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l == "monitor_evictions_stuck_total{cause=\"frozen\"} 1"),
        "{metrics}"
    );
    assert_eq!(freezer.v1_state("container"), "FROZEN");
    assert!(
        charged(&scene, &victim) > 250 * MIB,
        "the victim still holds its memory"
    );
    scene.wait_until_empty(&next, KILL);

    // Still under pressure: the third in the kubelet's order goes, never the victim again.
    let third = agent.next_decision(DECIDE);
    assert_decision(&third, "evict", &steady);
    scene.wait_until_empty(&steady, KILL);

    // Thawed by its owner, it dies at once of the SIGKILL the agent left pending, and the
    // agent takes its eviction as over.
    freezer.v1_thaw("container");
    scene.wait_until_empty(&victim, Duration::from_secs(3));
    assert!(!victim_proc.wait().success(), "killed, not drained");
    agent
        .wait_stderr(Duration::from_secs(10), |l| {
            l.contains("default/victim has no process left")
        })
        .expect("the agent sees the victim's eviction over");
    assert_no_decision(&agent, Duration::from_secs(4), "the pressure is gone");
    agent.stop();
}

/// The MiB the agent says a victim it passed over still holds (`... 301.4Mi still held:
/// passed over ...`).
fn held_mib(log: &str) -> Option<f64> {
    let line = log
        .lines()
        .find(|l| l.contains("still held: passed over"))?;
    let before = line.split(" still held").next()?;
    before.rsplit(' ').next()?.strip_suffix("Mi")?.parse().ok()
}

/// In the agent's process before exec: its own mount namespace, in which the v1 freezer
/// hierarchy is read-only.
fn read_only_freezer() -> std::io::Result<()> {
    let check = |result: libc::c_int| {
        if result == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    };
    // SAFETY: syscalls with constant, NUL-terminated arguments.
    unsafe {
        check(libc::unshare(libc::CLONE_NEWNS))?;
        check(libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        ))?;
        check(libc::mount(
            std::ptr::null(),
            c"/sys/fs/cgroup/freezer".as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY,
            std::ptr::null(),
        ))
    }
}
