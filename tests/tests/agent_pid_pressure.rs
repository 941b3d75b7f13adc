//! PID pressure end to end (root only): a fork bomb's pod is evicted on `pid.available`, and
//! its processes, exited but not yet reaped by their parent, are not taken for pressure that
//! remains. The kubelet's node e2e scenario, scaled to this machine: an innocent pod of the
//! same priority ranks next, so a second decision on a stale reading would evict it. And the
//! bomb is decided on when it crosses the threshold, woken by the kernel's fork counter, not
//! at the next resync; a forking bomb capped by its pod's real pids cgroup is stopped before
//! the cap refuses a fork.
use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use tests::{
    AgentScene, Allocator, MonitorProcess, PidsCap, TestPod, binary, cgroup_tree, fork_bomb,
    http_get, metric, metrics_addr, pid_available_now, process_alive, reap_within, running_as_root,
};

/// How long a decision may take to show up once the threshold is crossed (a slow VM
/// included).
const DECIDE: Duration = Duration::from_secs(20);
/// Processes of the bomb, and how far below today's `pid.available` the threshold sits.
const BOMB: usize = 500;
const MARGIN: i64 = 250;
/// How long the bomb's processes stay zombies before their parent reaps them.
const UNREAPED: Duration = Duration::from_secs(3);

/// One bomb at a time: each moves the node's `pid.available`, which every agent reads.
static ONE_BOMB_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_bomb_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_BOMB_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Starts up to `count` processes in `dir` that ignore SIGTERM, so a bomb goes at force as a
/// real one busy forking would. Their parent is this test, which reaps them when it waits.
/// A real bomb forks inside its pod, so its forks end with it; these are started from
/// outside, one by one, so the starting stops once the pod was killed (its first process
/// exited): in a slow VM, starting 500 outlasted the eviction, and the ones started after it
/// were taken for processes that outlived force.
fn spawn_bomb(dir: &std::path::Path, count: usize) -> Vec<Child> {
    let mut children: Vec<Child> = Vec::with_capacity(count);
    while children.len() < count && !children.first().is_some_and(exited) {
        // A helper of this crate: the test VM has no `sleep`.
        let mut idle = Command::new(binary("ignore_term", "MONITOR_IGNORE_TERM_BIN"));
        idle.stdin(Stdio::null()).stdout(Stdio::null());
        children.push(cgroup_tree::spawn_in(&mut idle, dir).expect("starting a bomb process"));
    }
    children
}

/// Whether `child` exited, leaving it to be reaped (`WNOWAIT`): the test reaps it later.
fn exited(child: &Child) -> bool {
    // SAFETY: a zeroed siginfo_t is valid; waitid writes it for a child of this process.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        libc::waitid(
            libc::P_PID,
            child.id(),
            &raw mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        ) == 0
            && info.si_pid() != 0
    }
}

