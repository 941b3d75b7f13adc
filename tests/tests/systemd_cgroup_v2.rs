//! The kubelet's systemd cgroup driver on cgroup v2, end to end: real slices and scopes at
//! the hierarchy root named as the kubelet, containerd and CRI-O name them
//! (`kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/
//! cri-containerd-<id>.scope`, `crio-<id>.scope`), pods in them allocating memory, and the
//! agent run with `--kubepods-cgroup /kubepods.slice` evicting the pod the kubelet would.
//! A static pod, listed as its mirror pod, has its cgroup named after the kubelet's uid (the
//! mirror annotation), and `monitor trace --pods` attributes its OOM kill to it.
//!
//! VM only (`cargo xtask vm-test`): it creates `/kubepods.slice` at the root of the cgroup2
//! hierarchy, which on a real node belongs to the kubelet.
use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use monitor::cgroupfs::{CgroupVersion, MemoryHierarchy};
use serde_json::Value;
use tests::{
    Allocator, MonitorProcess, TempDir, Trace, binary, cgroup_tree, process_alive, running_as_root,
    set_memory_limit,
};

const KUBEPODS: &str = "/kubepods.slice";
const MIB: u64 = 1 << 20;
/// How long a decision may take to show up under TCG.
const DECIDE: Duration = Duration::from_secs(30);

/// One test at a time: both own `/kubepods.slice`.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// True when this runs in the test VM with the memory controller on cgroup2.
fn in_the_vm(test: &str) -> bool {
    if !running_as_root(test) {
        return false;
    }
    if std::env::var_os("MONITOR_VM").is_none() {
        tests::cannot_run(
            tests::Reason::VmOnly,
            "creates /kubepods.slice at the cgroup root",
        );
        return false;
    }
    let hierarchy = MemoryHierarchy::discover().expect("memory controller");
    assert_eq!(
        hierarchy.version,
        CgroupVersion::V2,
        "the VM must mount the memory controller on cgroup2"
    );
    true
}

/// A pod on the node: its manifest and where the runtime put its container.
struct Pod {
    name: &'static str,
    /// `metadata.uid` as the API server gives it.
    uid: &'static str,
    /// The kubelet's uid: the mirror annotation of a static pod, else the uid.
    kubelet_uid: &'static str,
    /// The QoS slice level below kubepods.slice (`None` for Guaranteed).
    qos: Option<&'static str>,
    /// The container scope, as the runtime names it.
    scope: &'static str,
    manifest: String,
}

impl Pod {
    /// The container's cgroup below the hierarchy root, as the kubelet's systemd driver and
    /// the runtime name it. Dashes in the uid become underscores in the slice name.
    fn scope_rel(&self) -> String {
        let uid = self.kubelet_uid.replace('-', "_");
        match self.qos {
            Some(qos) => format!(
                "{KUBEPODS}/kubepods-{qos}.slice/kubepods-{qos}-pod{uid}.slice/{}",
                self.scope
            ),
            None => format!("{KUBEPODS}/kubepods-pod{uid}.slice/{}", self.scope),
        }
    }
}

/// A pod manifest bound to `node`: `memory` is its request (and limit when `guaranteed`).
fn manifest(
    name: &str,
    uid: &str,
    memory: Option<&str>,
    guaranteed: bool,
    mirror: Option<&str>,
) -> String {
    let mut text = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: default\n  uid: {uid}\n"
    );
    if let Some(kubelet_uid) = mirror {
        text += &format!(
            "  annotations:\n    kubernetes.io/config.source: file\n    \
             kubernetes.io/config.mirror: {kubelet_uid}\n    kubernetes.io/config.hash: {kubelet_uid}\n"
        );
    }
    text += "spec:\n  nodeName: node-1\n  containers:\n  - name: main\n    image: registry.k8s.io/pause:3.9\n";
    if let Some(memory) = memory {
        text += &format!("    resources:\n      requests: {{cpu: 100m, memory: {memory}}}\n");
        if guaranteed {
            text += &format!("      limits: {{cpu: 100m, memory: {memory}}}\n");
        }
    }
    text + "status:\n  phase: Running\n"
}

/// The node: `/kubepods.slice` with its QoS slices, removed (processes killed) on drop.
struct Node {
    root: PathBuf,
    kubepods: PathBuf,
    manifests: TempDir,
}

impl Node {
    fn create(name: &str) -> Node {
        let root = MemoryHierarchy::discover()
            .expect("memory controller")
            .mount;
        let kubepods = root.join(KUBEPODS.trim_start_matches('/'));
        assert!(
            !kubepods.exists(),
            "{} exists already: not this test's to use",
            kubepods.display()
        );
        for qos in ["burstable", "besteffort"] {
            cgroup_tree::create_dirs(&root, &format!("{KUBEPODS}/kubepods-{qos}.slice"), true)
                .expect("creating the QoS slices");
        }
        // Everything the pods allocate stays under a limit, far above what the test uses.
        set_memory_limit(&kubepods, 700 * MIB).expect("limiting kubepods.slice");
        Node {
            root,
            kubepods,
            manifests: TempDir::new(name),
        }
    }

