//! What the end-to-end tests expect of an [`AgentScene`](crate::AgentScene)'s decisions: the
//! scene's hard `allocatableMemory.available<100Mi` threshold, its 1 s grace period, and how
//! long a decision and a kill may take.
use std::time::Duration;

use serde_json::Value;

use crate::{AgentScene, Allocator, MonitorProcess, TestPod, process_alive};

/// How long a decision may take to show up once the threshold is crossed (a slow VM
/// included).
pub const DECIDE: Duration = Duration::from_secs(20);
/// How long the agent may take to empty an evicted pod's cgroup: the hard eviction grace
/// period of 1 s, then force, on a slow VM.
pub const KILL: Duration = Duration::from_secs(15);
pub const MIB: i64 = 1 << 20;

/// The hog grows past the threshold beside a calm pod; exactly one decision, for the hog,
/// which is killed while the calm pod and the agent live on.
pub fn hog_is_evicted_once(scene: &AgentScene, agent: &mut MonitorProcess) {
    let hog = TestPod::new("hog").request_mib(20);
    let calm = TestPod::new("calm").request_mib(100);
    let calm_proc = scene.start_pod(&calm);
    let mut hog_proc = scene.start_pod(&hog);
    hog_proc.command("alloc 230");
    let decision = agent.next_decision(DECIDE);
    assert_eq!(decision["name"], "hog", "{decision:#}");
    scene.wait_until_empty(&hog, KILL);
    assert!(process_alive(calm_proc.pid()), "only the hog died");
    assert!(agent.running(), "the agent died:\n{}", agent.stderr());
}

/// Asserts that the agent decides nothing for `window`.
pub fn assert_no_decision(agent: &MonitorProcess, window: Duration, why: &str) {
    if let Some(line) = agent.next_line(window) {
        panic!("{why}, yet the agent decided: {line}");
    }
}

/// Asserts that `decision` is `action` on `pod` for the scene's hard threshold, taken under
/// pressure.
pub fn assert_decision(decision: &Value, action: &str, pod: &TestPod) {
    assert_eq!(decision["action"], action, "{decision:#}");
    assert_eq!(decision["name"], pod.name.as_str(), "{decision:#}");
    assert_eq!(decision["uid"], pod.uid.as_str(), "{decision:#}");
    assert_eq!(decision["namespace"], "default", "{decision:#}");
    assert_eq!(
        decision["signal"], "allocatableMemory.available",
        "{decision:#}"
    );
    assert_eq!(decision["threshold_kind"], "hard", "{decision:#}");
    assert_eq!(decision["threshold"], 100 * MIB, "{decision:#}");
    let observed = decision["observed"].as_i64().expect("observed");
    assert!(
        observed < 100 * MIB,
        "decided without pressure: {decision:#}"
    );
    assert_eq!(decision["grace_period_seconds"], 1, "{decision:#}");
}

/// True while the allocator's process lives.
pub fn alive(allocator: &Allocator) -> bool {
    process_alive(allocator.pid())
}
