//! The action path on a node in trouble (root only): a full or read-only checkpoint disk, a
//! pod that ignores SIGTERM past the cleanup timeout, stale manifests, an unreadable
//! memory.stat. Each test asserts which pod died, within what time, that nothing else died,
//! and that the agent is still running.
//!
//! Every scene has 300Mi allocatable and an `allocatableMemory.available` threshold of
//! 100Mi, so the agent sees pressure once the pods' working sets pass 200Mi.
use std::{
    fs,
    os::unix::{fs::PermissionsExt as _, process::CommandExt as _},
    time::{Duration, Instant},
};

use serde_json::Value;
use tests::{
    AgentScene, Allocator, MonitorProcess, TempDir, TermIgnorer, TestPod, mounts::Mount,
    process_alive, running_as_root,
};

/// How long a decision may take once the threshold is crossed (a slow VM included).
const DECIDE: Duration = Duration::from_secs(20);
/// The hard grace period of 1 s, then force, on a slow VM.
const KILL: Duration = Duration::from_secs(15);

fn assert_evicts(decision: &Value, pod: &TestPod) {
    assert_eq!(decision["action"], "evict", "{decision:#}");
    assert_eq!(decision["name"], pod.name.as_str(), "{decision:#}");
}

/// A soft eviction scene: `allocatableMemory.available<100Mi` for 1 s evicts with
/// `max_grace` seconds of grace; a `stubborn` pod ignoring SIGTERM beside a `calm` one.
struct Stubborn {
    scene: AgentScene,
    stubborn: TestPod,
    calm: TestPod,
}

impl Stubborn {
    fn new(name: &str, max_grace: u32, cleanup_timeout: &str) -> Self {
        let scene = AgentScene::with_config(
            name,
            &format!(
                "evictionHard: {{}}\n\
                 evictionSoft:\n  allocatableMemory.available: 100Mi\n\
                 evictionSoftGracePeriod:\n  allocatableMemory.available: 1s\n\
                 evictionMaxPodGracePeriod: {max_grace}\n\
                 monitor:\n  evictionInterval: 1s\n  podCleanupTimeout: {cleanup_timeout}\n"
            ),
        );
        Self {
            scene,
            stubborn: TestPod::new("stubborn").request_mib(20),
            calm: TestPod::new("calm").request_mib(100),
        }
    }

    /// Starts both pods, the stubborn one with a process ignoring SIGTERM beside its
    /// allocator, and makes it grow past the threshold.
    fn run(&self) -> Running {
        let calm = self.scene.start_pod(&self.calm);
        let mut stubborn = self.scene.start_pod(&self.stubborn);
        let ignorer = TermIgnorer::start_in(&self.scene.pod_dir(&self.stubborn).join("container"));
        stubborn.alloc(230);
        Running {
            calm,
            _stubborn: stubborn,
            ignorer,
        }
    }
}

/// The processes of a [`Stubborn`] scene.
struct Running {
    calm: Allocator,
    _stubborn: Allocator,
    ignorer: TermIgnorer,
}

