//! Signals (root only). SIGHUP: the agent reads its configuration again and lists its pods
//! anew, as operators expect of a daemon; a configuration that does not load keeps the one in
//! force. Ctrl-C ends it whatever its loop is busy with.
use std::{
    fs,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use tests::{AgentScene, TestPod, process_alive, running_as_root};

const DECIDE: Duration = Duration::from_secs(20);
const KILL: Duration = Duration::from_secs(15);

fn config(threshold: &str) -> String {
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         evictionHard:\n  allocatableMemory.available: {threshold}\n\
         monitor:\n  evictionInterval: 1s\n  podCleanupTimeout: 5s\n"
    )
}

#[test]
fn sighup_puts_a_new_configuration_in_force_and_keeps_the_old_one_when_it_is_broken() {
    if !running_as_root("sighup_puts_a_new_configuration_in_force") {
        return;
    }
    let scene = AgentScene::new("sighup", "1s", "5s");
    // 300Mi allocatable: at 10Mi the 150Mi hog is far from the threshold.
    fs::write(&scene.config, config("10Mi")).unwrap();
    let mut agent = scene.start_agent(&[]);
    let hog = TestPod::new("hog").request_mib(20);
    let calm = TestPod::new("calm").request_mib(100);
    let calm_proc = scene.start_pod(&calm);
    let mut hog_proc = scene.start_pod(&hog);
    hog_proc.alloc(150);
    assert!(
        agent.next_line(Duration::from_secs(2)).is_none(),
        "no decision 140Mi from the threshold"
    );

    // A broken file: logged, the agent lives on with the thresholds it had.
    fs::write(
        &scene.config,
        "evictionHard:\n  allocatableMemory.available: lots\n",
    )
    .unwrap();
    agent.hangup();
    agent
        .wait_stderr(Duration::from_secs(10), |l| {
            l.contains("the one in force stays")
        })
        .expect("the broken configuration is reported");
    agent.assert_running("after SIGHUP");
    assert!(agent.next_line(Duration::from_secs(1)).is_none());

    // The threshold moves to 200Mi: 150Mi available now meets it.
    fs::write(&scene.config, config("200Mi")).unwrap();
    agent.hangup();
    let decision = agent.next_decision(DECIDE);
    assert_eq!(decision["name"], "hog", "{decision:#}");
    assert_eq!(decision["threshold"], 200 << 20, "{decision:#}");
    scene.wait_until_empty(&hog, KILL);
    assert!(process_alive(calm_proc.pid()), "only the hog died");
    assert!(
        agent.stderr().contains("SIGHUP: listing the pods again"),
        "{}",
        agent.stderr()
    );
    agent.assert_running("after the signal");
    agent.stop();
}

/// `monitor --dry-run` in a terminal ends on Ctrl-C, cleanly, while a pod's allocations keep
/// kernel records coming. (The loop registers SIGINT once, before it starts: `monitor trace`,
/// whose loop is busier, lost every SIGINT with a `ctrl_c()` future made at each turn. The
/// agent's quieter loop did not lose it in this scene, so this test guards the behaviour, not
/// that race.)
#[test]
fn ctrl_c_ends_the_agent_while_kernel_records_keep_it_busy() {
    if !running_as_root("ctrl_c_ends_the_agent_while_kernel_records_keep_it_busy") {
        return;
    }
    let scene = AgentScene::new("sigint", "1s", "5s");
    fs::write(&scene.config, config("10Mi")).unwrap();
    let mut agent = scene.start_agent(&["--dry-run"]);
    let mut churn = scene.start_pod(&TestPod::new("churn").request_mib(100));
    let stop = Arc::new(AtomicBool::new(false));
    let churning = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                churn.alloc(16);
                churn.free();
            }
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    agent.interrupt();
    let status = agent.wait(Duration::from_secs(10));
    stop.store(true, Ordering::Relaxed);
    churning.join().unwrap();
    let status = status.unwrap_or_else(|| panic!("still running 10 s after SIGINT"));
    assert!(status.success(), "{status}; stderr:\n{}", agent.stderr());
}
