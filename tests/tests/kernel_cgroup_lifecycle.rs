//! The kernel programs on cgroups that come and go: creation and removal reported with
//! their path, `monitor trace` on a filtered cgroup, the aggregates of removed cgroups swept
//! from the kernel map, and the marks of cgroups whose tasks changed (root only).
use std::{collections::HashSet, path::Path, process::Command, time::Duration};

use monitor::{
    cgroupfs::CgroupPaths,
    source::{
        ebpf::{
            IncidentOptions, KernelSource, LoadOptions, MemcgHook, TaskCgroups,
            cgroup_map_entries_at,
        },
        event::KernelEvent,
    },
};
use tests::{
    Allocator, TempDir, TestCgroup, Trace, cgroup_id, cgroup_tree,
    kernel_programs::{
        collect, discard_pending, load, load_tracking_memory, run_in, runtime, serial,
        skip_reasons, write_cache,
    },
    running_as_root,
};

const MIB: i64 = 1 << 20;

#[test]
fn cgroup_creation_and_removal_are_reported_with_their_path() {
    if !running_as_root("cgroup_creation_and_removal_are_reported_with_their_path") {
        return;
    }
    let _serial = serial();
    let cgroup = TestCgroup::create("lifecycle");
    runtime().block_on(async {
        let mut source = load(&cgroup);
        let dir = cgroup.child("pod-x");
        let id = cgroup_id(&dir);
        let rel = cgroup.child_rel("pod-x");
        let created = collect(&mut source, Duration::from_secs(5), |ev| {
            ev.iter().any(|e| matches!(e, KernelEvent::Mkdir { cgroup_id, .. } if *cgroup_id == id))
        })
        .await;
        let mkdir = created
            .iter()
            .find(|e| matches!(e, KernelEvent::Mkdir { cgroup_id, .. } if *cgroup_id == id));
        assert!(
            matches!(mkdir, Some(KernelEvent::Mkdir { path, .. }) if *path == rel),
            "mkdir of {rel} (id {id}) not reported: {created:?}"
        );
        // The agent's walk takes ids from the directory entries, without a stat of each.
        let walked = CgroupPaths::scan(&cgroup.hierarchy.mount).unwrap();
        assert_eq!(walked.get(id), Some(rel.as_str()), "the walk names {rel} by another id");
        std::fs::remove_dir(&dir).unwrap();
        let removed = collect(&mut source, Duration::from_secs(5), |ev| {
            ev.iter().any(|e| matches!(e, KernelEvent::Rmdir { cgroup_id, .. } if *cgroup_id == id))
        })
        .await;
        assert!(
            removed
                .iter()
                .any(|e| matches!(e, KernelEvent::Rmdir { cgroup_id, path, .. } if *cgroup_id == id && *path == rel)),
            "rmdir of {rel} not reported: {removed:?}"
        );
    });
}

#[test]
fn trace_command_prints_json_lines_for_the_filtered_cgroup() {
    if !running_as_root("trace_command_prints_json_lines_for_the_filtered_cgroup") {
        return;
    }
    let _serial = serial();
    let cgroup = TestCgroup::create("trace-cli");
    let trace = Trace::start(&[
        "--output",
        "json",
        "--duration",
        "4s",
        "--cgroup",
        &cgroup.rel,
    ]);
    // Created after the programs attached, so its mkdir is reported on every kernel,
    // including those whose memory is polled.
    let dir = cgroup.child("app");
    let mut allocator = Allocator::start_in(&dir);
    allocator.alloc(64);
    let (status, stdout, stderr) = trace.finish();
    assert!(status.success(), "monitor trace failed: {stderr}");
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l}: {e}")))
        // The closing summary is about the whole trace, not one cgroup.
        .filter(|l: &serde_json::Value| l["type"] != "summary")
        .collect();
    assert!(!lines.is_empty(), "no events printed; stderr: {stderr}");
    for line in &lines {
        assert!(line["monotonic_ns"].as_u64().is_some(), "{line}");
        // Node-wide lines (kswapd, node pressure) name no cgroup and pass every filter.
        if ["stat", "mkdir", "rmdir"].contains(&line["type"].as_str().unwrap_or_default()) {
            let path = line["cgroup_path"].as_str().unwrap_or_default();
            assert!(path.starts_with(&cgroup.rel), "filter let through {line}");
            assert!(line["cgroup_id"].as_u64().is_some(), "{line}");
        }
    }
    let app = cgroup.child_rel("app");
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "mkdir" && l["cgroup_path"] == app.as_str()),
        "mkdir of {app} not reported: {stdout}"
    );
    if !stdout.contains("\"type\":\"stat\"") {
        // Kernels without memcg tracepoints report only the cgroup's lifecycle.
        assert!(
            stderr.contains("not attached"),
            "no stat events and no explanation: {stderr}"
        );
        return;
    }
    let anon: i64 = lines
        .iter()
        .filter(|l| l["type"] == "stat" && l["stat"] == "anon" && l["cgroup_path"] == app.as_str())
        .map(|l| l["delta_bytes"].as_i64().unwrap())
        .sum();
    assert!(
        (anon - 64 * MIB).abs() <= 64 * MIB / 10,
        "anon deltas sum to {anon}"
    );
    let last_current = lines
        .iter()
        .rev()
        .find(|l| l["stat"] == "anon" && l["cgroup_path"] == app.as_str())
        .and_then(|l| l["current_bytes"].as_i64())
        .unwrap();
    assert!(
        (last_current - 64 * MIB).abs() <= 64 * MIB / 10,
        "current_bytes {last_current}"
    );
}

