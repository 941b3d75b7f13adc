//! `cargo xtask demo`: a simulated dense node on this machine. Forty pods with mixed requests,
//! priorities and QoS classes get real cgroups under a demo-owned kubepods tree, each with a
//! real process allocating memory in its own pattern; the agent watches them in dry-run with a
//! live view of the signals, the ranking and its decisions. Everything is removed on exit or
//! Ctrl-C.
use std::{
    fs,
    io::{BufRead as _, BufReader, Write as _},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread,
    time::Duration,
};

use anyhow::{Context as _, bail};

use crate::process::{cargo, status, target_dir};

/// Below the memory hierarchy's root.
const DEMO_ROOT: &str = "monitor-demo";
/// Allocatable memory given to the agent: the pods below grow past it minus the default
/// 100Mi hard threshold after about twenty seconds, when the batch pods have grown.
const ALLOCATABLE: &str = "1600Mi";

/// How a pod's process uses memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pattern {
    /// Allocates this many MiB once.
    Steady(u32),
    /// Adds `step` MiB every tick up to `cap` MiB.
    Grow { step: u32, cap: u32 },
    /// Allocates `size` MiB, frees it the next tick, and again.
    Spike(u32),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DemoPod {
    pub name: String,
    pub namespace: &'static str,
    pub uid: String,
    pub qos: &'static str,
    pub request_mib: u32,
    pub priority: i32,
    pub pattern: Pattern,
}

/// The simulated node: 40 pods.
pub(crate) fn demo_pods() -> Vec<DemoPod> {
    let mut pods = Vec::new();
    let mut add = |name: String, namespace, qos, request_mib, priority, pattern| {
        let uid = format!("00000000-0000-4000-8000-{:012}", pods.len());
        pods.push(DemoPod {
            name,
            namespace,
            uid,
            qos,
            request_mib,
            priority,
            pattern,
        });
    };
    for i in 0..10 {
        add(
            format!("web-{i}"),
            "shop",
            "burstable",
            32,
            0,
            Pattern::Steady(20 + i),
        );
    }
    for i in 0..10 {
        add(
            format!("api-{i}"),
            "shop",
            "guaranteed",
            64,
            1000,
            Pattern::Steady(40),
        );
    }
    for i in 0..5 {
        add(
            format!("batch-{i}"),
            "jobs",
            "besteffort",
            0,
            0,
            Pattern::Grow {
                step: 4 + i,
                cap: 100,
            },
        );
    }
    for i in 5..10 {
        add(
            format!("batch-{i}"),
            "jobs",
            "besteffort",
            0,
            0,
            Pattern::Steady(8),
        );
    }
    for i in 0..5 {
        add(
            format!("cache-{i}"),
            "shop",
            "burstable",
            128,
            100,
            Pattern::Spike(48 + 8 * i),
        );
    }
    for i in 0..5 {
        add(
            format!("node-agent-{i}"),
            "kube-system",
            "burstable",
            16,
            2_000_001_000,
            Pattern::Grow { step: 2, cap: 40 },
        );
    }
    pods
}

/// The pod's cgroup below kubepods, by the kubelet's cgroupfs naming.
pub(crate) fn pod_cgroup(pod: &DemoPod) -> String {
    match pod.qos {
        "guaranteed" => format!("pod{}", pod.uid),
        qos => format!("{qos}/pod{}", pod.uid),
    }
}

/// A Pod manifest the agent reads; requests equal limits for guaranteed pods.
pub(crate) fn manifest(pod: &DemoPod) -> String {
    let resources = match (pod.qos, pod.request_mib) {
        ("besteffort", _) => "{}".to_string(),
        ("guaranteed", mib) => format!(
            "{{requests: {{memory: {mib}Mi, cpu: 100m}}, limits: {{memory: {mib}Mi, cpu: 100m}}}}"
        ),
        (_, mib) => format!("{{requests: {{memory: {mib}Mi}}}}"),
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {}, namespace: {}, uid: {}}}\n\
         spec:\n  priority: {}\n  containers: [{{name: main, image: demo, resources: {resources}}}]\n",
        pod.name, pod.namespace, pod.uid, pod.priority
    )
}

/// What the demo's configuration file holds: the kubelet's defaults, with short intervals so
/// decisions show up every few seconds.
const CONFIG: &str = "\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
evictionHard:
  allocatableMemory.available: 100Mi
  memory.available: 100Mi
