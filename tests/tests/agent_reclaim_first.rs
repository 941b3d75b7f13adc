//! Reclaim before eviction (`--reclaim-first`, root) with real cgroups and real page cache:
//! a pod whose working set is idle file cache it read twice (so the kubelet counts it) is
//! relieved through its `memory.reclaim` instead of evicted; the same pod is evicted without
//! the flag, as the kubelet would; a pod whose cache is in use, and an anonymous hog, are
//! evicted with the flag on. Where the kernel cannot (cgroup v1 on this host, Linux before
//! 5.19) the flag is refused with its reason, in the agent's log and in `monitor doctor`, and
//! each scene's pod is evicted as without it. Runs in the 6.1 VM and on
//! this host, whose kernels count a file read twice as active cache (see [`CacheScene`]).
//!
//! Every scene has 300Mi allocatable and a hard `allocatableMemory.available<100Mi`
//! threshold: pressure once the pods' working sets pass 200Mi.
use std::{path::PathBuf, process::Command, time::Duration};

use monitor::{
    cgroupfs::{MemoryHierarchy, stats},
    source::probe::kernel_version,
};
use tests::{
    AgentScene, Allocator, KubeScene, MonitorProcess, TempDir, TestPod,
    kube_api::MockKubeApi,
    monitor_bin, running_as_root,
    scene_decisions::{DECIDE, KILL, MIB, alive, assert_no_decision, hog_is_evicted_once},
};

/// What `monitor doctor` says of the flag here: `Ok(())` when it can work, else the phrase its
/// reason must hold. Checked against the kernel's release and the hierarchy: memory.reclaim
/// came in 5.19, and only on cgroup v2.
fn reclaim_possible() -> Result<(), &'static str> {
    let out = Command::new(monitor_bin())
        .args(["doctor", "--output", "json"])
        .output()
        .expect("running monitor doctor");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("doctor JSON");
    let release = report["kernel"].as_str().expect("kernel release");
    let v2 = report["cgroup"]["found"]["version"] == "v2";
    let expected = v2 && kernel_version(release).expect("kernel version") >= (5, 19);
    let said = &report["reclaim_first"];
    match said["missing"].as_str() {
        None => {
            assert!(
                expected,
                "doctor says possible on {release} (v2: {v2}): {said}"
            );
            assert_eq!(said["found"], true, "{said}");
            Ok(())
        }
        Some(reason) => {
            assert!(
                !expected,
                "doctor refuses on {release} with cgroup v2: {reason}"
            );
            let why = if v2 {
                "memory.reclaim came in Linux 5.19"
            } else {
                "cgroup v1 has no memory.reclaim"
            };
            assert!(
                reason.contains(why),
                "doctor's reason names {why:?}: {reason}"
            );
            Err(why)
        }
    }
}

const FLAG: &str = "--reclaim-first";

/// Checks what the agent started with the flag says of it: on, or refused with the reason
/// doctor gives.
fn flag_said(agent: MonitorProcess, possible: Result<(), &str>) -> MonitorProcess {
    let said = |l: &str| match possible {
        Ok(()) => l.contains("--reclaim-first: page cache is taken back"),
        Err(why) => l.contains("--reclaim-first refused on this node: ") && l.contains(why),
    };
    if !agent.stderr().lines().any(said) {
        agent
            .wait_stderr(Duration::from_secs(10), said)
            .unwrap_or_else(|| panic!("the agent says {possible:?}: {}", agent.stderr()));
    }
    agent
}

/// The scene with the pods' manifests written.
fn listed<'a>(scene: &'a AgentScene, pods: [&TestPod; 2]) -> &'a AgentScene {
    for pod in pods {
        scene.write_manifest(pod);
    }
    scene
}

/// A reader requesting 10Mi whose working set is 150Mi of file cache it wrote and read twice
/// (active, so the kubelet counts it), idle since, and a 100Mi pod beside it; 80Mi of
/// anonymous memory in that pod takes the pods past 200Mi. The reader heads the kubelet's
/// order (140Mi over its request).
struct CacheScene {
    scene: AgentScene,
    reader: TestPod,
    reader_proc: Allocator,
    anon_proc: Allocator,
    cache: PathBuf,
    _files: TempDir,
}

