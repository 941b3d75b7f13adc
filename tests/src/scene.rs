//! One agent's world in a test: cgroups, manifests, checkpoint and configuration.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use crate::{Allocator, Kubepods, MonitorProcess, TempDir, TestCgroup, TestPod, cgroup_tree};

/// One agent's world in a test: a kubepods tree below a test cgroup, a manifests directory,
/// a checkpoint directory and a configuration file. The agent sees pressure once the
/// kubepods working set passes [`AgentScene::PRESSURE_ABOVE_MIB`].
pub struct AgentScene {
    pub cgroup: TestCgroup,
    pub kubepods: Kubepods,
    pub manifests: TempDir,
    pub checkpoint: TempDir,
    pub config: PathBuf,
    _files: TempDir,
}

impl AgentScene {
    /// `--allocatable-memory`.
    pub const ALLOCATABLE: &str = "300Mi";
    /// The hard `allocatableMemory.available` threshold.
    pub const THRESHOLD: &str = "100Mi";
    /// Kubepods working set above which the threshold is met.
    pub const PRESSURE_ABOVE_MIB: u64 = 200;

    /// A scene whose configuration has the given `evictionInterval` and `podCleanupTimeout`
    /// (Go durations).
    pub fn new(name: &str, eviction_interval: &str, pod_cleanup_timeout: &str) -> Self {
        Self::with_config(
            name,
            &format!(
                "evictionHard:\n  allocatableMemory.available: {}\n\
                 monitor:\n  evictionInterval: {eviction_interval}\n  \
                 podCleanupTimeout: {pod_cleanup_timeout}\n",
                Self::THRESHOLD
            ),
        )
    }

    /// A scene whose KubeletConfiguration holds `eviction_fields` (YAML lines).
    pub fn with_config(name: &str, eviction_fields: &str) -> Self {
        let cgroup = TestCgroup::create(name);
        let kubepods = Kubepods::create(&cgroup);
        let files = TempDir::new(&format!("{name}-files"));
        let config = files.join("kubelet-config.yaml");
        fs::write(
            &config,
            format!(
                "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
                 {eviction_fields}"
            ),
        )
        .expect("writing the configuration");
        Self {
            cgroup,
            kubepods,
            manifests: TempDir::new(&format!("{name}-pods")),
            checkpoint: TempDir::new(&format!("{name}-state")),
            config,
            _files: files,
        }
    }

    /// Writes the pod's manifest.
    pub fn write_manifest(&self, pod: &TestPod) -> PathBuf {
        pod.write_to(&self.manifests.path)
    }

    /// Removes the pod's manifest.
    pub fn remove_manifest(&self, pod: &TestPod) {
        let path = self.manifests.join(&format!("{}.yaml", pod.name));
        fs::remove_file(&path).unwrap_or_else(|e| panic!("removing {}: {e}", path.display()));
    }

    /// The pod's cgroup directory.
    pub fn pod_dir(&self, pod: &TestPod) -> PathBuf {
        self.kubepods.pod_dir(pod.qos(), &pod.uid)
    }

    /// Creates the pod's cgroup (with a container cgroup) and starts an allocator in the
    /// container.
    pub fn run_pod(&self, pod: &TestPod) -> Allocator {
        Allocator::start_in(&self.kubepods.create_pod(pod.qos(), &pod.uid))
    }

    /// Writes the manifest, creates the cgroup and starts an allocator in it.
    pub fn start_pod(&self, pod: &TestPod) -> Allocator {
        self.write_manifest(pod);
        self.run_pod(pod)
    }

