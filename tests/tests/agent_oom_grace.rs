//! The grace period the node can afford (root only). A victim that handles SIGTERM and keeps
//! allocating through the kubelet's 1 s grace period lets the kernel's OOM killer fire first,
//! however early the agent decides; with the OOM point projected from the growth the kernel
//! reports, the grace is cut to what the node affords and the hog is forced in time. A victim
//! on a node that is not racing to its OOM point keeps its whole grace period and drains.
use std::{
    os::unix::process::ExitStatusExt as _,
    time::{Duration, Instant},
};

use serde_json::Value;
use tests::{
    AgentScene, Allocator, MonitorProcess, Reason, TestPod, cannot_run, running_as_root,
    set_memory_limit,
};

/// How far above the threshold's level the kubepods cgroup's limit lies.
const MARGIN_MIB: u64 = 48;

/// One race at a time: two hogs allocating at full speed on a small machine slow each
/// other's kill, which is the OOM race's business, not these tests'.
static ONE_RACE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The kubepods limit `MARGIN_MIB` above the threshold.
const LIMIT: u64 = (AgentScene::PRESSURE_ABOVE_MIB + MARGIN_MIB) << 20;

/// A scene whose kubepods cgroup is limited `MARGIN_MIB` above the threshold, and its agent;
/// `None` (reported as not run) when the kernel programs are not the agent's source.
fn scene_and_agent(name: &str) -> Option<(AgentScene, MonitorProcess)> {
    scene_and_agent_with(name, LIMIT, &[])
}

/// As [`scene_and_agent`], with the kubepods cgroup limited to `limit` and the agent given
/// `extra` arguments.
fn scene_and_agent_with(
    name: &str,
    limit: u64,
    extra: &[&str],
) -> Option<(AgentScene, MonitorProcess)> {
    if std::env::var_os("MONITOR_VM").is_some() {
        // Under emulation the growth the projection measures swings from one 50 ms window to
        // the next (a CI run saw 0.2 GiB/s, then the hog outran the cut grace). cgroup v2
        // nodes have the brake for this race (agent_memory_brake.rs, which runs there).
        cannot_run(
            Reason::HostOnly,
            "the projection's race needs a CPU as steady as a node's, not the emulated VM's",
        );
        return None;
    }
    let scene = AgentScene::new(name, "1s", "5s");
    set_memory_limit(&scene.kubepods.dir, limit).expect("limiting kubepods");
    // The grace projection measured on its own: on cgroup v2 the brake would keep the grace.
    let args: Vec<&str> = ["--memory-brake", "off"]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    let mut agent = scene.start_agent(&args);
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
        return None;
    }
    Some((scene, agent))
}

/// A hog that handles SIGTERM and allocates on for a minute after it races past the kubepods
/// limit at full speed: asserts that it was decided on with its grace cut and forced before
/// the kernel's OOM killer fired. Returns the decision.
fn forced_before_the_oom_killer(scene: &AgentScene, agent: &MonitorProcess) -> Value {
    let hog = TestPod::new("hog");
    let mut hog_proc = scene.start_pod(&hog);
    hog_proc.drain_after_term(60_000);
    std::thread::sleep(Duration::from_millis(300));
    let before = scene.kubepods.oom_kills();
    // Far past the limit in one go, at full speed.
    hog_proc.command("alloc 1024");
    let decision = agent.next_decision(Duration::from_secs(20));
    assert_eq!(decision["name"], "hog", "{decision:#}");
    assert_eq!(decision["grace"]["cut"], true, "{decision:#}");
    scene.wait_until_empty(&hog, Duration::from_secs(15));
    let status = hog_proc.wait();
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the hog was forced: {status:?}"
    );
    assert_eq!(
        scene.kubepods.oom_kills(),
        before,
        "the kernel's OOM killer fired before the agent's force"
    );
    decision
}

#[test]
fn a_hog_that_drains_while_allocating_gets_only_the_grace_the_node_affords() {
    if !running_as_root("a_hog_that_drains_while_allocating_gets_only_the_grace_the_node_affords") {
        return;
    }
    let _one = ONE_RACE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some((scene, mut agent)) = scene_and_agent("oom-grace-cut") else {
        return;
    };
    let decision = forced_before_the_oom_killer(&scene, &agent);
    let given = decision["grace"]["given_ms"]
        .as_u64()
        .expect("grace.given_ms");
    assert!(given < 1000, "{decision:#}");
    assert!(
        decision["grace"]["oom_in_ms"]
            .as_u64()
            .expect("grace.oom_in_ms")
            < 1100,
        "{decision:#}"
    );
    let line = agent
        .wait_stderr(Duration::from_secs(5), |l| l.contains("grace 1s -> "))
        .expect("the decision's log names the cut grace period");
    assert!(line.contains("the OOM point is "), "{line}");
    eprintln!("{line}");
    agent.stop();
}