    /// Writes the pod's manifest and creates its slices and container scope.
    fn add(&self, pod: &Pod) -> PathBuf {
        fs::write(
            self.manifests.join(&format!("{}.yaml", pod.name)),
            &pod.manifest,
        )
        .expect("writing the manifest");
        cgroup_tree::create_dirs(&self.root, &pod.scope_rel(), true)
            .unwrap_or_else(|e| panic!("creating {}: {e}", pod.scope_rel()))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        cgroup_tree::remove_tree(&self.kubepods);
    }
}

const CONTAINERD_ID: &str = "4c1d0a3f9b8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a392817061f2e";
const CRIO_ID: &str = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d";

fn pods() -> [Pod; 4] {
    [
        Pod {
            name: "hog",
            uid: "0b6a4b49-3c2e-4c55-9d1e-5f0a7e2d9c11",
            kubelet_uid: "0b6a4b49-3c2e-4c55-9d1e-5f0a7e2d9c11",
            qos: Some("burstable"),
            scope: "cri-containerd-4c1d0a3f9b8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a392817061f2e.scope",
            manifest: manifest(
                "hog",
                "0b6a4b49-3c2e-4c55-9d1e-5f0a7e2d9c11",
                Some("20Mi"),
                false,
                None,
            ),
        },
        Pod {
            name: "steady",
            uid: "7f1c2d3e-4b5a-4697-8877-66554433aa22",
            kubelet_uid: "7f1c2d3e-4b5a-4697-8877-66554433aa22",
            qos: None,
            scope: "cri-containerd-7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b.scope",
            manifest: manifest(
                "steady",
                "7f1c2d3e-4b5a-4697-8877-66554433aa22",
                Some("100Mi"),
                true,
                None,
            ),
        },
        Pod {
            name: "batch",
            uid: "c0ffee00-1111-4222-8333-444455556666",
            kubelet_uid: "c0ffee00-1111-4222-8333-444455556666",
            qos: Some("besteffort"),
            scope: "crio-9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d.scope",
            manifest: manifest(
                "batch",
                "c0ffee00-1111-4222-8333-444455556666",
                None,
                false,
                None,
            ),
        },
        // A static pod as kubectl lists its mirror: the API's uid, and the kubelet's own in
        // the mirror annotation, which names its cgroup.
        Pod {
            name: "etcd-node-1",
            uid: "a1b2c3d4-0000-4000-8000-0000000000e7",
            kubelet_uid: "8ac8c3a9ee4d182b8d934f20e971ada7",
            qos: Some("burstable"),
            scope: "cri-containerd-1f2e3d4c5b6a79880716253443526170f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4.scope",
            manifest: manifest(
                "etcd-node-1",
                "a1b2c3d4-0000-4000-8000-0000000000e7",
                Some("10Mi"),
                false,
                Some("8ac8c3a9ee4d182b8d934f20e971ada7"),
            ),
        },
    ]
}

