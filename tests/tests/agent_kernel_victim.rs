//! A decision names what the kernel would do without it: the process its OOM killer would
//! choose at the OOM point the node is nearest, and that process's pod (root only).
use std::time::Duration;

use tests::{AgentScene, TestPod, running_as_root, set_memory_limit};

/// How long a decision and its follow-up may take (a slow VM included).
const DECIDE: Duration = Duration::from_secs(20);

/// The kubelet evicts the pod over its request; the kernel's OOM killer, which knows only
/// resident memory and `oom_score_adj`, would take the bigger pod that stays within its
/// request. The dry-run decision says both.
#[test]
fn a_dry_run_decision_names_the_pod_the_oom_killer_would_take_instead() {
    if !running_as_root("a_dry_run_decision_names_the_pod_the_oom_killer_would_take_instead") {
        return;
    }
    let scene = AgentScene::new("agent-kernel-victim", "10s", "10s");
    // A kubepods limit far nearer than the node's memory: the kernel would act among the
    // pods' processes, not among every process of this machine.
    set_memory_limit(&scene.kubepods.dir, 1 << 30).expect("limiting kubepods");
    let big = TestPod::new("big").request_mib(200);
    let over = TestPod::new("over").request_mib(20);
    let mut agent = scene.start_agent(&["--dry-run"]);
    let mut over_proc = scene.start_pod(&over);
    let mut big_proc = scene.start_pod(&big);
    over_proc.alloc(60);
    big_proc.alloc(160);

    let decision = agent.next_decision(DECIDE);
    assert_eq!(decision["action"], "would_evict", "{decision:#}");
    assert_eq!(decision["name"], "over", "{decision:#}");
    let line = agent
        .wait_stderr(DECIDE, |l| l.contains("the OOM killer would"))
        .unwrap_or_else(|| panic!("no counterfactual: {}", agent.stderr()));
    let expected = format!(
        "without it, the OOM killer would kill pid {} (alloc) of pod default/big at the \
         kubepods cgroup's limit",
        big_proc.pid()
    );
    assert!(line.contains(&expected), "{line}");
    agent.stop();
}
