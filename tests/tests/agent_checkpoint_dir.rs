//! The checkpoint directory as others may leave it (root only): a second agent already on it,
//! or the directory removed while an eviction is in flight. Each test asserts that the agent
//! neither hangs nor acts twice, and that the right pod dies. A damaged checkpoint, or
//! something other than a regular file where it belongs, is `agent_checkpoint_damage.rs`'s.
use std::{
    fs,
    os::unix::fs::PermissionsExt as _,
    time::{Duration, Instant},
};

use tests::{
    AgentScene, MonitorProcess, TempDir, TestPod, process_alive, running_as_root,
    scene_decisions::{DECIDE, hog_is_evicted_once},
    sigterms_logged,
};

/// A refusal comes at start, long before this.
const REFUSED_WITHIN: Duration = Duration::from_secs(15);

#[test]
fn a_second_agent_on_the_same_checkpoint_directory_is_refused_naming_the_first() {
    if !running_as_root("a_second_agent_on_the_same_checkpoint_directory_is_refused") {
        return;
    }
    let scene = AgentScene::new("ckpt-two-agents", "10s", "10s");
    let mut first = scene.start_agent(&[]);
    // What a write of the first agent leaves for an instant; a second start-up removed it.
    let temporary = scene
        .checkpoint
        .join(&format!(".agent_state.tmp-{}-999", first.pid()));
    fs::write(&temporary, b"in flight").unwrap();

    let mut second = MonitorProcess::start(scene.agent_args(&[]));
    let status = second
        .wait(REFUSED_WITHIN)
        .expect("the second agent ends at once");
    assert!(!status.success(), "{status:?}");
    let stderr = second.stderr();
    assert!(
        stderr.contains(&format!("(pid {})", first.pid())) && stderr.contains("--checkpoint-dir"),
        "the refusal names the holder and the way out: {stderr}"
    );
    assert!(
        temporary.exists(),
        "the first agent's temporary file was left alone"
    );
    fs::remove_file(&temporary).unwrap();

    hog_is_evicted_once(&scene, &mut first);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(first.stdout_lines().len(), 1, "one decision, one agent");
    first.stop();

    // Once the first is gone, the directory is free again.
    let mut third = scene.start_agent(&[]);
    third
        .wait_stderr(Duration::from_secs(10), |l| l.contains(" known"))
        .expect("the third agent runs on the freed directory");
    third.assert_running("the third agent");
    third.terminate();
    third
        .wait(Duration::from_secs(10))
        .expect("it ends on SIGTERM");
}

#[test]
fn the_directory_removed_mid_eviction_is_made_again_and_a_restart_evicts_once() {
    if !running_as_root("the_directory_removed_mid_eviction_is_made_again") {
        return;
    }
    // A soft threshold with 6 s of grace, so a restart lands inside it; the victim drains
    // far longer: only force at the deadline ends it.
    let scene = AgentScene::with_config(
        "ckpt-dir-removed",
        "evictionHard: {}\n\
         evictionSoft:\n  allocatableMemory.available: 100Mi\n\
         evictionSoftGracePeriod:\n  allocatableMemory.available: 1s\n\
         evictionMaxPodGracePeriod: 6\n\
         monitor:\n  evictionInterval: 1s\n  podCleanupTimeout: 30s\n",
    );
    let victim = TestPod::new("victim").request_mib(10);
    let logs = TempDir::new("ckpt-dir-removed-sigterms");
    let log = logs.join("sigterms");
    let mut victim_proc = scene.start_pod(&victim);
    victim_proc.drain_after_term_logging(120_000, &log);
    let agent = scene.start_agent(&[]);
    // An operator's mistake, a node cleanup script: the directory goes while the agent runs.
    // The agent may be writing into it meanwhile (ENOTEMPTY): tried again until gone.
    let mut tries = 0;
    while let Err(error) = fs::remove_dir_all(&scene.checkpoint.path) {
        tries += 1;
        assert!(tries < 50, "removing the checkpoint directory: {error}");
        std::thread::sleep(Duration::from_millis(10));
    }
    victim_proc.alloc(230);
    let decision = agent.next_decision(DECIDE);
    let decided = Instant::now();
    assert_eq!(decision["uid"], victim.uid.as_str(), "{decision:#}");

    // The writer made the directory again, with its mode, and the eviction is in it.
    let state = scene.checkpoint.join("agent_state");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !fs::read_to_string(&state).is_ok_and(|s| s.contains(&victim.uid)) {
        assert!(
            Instant::now() < deadline,
            "the eviction never reached the checkpoint:\n{}",
            agent.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mode = fs::metadata(&scene.checkpoint.path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700);
    assert!(
        agent
            .stderr()
            .contains("was removed while the agent ran; made it again"),
        "{}",
        agent.stderr()
    );

    // Killed mid-grace and started again: the eviction is finished, not decided again.
    std::thread::sleep(Duration::from_millis(1500));
    drop(agent);
    let mut restarted = scene.start_agent(&[]);
    while process_alive(victim_proc.pid()) {
        assert!(
            decided.elapsed() < Duration::from_secs(6 + 3),
            "not forced at its original deadline:\n{}",
            restarted.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let died = decided.elapsed();
    assert!(
        died >= Duration::from_millis(5700),
        "forced before its original deadline: {died:?}"
    );
    assert_eq!(sigterms_logged(&log), 1, "one SIGTERM wave");
    assert!(
        restarted.stdout_lines().is_empty(),
        "decided a second time: {:?}",
        restarted.stdout_lines()
    );
    restarted.assert_running("after the restart");
    restarted.stop();
}