impl CacheScene {
    /// The pods started and the cache read twice, under the agent `start` runs once it made
    /// the pods known to it (manifests, or the mock API server).
    fn start(
        name: &str,
        start: impl FnOnce(&AgentScene, [&TestPod; 2]) -> MonitorProcess,
    ) -> (Self, MonitorProcess) {
        let scene = AgentScene::new(name, "1s", "5s");
        let files = TempDir::new(&format!("{name}-cache"));
        let (reader, anon) = (
            TestPod::new("reader").request_mib(10),
            TestPod::new("anon").request_mib(100),
        );
        let agent = start(&scene, [&reader, &anon]);
        let mut reader_proc = scene.run_pod(&reader);
        let anon_proc = scene.run_pod(&anon);
        let cache = files.join("cache");
        reader_proc.cache(150, &cache);
        reader_proc.read_file(&cache);
        reader_proc.read_file(&cache);
        let this = Self {
            scene,
            reader,
            reader_proc,
            anon_proc,
            cache,
            _files: files,
        };
        // The premise of kubernetes#43916. Not so under the multi-generational LRU (Debian's
        // 6.12 turns it on), which leaves pages read through read() in its older generations:
        // the test runs where the kernel boots with the classic LRU (6.1, and this host).
        let counted = this.reader_working_set();
        assert!(
            counted >= 120 * MIB as u64,
            "the premise: the kubelet counts the cache read twice, yet the working set is {counted}"
        );
        (this, agent)
    }

    /// The kubelet's working set of the reader's cgroup.
    fn reader_working_set(&self) -> u64 {
        let version = MemoryHierarchy::discover()
            .expect("the memory hierarchy")
            .version;
        stats::read(&self.scene.pod_dir(&self.reader), version)
            .expect("reading the reader's cgroup")
            .working_set()
    }

    /// 80Mi of anonymous memory: the pods pass 200Mi.
    fn press(&mut self) {
        self.anon_proc.alloc(80);
    }

    /// The agent evicts the reader, and only it.
    fn reader_evicted(&self, agent: &MonitorProcess) -> serde_json::Value {
        let decision = agent.next_decision(DECIDE);
        assert_eq!(decision["name"], "reader", "{decision:#}");
        self.scene.wait_until_empty(&self.reader, KILL);
        assert!(alive(&self.anon_proc), "only the reader");
        decision
    }
}

#[test]
fn idle_cache_is_reclaimed_instead_of_evicting_its_pod() {
    if !running_as_root("idle_cache_is_reclaimed_instead_of_evicting_its_pod") {
        return;
    }
    let possible = reclaim_possible();
    let (mut s, mut agent) = CacheScene::start("reclaim-idle", |scene, pods| {
        flag_said(listed(scene, pods).start_agent(&[FLAG]), possible)
    });
    let before = s.reader_working_set();
    s.press();
    if possible.is_err() {
        // Refused: the kubelet's eviction, as without the flag.
        s.reader_evicted(&agent);
        agent.stop();
        return;
    }
    let relieved = agent
        .wait_stderr(DECIDE, |l| {
            l.contains("memory pressure over: first reclaimed")
        })
        .unwrap_or_else(|| panic!("reclaim relieves the node: {}", agent.stderr()));
    assert!(
        relieved.contains("default/reader") && relieved.contains("then evicted nobody"),
        "{relieved}"
    );
    assert_no_decision(&agent, Duration::from_secs(3), "reclaim relieved the node");
    assert!(
        alive(&s.reader_proc) && alive(&s.anon_proc),
        "nobody evicted"
    );
    let after = s.reader_working_set();
    assert!(
        after + 16 * MIB as u64 <= before,
        "the reader's working set went down: {before} -> {after}"
    );
    assert_eq!(s.scene.kubepods.oom_kills(), 0, "no kernel OOM kill");
    agent.stop();
}

#[test]
fn without_the_flag_the_same_pod_is_evicted_as_the_kubelet_would() {
    if !running_as_root("without_the_flag_the_same_pod_is_evicted_as_the_kubelet_would") {
        return;
    }
    let (mut s, mut agent) = CacheScene::start("reclaim-off", |scene, pods| {
        listed(scene, pods).start_agent(&[])
    });
    s.press();
    let decision = s.reader_evicted(&agent);
    assert!(decision.get("reclaim_first").is_none(), "{decision:#}");
    agent.stop();
}

#[test]
fn a_pod_whose_cache_is_in_use_is_evicted_after_all() {
    if !running_as_root("a_pod_whose_cache_is_in_use_is_evicted_after_all") {
        return;
    }
    let possible = reclaim_possible();
    let (mut s, mut agent) = CacheScene::start("reclaim-hot", |scene, pods| {
        flag_said(listed(scene, pods).start_agent(&[FLAG]), possible)
    });
    let cache = s.cache.clone();
    s.reader_proc.keep_reading(&cache);
    // A server's shutdown: it drains for half a second after SIGTERM, reading on.
    s.reader_proc.drain_after_term(500);
    s.press();
    let decision = s.reader_evicted(&agent);
    if possible.is_ok() {
        let said = decision["reclaim_first"].as_str().unwrap_or_default();
        assert!(said.starts_with("first reclaimed"), "{decision:#}");
        assert!(
            said.contains(", over: "),
            "the ladder was over first: {said}"
        );
    }
    agent.stop();
}

