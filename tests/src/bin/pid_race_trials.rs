//! The PID race for `cargo xtask bench pid-race` (root): a fork bomb inside a pod, and how
//! soon after it crosses a hard `pid.available` threshold the agent decides; and what a fork
//! costs with the agent's kernel programs attached.
//!
//!     pid_race_trials ebpf|resync TRIALS
//!     pid_race_trials fork-cost ROUNDS
//!
//! `ebpf`: the kernel's fork counter wakes the agent (its resync 10 s away); `resync`: the
//! agent polls every 10 s, as the kubelet's housekeeping reads `pid.available`. Each trial
//! lists a bomb pod whose parent process forks idle children into the pod's cgroup as fast as
//! it can until its pod's pids cgroup refuses a fork (`pids.max` [`CAP`], far below the
//! machine's limit, as the kubelet's pod PIDs limit would), and dies at SIGTERM as a shell
//! would. One JSON line per trial: the time from the fork at which `pid.available` met the
//! threshold ([`MARGIN`] below its value at the start) to the decision, how many tasks the
//! bomb had made by the decision and in all, and whether it was stopped before its cap (the
//! cap refused no fork).
//! `fork-cost`: a loop of fork, exit and wait, timed with no agent, with one running (dry run)
//! on memory thresholds only, and with one that also has a pid threshold (the fork counter
//! armed, task cgroups marked), alternating ROUNDS times; one JSON line with the medians and
//! their ratios.
use std::{
    path::Path,
    time::{Duration, Instant},
};

use serde_json::json;
use tests::{AgentScene, MonitorProcess, PidsCap, TestPod, fork_bomb, pid_available_now, reap};

/// The most tasks a bomb's pod may hold: its pids cgroup's limit (the parent and its
/// children), safely below the machine's.
const CAP: usize = 3000;
/// How far below `pid.available` at the start the threshold sits.
const MARGIN: i64 = 300;
/// Forks timed per fork-cost round.
const FORKS_PER_ROUND: u32 = 4000;