/// Waits until process `pid` is gone, failing at `deadline` with the agent's log.
fn wait_for_death(pid: u32, deadline: Instant, agent: &MonitorProcess, what: &str) {
    while process_alive(pid) {
        assert!(
            Instant::now() < deadline,
            "{what}; stderr:\n{}",
            agent.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_full_checkpoint_disk_never_stops_the_kill_and_the_state_lands_once_there_is_room() {
    if !running_as_root("a_full_checkpoint_disk_never_stops_the_kill") {
        return;
    }
    let scene = AgentScene::new("faults-enospc", "10s", "10s");
    let disk = TempDir::new("faults-enospc-disk");
    let mount = Mount::tmpfs(&disk.path, "64k");
    let state_dir = disk.join("state");
    fs::create_dir(&state_dir).unwrap();
    mount.fill();
    let hog = TestPod::new("hog").request_mib(20);
    let calm = TestPod::new("calm").request_mib(100);
    let state = state_dir.display().to_string();
    let mut agent = scene.start_agent(&["--checkpoint-dir", &state]);
    assert!(
        agent.stderr().contains("checkpoint not written"),
        "the write failure is reported: {}",
        agent.stderr()
    );
    let calm_proc = scene.start_pod(&calm);
    let mut hog_proc = scene.start_pod(&hog);
    // No answer to wait for: the eviction may end the helper before the allocation does.
    hog_proc.command("alloc 230");

    let decision = agent.next_decision(DECIDE);
    assert_evicts(&decision, &hog);
    scene.wait_until_empty(&hog, KILL);
    assert!(process_alive(calm_proc.pid()), "only the hog died");
    agent.assert_running("after the fault");
    let warnings = agent
        .stderr()
        .lines()
        .filter(|l| l.contains("checkpoint not written"))
        .count();
    assert_eq!(warnings, 1, "logged once per episode:\n{}", agent.stderr());

    mount.make_room();
    agent
        .wait_stderr(Duration::from_secs(15), |l| {
            l.contains("checkpoint written again")
        })
        .expect("the retry writes the state once there is room");
    let saved = fs::read_to_string(state_dir.join("agent_state")).expect("the checkpoint");
    assert!(
        saved.contains("\"hog\""),
        "the eviction is recorded: {saved}"
    );
    agent.stop();
}

#[test]
fn a_read_only_checkpoint_directory_with_a_valid_file_still_starts_and_evicts() {
    if !running_as_root("a_read_only_checkpoint_directory_with_a_valid_file_still_starts") {
        return;
    }
    let scene = AgentScene::new("faults-erofs", "10s", "10s");
    // A valid checkpoint from an earlier run.
    let mut first = scene.start_agent(&["--duration", "1s"]);
    first
        .wait(Duration::from_secs(20))
        .expect("stops at --duration");
    assert!(scene.checkpoint.join("agent_state").exists());
    let read_only = TempDir::new("faults-erofs-ro");
    let _mount = Mount::read_only_bind(&scene.checkpoint.path, &read_only.path);
    let hog = TestPod::new("hog").request_mib(20);
    let calm = TestPod::new("calm").request_mib(100);

    let ro = read_only.path.display().to_string();
    let mut agent = scene.start_agent(&["--checkpoint-dir", &ro]);
    assert!(
        agent.stderr().contains("Read-only file system"),
        "it warns that it cannot persist: {}",
        agent.stderr()
    );
    let calm_proc = scene.start_pod(&calm);
    let mut hog_proc = scene.start_pod(&hog);
    hog_proc.command("alloc 230");
    assert_evicts(&agent.next_decision(DECIDE), &hog);
    scene.wait_until_empty(&hog, KILL);
    assert!(process_alive(calm_proc.pid()));
    agent.assert_running("after the fault");
    agent.stop();
}

#[test]
fn a_pod_ignoring_sigterm_past_the_cleanup_timeout_is_still_killed() {
    if !running_as_root("a_pod_ignoring_sigterm_past_the_cleanup_timeout_is_still_killed") {
        return;
    }
    // A soft eviction gives the pod 3 s, longer than the 2 s cleanup timeout: the cleanup
    // timeout bounds the wait for the next eviction and never replaces the kill.
    let s = Stubborn::new("faults-stubborn", 3, "2s");
    let mut agent = s.scene.start_agent(&[]);
    let running = s.run();

    let decision = agent.next_decision(DECIDE);
    assert_evicts(&decision, &s.stubborn);
    assert_eq!(decision["grace_period_seconds"], 3, "{decision:#}");
    let decided = Instant::now();
    wait_for_death(
        running.ignorer.pid(),
        decided + Duration::from_secs(3 + 5),
        &agent,
        "the SIGTERM-ignoring process outlived its grace period",
    );
    assert!(
        decided.elapsed() >= Duration::from_millis(2500),
        "killed before its grace period: {:?}",
        decided.elapsed()
    );
    s.scene.wait_until_empty(&s.stubborn, KILL);
    assert!(
        process_alive(running.calm.pid()),
        "only the stubborn pod died"
    );
    agent.assert_running("after the fault");
    agent.stop();
}

#[test]
fn stale_manifests_without_cgroups_do_not_hold_back_the_eviction() {
    if !running_as_root("stale_manifests_without_cgroups_do_not_hold_back_the_eviction") {
        return;
    }
    // A long cleanup timeout: waiting on a pod with nothing to reclaim would show.
    let scene = AgentScene::new("faults-stale", "10s", "60s");
    for name in ["gone-1", "gone-2"] {
        scene.write_manifest(&TestPod::new(name));
    }
    let hog = TestPod::new("hog").request_mib(150);
    let calm = TestPod::new("calm").request_mib(100);
    let mut agent = scene.start_agent(&[]);
    let calm_proc = scene.start_pod(&calm);
    let mut hog_proc = scene.start_pod(&hog);
    hog_proc.command("alloc 230");

    let decision = agent.next_decision(DECIDE);
    assert_evicts(&decision, &hog);
    let decided = Instant::now();
    scene.wait_until_empty(&hog, KILL);
    assert!(
        decided.elapsed() < Duration::from_secs(5),
        "the hog lived {:?} after the decision",
        decided.elapsed()
    );
    assert!(process_alive(calm_proc.pid()));
    agent.assert_running("after the fault");
    agent.stop();
}

#[test]
fn an_unreadable_memory_stat_never_makes_its_pod_the_victim() {
    if !running_as_root("an_unreadable_memory_stat_never_makes_its_pod_the_victim") {
        return;
    }
    let scene = AgentScene::new("faults-unreadable", "10s", "10s");
    let small = TestPod::new("small").request_mib(100);
    let hog = TestPod::new("hog").request_mib(20);
    let mut small_proc = scene.start_pod(&small);
    small_proc.alloc(5);
    let stat = scene.pod_dir(&small).join("memory.stat");
    fs::set_permissions(&stat, fs::Permissions::from_mode(0o000)).expect("chmod memory.stat");
    // Without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH the agent cannot read it, as a
    // filesystem error would leave it.
    let mut agent = scene.start_agent_with(&[], |command| {
        // SAFETY: prctl with integer arguments between fork and exec; no allocation.
        unsafe {
            command.pre_exec(|| {
                // CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (capability.h).
                for cap in [1 as libc::c_ulong, 2] {
                    if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    });
    agent
        .wait_stderr(Duration::from_secs(10), |l| {
            l.contains("pod default/small") && l.contains("memory.stat")
        })
        .expect("the failed read is logged");
    let mut hog_proc = scene.start_pod(&hog);
    hog_proc.command("alloc 230");

    let decision = agent.next_decision(DECIDE);
    assert_evicts(&decision, &hog);
    scene.wait_until_empty(&hog, KILL);
    assert!(
        process_alive(small_proc.pid()),
        "the pod whose stats could not be read lives"
    );
    agent.assert_running("after the fault");
    agent.stop();
}

#[test]
fn a_restart_during_the_grace_period_finishes_the_eviction_on_its_deadline() {
    if !running_as_root("a_restart_during_the_grace_period_finishes_the_eviction_on_its_deadline") {
        return;
    }
    // An 8 s grace period and a long cleanup timeout: waiting out the cleanup timeout and
    // starting a new grace period would show.
    let s = Stubborn::new("faults-resume", 8, "30s");
    let agent = s.scene.start_agent(&[]);
    let running = s.run();
    let decision = agent.next_decision(DECIDE);
    let decided = Instant::now();
    assert_evicts(&decision, &s.stubborn);
    assert_eq!(decision["grace_period_seconds"], 8, "{decision:#}");

    // Killed two seconds into the grace period, as by the OOM killer or a node drain.
    std::thread::sleep(Duration::from_secs(2));
    drop(agent);
    assert!(
        process_alive(running.ignorer.pid()),
        "still within its grace period"
    );
    let mut restarted = s.scene.start_agent(&[]);
    restarted
        .wait_stderr(Duration::from_secs(10), |l| {
            l.contains("resuming the eviction of default/stubborn")
        })
        .expect("the restarted agent resumes the eviction");
    wait_for_death(
        running.ignorer.pid(),
        decided + Duration::from_secs(8 + 3),
        &restarted,
        "not killed at the end of its original grace period",
    );
    assert!(
        decided.elapsed() >= Duration::from_secs(7),
        "killed before its grace period was over: {:?}",
        decided.elapsed()
    );
    s.scene.wait_until_empty(&s.stubborn, KILL);
    assert!(
        process_alive(running.calm.pid()),
        "only the stubborn pod died"
    );
    restarted.assert_running("after the fault");
    restarted.stop();
}

#[test]
fn lost_kernel_records_are_counted_and_followed_by_a_rescan() {
    if !running_as_root("lost_kernel_records_are_counted_and_followed_by_a_rescan") {
        return;
    }
    if std::env::var_os("MONITOR_VM").is_some() {
        // An emulated CPU allocates more slowly than the agent drains the ring.
        tests::cannot_run(
            tests::Reason::HostOnly,
            "the emulated VM cannot fill the ring buffer faster than it is read",
        );
        return;
    }
    let scene = AgentScene::new("faults-lost", "10s", "10s");
    let filler = TestPod::new("filler").request_mib(300).priority(1000);
    let late = TestPod::new("late").request_mib(10);
    // A record per 4 KiB step; resyncs are rare, so only the rescan after the loss can find
    // what the lost records said.
    let mut agent = scene.start_agent(&["--step", "4Ki", "--resync-interval", "60s"]);
    if !agent.stderr().contains("source ebpf (") {
        tests::cannot_run(
            tests::Reason::MemcgPrograms,
            "no per-cgroup memory programs: nothing to lose",
        );
        return;
    }
    let mut filler_proc = scene.start_pod(&filler);
    agent
        .wait_stderr(Duration::from_secs(10), |l| l.contains("1 known"))
        .expect("the agent reads the filler's manifest");
    // The agent stopped, as a descheduled reader would be: 150 MiB in 4 KiB steps overflow
    // the ring, and the late pod's cgroup is created meanwhile, its record lost with them.
    // SAFETY: signalling the agent process this test started and still owns.
    unsafe { libc::kill(agent.pid() as i32, libc::SIGSTOP) };
    filler_proc.alloc(150);
    scene.write_manifest(&late);
    let late_dir = scene.kubepods.create_pod(late.qos(), &late.uid);
    // SAFETY: as above.
    unsafe { libc::kill(agent.pid() as i32, libc::SIGCONT) };
    let lost = agent
        .wait_stderr(Duration::from_secs(10), |l| {
            l.contains("kernel records lost")
        })
        .expect("the overflow is noticed");
    assert!(lost.contains("rescanning cgroups"), "{lost}");
    // The kernel programs' own log of the drops (aya-log), carried into the agent's.
    let logged = agent.wait_stderr(Duration::from_secs(5), |l| {
        l.contains("kernel: ring buffer full:") && l.contains("records dropped on this CPU")
    });
    assert!(
        logged.is_some(),
        "no kernel log record of the drops: {}",
        agent.stderr()
    );
    // Found by the rescan and ranked: over its request it goes before the filler, which is
    // within its request.
    let mut late_proc = Allocator::start_in(&late_dir);
    late_proc.command("alloc 80");
    let decision = agent.next_decision(DECIDE);
    assert_evicts(&decision, &late);
    scene.wait_until_empty(&late, KILL);
    assert!(process_alive(filler_proc.pid()));
    agent.assert_running("after the fault");
    agent.stop();
}
