//! From dry run to acting and back on one checkpoint directory, as the DaemonSet and its
//! enforce overlay share one (root only; real v1 memory cgroups, real allocating processes,
//! victims that drain on SIGTERM and log each one they get). A dry run's decision is never
//! carried out by the acting agent that follows it, which decides again from what it sees;
//! an acting agent's eviction in flight is neither taken over nor cleared by a dry run.
use std::{
    fs,
    path::PathBuf,
    time::{Duration, Instant},
};

use serde_json::Value;
use tests::{
    AgentScene, Allocator, TempDir, TestPod, process_alive, running_as_root, sigterms_logged,
};

/// How long a decision may take once the threshold is crossed (a slow VM included).
const DECIDE: Duration = Duration::from_secs(20);
/// Longer than the old path took to kill (22 ms) plus the hard grace period (1 s) and a
/// cleanup wait, on a slow machine.
const NOTHING_FOR: Duration = Duration::from_secs(4);

/// A victim in its own pod, draining `drain_ms` after SIGTERM, each SIGTERM logged.
struct Victim {
    pod: TestPod,
    process: Allocator,
    log: PathBuf,
    _logs: TempDir,
}

impl Victim {
    fn start(scene: &AgentScene, name: &str, drain_ms: u64) -> Self {
        let pod = TestPod::new("victim").request_mib(10);
        let logs = TempDir::new(&format!("{name}-sigterms"));
        let log = logs.join("sigterms");
        let mut process = scene.start_pod(&pod);
        process.drain_after_term_logging(drain_ms, &log);
        Self {
            pod,
            process,
            log,
            _logs: logs,
        }
    }

    fn sigterms(&self) -> usize {
        sigterms_logged(&self.log)
    }

    fn alive(&self) -> bool {
        process_alive(self.process.pid())
    }
}

fn assert_decision(decision: &Value, action: &str, pod: &TestPod) {
    assert_eq!(decision["action"], action, "{decision:#}");
    assert_eq!(decision["uid"], pod.uid.as_str(), "{decision:#}");
}

/// The agent's checkpoint as JSON.
fn checkpoint(scene: &AgentScene) -> Value {
    let text = fs::read_to_string(scene.checkpoint.join("agent_state")).expect("the checkpoint");
    serde_json::from_str(&text).expect("the checkpoint is JSON")
}

#[test]
fn a_dry_run_s_decision_is_never_carried_out_and_the_acting_agent_decides_on_what_it_sees() {
    if !running_as_root("a_dry_run_s_decision_is_never_carried_out") {
        return;
    }
    // A 60 s eviction interval: had the dry run's last eviction been carried over, the acting
    // agent could not decide within DECIDE.
    let scene = AgentScene::new("handover-dry-to-acting", "60s", "5s");
    let mut victim = Victim::start(&scene, "handover-dry-to-acting", 500);
    let mut dry_run = scene.start_agent(&["--dry-run"]);
    victim.process.alloc(230);
    assert_decision(&dry_run.next_decision(DECIDE), "would_evict", &victim.pod);
    dry_run.stop();
    assert_eq!(checkpoint(&scene)["v4"]["written_by"], "dry_run");
    assert!(
        checkpoint(&scene)["state"]["awaiting_cleanup"].is_null(),
        "nothing a dry run decided is where an older acting agent reads: {:#}",
        checkpoint(&scene)
    );

    // The pressure is gone before the acting agent starts: no threshold is met.
    victim.process.free();
    let mut acting = scene.start_agent(&[]);
    acting
        .wait_stderr(Duration::from_secs(10), |l| {
            l.contains("dropped the eviction of default/victim")
                && l.contains("decided by a dry run")
                && l.contains("not resumed")
        })
        .expect("the log says what was dropped and why");
    if let Some(line) = acting.next_line(NOTHING_FOR) {
        panic!("decided with no threshold met: {line}\n{}", acting.stderr());
    }
    assert!(victim.alive(), "killed on a dry run's decision");
    assert_eq!(victim.sigterms(), 0, "signalled on a dry run's decision");
    assert!(
        !acting.stderr().contains("resuming the eviction"),
        "{}",
        acting.stderr()
    );

    // A threshold met now: decided again, on what the acting agent sees, and carried out
    // once: one SIGTERM, the victim drains and leaves.
    victim.process.command("alloc 230");
    assert_decision(&acting.next_decision(DECIDE), "evict", &victim.pod);
    scene.wait_until_empty(&victim.pod, Duration::from_secs(15));
    assert_eq!(victim.sigterms(), 1, "one SIGTERM wave");
    acting.assert_running("the acting agent");
    acting.stop();
    assert_eq!(checkpoint(&scene)["v4"]["written_by"], "acting");
}

#[test]
fn an_acting_eviction_in_flight_is_neither_taken_over_nor_cleared_by_a_dry_run() {
    if !running_as_root("an_acting_eviction_in_flight_is_neither_taken_over_nor_cleared") {
        return;
    }
    // A soft threshold with 8 s of grace: the eviction is in flight across both restarts.
    let scene = AgentScene::with_config(
        "handover-acting-to-dry",
        "evictionHard: {}\n\
         evictionSoft:\n  allocatableMemory.available: 100Mi\n\
         evictionSoftGracePeriod:\n  allocatableMemory.available: 1s\n\
         evictionMaxPodGracePeriod: 8\n\
         monitor:\n  evictionInterval: 1s\n  podCleanupTimeout: 30s\n",
    );
    // It drains for longer than the test: only force ends it.
    let mut victim = Victim::start(&scene, "handover-acting-to-dry", 120_000);
    let acting = scene.start_agent(&[]);
    victim.process.alloc(230);
    assert_decision(&acting.next_decision(DECIDE), "evict", &victim.pod);
    let decided = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    drop(acting);
    assert_eq!(victim.sigterms(), 1);

    // The dry run, past the eviction's deadline: it signals nothing and keeps the acting
    // agent's eviction for the next acting agent.
    let mut dry_run = scene.start_agent(&["--dry-run"]);
    dry_run
        .wait_stderr(Duration::from_secs(10), |l| {
            l.contains("the eviction of default/victim")
                && l.contains("not taken over by this dry run")
        })
        .expect("the dry run says it leaves the acting eviction alone");
    while decided.elapsed() < Duration::from_secs(8 + 2) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(victim.alive(), "a dry run forced the victim");
    assert_eq!(victim.sigterms(), 1, "a dry run signalled the victim");
    dry_run.stop();
    let file = checkpoint(&scene);
    assert_eq!(file["v4"]["written_by"], "dry_run");
    assert_eq!(
        file["state"]["awaiting_cleanup"]["pod"]["uid"],
        victim.pod.uid.as_str(),
        "the acting eviction is still in the checkpoint: {file:#}"
    );

    // The next acting agent finishes its own eviction (its deadline is past: force now),
    // without a second SIGTERM.
    let mut again = scene.start_agent(&[]);
    again
        .wait_stderr(Duration::from_secs(10), |l| {
            l.contains("resuming the eviction of default/victim")
        })
        .expect("the acting agent resumes its own eviction");
    scene.wait_until_empty(&victim.pod, Duration::from_secs(10));
    assert_eq!(victim.sigterms(), 1, "one SIGTERM wave in all");
    again.assert_running("the agent started again");
    again.stop();
}
