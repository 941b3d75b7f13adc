//! Killing a pod whose processes are frozen (checkpoint and pause tools) or stopped, with
//! real cgroups, a real freezer and real processes that drain on SIGTERM (root only). Where
//! the memory controller is on cgroup v1 the freezer is a v1 freezer cgroup of the test's
//! own; on cgroup v2 (the VM) `cgroup.freeze` on the test's cgroups.
use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use monitor::{
    action::{KillOutcome, KillReport, KillTimings, kill_cgroup_tree},
    cgroupfs::{CgroupVersion, MemoryHierarchy},
};
use tests::{
    Allocator, Freezer, TestCgroup, cgroup_pids, cgroup_tree, process_alive, running_as_root,
    set_memory_limit, v2_frozen,
};

/// How long a victim drains after SIGTERM before it exits by itself.
const DRAIN_MS: u64 = 300;
const DRAIN: Duration = Duration::from_millis(DRAIN_MS);
/// Long enough to drain in, so a kill that ends early proves SIGTERM was handled.
const GRACE: Duration = Duration::from_secs(5);
const FORCE_FOR: Duration = Duration::from_secs(5);
const MIB: u64 = 1 << 20;

/// A test cgroup with a memory limit.
fn test_cgroup(name: &str) -> TestCgroup {
    let cgroup = TestCgroup::create(name);
    set_memory_limit(&cgroup.dir, 512 * MIB).expect("limiting the test cgroup");
    cgroup
}

/// A process in `dir` holding 64 MiB that drains for [`DRAIN`] after SIGTERM.
fn drainer(dir: &Path) -> Allocator {
    let mut process = Allocator::start_in(dir);
    process.drain_after_term(DRAIN_MS);
    process.alloc(64);
    process
}

/// Kills `rel` of `hierarchy` with `grace`.
async fn kill(hierarchy: &MemoryHierarchy, rel: &str, grace: Duration) -> KillReport {
    let timings = KillTimings {
        grace,
        force_for: FORCE_FOR,
        reap_wait: Duration::ZERO,
        terminate: true,
    };
    kill_cgroup_tree(hierarchy, rel, timings, &tokio::sync::Notify::new())
        .await
        .unwrap()
}

/// The victim handled SIGTERM: it drained, exited by itself with status 0, before force.
fn assert_drained(report: &KillReport, victim: &mut Allocator) {
    assert_eq!(report.outcome, KillOutcome::Emptied, "{report:?}");
    assert!(!report.forced, "ended before force: {report:?}");
    assert!(
        report.elapsed + Duration::from_millis(50) >= DRAIN && report.elapsed < GRACE,
        "drained for {DRAIN:?}, within the grace period: {report:?}"
    );
    assert!(victim.wait().success(), "it exited by itself, not of force");
}

#[tokio::test]
async fn a_frozen_victim_is_thawed_and_drains_within_its_grace_period() {
    if !running_as_root("a_frozen_victim_is_thawed_and_drains_within_its_grace_period") {
        return;
    }
    let cgroup = test_cgroup("kill-frozen");
    let pod = cgroup.child("pod");
    let mut victim = drainer(&pod);
    let freezer = Freezer::create(&cgroup.hierarchy, "kill-frozen");
    freezer.freeze_memory_cgroup(&pod);

    let report = kill(&cgroup.hierarchy, &cgroup.child_rel("pod"), GRACE).await;

    assert_drained(&report, &mut victim);
    assert!(!freezer.memory_cgroup_frozen(&pod), "left thawed");
}

#[tokio::test]
async fn a_victim_frozen_by_a_parent_that_holds_only_its_pod_is_thawed_there() {
    if !running_as_root("a_victim_frozen_by_a_parent_that_holds_only_its_pod_is_thawed_there") {
        return;
    }
    let cgroup = test_cgroup("kill-frozen-parent");
    let container = cgroup.child("pod/container");
    let mut victim = drainer(&container);
    let freezer = Freezer::create(&cgroup.hierarchy, "kill-frozen-parent");
    // Frozen from the level above the process's own: thawing its own cgroup changes nothing.
    match cgroup.hierarchy.version {
        CgroupVersion::V1 => {
            freezer.v1_add("pod/container", victim.pid());
            freezer.v1_freeze("pod");
            assert_eq!(freezer.v1_state("pod/container"), "FROZEN");
        }
        CgroupVersion::V2 => freezer.v2_freeze(&cgroup.dir.join("pod")),
    }

    let report = kill(&cgroup.hierarchy, &cgroup.child_rel("pod"), GRACE).await;

    assert_drained(&report, &mut victim);
    match cgroup.hierarchy.version {
        CgroupVersion::V1 => assert_eq!(freezer.v1_state("pod"), "THAWED"),
        CgroupVersion::V2 => assert!(!v2_frozen(&cgroup.dir.join("pod"))),
    }
}

