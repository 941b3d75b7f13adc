//! One step of `--reclaim-first` against the real kernel: what a write to a cgroup's
//! `memory.reclaim` answers and what the agent reads of it, in a test-owned cgroup with a
//! process whose page cache and anonymous memory are real.
//!
//! Runs in `cargo xtask vm-test`: in Debian 12's 6.1 (the kernel has `memory.reclaim`, and the
//! classic LRU, which counts a file read twice as active cache, the only cache a step is
//! written for) and in the poll tier's 5.10 (no `memory.reclaim`: the step is refused, as the
//! agent refuses the flag there). Skipped on hosts whose memory controller is on cgroup v1.
use std::{fs, path::Path};

use monitor::{
    cgroupfs::{CgroupVersion, reclaim},
    engine::reclaim_ladder::StepAnswer,
    source::probe::kernel_version,
};
use tests::{
    Allocator, TempDir, TestCgroup, memory_on_cgroup_v2, running_as_root, set_memory_limit,
};

const V2_ONLY: &str = "cgroup v1 here; runs in cargo xtask vm-test";
const MIB: u64 = 1 << 20;
const PAGE: u64 = 4096;

/// `memory.reclaim` came in Linux 5.19.
fn kernel_has_memory_reclaim() -> bool {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease").expect("the kernel's release");
    kernel_version(release.trim()).expect("the kernel's version") >= (5, 19)
}

/// A leaf cgroup of the test's own, limited to 512 MiB, with the alloc helper in it.
fn work_cgroup(cgroup: &TestCgroup) -> (std::path::PathBuf, Allocator) {
    let work = cgroup.child("work");
    set_memory_limit(&work, 512 * MIB).expect("limiting the test cgroup");
    let allocator = Allocator::start_in(&work);
    (work, allocator)
}

/// Writes `mib` MiB to a file of `files` from inside the cgroup and reads it twice, so its
/// pages are charged there and, on the classic LRU, active.
fn cached_file(allocator: &mut Allocator, files: &TempDir, mib: usize) {
    let path = files.join("cache");
    allocator.cache(mib, &path);
    allocator.read_file(&path);
    allocator.read_file(&path);
}

fn refused_as_on_an_old_kernel(root: &Path, work: &Path) {
    let said = reclaim::refusal(CgroupVersion::V2, root).unwrap_err();
    assert!(said.contains("Linux 5.19"), "{said}");
    let result = reclaim::step(work, 32 * MIB, PAGE);
    assert_eq!(result.answer, StepAnswer::Refused, "{result:?}");
    assert!(
        !work.join("memory.reclaim").exists(),
        "the step must not create the kernel's file"
    );
}

#[test]
fn idle_cache_is_freed_up_to_what_was_asked() {
    if !running_as_root("cgroup_reclaim") || !memory_on_cgroup_v2(V2_ONLY) {
        return;
    }
    let cgroup = TestCgroup::create("reclaim-idle");
    let files = TempDir::new("reclaim-idle-files");
    let (work, mut allocator) = work_cgroup(&cgroup);
    cached_file(&mut allocator, &files, 96);
    if !kernel_has_memory_reclaim() {
        refused_as_on_an_old_kernel(&cgroup.hierarchy.dir("/"), &work);
        return;
    }
    assert_eq!(
        reclaim::refusal(CgroupVersion::V2, &cgroup.hierarchy.dir("/")),
        Ok(())
    );
    let result = reclaim::step(&work, 32 * MIB, PAGE);
    assert_eq!(result.answer, StepAnswer::Done, "{result:?}");
    // The kernel frees at least what it was asked, and more in its batches (6.1 freed 56 MiB
    // when asked for 32 MiB in the VM).
    assert!(
        (32 * MIB..=96 * MIB).contains(&result.freed),
        "32 MiB asked of 96 MiB of idle cache: {result:?}"
    );
    assert!(
        result.taken >= 16 * MIB,
        "the working set held less: {result:?}"
    );
    assert!(
        !result.came_straight_back(),
        "nobody reads the file: {result:?}"
    );
    let now = reclaim::now(&work, PAGE).expect("the cgroup's counters");
    assert_eq!(
        now.refaults, result.refaults_after,
        "nothing refaulted since"
    );
}

#[test]
fn anonymous_memory_past_the_cache_is_a_partial_step() {
    if !running_as_root("cgroup_reclaim") || !memory_on_cgroup_v2(V2_ONLY) {
        return;
    }
    let cgroup = TestCgroup::create("reclaim-anon");
    let files = TempDir::new("reclaim-anon-files");
    let (work, mut allocator) = work_cgroup(&cgroup);
    allocator.alloc(128);
    cached_file(&mut allocator, &files, 8);
    if !kernel_has_memory_reclaim() {
        refused_as_on_an_old_kernel(&cgroup.hierarchy.dir("/"), &work);
        return;
    }
    // Without swap the kernel can take the 8 MiB of cache and nothing of the anonymous
    // memory: it answers EAGAIN once its retries are spent.
    let result = reclaim::step(&work, 32 * MIB, PAGE);
    assert_eq!(result.answer, StepAnswer::Partial, "{result:?}");
    assert!(
        (1..=10 * MIB).contains(&result.freed),
        "at most the cache: {result:?}"
    );
    drop(allocator);
}

#[test]
fn a_removed_cgroup_is_gone_and_nothing_is_written() {
    if !running_as_root("cgroup_reclaim") || !memory_on_cgroup_v2(V2_ONLY) {
        return;
    }
    let cgroup = TestCgroup::create("reclaim-gone");
    let (work, mut allocator) = work_cgroup(&cgroup);
    allocator.command("exit");
    allocator.wait();
    fs::remove_dir(&work).expect("removing the emptied cgroup");
    let result = reclaim::step(&work, 32 * MIB, PAGE);
    assert_eq!(result.answer, StepAnswer::Gone, "{result:?}");
    assert!(!work.exists(), "the step must not create anything");
}