monitor:
  evictionInterval: 5s
  podCleanupTimeout: 5s
";

pub(crate) fn run(duration: Duration, enforce: bool) -> anyhow::Result<()> {
    status(cargo().args([
        "build",
        "--package",
        "monitor",
        "--package",
        "tests",
        "--bins",
    ]))?;
    let bin = target_dir()?.join("debug");
    let (mount, v2) = test_harness::cgroup_tree::memory_mount()?;
    let stop = Arc::new(AtomicBool::new(false));
    let handler_stop = stop.clone();
    ctrlc::set_handler(move || handler_stop.store(true, Ordering::SeqCst))
        .context("installing the Ctrl-C handler")?;

    let work = std::env::temp_dir().join(format!("monitor-demo-{}", std::process::id()));
    fs::create_dir_all(work.join("pods"))?;
    let tree = DemoTree::create(&mount, v2)?;
    let pods = demo_pods();
    for pod in &pods {
        fs::write(
            work.join("pods").join(format!("{}.yaml", pod.name)),
            manifest(pod),
        )?;
        tree.mkdir(&format!("kubepods/{}", pod_cgroup(pod)))?;
    }
    fs::write(work.join("config.yaml"), CONFIG)?;
    let workers: Vec<Worker> = pods
        .iter()
        .map(|pod| {
            Worker::start(
                &bin.join("alloc"),
                &tree.dir(&format!("kubepods/{}", pod_cgroup(pod))),
                pod.pattern,
                stop.clone(),
            )
        })
        .collect::<anyhow::Result<_>>()?;
    let metrics_addr = metrics_addr();
    let top = if metrics_addr == DEFAULT_METRICS_ADDR {
        String::new()
    } else {
        format!(" --addr {metrics_addr}")
    };
    eprintln!(
        "demo: {} pods under {}/kubepods, allocatable {ALLOCATABLE}; the agent prints its \
         decisions below and the ranking every 2 s; in another terminal, `{} top{top}` shows \
         it live. Ctrl-C ends the demo.",
        pods.len(),
        tree.root.display(),
        bin.join("monitor").display()
    );
    let mut agent = Command::new(bin.join("monitor"));
    agent
        .args(["--pods", &work.join("pods").to_string_lossy()])
        .args(["--kubepods-cgroup", &format!("/{DEMO_ROOT}/kubepods")])
        .args(["--allocatable-memory", ALLOCATABLE])
        .args(["--config", &work.join("config.yaml").to_string_lossy()])
        .args([
            "--checkpoint-dir",
            &work.join("checkpoint").to_string_lossy(),
        ])
        .args(["--status-interval", "2s", "--metrics-addr", &metrics_addr])
        .args(["--duration", &format!("{}s", duration.as_secs())]);
    if !enforce {
        agent.arg("--dry-run");
    }
    let result = agent.status().context("running the agent");
    stop.store(true, Ordering::SeqCst);
    drop(workers);
    drop(tree);
    let _ = fs::remove_dir_all(&work);
    let code = result?;
    // Ctrl-C ends the agent by SIGINT, which is how the demo is meant to end.
    if !code.success() && code.code().is_some() {
        bail!("the agent exited with {code}");
    }
    Ok(())
}

/// The agent's own default address, where `monitor top` looks without flags.
const DEFAULT_METRICS_ADDR: &str = "127.0.0.1:9753";

/// Where the demo's agent serves `/debug/ranking` for `monitor top`: the default address,
/// or a free port when something listens there already (an agent on this machine).
fn metrics_addr() -> String {
    if std::net::TcpListener::bind(DEFAULT_METRICS_ADDR).is_ok() {
        return DEFAULT_METRICS_ADDR.into();
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|free| free.local_addr())
        .map_or_else(|_| DEFAULT_METRICS_ADDR.into(), |addr| addr.to_string())
}

/// The demo's cgroups; killed and removed on drop, deepest first.
struct DemoTree {
    root: PathBuf,
    v2: bool,
}

impl DemoTree {
    fn create(mount: &Path, v2: bool) -> anyhow::Result<Self> {
        let tree = Self {
            root: mount.join(DEMO_ROOT),
            v2,
        };
        if tree.root.exists() {
            eprintln!(
                "demo: removing {} left by an earlier run",
                tree.root.display()
            );
            test_harness::cgroup_tree::remove_tree(&tree.root);
        }
        test_harness::cgroup_tree::create_dirs(mount, DEMO_ROOT, v2)
            .with_context(|| format!("creating {}", tree.root.display()))?;
        Ok(tree)
    }

