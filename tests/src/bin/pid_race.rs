//! The PID race for `cargo xtask bench pid-race` (root): a fork bomb inside a pod, and how
//! soon after it crosses a hard `pid.available` threshold the agent decides; and what a fork
//! costs with the agent's kernel programs attached.
//!
//!     pid_race ebpf|resync TRIALS
//!     pid_race fork-cost ROUNDS
//!
//! `ebpf`: the kernel's fork counter wakes the agent (its resync 10 s away); `resync`: the
//! agent polls every 10 s, as the kubelet's housekeeping reads `pid.available`. Each trial
//! lists a bomb pod whose parent process forks idle children into the pod's cgroup as fast as
//! it can, up to [`CAP`] (a bounded bomb, far below the machine's limit), and dies at
//! SIGTERM as a shell would. One JSON line per trial: the time from the fork at which
//! `pid.available` met the threshold ([`MARGIN`] below its value at the start) to the
//! decision, how many tasks the bomb had made by the decision and in all, and whether it was
//! stopped before its cap.
//! `fork-cost`: a loop of fork, exit and wait, timed with no agent and with one running
//! (dry run), alternating ROUNDS times; one JSON line with the medians and their ratio.
use std::{
    ffi::CString,
    io::Read as _,
    os::fd::FromRawFd as _,
    path::Path,
    thread::JoinHandle,
    time::{Duration, Instant},
};

use monitor::system_clock::monotonic_ns;
use serde_json::json;
use tests::{AgentScene, MonitorProcess, TestPod, pid_available_now};

/// The most tasks a bomb makes: its pids cgroup's limit, safely below the machine's.
const CAP: usize = 3000;
/// How far below `pid.available` at the start the threshold sits.
const MARGIN: i64 = 300;
/// Forks timed per fork-cost round.
const FORKS_PER_ROUND: u32 = 4000;

/// A fork bomb in the cgroup whose `cgroup.procs` is `procs`: a parent that moves itself in
/// and forks idle children as fast as it can, up to `cap` (a pids cgroup's limit, safely
/// below the machine's), dying at SIGTERM as a shell would; its children ignore SIGTERM and
/// go at force. Returns the parent's pid, and a thread that hands back (pid, time the fork
/// returned) of every child once the parent is gone.
fn bomb(procs: &Path, cap: usize) -> (libc::pid_t, JoinHandle<Vec<(libc::pid_t, u64)>>) {
    let path = CString::new(procs.as_os_str().as_encoded_bytes()).expect("a path without NUL");
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into the array it is given.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    let [read_end, write_end] = fds;
    // SAFETY: the child calls only async-signal-safe functions (open, write, close, fork,
    // clock_gettime, signal, pause, _exit) on memory prepared before the fork.
    let parent = unsafe { libc::fork() };
    if parent == 0 {
        unsafe {
            libc::close(read_end);
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY);
            if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                libc::_exit(1);
            }
            libc::close(fd);
            for _ in 0..cap {
                let child = libc::fork();
                if child == 0 {
                    libc::close(write_end);
                    libc::signal(libc::SIGTERM, libc::SIG_IGN);
                    loop {
                        libc::pause();
                    }
                }
                if child < 0 {
                    break;
                }
                // clock_gettime underneath: async-signal-safe.
                let ns = monotonic_ns();
                let mut record = [0u8; 12];
                record[..4].copy_from_slice(&child.to_ne_bytes());
                record[4..].copy_from_slice(&ns.to_ne_bytes());
                libc::write(write_end, record.as_ptr().cast(), record.len());
            }
            loop {
                libc::pause();
            }
        }
    }
    assert!(parent > 0, "fork: {}", std::io::Error::last_os_error());
    // SAFETY: closing this process's copy of the write end; the read end is owned below.
    unsafe { libc::close(write_end) };
    // SAFETY: a descriptor nobody else owns.
    let mut pipe = unsafe { std::fs::File::from_raw_fd(read_end) };
    let records = std::thread::spawn(move || {
        let mut data = Vec::new();
        // Ends when the parent is gone: its children closed their copies at birth.
        let _ = pipe.read_to_end(&mut data);
        data.chunks_exact(12)
            .map(|r| {
                let pid = libc::pid_t::from_ne_bytes(r[..4].try_into().unwrap_or_default());
                let ns = u64::from_ne_bytes(r[4..].try_into().unwrap_or_default());
                (pid, ns)
            })
            .collect()
    });
    (parent, records)
}

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

/// Reaps `pid`, a child or an orphan this subreaper adopted (zombies count in
/// `pid.available`).
fn reap(pid: libc::pid_t) {
    // SAFETY: waiting for a process of this run.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
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
        let procs = dir.join("cgroup.procs");
        let (parent, records) = bomb(&procs, CAP);
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
                "stopped_before_cap": times.len() < CAP,
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
    let scene = AgentScene::new("pid-race-cost", "10s", "10s");
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        without.push(fork_loop());
        let mut agent = scene.start_agent(&["--dry-run", "--source", "ebpf"]);
        // Settled: its programs attached and its start-up reads done.
        std::thread::sleep(Duration::from_millis(500));
        with.push(fork_loop());
        agent.stop();
    }
    let (without_ns, with_ns) = (median(without.clone()), median(with.clone()));
    println!(
        "{}",
        json!({
            "mode": "fork-cost",
            "rounds": rounds,
            "forks_per_round": FORKS_PER_ROUND,
            "without_ns": without,
            "with_ns": with,
            "median_without_ns": without_ns,
            "median_with_ns": with_ns,
            "ratio": with_ns / without_ns,
        })
    );
}

fn main() {
    // The bomb's children outlive their parent: adopted here, and reaped here.
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: pid_race ebpf|resync TRIALS | pid_race fork-cost ROUNDS";
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