#[test]
fn a_victim_on_a_slowly_growing_node_keeps_its_whole_grace_period() {
    if !running_as_root("a_victim_on_a_slowly_growing_node_keeps_its_whole_grace_period") {
        return;
    }
    let _one = ONE_RACE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some((scene, mut agent)) = scene_and_agent("oom-grace-kept") else {
        return;
    };
    let pod = TestPod::new("slow");
    let mut proc = scene.start_pod(&pod);
    // Exits 300 ms after SIGTERM, well within the 1 s grace period.
    proc.drain_after_term(300);
    let decision = grow_slowly_until_decided(&mut proc, &agent);
    assert_eq!(decision["name"], "slow", "{decision:#}");
    scene.wait_until_empty(&pod, Duration::from_secs(15));
    let status = proc.wait();
    assert_eq!(
        status.code(),
        Some(0),
        "the victim had time to drain and exit by itself: {status:?}"
    );
    agent.stop();
}

#[test]
fn a_victim_that_starts_racing_during_its_grace_period_is_forced_at_once() {
    if !running_as_root("a_victim_that_starts_racing_during_its_grace_period_is_forced_at_once") {
        return;
    }
    let _one = ONE_RACE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some((scene, mut agent)) = scene_and_agent("oom-grace-recheck") else {
        return;
    };
    let hog = TestPod::new("late-hog");
    let mut hog_proc = scene.start_pod(&hog);
    hog_proc.drain_after_term(60_000);
    grow_slowly_until_decided(&mut hog_proc, &agent);
    let before = scene.kubepods.oom_kills();
    // In its grace period, at full speed: the whole second would let the OOM killer fire.
    let started = Instant::now();
    hog_proc.command("alloc 1024");
    scene.wait_until_empty(&hog, Duration::from_secs(15));
    let line = agent
        .wait_stderr(Duration::from_secs(5), |l| {
            l.contains("forcing now, the rest of the grace")
        })
        .expect("the decision's log says the rest of the grace period was cut");
    assert!(line.contains("-> 0s: the OOM point is "), "{line}");
    eprintln!("{line}");
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "forced before the grace period's end: {:?}",
        started.elapsed()
    );
    let status = hog_proc.wait();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    assert_eq!(
        scene.kubepods.oom_kills(),
        before,
        "the kernel's OOM killer fired during the grace period"
    );
    agent.stop();
}

/// Grows `proc` to just below the threshold, lets the growth window go quiet, then by 1 MiB
/// every 100 ms (10 MiB/s, seconds from the OOM point) until the agent decides; the decision
/// must keep the whole grace period.
fn grow_slowly_until_decided(proc: &mut Allocator, agent: &MonitorProcess) -> Value {
    proc.alloc(usize::try_from(AgentScene::PRESSURE_ABOVE_MIB).unwrap() - 8);
    std::thread::sleep(Duration::from_millis(300));
    let deadline = Instant::now() + Duration::from_secs(10);
    let decision = loop {
        assert!(Instant::now() < deadline, "no decision within 10 s");
        proc.alloc(1);
        if let Some(line) = agent.next_line(Duration::from_millis(100)) {
            break serde_json::from_str::<Value>(&line).expect("a JSON decision");
        }
    };
    assert_eq!(decision["grace"]["cut"], false, "{decision:#}");
    assert_eq!(decision["grace"]["given_ms"], 1000, "{decision:#}");
    decision
}

/// The kubelet sets the kubepods limit from the node's allocatable memory, which changes with
/// its reservations: a limit lowered while the agent runs is the OOM point it projects from
/// its next resync on, and a hog racing to it is forced in time.
#[test]
fn a_kubepods_limit_lowered_while_the_agent_runs_is_the_oom_point_it_projects() {
    if !running_as_root("a_kubepods_limit_lowered_while_the_agent_runs_is_the_oom_point") {
        return;
    }
    let _one = ONE_RACE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // Far from any OOM point at start: no grace would be cut.
    let Some((scene, mut agent)) =
        scene_and_agent_with("oom-grace-relimit", 8 << 30, &["--resync-interval", "1s"])
    else {
        return;
    };
    set_memory_limit(&scene.kubepods.dir, LIMIT).expect("lowering the kubepods limit");
    let line = agent
        .wait_stderr(Duration::from_secs(10), |l| {
            l.contains("node capacity changed")
        })
        .unwrap_or_else(|| panic!("the new limit was never read: {}", agent.stderr()));
    assert!(line.contains("kubepods limit 8.0Gi -> 248.0Mi"), "{line}");
    forced_before_the_oom_killer(&scene, &agent);
    agent.stop();
}