    fn dir(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn mkdir(&self, rel: &str) -> anyhow::Result<()> {
        test_harness::cgroup_tree::create_dirs(&self.root, rel, self.v2)
            .with_context(|| format!("creating {}", self.root.join(rel).display()))?;
        Ok(())
    }
}

impl Drop for DemoTree {
    fn drop(&mut self) {
        test_harness::cgroup_tree::remove_tree(&self.root);
    }
}

/// One pod's allocating process and the thread that drives its pattern.
struct Worker {
    child: Child,
    driver: Option<thread::JoinHandle<()>>,
}

impl Worker {
    fn start(
        alloc: &Path,
        cgroup: &Path,
        pattern: Pattern,
        stop: Arc<AtomicBool>,
    ) -> anyhow::Result<Self> {
        let mut cmd = Command::new(alloc);
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = test_harness::cgroup_tree::spawn_in(&mut cmd, cgroup)
            .with_context(|| format!("starting {}", alloc.display()))?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        let mut answers = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let driver = thread::spawn(move || {
            let mut held = 0;
            let mut tick = 0u32;
            while !stop.load(Ordering::SeqCst) {
                let command = match pattern {
                    Pattern::Steady(mib) if tick == 0 => Some(format!("alloc {mib}")),
                    Pattern::Grow { step, cap } if held + step <= cap => {
                        held += step;
                        Some(format!("alloc {step}"))
                    }
                    Pattern::Spike(mib) if tick.is_multiple_of(2) => Some(format!("alloc {mib}")),
                    Pattern::Spike(_) => Some("free".to_string()),
                    _ => None,
                };
                if let Some(command) = command
                    && (writeln!(stdin, "{command}").is_err() || answers.next().is_none())
                {
                    return;
                }
                tick += 1;
                thread::sleep(Duration::from_secs(1));
            }
        });
        Ok(Self {
            child,
            driver: Some(driver),
        })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(driver) = self.driver.take() {
            let _ = driver.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_finds_the_agent_at_the_default_address_or_is_told_another() {
        // Held here, the default is taken, as by an agent already running on the machine.
        let held = std::net::TcpListener::bind(DEFAULT_METRICS_ADDR);
        let addr: std::net::SocketAddr = metrics_addr().parse().expect("an address");
        assert!(addr.ip().is_loopback(), "{addr}");
        assert_ne!(addr.to_string(), DEFAULT_METRICS_ADDR, "taken: {held:?}");
        assert!(std::net::TcpListener::bind(addr).is_ok(), "{addr} is free");
        drop(held);
    }

    #[test]
    fn forty_pods_with_unique_uids_and_critical_ones() {
        let pods = demo_pods();
        assert!(pods.len() >= 40);
        let mut uids: Vec<_> = pods.iter().map(|p| p.uid.clone()).collect();
        uids.sort();
        uids.dedup();
        assert_eq!(uids.len(), pods.len());
        assert!(pods.iter().any(|p| p.priority >= 2_000_000_000));
        assert_eq!(uids[0].len(), 36, "uids look like Kubernetes uids");
    }

    #[test]
    fn cgroups_follow_the_kubelet_cgroupfs_naming() {
        let pods = demo_pods();
        let api = pods.iter().find(|p| p.qos == "guaranteed").unwrap();
        assert_eq!(pod_cgroup(api), format!("pod{}", api.uid));
        let batch = pods.iter().find(|p| p.qos == "besteffort").unwrap();
        assert_eq!(pod_cgroup(batch), format!("besteffort/pod{}", batch.uid));
    }

    #[test]
    fn manifests_carry_qos_defining_resources() {
        let pods = demo_pods();
        let api = manifest(pods.iter().find(|p| p.qos == "guaranteed").unwrap());
        assert!(api.contains("limits: {memory: 64Mi, cpu: 100m}"), "{api}");
        let batch = manifest(pods.iter().find(|p| p.qos == "besteffort").unwrap());
        assert!(batch.contains("resources: {}"), "{batch}");
        assert!(batch.contains("uid: 00000000-0000-4000-8000-"), "{batch}");
    }
}