#[test]
fn the_agent_evicts_the_right_pod_under_the_systemd_driver() {
    if !in_the_vm("the_agent_evicts_the_right_pod_under_the_systemd_driver") {
        return;
    }
    let _serial = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    assert_eq!((CONTAINERD_ID.len(), CRIO_ID.len()), (64, 64));
    let node = Node::create("systemd-evict");
    let files = TempDir::new("systemd-evict-files");
    let config = files.join("kubelet-config.yaml");
    fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         cgroupDriver: systemd\nevictionHard:\n  allocatableMemory.available: 100Mi\n\
         evictionPressureTransitionPeriod: 0s\nmonitor:\n  evictionInterval: 10s\n",
    )
    .unwrap();
    let [hog, steady, batch, etcd] = pods();
    // Listed but not this kubelet's to rank: bound to another node, and finished.
    for (name, uid, node_name, phase) in [
        (
            "elsewhere",
            "e15e0000-0000-4000-8000-000000000001",
            "node-2",
            "Running",
        ),
        (
            "done",
            "d0de0000-0000-4000-8000-000000000002",
            "node-1",
            "Succeeded",
        ),
    ] {
        let text = manifest(name, uid, Some("10Mi"), false, None)
            .replace("nodeName: node-1", &format!("nodeName: {node_name}"))
            .replace("phase: Running", &format!("phase: {phase}"));
        fs::write(node.manifests.join(&format!("{name}.yaml")), text).unwrap();
    }
    let mut procs: Vec<Allocator> = [&hog, &steady, &batch, &etcd]
        .iter()
        .map(|pod| Allocator::start_in(&node.add(pod)))
        .collect();
    // Within its 100Mi: the guaranteed pod; 10Mi over nothing: the best-effort one; 40Mi
    // over 10Mi: the static pod, critical, never evicted.
    procs[1].alloc(40);
    procs[2].alloc(10);
    procs[3].alloc(50);

    let path = |p: &Path| p.display().to_string();
    let checkpoint = files.join("state");
    let agent = MonitorProcess::start([
        "--pods",
        &path(&node.manifests.path),
        "--node-name",
        "node-1",
        "--kubepods-cgroup",
        KUBEPODS,
        "--allocatable-memory",
        "300Mi",
        "--config",
        &path(&config),
        "--checkpoint-dir",
        &path(&checkpoint),
        "--output",
        "json",
        "--source",
        "auto",
        "--poll-interval",
        "200ms",
        "--no-metrics",
        "--duration",
        "90s",
    ]);
    let ready = agent.wait_stderr(Duration::from_secs(60), |l| {
        l.contains(" thresholds ") || l.contains("Error")
    });
    assert!(
        ready.as_deref().is_some_and(|l| l.contains(" thresholds ")),
        "the agent did not start: {}",
        agent.stderr()
    );
    agent
        .wait_stderr(Duration::from_secs(20), |l| l.contains("pods: "))
        .filter(|l| l.contains("pods: 4 added, 0 removed, 4 known"))
        .unwrap_or_else(|| panic!("not the 4 pods of node-1: {}", agent.stderr()));

    // 150Mi over a 20Mi request: 250Mi of the 300Mi allocatable in use, past the threshold.
    // No answer to wait for: the eviction may end the helper before the allocation does.
    procs[0].command("alloc 150");
    let decision = agent.next_decision(DECIDE);
    assert_eq!(decision["action"], "evict", "{decision:#}");
    assert_eq!(decision["name"], "hog", "{decision:#}");
    assert_eq!(decision["uid"], hog.uid, "{decision:#}");
    assert_eq!(decision["rank"]["exceedsRequest"], true, "{decision:#}");
    assert_eq!(decision["rank"]["request"], 20 * MIB, "{decision:#}");

    let hog_scope = node.root.join(hog.scope_rel().trim_start_matches('/'));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !cgroup_tree::pids_in(&hog_scope).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the hog's scope still has processes: {}",
            agent.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !process_alive(procs[0].pid()),
        "the evicted pod's process is gone"
    );
    for (proc, pod) in procs[1..].iter().zip([&steady, &batch, &etcd]) {
        assert!(process_alive(proc.pid()), "{} runs on", pod.name);
    }
    let stderr = agent.stderr();
    for pod in [&steady, &batch, &etcd] {
        assert!(
            !stderr.contains(&format!("pod {} (", pod.name)),
            "the agent did not find {}'s cgroup: {stderr}",
            pod.name
        );
    }
}

#[test]
fn trace_attributes_a_static_pods_oom_kill_to_it_under_the_systemd_driver() {
    if !in_the_vm("trace_attributes_a_static_pods_oom_kill_to_it_under_the_systemd_driver") {
        return;
    }
    let _serial = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let node = Node::create("systemd-trace");
    let [hog, _, batch, etcd] = pods();
    for pod in [&hog, &batch] {
        node.add(pod);
    }
    let scope = node.add(&etcd);
    set_memory_limit(&scope, 32 * MIB).expect("limiting the static pod's container");

    let trace = Trace::start(&[
        "--output",
        "json",
        "--duration",
        "15s",
        "--min-stall",
        "1ms",
        "--pods",
        node.manifests.path.to_str().unwrap(),
        "--kubepods-cgroup",
        KUBEPODS,
    ]);
    // 64 MiB in a container limited to 32 MiB: the OOM killer ends it.
    let mut cmd = Command::new(binary("alloc", "MONITOR_ALLOC_BIN"));
    cmd.stdin(Stdio::piped()).stdout(Stdio::null());
    let mut victim = cgroup_tree::spawn_in(&mut cmd, &scope).expect("starting the allocator");
    let mut stdin = victim.stdin.take().unwrap();
    writeln!(stdin, "alloc 64").unwrap();
    // At end of input a surviving allocator exits, so a missed OOM fails instead of hanging.
    drop(stdin);
    let status = victim.wait().unwrap();
    assert!(!status.success(), "64 MiB fit under a 32 MiB limit");
    let (status, stdout, stderr) = trace.finish();
    assert!(status.success(), "monitor trace failed: {stderr}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        .collect();
    let kill = lines
        .iter()
        .find(|l| l["type"] == "oom_kill" && l["pid"] == victim.id())
        .unwrap_or_else(|| panic!("no OOM kill of the allocator; stderr: {stderr}\n{stdout}"));
    assert_eq!(kill["pod"]["name"], "etcd-node-1", "{kill}");
    assert_eq!(kill["pod"]["namespace"], "default", "{kill}");
    assert!(
        kill["cgroup_path"]
            .as_str()
            .is_some_and(|p| p.ends_with(etcd.scope)),
        "{kill}"
    );
    let summary = lines.last().unwrap();
    assert_eq!(summary["type"], "summary", "{summary}");
    assert!(
        summary.to_string().contains("default/etcd-node-1"),
        "the summary names the static pod: {summary}"
    );
}
