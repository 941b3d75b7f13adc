//! Evictions in flight and the pod listing, end to end with the real binary, real cgroups and
//! real processes (root only): an evicted pod that drains for a while after SIGTERM holds its
//! memory whatever its manifest does, so nothing else may go for it, and it gets one SIGTERM
//! wave only.
use std::time::{Duration, Instant};

use serde_json::Value;
use tests::{AgentScene, Allocator, MonitorProcess, TestPod, process_alive, running_as_root};

/// How long a decision may take to show up once the threshold is crossed (a slow VM
/// included).
const DECIDE: Duration = Duration::from_secs(20);
/// How long the victim keeps its memory after SIGTERM.
const DRAIN_MS: u64 = 5_000;
const DRAIN: Duration = Duration::from_millis(DRAIN_MS);
/// The grace period a soft eviction gives it: longer than its drain, so it leaves by itself.
const GRACE_SECONDS: u64 = 20;

/// A soft `allocatableMemory.available<100Mi` (met for 1 s: a zero grace period would make
/// it hard) evicting with
/// 20 s of grace, a 1 s interval and a 30 s cleanup timeout; a `victim` 140Mi over its
/// request that drains for [`DRAIN`] after SIGTERM, beside `next` (20Mi over its request,
/// the next candidate) and `steady` (within its request). Together they are 230Mi of the
/// 300Mi allocatable; without the victim, 80Mi.
struct DrainingVictim {
    scene: AgentScene,
    victim: TestPod,
    others: Vec<(TestPod, Allocator)>,
    _victim_proc: Allocator,
    agent: MonitorProcess,
}

impl DrainingVictim {
    /// Starts the agent and the pods, and waits for the victim's eviction.
    fn evicted(name: &str) -> (Self, Instant) {
        let scene = AgentScene::with_config(
            name,
            &format!(
                "evictionHard: {{}}\n\
                 evictionSoft:\n  allocatableMemory.available: 100Mi\n\
                 evictionSoftGracePeriod:\n  allocatableMemory.available: 1s\n\
                 evictionMaxPodGracePeriod: {GRACE_SECONDS}\n\
                 monitor:\n  evictionInterval: 1s\n  podCleanupTimeout: 30s\n"
            ),
        );
        let agent = scene.start_agent(&[]);
        let victim = TestPod::new("victim").request_mib(10);
        let mut others = Vec::new();
        for (pod, mib) in [
            (TestPod::new("next").request_mib(20), 40),
            (TestPod::new("steady").request_mib(300), 40),
        ] {
            let mut process = scene.start_pod(&pod);
            process.alloc(mib);
            others.push((pod, process));
        }
        let mut victim_proc = scene.start_pod(&victim);
        victim_proc.drain_after_term(DRAIN_MS);
        victim_proc.alloc(150);
        let decision = agent.next_decision(DECIDE);
        let decided_at = Instant::now();
        assert_soft_eviction(&decision, &victim);
        let state = Self {
            scene,
            victim,
            others,
            _victim_proc: victim_proc,
            agent,
        };
        (state, decided_at)
    }

    /// Removes the victim's manifest and waits until the agent has taken the removal in.
    fn remove_victim_manifest(&self) {
        let before = self.pod_changes(" 1 removed");
        self.scene.remove_manifest(&self.victim);
        self.wait_for_pod_change(" 1 removed", before);
    }

    /// Writes the victim's manifest back and waits until the agent has taken it in.
    fn write_victim_manifest_back(&self) {
        let before = self.pod_changes("1 added");
        self.scene.write_manifest(&self.victim);
        self.wait_for_pod_change("1 added", before);
    }

    /// How many pod set changes the agent logged that say `what`.
    fn pod_changes(&self, what: &str) -> usize {
        self.agent
            .stderr()
            .lines()
            .filter(|l| l.contains("pods: ") && l.contains(what))
            .count()
    }

    fn wait_for_pod_change(&self, what: &str, before: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.pod_changes(what) == before {
            assert!(
                Instant::now() < deadline,
                "the agent did not log a pod set change \"{what}\":\n{}",
                self.agent.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the victim's cgroup is empty, failing on any decision meanwhile; returns
    /// how long after the decision it emptied.
    fn no_decision_while_the_victim_runs(&self, decided_at: Instant) -> Duration {
        let deadline = decided_at + Duration::from_secs(GRACE_SECONDS + 10);
        while !self.scene.pod_pids(&self.victim).is_empty() {
            assert!(Instant::now() < deadline, "the victim never went");
            if let Some(line) = self.agent.next_line(Duration::from_millis(50)) {
                panic!(
                    "decided {:?} after the victim's SIGTERM while it still held its memory \
                     (pids {:?}): {line}\n{}",
                    decided_at.elapsed(),
                    self.scene.pod_pids(&self.victim),
                    self.agent.stderr()
                );
            }
        }
        decided_at.elapsed()
    }

    /// With the victim gone the pressure is gone: nothing more is decided, and the other
    /// pods live.
    fn nothing_else_goes(&mut self) {
        if let Some(line) = self.agent.next_line(Duration::from_secs(3)) {
            panic!("decided once the victim was gone: {line}");
        }
        for (pod, process) in &self.others {
            assert!(process_alive(process.pid()), "{} was killed", pod.name);
        }
        self.agent.assert_running("after the eviction");
        let waves = self
            .agent
            .stderr()
            .matches("eviction of default/victim started")
            .count();
        assert_eq!(waves, 1, "one SIGTERM wave:\n{}", self.agent.stderr());
        self.agent.stop();
    }
}

fn assert_soft_eviction(decision: &Value, pod: &TestPod) {
    assert_eq!(decision["action"], "evict", "{decision:#}");
    assert_eq!(decision["uid"], pod.uid.as_str(), "{decision:#}");
    assert_eq!(decision["threshold_kind"], "soft", "{decision:#}");
    assert_eq!(
        decision["grace_period_seconds"], GRACE_SECONDS,
        "{decision:#}"
    );
}

#[test]
fn a_victim_whose_manifest_goes_mid_drain_holds_the_next_eviction_until_its_memory_is_back() {
    if !running_as_root("a_victim_whose_manifest_goes_mid_drain_holds_the_next_eviction") {
        return;
    }
    let (mut scene, decided_at) = DrainingVictim::evicted("inflight-deleted");
    // `kubectl delete`, a controller replacing the pod: the manifest goes at once, the
    // processes drain.
    scene.remove_victim_manifest();
    let gone_after = scene.no_decision_while_the_victim_runs(decided_at);
    assert!(
        gone_after + Duration::from_millis(500) >= DRAIN,
        "the victim drained for {DRAIN:?} while holding its memory, gone after {gone_after:?}"
    );
    scene.nothing_else_goes();
}

#[test]
fn a_victim_listed_again_with_its_uid_gets_one_sigterm_wave_and_one_decision() {
    if !running_as_root("a_victim_listed_again_with_its_uid_gets_one_sigterm_wave") {
        return;
    }
    let (mut scene, decided_at) = DrainingVictim::evicted("inflight-relisted");
    scene.remove_victim_manifest();
    scene.write_victim_manifest_back();
    scene.no_decision_while_the_victim_runs(decided_at);
    scene.nothing_else_goes();
}