    /// Waits until the pod's cgroup subtree holds no process.
    pub fn wait_until_empty(&self, pod: &TestPod, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.pod_pids(pod).is_empty() {
            assert!(
                Instant::now() < deadline,
                "{} still has processes {:?} after {within:?}",
                pod.name,
                self.pod_pids(pod)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Pids in the pod's cgroup subtree (empty when it is gone).
    pub fn pod_pids(&self, pod: &TestPod) -> Vec<i32> {
        cgroup_tree::subtree_pids(&self.pod_dir(pod))
    }

    /// The agent's flags for this scene: no metrics, and unless `extra` sets them JSON
    /// decisions, `--config` (the scene's), `--allocatable-memory` ([`Self::ALLOCATABLE`]),
    /// `--pods` (the scene's manifests; not with `--kube`), `--source auto` with a short poll
    /// interval,
    /// `--duration` 60s and this scene's checkpoint directory.
    pub fn agent_args(&self, extra: &[&str]) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        let mut args: Vec<String> = Vec::new();
        if !extra.contains(&"--pods") && !extra.contains(&"--kube") {
            args.extend(["--pods".into(), path(&self.manifests.path)]);
        }
        if !extra.contains(&"--allocatable-memory") {
            args.extend(["--allocatable-memory".into(), Self::ALLOCATABLE.into()]);
        }
        args.extend(
            ["--kubepods-cgroup", &self.kubepods.rel]
                .iter()
                .map(ToString::to_string),
        );
        if !extra.contains(&"--config") {
            args.extend(["--config".into(), path(&self.config)]);
        }
        if !extra.contains(&"--output") {
            args.extend(["--output".into(), "json".into()]);
        }
        if !extra.contains(&"--checkpoint-dir") {
            args.extend(["--checkpoint-dir".into(), path(&self.checkpoint.path)]);
        }
        for (flag, default) in [("--source", "auto"), ("--poll-interval", "200ms")] {
            if !extra.contains(&flag) {
                args.extend([flag.to_string(), default.to_string()]);
            }
        }
        if !extra.contains(&"--metrics-addr") {
            args.push("--no-metrics".into());
        }
        if !extra.contains(&"--duration") {
            args.extend(["--duration".into(), "60s".into()]);
        }
        args.extend(extra.iter().map(ToString::to_string));
        args
    }

    /// Starts the agent on this scene and waits until it runs: its manifest watch is set up,
    /// its kernel programs attached, and it has logged its configuration.
    pub fn start_agent(&self, extra: &[&str]) -> MonitorProcess {
        self.start_agent_with(extra, |_| {})
    }

    /// [`Self::start_agent`] with the command configured first (see
    /// [`MonitorProcess::start_with`]).
    pub fn start_agent_with(
        &self,
        extra: &[&str],
        configure: impl FnOnce(&mut Command),
    ) -> MonitorProcess {
        Self::until_ready(MonitorProcess::start_with(
            self.agent_args(extra),
            configure,
        ))
    }

    /// As [`Self::start_agent`], with the agent inside the cgroup `dir`.
    pub fn start_agent_in(&self, extra: &[&str], dir: &Path) -> MonitorProcess {
        Self::until_ready(MonitorProcess::start_in(self.agent_args(extra), dir))
    }

    /// Starts the agent with `--kube` on this scene, its pods served by the (mock) API server
    /// of `kubeconfig` for `node`, and waits until it knows them.
    pub fn start_kube_agent(
        &self,
        kubeconfig: &Path,
        node: &str,
        extra: &[&str],
    ) -> MonitorProcess {
        let mut args = self.agent_args(extra);
        // --kube replaces the scene's manifests directory.
        let at = args.iter().position(|a| a == "--pods").expect("--pods");
        args.drain(at..at + 2);
        args.extend(
            ["--kube", "--node-name", node, "--kubeconfig"]
                .map(String::from)
                .into_iter()
                .chain([kubeconfig.display().to_string()]),
        );
        wait_for_start(
            MonitorProcess::start(args),
            Duration::from_secs(20),
            |l| l.contains("pods: ") && l.contains(" known"),
            |l| l.contains("monitor: "),
        )
    }

    fn until_ready(agent: MonitorProcess) -> MonitorProcess {
        // A hang's guard, not a speed check: an emulated VM on a busy host took over 30 s to
        // load the kernel programs through fentry.
        wait_for_start(
            agent,
            Duration::from_secs(90),
            |l| l.contains(" source ") && l.contains(" thresholds "),
            |l| l.contains("Error"),
        )
    }
}

/// Waits until the agent logs a line that shows it `started`, or one that shows it `failed`,
/// and panics with its log unless it started within `timeout`.
fn wait_for_start(
    agent: MonitorProcess,
    timeout: Duration,
    started: impl Fn(&str) -> bool,
    failed: impl Fn(&str) -> bool,
) -> MonitorProcess {
    let line = agent.wait_stderr(timeout, |l| started(l) || failed(l));
    assert!(
        line.as_deref().is_some_and(&started),
        "the agent did not start: {}",
        agent.stderr()
    );
    agent
}
