//! Trials of the OOM race for `cargo xtask bench oom-race` (root): a pod allocating as fast
//! as one process can inside a kubepods cgroup with a memory limit `MARGIN` MiB above the
//! point where a hard `allocatableMemory.available` threshold is met, two steady pods beside
//! it; a trial is won when the agent stopped the hog (or, `--other-victim`, whatever it
//! chose) before the kernel's OOM killer fired in the tree.
//!
//!     oom_race_trials SOURCE MARGIN_MIB TRIALS [--kube api|kill] [--kubelet-delay MS] [--other-victim]
//!              [--draining-hog] [--draining-victim] [--grace-projection on|off]
//!              [--memory-brake kubepods|pods|off] [--predict MS] [--beyond-distance]
//!              [--reclaim-first]
//!
//! SOURCE is `ebpf` or `poll:<ms>`. With `--kube` the pods are served by the MOCK API server
//! and a STAND-IN kubelet stops a pod `--kubelet-delay` after its eviction was accepted
//! (`api`: the agent only posts the Eviction; `kill`: the agent kills on the node first).
//! `--other-victim` adds a best-effort pod of lower priority that the kubelet's order evicts
//! before the allocating pod. `--draining-hog`: the hog handles SIGTERM and keeps allocating
//! until SIGKILL, as a server draining its requests would; `--draining-victim`: the
//! bystander handles SIGTERM likewise, idle. `--grace-projection`, `--memory-brake`,
//! `--predict` (as a lead in ms) and `--reclaim-first` are passed to the agent.
//! `--beyond-distance`: allocatable memory leaves twice the agent's default `--attach-within`
//! on this node above the threshold, so its stat programs are detached when each trial
//! starts (the trial waits for that) and only the 100 ms guard read can attach them before
//! the hog crosses; the hog then allocates past the kubepods limit. One JSON object per trial on stdout, naming the
//! arguments it ran with and every pod the agent evicted.
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use serde_json::json;
use test_harness::watched_process::monotonic_ns;
use tests::{
    AgentScene, MonitorProcess, TempDir, TestPod, attach_distance_bound_mib, kube_api::MockKubeApi,
    set_memory_limit, stand_in_kubelet::StandInKubelet,
};

const NODE: &str = "bench-node";
/// MiB each steady pod holds, within its request.
const STEADY_MIB: usize = 40;
/// The hard `allocatableMemory.available` threshold (the scene's).
const THRESHOLD_MIB: u64 = 100;
/// The stat gate's log lines.
const DETACHED: &str = "memory stat programs detached";
const ATTACHED: &str = "memory stat programs attached";

struct Args {
    source: Vec<String>,
    margin_mib: u64,
    trials: usize,
    kube: Option<String>,
    kubelet_delay: Duration,
    other_victim: bool,
    draining_hog: bool,
    draining_victim: bool,
    grace_projection: Option<String>,
    memory_brake: Option<String>,
    predict: Option<String>,
    beyond_distance: bool,
    reclaim_first: bool,
}

fn parse() -> Result<Args, String> {
    let usage = "usage: oom_race_trials ebpf|poll:MS MARGIN_MIB TRIALS [--kube api|kill] \
                 [--kubelet-delay MS] [--other-victim] [--draining-hog] [--draining-victim] \
                 [--grace-projection on|off] [--memory-brake kubepods|pods|off] [--predict MS] \
                 [--beyond-distance] [--reclaim-first]";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [source, margin, trials, rest @ ..] = args.as_slice() else {
        return Err(usage.into());
    };
    let source = match source.split_once(':') {
        None if source == "ebpf" => vec!["--source".into(), "ebpf".into()],
        Some(("poll", ms)) => vec![
            "--source".into(),
            "poll".into(),
            "--poll-interval".into(),
            format!("{}ms", ms.parse::<u64>().map_err(|e| format!("{ms}: {e}"))?),
        ],
        _ => return Err(format!("{source}: not ebpf or poll:MS; {usage}")),
    };
    let number = |s: &str| s.parse::<u64>().map_err(|e| format!("{s}: {e}; {usage}"));
    let mut parsed = Args {
        source,
        margin_mib: number(margin)?,
        trials: number(trials)? as usize,
        kube: None,
        kubelet_delay: Duration::from_millis(100),
        other_victim: false,
        draining_hog: false,
        draining_victim: false,
        grace_projection: None,
        memory_brake: None,
        predict: None,
        beyond_distance: false,
        reclaim_first: false,
    };
    let mut rest = rest.iter();
    while let Some(flag) = rest.next() {
        match (flag.as_str(), rest.clone().next()) {
            ("--kube", Some(mode)) if mode == "api" || mode == "kill" => {
                parsed.kube = rest.next().cloned();
            }
            ("--kubelet-delay", Some(ms)) => {
                parsed.kubelet_delay = Duration::from_millis(number(ms)?);
                rest.next();
            }
            ("--other-victim", _) => parsed.other_victim = true,
            ("--draining-hog", _) => parsed.draining_hog = true,
            ("--draining-victim", _) => parsed.draining_victim = true,
            ("--beyond-distance", _) => parsed.beyond_distance = true,
            ("--reclaim-first", _) => parsed.reclaim_first = true,
            ("--memory-brake", Some(mode))
                if ["kubepods", "pods", "off"].contains(&mode.as_str()) =>
            {
                parsed.memory_brake = rest.next().cloned();
            }
            ("--grace-projection", Some(mode)) if mode == "on" || mode == "off" => {
                parsed.grace_projection = rest.next().cloned();
            }
            ("--predict", Some(ms)) => {
                parsed.predict = Some(format!("{}ms", number(ms)?));
                rest.next();
            }
            _ => return Err(format!("{flag}: unexpected; {usage}")),
        }
    }
    Ok(parsed)
}

