//! The metrics endpoint cannot starve the agent: with a low open-file limit and more idle
//! connections to it than the limit, the agent keeps its descriptors for its own reads, does
//! not spin, evicts a hog over a hard threshold within its grace period, and answers
//! `/metrics` again once the connections are gone. The real `monitor` binary on real cgroups
//! and processes, serving on loopback in a network namespace of the test's own (root only).
//!
//! The scene has 300Mi allocatable and a hard `allocatableMemory.available<100Mi` threshold,
//! so the agent sees pressure once the pods' working sets pass 200Mi.
use std::{
    fs,
    net::TcpStream,
    os::unix::process::CommandExt as _,
    time::{Duration, Instant},
};

use tests::{
    AgentScene, MonitorProcess, TestPod, http_get, in_own_network_namespace, metrics_addr,
    process_alive, running_as_root,
};

/// The agent's open-file limit.
const NOFILE: u64 = 256;
/// Idle connections opened to the metrics endpoint: more than the limit.
const IDLE_CONNECTIONS: usize = 300;
/// How long the decision may take once the hog's allocation is sent: the allocation itself
/// takes seconds in the emulated VM.
fn prompt() -> Duration {
    if std::env::var_os("MONITOR_VM").is_some() {
        Duration::from_secs(15)
    } else {
        Duration::from_secs(3)
    }
}
/// The hard threshold's grace period (1 s) plus two.
const GRACE_AND_MARGIN: Duration = Duration::from_secs(3);

/// CPU time the process has used (user and system).
fn cpu_time(pid: u32) -> Duration {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/<pid>/stat");
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .expect("fields after the command")
        .split_whitespace()
        .collect();
    // utime and stime, fields 14 and 15 of proc(5); the rest starts at field 3.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / per_second)
}

#[test]
fn idle_metrics_connections_beyond_the_open_file_limit_do_not_stop_an_eviction() {
    if !running_as_root("idle_metrics_connections_beyond_the_open_file_limit") {
        return;
    }
    let scene = AgentScene::new("metrics-fds", "10s", "10s");
    let hog = TestPod::new("hog");
    in_own_network_namespace(|| {
        let mut command =
            MonitorProcess::command(scene.agent_args(&["--metrics-addr", "127.0.0.1:0"]));
        // SAFETY: setrlimit is async-signal-safe and touches nothing of the parent's.
        unsafe {
            command.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: NOFILE,
                    rlim_max: NOFILE,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &raw const limit) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let mut agent = MonitorProcess::spawn(command);
        let addr = metrics_addr(&agent);
        // Created after the start, so the kernel reports the pod's cgroup.
        let mut hog_proc = scene.start_pod(&hog);
        agent
            .wait_stderr(Duration::from_secs(10), |l| l.contains("1 known"))
            .expect("the agent reads the hog's manifest");

        let idle: Vec<TcpStream> = (0..IDLE_CONNECTIONS)
            .map(|i| {
                TcpStream::connect_timeout(&addr, Duration::from_secs(2))
                    .unwrap_or_else(|e| panic!("idle connection {i}: {e}"))
            })
            .collect();
        // Let the agent take in what it will.
        std::thread::sleep(Duration::from_millis(500));
        let cpu_before = cpu_time(agent.pid());
        let window = Instant::now();

        let sent = Instant::now();
        hog_proc.command("alloc 220");
        let decision = agent.next_decision(prompt());
        assert_eq!(decision["name"], "hog", "{decision:#}");
        assert!(
            sent.elapsed() < prompt(),
            "decided after {:?}",
            sent.elapsed()
        );
        scene.wait_until_empty(&hog, GRACE_AND_MARGIN);
        std::thread::sleep(Duration::from_secs(1));

        let cpu = cpu_time(agent.pid()).checked_sub(cpu_before).unwrap();
        let share = cpu.as_secs_f64() / window.elapsed().as_secs_f64();
        eprintln!(
            "agent CPU {cpu:?} over {:?} ({:.0} %) with {IDLE_CONNECTIONS} idle connections",
            window.elapsed(),
            share * 100.0
        );
        assert!(
            share < 0.3,
            "the agent used {:.0} % of a core",
            share * 100.0
        );
        assert!(process_alive(agent.pid()), "the agent runs on");
        let stderr = agent.stderr();
        assert!(
            !stderr.contains("Too many open files"),
            "the agent ran out of descriptors:\n{stderr}"
        );

        drop(idle);
        let answer = http_get(addr, "/metrics");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(
            answer.contains(
                "monitor_evictions_total{eviction_signal=\"allocatableMemory.available\"} 1"
            ),
            "{answer}"
        );
        agent.stop();
    });
}