/// A freezer that also holds a process outside the pod is never thawed: on v1 the victim
/// alone leaves it (for the freezer root, never frozen) and drains; on v2 the frozen level
/// above the pod stays frozen, and force, which the kernel delivers to frozen tasks, ends
/// the victim.
#[tokio::test]
async fn a_freezer_that_also_holds_another_pod_stays_frozen_while_the_victim_dies() {
    if !running_as_root("a_freezer_that_also_holds_another_pod_stays_frozen_while_the_victim_dies")
    {
        return;
    }
    let cgroup = test_cgroup("kill-frozen-shared");
    let pod = cgroup.child("group/pod");
    let sibling = cgroup.child("group/sibling");
    let mut victim = drainer(&pod);
    let outsider = drainer(&sibling);
    let freezer = Freezer::create(&cgroup.hierarchy, "kill-frozen-shared");
    let v1 = cgroup.hierarchy.version == CgroupVersion::V1;
    if v1 {
        freezer.v1_add("shared", victim.pid());
        freezer.v1_add("shared", outsider.pid());
        freezer.v1_freeze("shared");
    } else {
        freezer.v2_freeze(&cgroup.dir.join("group"));
    }
    let grace = Duration::from_secs(1);

    let report = kill(&cgroup.hierarchy, &cgroup.child_rel("group/pod"), grace).await;

    assert_eq!(report.outcome, KillOutcome::Emptied, "{report:?}");
    assert!(cgroup_pids(&pod).is_empty());
    if v1 {
        assert!(
            !report.forced,
            "moved out of the freezer, it drained: {report:?}"
        );
        assert!(victim.wait().success());
        assert_eq!(
            freezer.v1_state("shared"),
            "FROZEN",
            "the outsider's freezer"
        );
        assert_eq!(
            cgroup_pids(&freezer.v1_cgroup("shared")),
            [outsider.pid() as i32],
            "only the victim left it"
        );
    } else {
        assert!(
            report.forced,
            "frozen from above, it could not drain: {report:?}"
        );
        assert!(
            report.elapsed < grace + Duration::from_secs(2),
            "{report:?}"
        );
        assert!(v2_frozen(&cgroup.dir.join("group")), "left frozen");
    }
    assert!(
        process_alive(outsider.pid()),
        "the other pod's process lives"
    );
    assert_eq!(cgroup_pids(&sibling), [outsider.pid() as i32]);
}

/// A stopped process handles SIGTERM only once continued: SIGCONT follows SIGTERM, as
/// systemd sends it, so it drains within its grace period instead of dying of force.
#[tokio::test]
async fn a_stopped_victim_handles_sigterm_within_its_grace_period() {
    if !running_as_root("a_stopped_victim_handles_sigterm_within_its_grace_period") {
        return;
    }
    let cgroup = test_cgroup("kill-stopped");
    let pod = cgroup.child("pod");
    let mut victim = drainer(&pod);
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(victim.pid() as i32, libc::SIGSTOP) }, 0);
    wait_for_state(victim.pid(), 'T');

    let report = kill(&cgroup.hierarchy, &cgroup.child_rel("pod"), GRACE).await;

    assert_drained(&report, &mut victim);
}

/// `cgroup.freeze` on cgroup v2, on this machine: in the memory hierarchy when it is v2;
/// on a hybrid host in the unified hierarchy beside the v1 memory controller (the process's
/// memory stays in a limited v1 cgroup).
#[tokio::test]
async fn a_victim_frozen_with_cgroup_freeze_is_thawed_and_drains() {
    if !running_as_root("a_victim_frozen_with_cgroup_freeze_is_thawed_and_drains") {
        return;
    }
    let memory = test_cgroup("kill-freeze-v2");
    let mut victim = drainer(&memory.child("pod"));
    let (hierarchy, rel, _unified) = if memory.hierarchy.version == CgroupVersion::V2 {
        (memory.hierarchy.clone(), memory.child_rel("pod"), None)
    } else {
        let Some(unified) = UnifiedCgroup::create("kill-freeze-v2") else {
            tests::cannot_run(
                tests::Reason::CgroupV2,
                "no cgroup2 mount at /sys/fs/cgroup/unified to freeze with cgroup.freeze",
            );
            return;
        };
        let pod = unified.dir.join("pod");
        std::fs::create_dir(&pod).unwrap();
        std::fs::write(pod.join("cgroup.procs"), victim.pid().to_string()).unwrap();
        let hierarchy = MemoryHierarchy {
            version: CgroupVersion::V2,
            mount: UnifiedCgroup::MOUNT.into(),
            hierarchy_id: 0,
        };
        let rel = format!("{}/pod", unified.rel);
        (hierarchy, rel, Some(unified))
    };
    let pod = hierarchy.dir(&rel);
    let freezer = Freezer::create(&hierarchy, "kill-freeze-v2");
    freezer.v2_freeze(&pod);

    let report = kill(&hierarchy, &rel, GRACE).await;

    assert_drained(&report, &mut victim);
    assert!(!v2_frozen(&pod));
}

/// A cgroup of the test's own in the unified hierarchy of a hybrid host; removed on drop.
struct UnifiedCgroup {
    rel: String,
    dir: PathBuf,
}

impl UnifiedCgroup {
    const MOUNT: &str = "/sys/fs/cgroup/unified";

    fn create(name: &str) -> Option<Self> {
        // The root of a cgroup2 mount has cgroup.procs and cgroup.subtree_control, a v1
        // hierarchy no subtree_control.
        if !Path::new(Self::MOUNT)
            .join("cgroup.subtree_control")
            .exists()
        {
            return None;
        }
        let rel = format!("/monitor-test-{}-{name}", std::process::id());
        let dir = Path::new(Self::MOUNT).join(&rel[1..]);
        if dir.exists() {
            cgroup_tree::remove_tree(&dir);
        }
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        Some(Self { rel, dir })
    }
}

impl Drop for UnifiedCgroup {
    fn drop(&mut self) {
        cgroup_tree::remove_tree(&self.dir);
    }
}

fn wait_for_state(pid: u32, state: char) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.trim_start().chars().next())
            == Some(state)
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{pid} never in state {state}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}