#[test]
fn an_agent_killed_while_its_ladder_runs_leaves_nothing_to_undo() {
    if !running_as_root("an_agent_killed_while_its_ladder_runs_leaves_nothing_to_undo") {
        return;
    }
    let possible = reclaim_possible();
    let (mut s, mut agent) = CacheScene::start("reclaim-crash", |scene, pods| {
        flag_said(listed(scene, pods).start_agent(&[FLAG]), possible)
    });
    s.press();
    if possible.is_err() {
        s.reader_evicted(&agent);
        return;
    }
    // The brake holds the node while the ladder runs: SIGKILL then, a step under way or
    // about to be. The kernel finishes a write it began; nothing of the agent's is undone but
    // the brake, which its record lets the next start lift.
    agent
        .wait_stderr(DECIDE, |l| l.contains("memory brake on"))
        .unwrap_or_else(|| panic!("the ladder begins: {}", agent.stderr()));
    // SAFETY: kill(2) of the agent this test started, by its pid.
    unsafe { libc::kill(agent.pid() as i32, libc::SIGKILL) };
    agent
        .wait(Duration::from_secs(10))
        .expect("the agent ends on SIGKILL");
    // A ladder quicker than the kill lifted its brake itself.
    let lifted = agent.stderr().contains("memory brake lifted");
    drop(agent);
    let mut next = s.scene.start_agent(&[FLAG]);
    if !lifted {
        next.wait_stderr(Duration::from_secs(10), |l| {
            l.contains("memory brake: a previous agent stopped while holding it")
        })
        .unwrap_or_else(|| panic!("the next start lifts the brake: {}", next.stderr()));
    }
    // Pressure left or not, the new agent's own ladder (or the step the killed one began)
    // spares the reader: nobody is evicted.
    assert_no_decision(&next, Duration::from_secs(4), "after a restart mid-ladder");
    assert!(
        alive(&s.reader_proc) && alive(&s.anon_proc),
        "nobody evicted"
    );
    let high = std::fs::read_to_string(s.scene.kubepods.dir.join("memory.high"))
        .expect("the kubepods' memory.high");
    assert_eq!(high.trim(), "max", "no brake left: {}", next.stderr());
    assert_eq!(s.scene.kubepods.oom_kills(), 0, "no kernel OOM kill");
    next.stop();
}

#[test]
fn an_anonymous_hog_is_evicted_with_the_flag_on() {
    if !running_as_root("an_anonymous_hog_is_evicted_with_the_flag_on") {
        return;
    }
    let possible = reclaim_possible();
    let scene = AgentScene::new("reclaim-anon", "10s", "10s");
    let mut agent = flag_said(scene.start_agent(&[FLAG]), possible);
    hog_is_evicted_once(&scene, &mut agent);
    agent.stop();
}

#[test]
fn with_kube_a_spared_eviction_is_told_in_an_event_on_the_pod() {
    if !running_as_root("with_kube_a_spared_eviction_is_told_in_an_event_on_the_pod") {
        return;
    }
    let possible = reclaim_possible();
    // The pods come from the MOCK API server, as no real one can run here.
    let api = MockKubeApi::start(KubeScene::NODE);
    let (_files, kubeconfig) = api.kubeconfig_in("reclaim-kube-config");
    let (mut s, mut agent) = CacheScene::start("reclaim-kube", |scene, pods| {
        for pod in pods {
            api.apply_pod(pod);
        }
        flag_said(
            scene.start_kube_agent(&kubeconfig, KubeScene::NODE, &[FLAG]),
            possible,
        )
    });
    s.press();
    let within = Duration::from_secs(20);
    let wanted = if possible.is_ok() {
        "ReclaimedBeforeEviction"
    } else {
        "Evicted"
    };
    let event = api
        .wait_until(within, |api| {
            api.events().into_iter().find(|e| e["reason"] == wanted)
        })
        .unwrap_or_else(|| panic!("no {wanted} event: {:?}; {}", api.events(), agent.stderr()));
    assert_eq!(event["involvedObject"]["name"], "reader", "{event:#}");
    if possible.is_ok() {
        assert_eq!(event["type"], "Normal", "{event:#}");
        let message = event["message"].as_str().unwrap_or_default();
        assert!(message.contains("nobody was evicted"), "{event:#}");
        assert!(
            !api.requests()
                .iter()
                .any(|r| r.path().ends_with("/eviction")),
            "nothing evicted"
        );
        assert!(alive(&s.reader_proc), "the reader runs on");
    }
    agent.stop();
}