/// How many of `ids` still have an aggregate in the kernel map.
fn still_tracked(source: &KernelSource, ids: &[u64]) -> Vec<u64> {
    let tracked: HashSet<u64> = source
        .tracked_cgroups()
        .expect("reading CGROUP_STATS")
        .into_iter()
        .collect();
    ids.iter()
        .copied()
        .filter(|id| tracked.contains(id))
        .collect()
}

#[test]
fn removed_cgroups_leave_no_aggregate_in_the_kernel_map() {
    if !running_as_root("removed_cgroups_leave_no_aggregate_in_the_kernel_map") {
        return;
    }
    let _serial = serial();
    let cgroup = TestCgroup::create("churn");
    let files = TempDir::new("churn-cache");
    runtime().block_on(async {
        let Some(mut source) = load_tracking_memory(&cgroup) else {
            return;
        };
        let mut removed = Vec::new();
        for i in 0..200 {
            let dir = cgroup.child(&format!("c{i}"));
            removed.push(cgroup_id(&dir));
            // Every fourth leaves page cache behind, uncharged from the dead cgroup when the
            // file goes after the rmdir.
            let cache = (i % 4 == 0).then(|| files.join(&format!("c{i}")));
            match &cache {
                Some(file) => write_cache(&dir, file, 2),
                None => run_in(&dir, "true"),
            }
            std::fs::remove_dir(&dir).unwrap_or_else(|e| panic!("removing {}: {e}", dir.display()));
            if let Some(file) = cache {
                std::fs::remove_file(file).unwrap();
            }
            discard_pending(&mut source);
        }
        // Late uncharges (per-CPU stock, RCU-deferred frees) come within a few hundred ms.
        tokio::time::sleep(Duration::from_secs(2)).await;
        discard_pending(&mut source);
        let stale = still_tracked(&source, &removed);
        assert!(
            stale.is_empty(),
            "{} of 200 removed cgroups still have an entry in CGROUP_STATS, e.g. {:?}",
            stale.len(),
            &stale[..stale.len().min(8)]
        );
    });
}