/// Where the pods are known to the agent: its manifests directory or the mock API server.
enum Pods {
    Manifests,
    Kube {
        api: Arc<MockKubeApi>,
        /// Holds the kubeconfig.
        files: TempDir,
    },
}

impl Pods {
    fn add(&self, scene: &AgentScene, pod: &TestPod) {
        match self {
            Pods::Manifests => drop(scene.write_manifest(pod)),
            Pods::Kube { api, .. } => api.apply_pod(pod),
        }
    }

    fn remove(&self, scene: &AgentScene, pod: &TestPod) {
        match self {
            Pods::Manifests => scene.remove_manifest(pod),
            Pods::Kube { api, .. } => {
                if api.accepted_evictions().contains(&pod.name) {
                    return; // the stand-in kubelet deleted it
                }
                api.delete_pod(pod);
            }
        }
        scene.kubepods.remove_pod(pod.qos(), &pod.uid);
    }
}

fn main() {
    let args = match parse() {
        Ok(args) => args,
        Err(usage) => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let scene = AgentScene::new("oom-race-bench", "1s", "5s");
    // Kubepods working set above which the threshold is met.
    let pressure_above_mib = if args.beyond_distance {
        2 * STEADY_MIB as u64 + 2 * attach_distance_bound_mib()
    } else {
        AgentScene::PRESSURE_ABOVE_MIB
    };
    let allocatable = format!("{}Mi", pressure_above_mib + THRESHOLD_MIB);
    set_memory_limit(
        &scene.kubepods.dir,
        (pressure_above_mib + args.margin_mib) << 20,
    )
    .expect("limiting kubepods");
    // Far past the limit in one go: only a fast stop beats the kernel's OOM killer.
    let hog_mib = (pressure_above_mib + args.margin_mib).max(1024);
    let pods = if args.kube.is_none() {
        Pods::Manifests
    } else {
        let api = Arc::new(MockKubeApi::start(NODE));
        let files = TempDir::new("oom-race-bench-kubeconfig");
        api.write_kubeconfig(&files.join("kubeconfig"));
        Pods::Kube { api, files }
    };
    let steady: Vec<TestPod> = (0..2)
        .map(|i| TestPod::new(&format!("steady-{i}")).request_mib(100))
        .collect();
    let mut steady_procs = Vec::new();
    for pod in &steady {
        pods.add(&scene, pod);
        let mut proc = scene.run_pod(pod);
        proc.alloc(STEADY_MIB);
        steady_procs.push(proc);
    }
    // Many trials in a slow VM outlast the scene's default minute.
    let mut extra: Vec<&str> = args.source.iter().map(String::as_str).collect();
    extra.extend(["--duration", "1h", "--allocatable-memory", &allocatable]);
    if let Some(mode) = &args.grace_projection {
        extra.extend(["--grace-projection", mode]);
    }
    if let Some(lead) = &args.predict {
        extra.extend(["--predict", lead]);
    }
    if let Some(mode) = &args.memory_brake {
        extra.extend(["--memory-brake", mode]);
    }
    if args.reclaim_first {
        extra.push("--reclaim-first");
    }
    let agent: MonitorProcess = match (&pods, &args.kube) {
        (Pods::Kube { files, .. }, Some(mode)) => {
            extra.extend(["--kube-hard-action", mode]);
            scene.start_kube_agent(&files.join("kubeconfig"), NODE, &extra)
        }
        _ => scene.start_agent(&extra),
    };
    for trial in 0..args.trials {
        // The hog outranks the bystander by priority, so the kubelet's order picks the
        // bystander first when there is one.
        let hog = TestPod::new(&format!("hog-{trial}")).priority(1000);
        let bystander = args
            .other_victim
            .then(|| TestPod::new(&format!("bystander-{trial}")));
        let mut trial_pods = vec![hog.clone()];
        trial_pods.extend(bystander.clone());
        let mut procs = Vec::new();
        for pod in &trial_pods {
            pods.add(&scene, pod);
            procs.push(scene.run_pod(pod));
        }
        if bystander.is_some() {
            procs[1].alloc(20);
            if args.draining_victim {
                procs[1].drain_after_term(60_000);
            }
        }
        if args.draining_hog {
            // Allocates on for a minute after SIGTERM: only force stops it.
            procs[0].drain_after_term(60_000);
        }
        let kubelet = match &pods {
            Pods::Kube { api, .. } => Some(StandInKubelet::start(
                api.clone(),
                trial_pods
                    .iter()
                    .map(|p| (p.clone(), scene.pod_dir(p)))
                    .collect(),
                args.kubelet_delay,
            )),
            Pods::Manifests => None,
        };
        // Let the agent learn of the new pods before the race starts.
        std::thread::sleep(Duration::from_millis(300));
        if args.beyond_distance {
            // Detached again at a resync (every 10 s by default) once the last hog is gone.
            wait_detached(&agent, Duration::from_secs(30));
        }
        let attaches_before = gate_lines(&agent, ATTACHED);
        let before = scene.kubepods.oom_kills();
        let started = Instant::now();
        let started_ns = monotonic_ns();
        procs[0].command(&format!("alloc {hog_mib}"));
        let ended_ms = started.elapsed().as_secs_f64() * 1e3;
        let decision = agent.next_timed_line(Duration::from_secs(3));
        let decided_ms = decision
            .as_ref()
            .map(|l| l.read_ns.saturating_sub(started_ns) as f64 / 1e6);
        let decision = decision.map(|l| l.text);
        let oom_kills = scene.kubepods.oom_kills() - before;
        let decision_json = decision
            .as_deref()
            .and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok());
        let victim = decision_json
            .as_ref()
            .and_then(|d| d["name"].as_str().map(str::to_owned));
        let grace_ms = decision_json
            .as_ref()
            .and_then(|d| d["grace"]["given_ms"].as_u64());
        // A brake holds the node for the next eviction when the first victim freed too
        // little: that one comes an eviction interval (1 s) later.
        let mut evicted: Vec<String> = victim.iter().cloned().collect();
        let next_within = Duration::from_millis(if args.other_victim { 1500 } else { 50 });
        while let Some(line) = agent.next_line(next_within) {
            if let Some(name) = serde_json::from_str::<serde_json::Value>(&line)
                .ok()
                .and_then(|d| d["name"].as_str().map(str::to_owned))
            {
                evicted.push(name);
            }
        }
        println!(
            "{}",
            json!({
                "trial": trial,
                "win": oom_kills == 0 && decision.is_some(),
                "oom_kills": oom_kills,
                "victim": victim,
                "evicted": evicted,
                "grace_ms": grace_ms,
                "args": std::env::args().skip(1).collect::<Vec<_>>(),
                "hog_ended_ms": ended_ms,
                "decided_ms": decided_ms,
                "stat_programs_attached_in_race": gate_lines(&agent, ATTACHED) > attaches_before,
            })
        );
        if let Some(kubelet) = kubelet {
            kubelet.finish();
        }
        drop(procs);
        for pod in &trial_pods {
            pods.remove(&scene, pod);
        }
        while agent.next_line(Duration::from_millis(50)).is_some() {}
        // One eviction per interval (1 s): the next trial starts after it.
        std::thread::sleep(Duration::from_millis(1200));
    }
    drop(agent);
    drop(steady_procs);
}

/// How many times the agent logged `line` so far.
fn gate_lines(agent: &MonitorProcess, line: &str) -> usize {
    agent.stderr().lines().filter(|l| l.contains(line)).count()
}

/// Waits until the agent's stat programs are detached; fails the run when they are not
/// within `within`, as the scene then does not start beyond the distance (a panic, so the
/// scene's cgroups are removed on the way out).
fn wait_detached(agent: &MonitorProcess, within: Duration) {
    let deadline = Instant::now() + within;
    while gate_lines(agent, DETACHED) <= gate_lines(agent, ATTACHED) {
        assert!(
            Instant::now() <= deadline,
            "the stat programs were not detached within {within:?}: the race would not start \
             beyond the distance\n{}",
            agent.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