/// Reaps the bomb's processes, which the agent's eviction ends, waiting [`DECIDE`] at most:
/// ones it left running are killed here (this test started them) and the test fails with the
/// agent's log, instead of waiting forever.
fn reaped_by_the_eviction(children: &mut [Child], agent: &MonitorProcess) {
    let deadline = std::time::Instant::now() + DECIDE;
    for i in 0..children.len() {
        while children[i]
            .try_wait()
            .expect("waiting for a bomb process")
            .is_none()
        {
            if std::time::Instant::now() >= deadline {
                for child in children.iter_mut() {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                panic!(
                    "the eviction left the bomb's processes running: {}",
                    agent.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The agent's next decision, which must evict the bomb on `pid.available`, triggered by the
/// kernel's fork record; with the record's time.
fn bomb_decided_at_its_fork_record(agent: &MonitorProcess) -> (serde_json::Value, u64) {
    let decision = agent.next_decision(DECIDE);
    assert_eq!(decision["name"], "bomb", "{decision:#}\n{}", agent.stderr());
    assert_eq!(decision["signal"], "pid.available", "{decision:#}");
    let trigger = decision["event_monotonic_ns"]
        .as_u64()
        .unwrap_or_else(|| panic!("woken by the fork counter, not the resync: {decision:#}"));
    (decision, trigger)
}

/// An agent with a hard `pid.available` threshold [`MARGIN`] below today's and the given
/// resync interval, an innocent pod running, and the bomb's pod listed with an empty cgroup.
struct Scene {
    _scene: AgentScene,
    agent: MonitorProcess,
    innocent_proc: Allocator,
    bomb_dir: PathBuf,
}

fn scene(name: &str, resync: &str) -> Scene {
    scene_with(name, &["--resync-interval", resync])
}

/// [`scene`] with the agent's flags given whole.
fn scene_with(name: &str, agent_args: &[&str]) -> Scene {
    let threshold = pid_available_now() - MARGIN;
    let scene = AgentScene::with_config(
        name,
        &format!(
            "evictionHard:\n  pid.available: \"{threshold}\"\n\
             monitor:\n  evictionInterval: 500ms\n  podCleanupTimeout: 20s\n"
        ),
    );
    let agent = scene.start_agent(agent_args);
    let innocent = TestPod::new("innocent").request_mib(10).priority(0);
    let bomb = TestPod::new("bomb").request_mib(10).priority(0);
    let innocent_proc = scene.start_pod(&innocent);
    scene.write_manifest(&bomb);
    let bomb_dir = scene.kubepods.create_pod(bomb.qos(), &bomb.uid);
    Scene {
        _scene: scene,
        agent,
        innocent_proc,
        bomb_dir,
    }
}

#[test]
fn a_fork_bomb_is_evicted_once_and_its_unreaped_processes_evict_no_one_else() {
    if !running_as_root("a_fork_bomb_is_evicted_once_and_its_unreaped_processes") {
        return;
    }
    let _one = one_bomb_at_a_time();
    let Scene {
        _scene,
        mut agent,
        innocent_proc,
        bomb_dir,
    } = scene("pid-bomb", "500ms");
    // Reaped only [`UNREAPED`] after they exit.
    let mut bomb_procs = spawn_bomb(&bomb_dir, BOMB);

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
    reaped_by_the_eviction(&mut bomb_procs, &agent);
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
    agent.assert_running("after the bomb");
    agent.stop();
}

/// With the resync a minute away, the bomb is decided on as it crosses the threshold: the
/// kernel counted its forks up to the distance the agent armed, and its record (named as the
/// decision's trigger) made the agent read `pid.available` and the pods' process counts at
/// once. Without the fork counter nothing would read them before the resync.
#[test]
fn a_fork_bomb_is_decided_on_at_the_crossing_not_at_the_resync() {
    if !running_as_root("a_fork_bomb_is_decided_on_at_the_crossing_not_at_the_resync") {
        return;
    }
    let _one = one_bomb_at_a_time();
    let Scene {
        _scene,
        mut agent,
        innocent_proc,
        bomb_dir,
    } = scene("pid-wake", "60s");
    // The agent takes the bomb's manifest (and reads the pods) before the bomb starts.
    std::thread::sleep(Duration::from_secs(2));
    if let Some(line) = agent.next_line(Duration::ZERO) {
        panic!("decided before the bomb: {line}\n{}", agent.stderr());
    }
    let mut bomb_procs = spawn_bomb(&bomb_dir, BOMB);
    let (decision, trigger) = bomb_decided_at_its_fork_record(&agent);
    let decided = decision["monotonic_ns"].as_u64().unwrap();
    eprintln!(
        "fork record -> decision: {:.2} ms",
        decided.saturating_sub(trigger) as f64 / 1e6
    );
    reaped_by_the_eviction(&mut bomb_procs, &agent);
    assert!(
        process_alive(innocent_proc.pid()),
        "the innocent pod was killed"
    );
    agent.assert_running("after the bomb");
    agent.stop();
}

/// A bomb that forks as fast as it can inside its pod, capped by the pod's pids cgroup
/// (`pids.max`, as the kubelet's pod PIDs limit) far above the threshold's distance: the
/// kernel's fork counter wakes the agent at the crossing, the bomb is evicted, and the cap
/// never had to refuse a fork. One decision only: its processes' exit is not taken for
/// pressure that remains.
#[test]
fn a_forking_bomb_capped_by_its_pids_cgroup_is_stopped_before_the_cap() {
    if !running_as_root("a_forking_bomb_capped_by_its_pids_cgroup_is_stopped_before_the_cap") {
        return;
    }
    /// The pod's `pids.max`: the distance to the threshold ([`MARGIN`]) and far more.
    const CAP: usize = 3000;
    let _one = one_bomb_at_a_time();
    let Scene {
        _scene,
        mut agent,
        innocent_proc,
        bomb_dir,
    } = scene("pid-cap", "60s");
    let cap = PidsCap::new(&bomb_dir, "pid-cap-bomb", CAP as u64)
        .unwrap_or_else(|e| panic!("capping the bomb's pod with a pids cgroup: {e}"));
    std::thread::sleep(Duration::from_secs(2));
    if let Some(line) = agent.next_line(Duration::ZERO) {
        panic!("decided before the bomb: {line}\n{}", agent.stderr());
    }
    // Its own bound only past the cap: the pids cgroup is what would stop it.
    let (parent, records) = fork_bomb(&cap.procs(&bomb_dir), CAP + 100);
    bomb_decided_at_its_fork_record(&agent);
    // The parent dies at SIGTERM; its children, which ignore it, at force.
    assert!(
        reap_within(parent, DECIDE),
        "the eviction left the bomb's parent running: {}",
        agent.stderr()
    );
    let made = records.join().expect("the bomb's records").len();
    let deadline = std::time::Instant::now() + DECIDE;
    while !cgroup_tree::pids_in(&bomb_dir).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the bomb's processes outlived the eviction: {}",
            agent.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "the bomb made {made} tasks; its pids cgroup refused {} forks",
        cap.refused()
    );
    assert_eq!(
        cap.refused(),
        0,
        "the bomb reached its pids cgroup's cap ({made} tasks made) before the agent stopped it"
    );
    if let Some(line) = agent.next_line(Duration::from_secs(3)) {
        panic!("decided again after the bomb: {line}\n{}", agent.stderr());
    }
    assert!(
        process_alive(innocent_proc.pid()),
        "the innocent pod was killed"
    );
    agent.assert_running("after the bomb");
    agent.stop();
}

/// With 40 quiet pods beside the bomb and the resync a minute away, the fork record makes
/// the agent count the processes of the pods the kernel saw a task created, ended or moved
/// into, not of every pod: `monitor_pod_process_counts_total` moves by a few, where a read of
/// every pod would move it by 42.
#[test]
fn at_the_crossing_only_the_pods_whose_processes_changed_are_counted() {
    if !running_as_root("at_the_crossing_only_the_pods_whose_processes_changed_are_counted") {
        return;
    }
    const QUIET: usize = 40;
    let _one = one_bomb_at_a_time();
    let Scene {
        _scene: scene,
        mut agent,
        innocent_proc,
        bomb_dir,
    } = scene_with(
        "pid-marks",
        &["--resync-interval", "60s", "--metrics-addr", "127.0.0.1:0"],
    );
    let addr = metrics_addr(&agent);
    let quiet: Vec<Allocator> = (0..QUIET)
        .map(|i| scene.start_pod(&TestPod::new(&format!("quiet-{i}")).request_mib(10)))
        .collect();
    let scrape = |name: &str| -> u64 {
        let text = http_get(addr, "/metrics");
        metric(&text, name).unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    let ranked = QUIET as u64 + 2;
    let deadline = std::time::Instant::now() + DECIDE;
    while scrape("monitor_pods_ranked") < ranked {
        assert!(
            std::time::Instant::now() < deadline,
            "{ranked} pods not ranked: {}",
            agent.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(1));
    let cap = PidsCap::new(&bomb_dir, "pid-marks-bomb", 3000)
        .unwrap_or_else(|e| panic!("capping the bomb's pod with a pids cgroup: {e}"));
    let counted_before = scrape("monitor_pod_process_counts_total");
    assert!(
        counted_before >= ranked,
        "every pod was counted once as it came: {counted_before}"
    );
    let (parent, records) = fork_bomb(&cap.procs(&bomb_dir), 3000);
    bomb_decided_at_its_fork_record(&agent);
    let counted = scrape("monitor_pod_process_counts_total") - counted_before;
    assert!(
        reap_within(parent, DECIDE),
        "the eviction left the bomb's parent running: {}",
        agent.stderr()
    );
    records.join().expect("the bomb's records");
    eprintln!("pods counted at the crossing: {counted} of {ranked}");
    assert!(
        (1..=3).contains(&counted),
        "{counted} pods counted at the crossing, of {ranked}: only the bomb's had processes change\n{}",
        agent.stderr()
    );
    assert!(
        process_alive(innocent_proc.pid()),
        "the innocent pod was killed"
    );
    assert!(
        quiet.iter().all(|q| process_alive(q.pid())),
        "a quiet pod was killed"
    );
    agent.assert_running("after the bomb");
    agent.stop();
}