#[test]
fn the_sweep_deletes_aggregates_of_cgroups_removed_before_the_programs_attached() {
    if !running_as_root(
        "the_sweep_deletes_aggregates_of_cgroups_removed_before_the_programs_attached",
    ) {
        return;
    }
    let _serial = serial();
    let cgroup = TestCgroup::create("sweep");
    let files = TempDir::new("sweep-cache");
    // Removed before loading: the kernel programs never see their rmdir.
    let mut removed = Vec::new();
    for i in 0..20 {
        let dir = cgroup.child(&format!("gone{i}"));
        removed.push(cgroup_id(&dir));
        write_cache(&dir, &files.join(&format!("gone{i}")), 2);
        std::fs::remove_dir(&dir).unwrap();
    }
    let live_dir = cgroup.child("live");
    let live = cgroup_id(&live_dir);
    runtime().block_on(async {
        let Some(mut source) = load_tracking_memory(&cgroup) else {
            return;
        };
        let mut allocator = Allocator::start_in(&live_dir);
        allocator.alloc(8);
        // Their pages are uncharged now, which gives the dead cgroups entries again.
        for i in 0..20 {
            std::fs::remove_file(files.join(&format!("gone{i}"))).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        discard_pending(&mut source);
        let before = still_tracked(&source, &removed);
        assert!(
            !before.is_empty(),
            "uncharging the removed cgroups' page cache gave none of them an entry"
        );
        assert_eq!(
            still_tracked(&source, &[live]),
            [live],
            "live cgroup untracked"
        );
        let tracked = source.tracked_cgroups().expect("listing CGROUP_STATS");
        let scan = CgroupPaths::scan(&cgroup.hierarchy.mount).expect("walking the hierarchy");
        let deleted = source
            .remove_stale(tracked, &scan)
            .expect("sweeping CGROUP_STATS");
        assert!(scan.get(live).is_some(), "the sweep's walk misses {live}");
        assert!(
            deleted >= before.len(),
            "deleted {deleted}, {} stale",
            before.len()
        );
        assert_eq!(still_tracked(&source, &removed), Vec::<u64>::new());
        assert_eq!(
            still_tracked(&source, &[live]),
            [live],
            "the sweep deleted a live cgroup's entry"
        );
    });
}

/// A sweep walked in steps (the agent paces it over seconds) lists the map's ids first; a
/// cgroup removed during the walk has its entry deleted by the kernel's rmdir program before
/// the sweep's own delete comes: that delete's ENOENT is no failure, and the sweep goes on to
/// the other stale entries (before, the whole sweep failed on it).
#[test]
fn a_cgroup_removed_while_the_sweep_walks_does_not_fail_it() {
    if !running_as_root("a_cgroup_removed_while_the_sweep_walks_does_not_fail_it") {
        return;
    }
    let _serial = serial();
    let cgroup = TestCgroup::create("sweep-race");
    let files = TempDir::new("sweep-race-cache");
    // Removed before loading: only the sweep deletes their entries.
    let mut stale = Vec::new();
    for i in 0..5 {
        let dir = cgroup.child(&format!("gone{i}"));
        stale.push(cgroup_id(&dir));
        write_cache(&dir, &files.join(&format!("gone{i}")), 2);
        std::fs::remove_dir(&dir).unwrap();
    }
    let racing_dir = cgroup.child("racing");
    let racing = cgroup_id(&racing_dir);
    runtime().block_on(async {
        let Some(mut source) = load_tracking_memory(&cgroup) else {
            return;
        };
        let mut allocator = Allocator::start_in(&racing_dir);
        allocator.alloc(4);
        for i in 0..5 {
            std::fs::remove_file(files.join(&format!("gone{i}"))).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        discard_pending(&mut source);
        let tracked = source.tracked_cgroups().expect("listing CGROUP_STATS");
        assert!(tracked.contains(&racing), "the racing cgroup has an entry");
        // The walk finds it gone, and so did the kernel's rmdir program.
        drop(allocator);
        tokio::time::sleep(Duration::from_millis(200)).await;
        std::fs::remove_dir(&racing_dir).unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        discard_pending(&mut source);
        assert_eq!(still_tracked(&source, &[racing]), Vec::<u64>::new());
        let live = CgroupPaths::scan(&cgroup.hierarchy.mount).expect("walking the hierarchy");
        let deleted = source
            .remove_stale(tracked, &live)
            .expect("the sweep's delete of an entry already gone is no failure");
        assert!(deleted >= 1, "deleted {deleted}");
        assert_eq!(still_tracked(&source, &stale), Vec::<u64>::new());
    });
}

/// The marks the agent's PID ranking re-counts by: the memory cgroups in which a task was
/// created or ended, each taken once, and a full map owned up
/// to as "unknown", never as a partial list.
#[test]
fn tasks_created_or_ending_mark_their_memory_cgroup_once_until_taken() {
    if !running_as_root("tasks_created_or_ending_mark_their_memory_cgroup_once_until_taken") {
        return;
    }
    let _serial = serial();
    let cgroup = TestCgroup::create("task-marks");
    tests::set_memory_limit(&cgroup.dir, 256 * MIB as u64).expect("limiting the test cgroup");
    runtime().block_on(async {
        let mut source = KernelSource::load_with_incidents(
            LoadOptions {
                step_bytes: MIB as u64,
                hierarchy_id: cgroup.hierarchy.hierarchy_id,
                memcg_hook: MemcgHook::Auto,
                budget_pages: None,
                cgroup_map_entries: cgroup_map_entries_at(&cgroup.hierarchy.mount),
            },
            IncidentOptions {
                min_stall: Duration::from_millis(1),
            },
        )
        .expect("loading the kernel programs");
        assert!(
            source.marks_task_cgroups(),
            "both task programs attach on every supported kernel: {}",
            skip_reasons(&source)
        );
        let (forker, sleeper) = (cgroup.child("forker"), cgroup.child("sleeper"));
        let (forker_id, sleeper_id) = (cgroup_id(&forker), cgroup_id(&sleeper));
        let mut sleeping = idle_in(&sleeper);

        run_in(&forker, "true & wait");
        assert_unknown(&mut source, "marks are off until asked for");
        assert!(source.watch_task_cgroups(true).unwrap());
        run_in(&forker, "true & wait");
        assert_unknown(
            &mut source,
            "the first take after turning marks on cannot vouch for what came before",
        );

        run_in(&forker, "true & wait");
        let marked = take_marks(&mut source);
        assert!(
            marked.contains(&forker_id),
            "a fork and exits in {forker_id}: {marked:?}"
        );
        assert!(
            !marked.contains(&sleeper_id),
            "nothing changed in the sleeper's cgroup"
        );
        let again = take_marks(&mut source);
        assert!(
            !again.contains(&forker_id),
            "a mark is taken once: {again:?}"
        );

        // A task moved in (as a runtime starts a container or `runc exec` joins one) marks
        // the cgroup it arrives in, though nothing forks or ends there.
        let arrival = cgroup.child("arrival");
        let mut arrived = idle_in(&arrival);
        let marked = take_marks(&mut source);
        assert!(
            marked.contains(&cgroup_id(&arrival)),
            "a task moved in: {marked:?}"
        );
        // SAFETY: kill of a child this test started and has not reaped.
        unsafe { libc::kill(arrived.id() as i32, libc::SIGKILL) };
        arrived.wait().expect("reaping the arrival");

        // SAFETY: kill of a child this test started and has not reaped.
        unsafe { libc::kill(sleeping.id() as i32, libc::SIGKILL) };
        sleeping.wait().expect("reaping the sleeper");
        let marked = take_marks(&mut source);
        assert!(
            marked.contains(&sleeper_id),
            "the sleeper's exit: {marked:?}"
        );

        // More cgroups with changes than the map holds: the take says it cannot tell.
        for i in 0..1100 {
            let dir = cgroup.child(&format!("many/{i}"));
            run_in(&dir, "true & wait");
        }
        assert_unknown(&mut source, "1,100 cgroups in a map of 1,024");
        run_in(&forker, "true & wait");
        assert!(
            take_marks(&mut source).contains(&forker_id),
            "exact again after the take"
        );

        assert!(source.watch_task_cgroups(false).unwrap());
        run_in(&forker, "true & wait");
        assert_unknown(&mut source, "marks are off again");
    });
}

/// An idle process started in the cgroup `dir` (the test VM has no `sleep`).
fn idle_in(dir: &Path) -> std::process::Child {
    let mut idle = Command::new(tests::binary("ignore_term", "MONITOR_IGNORE_TERM_BIN"));
    idle.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    cgroup_tree::spawn_in(&mut idle, dir).expect("starting an idle process")
}

/// Takes the marks and checks the kernel cannot vouch for them.
fn assert_unknown(source: &mut KernelSource, why: &str) {
    assert_eq!(source.take_task_cgroups(), TaskCgroups::Unknown, "{why}");
}

/// The marked cgroup ids, taken; fails on "unknown".
fn take_marks(source: &mut KernelSource) -> Vec<u64> {
    match source.take_task_cgroups() {
        TaskCgroups::Marked(ids) => ids,
        TaskCgroups::Unknown => panic!("the kernel lost a mark"),
    }
}
