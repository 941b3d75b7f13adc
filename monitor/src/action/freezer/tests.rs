//! The v1 freezer rules over a fake freezer hierarchy (plain files in a temporary directory)
//! and a real child process standing in for the victim: what is thawed, what is left
//! frozen, what is moved, and the faults. The kernel's side is tested in the tests crate
//! (`kill_frozen.rs`, `agent_frozen.rs`).
use std::{
    os::fd::FromRawFd as _,
    process::{Child, Command},
};

use super::*;

/// A child process pinned as a victim is; killed on drop.
struct Victim {
    child: Child,
    pinned: Pinned,
}

impl Victim {
    fn start() -> Self {
        let child = Command::new("sleep").arg("60").spawn().expect("sleep");
        let pid = child.id() as i32;
        // Asleep in `sleep` itself, past exec.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.contains("(sleep) S"))
        {
            assert!(std::time::Instant::now() < deadline, "sleep never slept");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // SAFETY: plain syscall with integer arguments; the result is checked.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        assert!(fd >= 0, "pidfd_open: {}", io::Error::last_os_error());
        // SAFETY: a new descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(i32::try_from(fd).unwrap()) };
        Self {
            child,
            pinned: Pinned { pid, fd },
        }
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fake freezer hierarchy: each cgroup a directory with its files.
struct Hierarchy(tempfile::TempDir);

impl Hierarchy {
    fn new() -> Self {
        let hierarchy = Self(tempfile::tempdir().unwrap());
        fs::write(hierarchy.path("/cgroup.procs"), "").unwrap();
        hierarchy
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.0.path().join(rel.trim_start_matches('/'))
    }

    /// A cgroup with its state, whether it freezes itself, and its processes.
    fn cgroup(&self, rel: &str, state: &str, self_freezing: bool, pids: &[i32]) {
        let dir = self.path(rel);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("freezer.state"), state).unwrap();
        fs::write(
            dir.join("freezer.self_freezing"),
            if self_freezing { "1" } else { "0" },
        )
        .unwrap();
        let pids: Vec<String> = pids.iter().map(ToString::to_string).collect();
        fs::write(dir.join("cgroup.procs"), pids.join("\n")).unwrap();
    }

    fn read(&self, rel: &str, file: &str) -> String {
        fs::read_to_string(self.path(rel).join(file)).unwrap()
    }
}

fn new_thawer() -> Thawer {
    let memory = MemoryHierarchy {
        version: CgroupVersion::V1,
        mount: "/sys/fs/cgroup/memory".into(),
        hierarchy_id: 4,
    };
    Thawer::new(&memory, "/kubepods/pod1")
}

#[test]
fn the_freezer_line_says_whether_the_freezer_is_mounted_alone() {
    let alone = "7:memory:/kubepods/pod1\n6:freezer:/kubepods/pod1/ctr\n0::/\n";
    let shared = "6:cpu,freezer:/kubepods/pod1\n";
    assert_eq!(freezer_line(alone), Some((true, "/kubepods/pod1/ctr")));
    assert_eq!(freezer_line(shared), Some((false, "/kubepods/pod1")));
    assert_eq!(freezer_line("0::/init.scope\n"), None);
}

#[test]
fn the_cgroup_that_freezes_is_thawed_not_the_child_it_freezes_and_freezing_counts() {
    let victim = Victim::start();
    let pid = victim.pinned.pid;
    let h = Hierarchy::new();
    // The parent freezes itself, still FREEZING; the child reads so because of it.
    h.cgroup("/pod", "FREEZING", true, &[]);
    h.cgroup("/pod/ctr", "FREEZING", false, &[pid]);
    let mut thawer = new_thawer();
    let owns = |p: i32| p == pid;
    thawer.thaw_freezer_cgroup(h.0.path(), "/pod/ctr", true, &[&victim.pinned], &owns);
    assert_eq!(h.read("/pod", "freezer.state"), "THAWED");
    assert_eq!(
        h.read("/pod/ctr", "freezer.state"),
        "FREEZING",
        "never written: thawing it would change nothing"
    );
    assert_eq!(h.read("/", "cgroup.procs"), "", "nothing moved");
    assert!(thawer.refused.is_empty(), "{:?}", thawer.refused);
}

#[test]
fn a_freezer_that_holds_another_process_is_never_thawed_and_only_the_victim_leaves_it() {
    let victim = Victim::start();
    let pid = victim.pinned.pid;
    let h = Hierarchy::new();
    h.cgroup("/shared", "FROZEN", true, &[pid, 1]);
    let owns = |p: i32| p == pid;
    let mut thawer = new_thawer();
    thawer.thaw_freezer_cgroup(h.0.path(), "/shared", true, &[&victim.pinned], &owns);
    assert_eq!(h.read("/shared", "freezer.state"), "FROZEN");
    assert_eq!(
        h.read("/", "cgroup.procs"),
        pid.to_string(),
        "moved to the root"
    );
    assert!(thawer.refused.is_empty());

    // With other controllers on the hierarchy, moving would move them too: nothing is done,
    // and the reason is kept for the diagnosis.
    let h = Hierarchy::new();
    h.cgroup("/shared", "FROZEN", true, &[pid, 1]);
    let mut thawer = new_thawer();
    thawer.thaw_freezer_cgroup(h.0.path(), "/shared", false, &[&victim.pinned], &owns);
    assert_eq!(h.read("/shared", "freezer.state"), "FROZEN");
    assert_eq!(h.read("/", "cgroup.procs"), "");
    let why = &thawer.refused["/shared"];
    assert!(
        why.contains("outside the pod (pid 1 among them)") && why.contains("other controllers"),
        "{why}"
    );
}

#[test]
fn a_vanished_cgroup_is_no_failure_and_a_failed_write_is_kept_with_its_reason() {
    let victim = Victim::start();
    let pid = victim.pinned.pid;
    let owns = |p: i32| p == pid;
    let h = Hierarchy::new();
    let mut thawer = new_thawer();
    thawer.thaw_freezer_cgroup(h.0.path(), "/gone", true, &[&victim.pinned], &owns);
    thawer.thaw_freezer_cgroup(h.0.path(), "/../outside", true, &[&victim.pinned], &owns);
    assert_eq!(thawer.refused.len(), 1, "{:?}", thawer.refused);
    assert!(thawer.refused["/../outside"].contains("cgroup namespace"));

    // Neither the state nor the root's procs can be written (EIO, as a failing filesystem
    // or a read-only mount would refuse).
    h.cgroup("/stuck", "FROZEN", true, &[pid]);
    for file in [h.path("/stuck/freezer.state"), h.path("/cgroup.procs")] {
        fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink("/proc/version", &file).unwrap();
    }
    thawer.thaw_freezer_cgroup(h.0.path(), "/stuck", true, &[&victim.pinned], &owns);
    let why = &thawer.refused["/stuck"];
    assert!(
        why.starts_with("thawing it failed: writing")
            && why.contains("moving its processes out failed too"),
        "{why}"
    );
}

#[test]
fn a_process_that_outlives_force_is_said_frozen_with_why_or_by_its_state() {
    let victim = Victim::start();
    let pid = victim.pinned.pid;
    let mut thawer = new_thawer();
    // Not in any freezer cgroup of this test: its state from /proc (sleep: S).
    let stuck = thawer.diagnose(pid);
    assert_eq!(stuck.comm, "sleep");
    assert_eq!(stuck.cause, StuckCause::Other { state: 'S' });
    // Its freezer could not be thawed: said, with the reason.
    thawer.freezer_mount = Some(None);
    let text = format!(
        "6:freezer:/pause\n{}",
        fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap()
    );
    thawer
        .refused
        .insert("/pause".into(), "no freezer mounted".into());
    assert_eq!(
        thawer.frozen_cause(&text),
        Some(StuckCause::Frozen {
            cgroup: "/pause".into(),
            state: "state unknown".into(),
            why: "no freezer mounted".into(),
        })
    );
}
