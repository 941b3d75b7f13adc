//! Tests that cannot run here: each names its [`Reason`] with [`cannot_run`], which fails the
//! test unless the run allows that reason (`MONITOR_TESTS_ALLOW_SKIP`, see the `test-skip`
//! crate), so a green run means every test ran or skipped for a reason the runner named.

pub use test_skip::{Reason, cannot_run};

/// True when running as root. Otherwise the test (`test`: its name, or its group's) fails,
/// unless the run allows skipping for `root`: then the skip is reported and this returns false.
pub fn running_as_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    // The message names the running test; `test` adds to it when it names a group.
    let running = std::thread::current()
        .name()
        .unwrap_or_default()
        .to_string();
    let what = if running.ends_with(test) { "it" } else { test };
    cannot_run(
        Reason::Root,
        &format!("{what} needs root for real cgroups and kernel programs"),
    );
    false
}

/// True when the memory controller is on cgroup v2 here. Otherwise the test is reported as
/// not run for `cgroup-v2` (`why` says where it runs), and fails in the VM, which mounts the
/// memory controller on cgroup2 and must never skip it.
pub fn memory_on_cgroup_v2(why: &str) -> bool {
    let hierarchy =
        monitor::cgroupfs::MemoryHierarchy::discover().expect("a memory cgroup controller");
    if hierarchy.version == monitor::cgroupfs::CgroupVersion::V2 {
        return true;
    }
    assert!(
        std::env::var_os("MONITOR_VM").is_none(),
        "the VM must mount the memory controller on cgroup2"
    );
    cannot_run(Reason::CgroupV2, why);
    false
}

/// CAP_SYS_RESOURCE is in this process's effective set (some containers drop it even for
/// root); lowering an `oom_score_adj` below 0 needs it.
pub fn has_cap_sys_resource() -> bool {
    const CAP_SYS_RESOURCE: u32 = 24;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_RESOURCE) != 0)
}

/// True outside the test VM, which runs the test executables without the repository's files;
/// in it the test (`test`: its name) is reported as skipped for `host-only`.
pub fn on_the_host(test: &str) -> bool {
    outside_the_vm(&format!("{test} checks the repository's files"))
}

/// True outside the test VM; in it the test is reported as skipped for `host-only`, `why`
/// (which names the test).
pub fn outside_the_vm(why: &str) -> bool {
    let in_vm = std::env::var_os("MONITOR_VM").is_some();
    if in_vm {
        cannot_run(Reason::HostOnly, why);
    }
    !in_vm
}
