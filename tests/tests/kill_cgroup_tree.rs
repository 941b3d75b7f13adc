//! Killing a pod's cgroup subtree with real cgroups and real processes (root only).
use std::time::Duration;

use monitor::action::{KillOutcome, KillReport, KillTimings, kill_cgroup_tree};
use tests::{Allocator, TermIgnorer, TestCgroup, cgroup_pids, running_as_root};

const GRACE: Duration = Duration::from_millis(800);
const FORCE_FOR: Duration = Duration::from_secs(10);

/// Kills the test cgroup's `pod` subtree with the given grace period, forcing for `force_for`.
async fn kill_pod(cgroup: &TestCgroup, grace: Duration, force_for: Duration) -> KillReport {
    let timings = KillTimings {
        grace,
        force_for,
        reap_wait: Duration::ZERO,
        terminate: true,
    };
    kill_cgroup_tree(
        &cgroup.hierarchy,
        &cgroup.child_rel("pod"),
        timings,
        &tokio::sync::Notify::new(),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn a_process_ignoring_sigterm_is_killed_after_the_grace_period() {
    if !running_as_root("a_process_ignoring_sigterm_is_killed_after_the_grace_period") {
        return;
    }
    // Processes live in a leaf: cgroup v2 allows none where children get controllers.
    let cgroup = TestCgroup::create("kill-ignorer");
    let pod = cgroup.child("pod");
    let ignorer = TermIgnorer::start_in(&pod);
    assert_eq!(cgroup_pids(&pod), [ignorer.pid() as i32]);

    let report = kill_pod(&cgroup, GRACE, FORCE_FOR).await;

    assert_eq!(report.outcome, KillOutcome::Emptied);
    assert!(
        report.forced,
        "SIGTERM was ignored, so force was needed: {report:?}"
    );
    assert_eq!(report.terminated, 1);
    assert!(
        report.elapsed >= GRACE,
        "not before the grace period: {report:?}"
    );
    assert!(
        report.elapsed < GRACE + Duration::from_secs(2),
        "soon after it: {report:?}"
    );
    assert!(cgroup_pids(&pod).is_empty());
}

/// The agent cuts a running grace period short when the node cannot afford the rest.
#[tokio::test]
async fn force_now_ends_the_grace_period_at_once() {
    if !running_as_root("force_now_ends_the_grace_period_at_once") {
        return;
    }
    let cgroup = TestCgroup::create("kill-force-now");
    let pod = cgroup.child("pod");
    let ignorer = TermIgnorer::start_in(&pod);
    let force_now = std::sync::Arc::new(tokio::sync::Notify::new());
    let notifier = force_now.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        notifier.notify_one();
    });
    let timings = KillTimings {
        grace: Duration::from_secs(30),
        force_for: FORCE_FOR,
        reap_wait: Duration::ZERO,
        terminate: true,
    };
    let report = kill_cgroup_tree(
        &cgroup.hierarchy,
        &cgroup.child_rel("pod"),
        timings,
        &force_now,
    )
    .await
    .unwrap();
    assert_eq!(report.outcome, KillOutcome::Emptied);
    assert!(report.forced && report.terminated == 1, "{report:?}");
    assert!(
        report.elapsed < Duration::from_secs(3),
        "forced when told, not after the 30 s grace period: {report:?}"
    );
    assert!(!tests::process_alive(ignorer.pid()));
}

#[tokio::test]
async fn a_process_that_exits_on_sigterm_ends_before_the_grace_period() {
    if !running_as_root("a_process_that_exits_on_sigterm_ends_before_the_grace_period") {
        return;
    }
    let cgroup = TestCgroup::create("kill-polite");
    let mut allocator = Allocator::start_in(&cgroup.child("pod"));
    allocator.alloc(8);
    let grace = Duration::from_secs(5);

    let report = kill_pod(&cgroup, grace, FORCE_FOR).await;

    assert_eq!(report.outcome, KillOutcome::Emptied);
    assert!(!report.forced, "{report:?}");
    assert_eq!(report.terminated, 1);
    assert!(
        report.elapsed < Duration::from_secs(1),
        "ended early: {report:?}"
    );
}

#[tokio::test]
async fn nested_cgroups_are_killed_and_siblings_are_left_alone() {
    if !running_as_root("nested_cgroups_are_killed_and_siblings_are_left_alone") {
        return;
    }
    let cgroup = TestCgroup::create("kill-nested");
    // Processes only in leaves: cgroup v2 allows none in a cgroup that delegates memory.
    let in_pod = cgroup.child("pod/main");
    let container = cgroup.child("pod/container/inner");
    let sibling = cgroup.child("sibling");
    let _in_pod = Allocator::start_in(&in_pod);
    let _deep = TermIgnorer::start_in(&container);
    let mut outside = Allocator::start_in(&sibling);

    let report = kill_pod(&cgroup, GRACE, FORCE_FOR).await;

    assert_eq!(report.outcome, KillOutcome::Emptied, "{report:?}");
    assert_eq!(report.terminated, 2);
    assert!(
        report.forced,
        "the nested process ignores SIGTERM: {report:?}"
    );
    assert!(cgroup_pids(&in_pod).is_empty() && cgroup_pids(&container).is_empty());
    assert_eq!(cgroup_pids(&sibling), [outside.pid() as i32]);
    outside.alloc(1);
}

#[tokio::test]
async fn force_comes_after_the_grace_period_however_short_the_wait_after_it() {
    if !running_as_root("force_comes_after_the_grace_period_however_short_the_wait_after_it") {
        return;
    }
    let cgroup = TestCgroup::create("kill-short-wait");
    let pod = cgroup.child("pod");
    let ignorer = TermIgnorer::start_in(&pod);

    // Almost no time to wait once force begins: force is still used, and it works.
    let report = kill_pod(&cgroup, GRACE, Duration::from_millis(1)).await;

    assert!(report.forced, "{report:?}");
    assert!(report.elapsed >= GRACE, "{report:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while tests::process_alive(ignorer.pid()) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !tests::process_alive(ignorer.pid()),
        "the SIGTERM-ignoring process died of force: {report:?}"
    );
}

#[tokio::test]
async fn a_resumed_kill_sends_no_second_sigterm_and_forces_at_the_end_of_the_grace() {
    if !running_as_root("a_resumed_kill_sends_no_second_sigterm") {
        return;
    }
    let cgroup = TestCgroup::create("kill-resumed");
    let logs = tests::TempDir::new("kill-resumed-sigterms");
    let log = logs.join("sigterms");
    let mut drainer = Allocator::start_in(&cgroup.child("pod"));
    // It drains far longer than the grace left: only force ends it.
    drainer.drain_after_term_logging(60_000, &log);
    let grace = Duration::from_millis(800);
    let timings = KillTimings {
        grace,
        force_for: FORCE_FOR,
        reap_wait: Duration::ZERO,
        terminate: false,
    };
    let report = kill_cgroup_tree(
        &cgroup.hierarchy,
        &cgroup.child_rel("pod"),
        timings,
        &tokio::sync::Notify::new(),
    )
    .await
    .unwrap();
    assert_eq!(report.outcome, KillOutcome::Emptied);
    assert!(report.forced && report.terminated == 0, "{report:?}");
    assert!(report.elapsed >= grace, "forced early: {report:?}");
    assert_eq!(tests::sigterms_logged(&log), 0, "no SIGTERM went out");
    assert!(!tests::process_alive(drainer.pid()));
}
