//! PID pressure end to end (root only): a fork bomb's pod is evicted on `pid.available`, and
//! its processes, exited but not yet reaped by their parent, are not taken for pressure that
//! remains. The kubelet's node e2e scenario, scaled to this machine: an innocent pod of the
//! same priority ranks next, so a second decision on a stale reading would evict it.
use std::{
    fs,
    process::{Child, Command, Stdio},
    time::Duration,
};

use tests::{AgentScene, TestPod, binary, cgroup_tree, process_alive, running_as_root};

/// How long a decision may take to show up once the threshold is crossed (a slow VM
/// included).
const DECIDE: Duration = Duration::from_secs(20);
/// Processes of the bomb, and how far below today's `pid.available` the threshold sits.
const BOMB: usize = 500;
const MARGIN: i64 = 250;
/// How long the bomb's processes stay zombies before their parent reaps them.
const UNREAPED: Duration = Duration::from_secs(3);

/// `pid.available` as the kubelet computes it: the lower of `pid_max` and `threads-max`,
/// less the tasks in /proc/loadavg.
fn pid_available_now() -> i64 {
    let number = |path: &str| -> i64 { fs::read_to_string(path).unwrap().trim().parse().unwrap() };
    let max = number("/proc/sys/kernel/pid_max").min(number("/proc/sys/kernel/threads-max"));
    let loadavg = fs::read_to_string("/proc/loadavg").unwrap();
    let tasks: i64 = loadavg
        .split_whitespace()
        .nth(3)
        .and_then(|f| f.split('/').nth(1))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no task count in {loadavg:?}"));
    max - tasks
}

#[test]
fn a_fork_bomb_is_evicted_once_and_its_unreaped_processes_evict_no_one_else() {
    if !running_as_root("a_fork_bomb_is_evicted_once_and_its_unreaped_processes") {
        return;
    }
    let threshold = pid_available_now() - MARGIN;
    let scene = AgentScene::with_config(
        "pid-bomb",
        &format!(
            "evictionHard:\n  pid.available: \"{threshold}\"\n\
             monitor:\n  evictionInterval: 500ms\n  podCleanupTimeout: 20s\n"
        ),
    );
    let mut agent = scene.start_agent(&["--resync-interval", "500ms"]);
    let innocent = TestPod::new("innocent").request_mib(10).priority(0);
    let bomb = TestPod::new("bomb").request_mib(10).priority(0);
    let innocent_proc = scene.start_pod(&innocent);
    scene.write_manifest(&bomb);
    let bomb_dir = scene.kubepods.create_pod(bomb.qos(), &bomb.uid);
    // Their parent is this test, which reaps them only [`UNREAPED`] after they exit.
    let mut bomb_procs: Vec<Child> = (0..BOMB)
        .map(|_| {
            // A helper of this crate: the test VM has no `sleep`. It ignores SIGTERM, so the
            // bomb goes at force, as a real one busy forking would.
            let mut idle = Command::new(binary("ignore_term", "MONITOR_IGNORE_TERM_BIN"));
            idle.stdin(Stdio::null()).stdout(Stdio::null());
            cgroup_tree::spawn_in(&mut idle, &bomb_dir).expect("starting a bomb process")
        })
        .collect();

    let decision = agent.next_decision(DECIDE);
    assert_eq!(decision["name"], "bomb", "{decision:#}\n{}", agent.stderr());
    assert_eq!(decision["signal"], "pid.available", "{decision:#}");
    // Exited, not reaped: the node's task count still holds them.
    if let Some(line) = agent.next_line(UNREAPED) {
        panic!(
            "decided again while the bomb's processes were zombies: {line}\n{}",
            agent.stderr()
        );
    }
    for child in &mut bomb_procs {
        child.wait().expect("reaping a bomb process");
    }
    if let Some(line) = agent.next_line(Duration::from_secs(3)) {
        panic!(
            "decided once the bomb was reaped: {line}\n{}",
            agent.stderr()
        );
    }
    assert!(
        process_alive(innocent_proc.pid()),
        "the innocent pod was killed"
    );
    assert!(agent.running(), "{}", agent.stderr());
    agent.stop();
}