/// Sets the soft open-file limit of a running process, leaving the hard one as it is.
fn set_nofile(pid: u32, soft: u64) {
    let pid = pid as libc::pid_t;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a process this test started; the struct outlives each call.
    let set = unsafe {
        if libc::prlimit(pid, libc::RLIMIT_NOFILE, std::ptr::null(), &raw mut limit) != 0 {
            -1
        } else {
            limit.rlim_cur = soft;
            libc::prlimit(
                pid,
                libc::RLIMIT_NOFILE,
                &raw const limit,
                std::ptr::null_mut(),
            )
        }
    };
    assert_eq!(set, 0, "prlimit: {}", std::io::Error::last_os_error());
}

#[test]
fn out_of_descriptors_the_endpoint_backs_off_instead_of_spinning() {
    if !running_as_root("out_of_descriptors_the_endpoint_backs_off_instead_of_spinning") {
        return;
    }
    let scene = AgentScene::new("metrics-emfile", "10s", "10s");
    in_own_network_namespace(|| {
        // Polling, so no kernel event counter is due for the checkpoint while descriptors
        // are out: what a failed checkpoint write does is another test's concern.
        let mut agent = scene.start_agent(&[
            "--metrics-addr",
            "127.0.0.1:0",
            "--source",
            "poll",
            "--poll-interval",
            "1s",
        ]);
        let addr = metrics_addr(&agent);
        // Lowered after the start, below what the connection cap was sized for: two
        // descriptors to spare, so accepting soon fails with EMFILE.
        let open = fs::read_dir(format!("/proc/{}/fd", agent.pid()))
            .expect("the agent's descriptors")
            .count() as u64;
        set_nofile(agent.pid(), open + 2);
        let idle: Vec<TcpStream> = (0..20)
            .map(|i| {
                TcpStream::connect_timeout(&addr, Duration::from_secs(2))
                    .unwrap_or_else(|e| panic!("idle connection {i}: {e}"))
            })
            .collect();
        let cpu_before = cpu_time(agent.pid());
        let window = Instant::now();
        std::thread::sleep(Duration::from_secs(3));
        let cpu = cpu_time(agent.pid()).checked_sub(cpu_before).unwrap();
        let share = cpu.as_secs_f64() / window.elapsed().as_secs_f64();
        let failed_accepts = agent
            .stderr()
            .lines()
            .filter(|l| l.contains("metrics: accepting a connection"))
            .count();
        eprintln!(
            "agent CPU {:.0} % out of descriptors, {failed_accepts} failed accepts logged",
            share * 100.0
        );
        assert!(
            share < 0.3,
            "the agent used {:.0} % of a core",
            share * 100.0
        );
        assert!(
            failed_accepts > 0,
            "accepting never failed: {}",
            agent.stderr()
        );
        // Pauses of 10 ms doubling to 1 s: about ten in 3 s.
        assert!(
            failed_accepts <= 20,
            "{failed_accepts} failed accepts in 3 s"
        );
        assert!(process_alive(agent.pid()), "the agent runs on");

        drop(idle);
        set_nofile(agent.pid(), 1024);
        let answer = http_get(addr, "/metrics");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        agent.stop();
    });
}
