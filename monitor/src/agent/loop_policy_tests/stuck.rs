//! Kills whose processes outlive force (frozen where they could not be thawed, asleep in the
//! kernel) over the same fakes: the pod is passed over for the next one in the kubelet's
//! order, never asked for again, counted by cause, and its eviction settled once its cgroup
//! is empty.
use std::time::Duration;

use super::*;
use crate::action::{KillOutcome, KillReport, StuckCause, StuckProcess};

/// Every kill ends with a frozen process left, its SIGKILL pending.
fn frozen() -> ActionOutcome {
    ActionOutcome::Killed(KillReport {
        outcome: KillOutcome::TimedOut {
            remaining: vec![StuckProcess {
                pid: 4242,
                comm: "postgres".into(),
                cause: StuckCause::Frozen {
                    cgroup: "/pause".into(),
                    state: "FROZEN".into(),
                    why: "thawing it failed: Read-only file system".into(),
                },
            }],
        },
        elapsed: Duration::from_secs(6),
        terminated: 1,
        forced: true,
    })
}

#[tokio::test]
async fn a_pod_whose_processes_outlive_force_is_passed_over_and_never_asked_for_again() {
    // By the kubelet's order: hog (1,000 MiB above its request), then next (500), then
    // steady (within its request).
    let pods = [
        ("hog", 100, 1100),
        ("next", 100, 600),
        ("steady", 4000, 300),
    ];
    let mut s = scene(Mode::Acting(frozen), &pods, 8192 - 300);
    s.agent.evaluate(None);
    assert_eq!(s.asked(), ["hog"]);
    s.poll();
    assert_eq!(s.asked(), ["hog"], "one eviction in flight");
    s.finish_actions().await;
    assert_eq!(s.agent.actions.stuck().get("frozen"), Some(&1));
    assert_eq!(s.agent.actions.failures(), 1);
    // The node is still short: the next pod goes at once (no interval in this scene), not
    // hog.
    assert_eq!(s.asked(), ["hog", "next"]);
    s.finish_actions().await;
    s.finish_actions().await;
    s.poll();
    assert_eq!(
        s.asked(),
        ["hog", "next", "steady"],
        "each pod once, in the kubelet's order"
    );
    assert_eq!(s.agent.actions.stuck().get("frozen"), Some(&3));
    assert!(
        s.agent.core.pod("uid-hog").is_some_and(|row| !row.stopped),
        "its processes are still there"
    );
    // Thawed by its owner, hog died of the pending SIGKILL: its cgroup is empty.
    s.machine
        .0
        .borrow_mut()
        .pods
        .remove("/kubepods/burstable/poduid-hog");
    s.poll();
    assert!(
        s.agent.core.pod("uid-hog").is_some_and(|row| row.stopped),
        "its eviction is over"
    );
}
