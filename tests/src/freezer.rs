//! Freezing a test's own processes as checkpoint and pause tools do: where the memory
//! controller is on cgroup v1, in a freezer cgroup the test creates under the v1 freezer
//! hierarchy; on cgroup v2, with `cgroup.freeze` on the test's own cgroups. Thawed and removed
//! on drop, even when a test fails, so the processes can be killed and their memory cgroups
//! removed.
use std::{
    fs,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use monitor::cgroupfs::{CgroupVersion, MemoryHierarchy};

use crate::cgroup_tree;

/// Where the v1 freezer hierarchy is mounted on the machines the tests run on.
pub const V1_FREEZER: &str = "/sys/fs/cgroup/freezer";

/// A test's freezer: its own v1 freezer cgroup `/monitor-test-<pid>-<name>` (with children),
/// or, on v2, nothing to create: the test's memory cgroups freeze themselves.
pub struct Freezer {
    version: CgroupVersion,
    /// The v1 freezer cgroup's directory (`None` on v2).
    dir: Option<PathBuf>,
    /// v2 cgroups frozen by this test, thawed on drop.
    frozen_v2: std::cell::RefCell<Vec<PathBuf>>,
}

impl Freezer {
    /// A freezer for processes of the memory `hierarchy`; on v1 it needs the freezer
    /// hierarchy mounted at [`V1_FREEZER`].
    pub fn create(hierarchy: &MemoryHierarchy, name: &str) -> Self {
        let dir = (hierarchy.version == CgroupVersion::V1).then(|| {
            assert!(
                Path::new(V1_FREEZER).join("cgroup.procs").exists(),
                "the memory controller is on cgroup v1, but no v1 freezer hierarchy is \
                 mounted at {V1_FREEZER}"
            );
            let dir =
                Path::new(V1_FREEZER).join(format!("monitor-test-{}-{name}", std::process::id()));
            if dir.exists() {
                cgroup_tree::remove_tree(&dir);
            }
            fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
            dir
        });
        Self {
            version: hierarchy.version,
            dir,
            frozen_v2: std::cell::RefCell::default(),
        }
    }

    /// The v1 freezer cgroup `child` of this test's (`""`: its own), created if need be.
    pub fn v1_cgroup(&self, child: &str) -> PathBuf {
        let dir = self.dir.as_ref().expect("a v1 freezer").join(child);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        dir
    }

    /// The v1 freezer cgroup `child` as /proc/PID/cgroup names it.
    pub fn v1_rel(&self, child: &str) -> String {
        let dir = self.v1_cgroup(child);
        format!("/{}", dir.strip_prefix(V1_FREEZER).unwrap().display())
    }

    /// Moves `pid` into the v1 freezer cgroup `child`.
    pub fn v1_add(&self, child: &str, pid: u32) {
        let procs = self.v1_cgroup(child).join("cgroup.procs");
        fs::write(&procs, pid.to_string())
            .unwrap_or_else(|e| panic!("moving {pid} into {}: {e}", procs.display()));
    }

    /// Freezes the v1 freezer cgroup `child` and waits until every task in it is frozen.
    pub fn v1_freeze(&self, child: &str) {
        let dir = self.v1_cgroup(child);
        fs::write(dir.join("freezer.state"), "FROZEN").expect("writing FROZEN");
        wait_for(&format!("{} frozen", dir.display()), || {
            v1_state(&dir) == "FROZEN"
        });
    }

    /// Thaws the v1 freezer cgroup `child`, as its owner would.
    pub fn v1_thaw(&self, child: &str) {
        fs::write(self.v1_cgroup(child).join("freezer.state"), "THAWED").expect("writing THAWED");
    }

    /// The state of the v1 freezer cgroup `child` (FROZEN, FREEZING, THAWED).
    pub fn v1_state(&self, child: &str) -> String {
        v1_state(&self.v1_cgroup(child))
    }

    /// Freezes the memory cgroup `dir` whose processes a test started (on v1 after moving
    /// them into the freezer cgroup named like its last component) and waits until they are
    /// frozen.
    pub fn freeze_memory_cgroup(&self, dir: &Path) {
        match self.version {
            CgroupVersion::V1 => {
                let child = dir.file_name().unwrap().to_string_lossy().to_string();
                for pid in cgroup_tree::pids_in(dir) {
                    self.v1_add(&child, pid as u32);
                }
                self.v1_freeze(&child);
            }
            CgroupVersion::V2 => self.v2_freeze(dir),
        }
    }

    /// Whether the processes of the memory cgroup `dir` frozen by
    /// [`Self::freeze_memory_cgroup`] are still frozen.
    pub fn memory_cgroup_frozen(&self, dir: &Path) -> bool {
        match self.version {
            CgroupVersion::V1 => {
                let child = dir.file_name().unwrap().to_string_lossy().to_string();
                self.v1_state(&child) == "FROZEN"
            }
            CgroupVersion::V2 => v2_frozen(dir),
        }
    }

    /// Sets `cgroup.freeze` on the v2 cgroup `dir` and waits until it reports frozen.
    pub fn v2_freeze(&self, dir: &Path) {
        fs::write(dir.join("cgroup.freeze"), "1").expect("writing cgroup.freeze");
        self.frozen_v2.borrow_mut().push(dir.to_path_buf());
        wait_for(&format!("{} frozen", dir.display()), || v2_frozen(dir));
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        for dir in self.frozen_v2.borrow().iter() {
            let _ = fs::write(dir.join("cgroup.freeze"), "0");
        }
        if let Some(dir) = &self.dir {
            // Thawed first: a frozen task takes not even the SIGKILL that removal sends.
            for cgroup in monitor::cgroupfs::procs::subtree_dirs(dir).unwrap_or_default() {
                let _ = fs::write(cgroup.join("freezer.state"), "THAWED");
            }
            cgroup_tree::remove_tree(dir);
        }
    }
}

/// Whether the v2 cgroup `dir` reports itself frozen in `cgroup.events`.
pub fn v2_frozen(dir: &Path) -> bool {
    fs::read_to_string(dir.join("cgroup.events")).is_ok_and(|e| e.lines().any(|l| l == "frozen 1"))
}

fn v1_state(dir: &Path) -> String {
    fs::read_to_string(dir.join("freezer.state"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "not {what} after 10 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}