/// SIGKILLs every process in the cgroup whose `cgroup.procs` is `procs` (the agent did not).
fn kill_all_in(procs: &Path) {
    let listed = std::fs::read_to_string(procs).unwrap_or_default();
    for pid in listed
        .lines()
        .filter_map(|l| l.trim().parse::<libc::pid_t>().ok())
    {
        // SAFETY: the bomb's processes, which this run started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

fn race(mode: &str, trials: usize) {
    let threshold = pid_available_now() - MARGIN;
    let scene = AgentScene::with_config(
        &format!("pid-race-{mode}"),
        &format!(
            "evictionHard:\n  pid.available: \"{threshold}\"\n\
             monitor:\n  evictionInterval: 500ms\n  podCleanupTimeout: 20s\n"
        ),
    );
    let source: &[&str] = match mode {
        "ebpf" => &[
            "--source",
            "ebpf",
            "--resync-interval",
            "10s",
            "--duration",
            "1h",
        ],
        _ => &[
            "--source",
            "poll",
            "--poll-interval",
            "10s",
            "--duration",
            "1h",
        ],
    };
    let mut agent: MonitorProcess = scene.start_agent(source);
    for trial in 0..trials {
        let pod = TestPod::new(&format!("bomb-{trial}")).request_mib(10);
        scene.write_manifest(&pod);
        let dir = scene.kubepods.create_pod(pod.qos(), &pod.uid);
        // Let the agent learn of the pod before the bomb.
        std::thread::sleep(Duration::from_millis(500));
        let distance = pid_available_now() - threshold;
        let started = Instant::now();
        let cap = PidsCap::new(&dir, &format!("pid-race-{mode}-{trial}"), CAP as u64)
            .unwrap_or_else(|e| panic!("capping the bomb's pod with a pids cgroup: {e}"));
        let procs = dir.join("cgroup.procs");
        // Its own bound only past the cap: the pids cgroup stops it.
        let (parent, records) = fork_bomb(&cap.procs(&dir), CAP + 100);
        let decision = agent
            .next_line(Duration::from_secs(15))
            .and_then(|l| serde_json::from_str::<serde_json::Value>(&l).ok());
        if decision.is_none() {
            kill_all_in(&procs);
        }
        reap(parent);
        let records = records.join().expect("the bomb's records");
        // Its children, orphans now, go at force (or were killed above).
        for (pid, _) in &records {
            reap(*pid);
        }
        let times: Vec<u64> = records.iter().map(|(_, ns)| *ns).collect();
        let decided_ns = decision.as_ref().and_then(|d| d["monotonic_ns"].as_u64());
        let crossing_ns = usize::try_from(distance.max(1) - 1)
            .ok()
            .and_then(|i| times.get(i).copied());
        let latency_ms = match (crossing_ns, decided_ns) {
            (Some(c), Some(d)) => Some((d as f64 - c as f64) / 1e6),
            _ => None,
        };
        let made = decided_ns.map(|d| times.iter().filter(|&&t| t <= d).count());
        let refused = cap.refused();
        drop(cap);
        println!(
            "{}",
            json!({
                "mode": mode,
                "trial": trial,
                "distance": distance,
                "victim": decision.as_ref().and_then(|d| d["name"].as_str().map(str::to_owned)),
                "crossing_to_decision_ms": latency_ms,
                "tasks_made_by_decision": made,
                "tasks_made": times.len(),
                "cap": CAP,
                "forks_the_cap_refused": refused,
                "stopped_before_cap": refused == 0,
                "elapsed_ms": started.elapsed().as_secs_f64() * 1e3,
            })
        );
        // A panic, not an exit: the scene's cgroups and files are removed as it unwinds.
        assert!(
            agent.running(),
            "pid_race: the agent exited:\n{}",
            agent.stderr()
        );
        scene.remove_manifest(&pod);
        scene.kubepods.remove_pod(pod.qos(), &pod.uid);
        while agent.next_line(Duration::from_millis(50)).is_some() {}
        std::thread::sleep(Duration::from_millis(1000));
    }
    drop(agent);
}

/// Nanoseconds per fork, exit and wait, over [`FORKS_PER_ROUND`] forks.
fn fork_loop() -> f64 {
    let started = Instant::now();
    for _ in 0..FORKS_PER_ROUND {
        // SAFETY: the child exits at once; the parent reaps it.
        unsafe {
            let pid = libc::fork();
            if pid == 0 {
                libc::_exit(0);
            }
            assert!(pid > 0, "fork: {}", std::io::Error::last_os_error());
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
    }
    started.elapsed().as_nanos() as f64 / f64::from(FORKS_PER_ROUND)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn fork_cost(rounds: usize) {
    // Memory thresholds only: the fork counter stays disarmed and no cgroup is marked.
    let memory_only = AgentScene::new("pid-race-cost", "10s", "10s");
    // A pid threshold far below the node's value: the fork counter armed and the task
    // programs marking cgroups, as on a node with PID eviction configured.
    let with_pids = AgentScene::with_config(
        "pid-race-cost-pids",
        &format!(
            "evictionHard:\n  allocatableMemory.available: {}\n  pid.available: \"100\"\n",
            AgentScene::THRESHOLD
        ),
    );
    let (mut without, mut with, mut marking) = (Vec::new(), Vec::new(), Vec::new());
    let with_agent = |scene: &AgentScene| {
        let mut agent = scene.start_agent(&["--dry-run", "--source", "ebpf"]);
        // Settled: its programs attached and its start-up reads done.
        std::thread::sleep(Duration::from_millis(500));
        let ns = fork_loop();
        agent.stop();
        ns
    };
    for _ in 0..rounds {
        without.push(fork_loop());
        with.push(with_agent(&memory_only));
        marking.push(with_agent(&with_pids));
    }
    let (without_ns, with_ns, marking_ns) = (
        median(without.clone()),
        median(with.clone()),
        median(marking.clone()),
    );
    println!(
        "{}",
        json!({
            "mode": "fork-cost",
            "rounds": rounds,
            "forks_per_round": FORKS_PER_ROUND,
            "without_ns": without,
            "with_ns": with,
            "marking_ns": marking,
            "median_without_ns": without_ns,
            "median_with_ns": with_ns,
            "median_marking_ns": marking_ns,
            "ratio": with_ns / without_ns,
            "marking_ratio": marking_ns / without_ns,
        })
    );
}

fn main() {
    // The bomb's children outlive their parent: adopted here, and reaped here.
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: pid_race_trials ebpf|resync TRIALS | pid_race_trials fork-cost ROUNDS";
    let [mode, count] = args.as_slice() else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let count = match count.parse::<usize>() {
        Ok(n) if n > 0 => n,
        _ => {
            eprintln!("{count}: not a positive count; {usage}");
            std::process::exit(2);
        }
    };
    match mode.as_str() {
        "ebpf" | "resync" => race(mode, count),
        "fork-cost" => fork_cost(count),
        _ => {
            eprintln!("{mode}: {usage}");
            std::process::exit(2);
        }
    }
}
