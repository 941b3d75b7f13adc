//! Trials of `cargo xtask bench overhead` in a VM (root), where no compiler or sort is at
//! hand: processes in turn, each growing a heap of HEAP_MIB (`bench_load heap`, anonymous
//! faults only), timed in a pod's cgroup with no agent, with the agent's defaults (the
//! stat programs detached: the only threshold is 100 MiB of a 16 GiB allocatable), and with
//! `--attach-within always` on the kernel's default hook and on fentry. The variants
//! alternate round by round, after an untimed run of the job.
//!
//!     overhead_trials ROUNDS HEAP_MIB HEAPS
//!
//! One JSON object per timed job on stdout: `{"variant", "round", "seconds"}`.
use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use serde_json::json;
use tests::{AgentScene, MonitorProcess, TestPod, binary, cgroup_tree, set_memory_limit};

/// (label, the agent's flags; `None`: no agent).
const VARIANTS: [(&str, Option<&[&str]>); 4] = [
    ("no agent", None),
    (
        "default (stat programs detached)",
        Some(&["--attach-within", "auto"]),
    ),
    (
        "--attach-within always",
        Some(&["--attach-within", "always"]),
    ),
    (
        "--attach-within always --memcg-hook fentry",
        Some(&["--attach-within", "always", "--memcg-hook", "fentry"]),
    ),
];

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()
        .unwrap_or_default();
    let [rounds, heap_mib, heaps] = args[..] else {
        eprintln!("usage: overhead_trials ROUNDS HEAP_MIB HEAPS");
        std::process::exit(2);
    };
    let scene = AgentScene::new("overhead-bench", "10s", "10s");
    let pod = TestPod::new("job").request_mib(heap_mib as u64 + 64);
    scene.write_manifest(&pod);
    let container = scene.kubepods.create_pod(pod.qos(), &pod.uid);
    set_memory_limit(&scene.pod_dir(&pod), (heap_mib as u64 + 256) << 20)
        .expect("limiting the pod's memory");
    let load = binary("bench_load", "MONITOR_BENCH_LOAD_BIN");
    time_job(&load, &container, heap_mib, heaps);
    for round in 0..rounds {
        for (label, flags) in VARIANTS {
            let agent = flags.map(|flags| start(&scene, flags));
            let seconds = time_job(&load, &container, heap_mib, heaps);
            println!(
                "{}",
                json!({"variant": label, "round": round, "seconds": seconds})
            );
            if let Some(mut agent) = agent {
                agent.stop();
            }
        }
    }
}

/// The agent with `flags`, started and, by default, with its stat programs detached.
fn start(scene: &AgentScene, flags: &[&str]) -> MonitorProcess {
    let mut args = vec![
        "--source",
        "ebpf",
        "--allocatable-memory",
        "16Gi",
        "--duration",
        "1h",
    ];
    args.extend(flags);
    let agent = scene.start_agent(&args);
    if flags.contains(&"auto") {
        agent
            .wait_stderr(Duration::from_secs(60), |l| {
                l.contains("memory stat programs detached")
            })
            .unwrap_or_else(|| panic!("the stat programs were not detached: {}", agent.stderr()));
    }
    agent
}

/// Seconds for `heaps` processes in turn in `cgroup`, each growing a heap of `heap_mib`.
fn time_job(load: &Path, cgroup: &Path, heap_mib: usize, heaps: usize) -> f64 {
    let started = Instant::now();
    for _ in 0..heaps {
        let mut cmd = Command::new(load);
        cmd.args(["heap", &heap_mib.to_string()]);
        let status = cgroup_tree::spawn_in(&mut cmd, cgroup)
            .expect("starting bench_load")
            .wait()
            .expect("waiting for bench_load");
        assert!(status.success(), "bench_load heap {heap_mib}: {status}");
    }
    started.elapsed().as_secs_f64()
}
