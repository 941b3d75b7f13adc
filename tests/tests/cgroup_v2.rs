//! cgroup v2 for real: a test-owned cgroup under the cgroup2 root with a process allocating
//! inside it, read through the agent's stats reader and emptied with `cgroup.kill` (5.14+), and
//! what `monitor doctor` says about the kernel.
//!
//! Runs in `cargo xtask vm-test` (Debian's 6.1 and 6.12 kernels with cgroup2); skipped on
//! hosts whose memory controller is on cgroup v1.
use std::{
    fs,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use monitor::{
    cgroupfs::{CgroupVersion, stats},
    source::probe::kernel_version,
};
use tests::{Allocator, Kubepods, TestCgroup, memory_on_cgroup_v2, monitor_bin, running_as_root};

const V2_ONLY: &str = "cgroup v1 here; runs in cargo xtask vm-test";

const MIB: u64 = 1 << 20;

fn working_set(dir: &Path) -> u64 {
    stats::read(dir, CgroupVersion::V2)
        .expect("reading the cgroup's memory")
        .working_set()
}

#[test]
fn working_set_follows_a_process_until_cgroup_kill_empties_the_cgroup() {
    if !running_as_root("cgroup_v2") || !memory_on_cgroup_v2(V2_ONLY) {
        return;
    }
    let cgroup = TestCgroup::create("cgroup-v2");
    // Processes go into a leaf: the test cgroup delegates the memory controller to children.
    let work = cgroup.child("work");
    let empty = working_set(&work);
    let mut allocator = Allocator::start_in(&work);
    let started = working_set(&work);
    allocator.alloc(64);
    let grown = stats::read(&work, CgroupVersion::V2).expect("reading the cgroup's memory");
    let growth = grown.working_set().saturating_sub(started);
    // A page or so charged before may be freed meanwhile (seen on arm64: 4 KiB less).
    assert!(
        (63 * MIB..80 * MIB).contains(&growth),
        "touching 64 MiB grew the working set by {growth} bytes: {grown:?}"
    );
    assert!(
        grown.anon >= 64 * MIB,
        "64 MiB touched, anon is {}",
        grown.anon
    );

    fs::write(work.join("cgroup.kill"), "1").expect("writing cgroup.kill");
    let deadline = Instant::now() + Duration::from_secs(10);
    let events = work.join("cgroup.events");
    while !fs::read_to_string(&events).unwrap().contains("populated 0") {
        assert!(
            Instant::now() < deadline,
            "cgroup still populated after cgroup.kill"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(fs::read_to_string(work.join("cgroup.procs")).unwrap(), "");
    let after = working_set(&work);
    assert!(
        after < empty + 8 * MIB,
        "the killed process's memory stayed charged: {after} bytes (empty cgroup: {empty})"
    );
    drop(allocator);
}

#[test]
fn doctor_reports_cgroup_v2_and_the_programs_this_kernel_has() {
    if !running_as_root("cgroup_v2") || !memory_on_cgroup_v2(V2_ONLY) {
        return;
    }
    // The agent needs a kubepods cgroup, which the VM has only as a test makes one.
    let cgroup = TestCgroup::create("cgroup-v2-doctor");
    let kubepods = Kubepods::create(&cgroup);
    let out = Command::new(monitor_bin())
        .args([
            "doctor",
            "--output",
            "json",
            "--kubepods-cgroup",
            &kubepods.rel,
        ])
        .output()
        .expect("running monitor doctor");
    assert!(
        out.status.success(),
        "monitor doctor failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("doctor JSON");
    let kernel = report["kernel"].as_str().expect("kernel release");
    let in_vm = std::env::var_os("MONITOR_VM").is_some();
    if let Some(series) = std::env::var_os("MONITOR_VM_KERNEL") {
        let series = series.to_string_lossy();
        assert!(
            kernel.starts_with(&format!("{series}.")),
            "the VM boots Debian's {series} kernel, not {kernel}"
        );
    }
    // The memcg tracepoints arrived in 6.13 (hooked raw where BTF gives their prototype);
    // the cgroup ones long before.
    let version = kernel_version(kernel).expect("kernel version");
    let has_memcg = version >= (6, 13);
    let hook = if has_memcg {
        "raw_tracepoint"
    } else {
        "fentry"
    };
    // arm64 attaches fentry to kernel functions from 6.4: before, the agent polls memory
    // and keeps its other kernel programs, and says why.
    let arm64_without_fentry = std::env::consts::ARCH == "aarch64" && version < (6, 4);
    if arm64_without_fentry {
        assert_eq!(report["memcg_hook"], serde_json::Value::Null, "{report:#}");
        assert_eq!(report["source"], "ebpf+poll", "{report:#}");
        let reason = report["memcg_reason"].as_str().expect("memcg_reason");
        assert!(
            reason.contains("arm64 kernels attach fentry to kernel functions from 6.4"),
            "{reason}"
        );
    } else if in_vm || has_memcg {
        // The VM's other kernels (5.11+ with BTF) have the functions for fentry.
        assert_eq!(report["memcg_hook"], hook, "{report:#}");
    }
    assert_eq!(report["cgroup"]["found"]["version"], "v2", "{report:#}");
    assert_eq!(report["btf"], true, "{report:#}");
    assert_eq!(report["ring_buffer"], true, "{report:#}");
    assert_eq!(report["psi"]["node"], true, "{report:#}");
    assert_eq!(
        report["psi"]["cgroup"], report["cgroup"]["found"]["memory_mount"],
        "{report:#}"
    );
    let programs = report["programs"].as_array().expect("programs");
    assert!(!programs.is_empty());
    for program in programs {
        let hook = program["hook"].as_str().expect("hook");
        let expected = if hook.starts_with("memcg/") {
            has_memcg
        } else {
            assert!(
                hook.starts_with("cgroup/")
                    || ["sched/sched_process_fork", "sched/sched_process_exit"].contains(&hook),
                "unexpected hook {hook}"
            );
            true
        };
        assert_eq!(program["present"], expected, "{hook} on {kernel}");
    }
    let source = if report["memcg_hook"].is_null() {
        "ebpf+poll"
    } else {
        "ebpf"
    };
    assert_eq!(report["source"], source, "{report:#}");
    assert_eq!(report["ok"], true);
}
