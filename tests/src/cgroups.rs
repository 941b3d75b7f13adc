//! Cgroups a test creates under the memory hierarchy, and what a test reads or sets on them.
use std::{
    fs, io,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
};

use monitor::cgroupfs::{CgroupVersion, MemoryHierarchy};

use crate::cgroup_tree;

/// A cgroup created by a test under the memory hierarchy, with its children; removed on drop
/// after killing whatever still runs inside.
pub struct TestCgroup {
    pub hierarchy: MemoryHierarchy,
    /// Path below the hierarchy root, e.g. `/monitor-test-1234-trace`.
    pub rel: String,
    pub dir: PathBuf,
}

impl TestCgroup {
    /// Creates `/<name>-<pid>` below the memory hierarchy's root.
    pub fn create(name: &str) -> Self {
        let hierarchy = MemoryHierarchy::discover().expect("memory controller");
        let rel = format!("/monitor-test-{}-{name}", std::process::id());
        let dir = hierarchy.dir(&rel);
        if dir.exists() {
            cgroup_tree::remove_tree(&dir);
        }
        fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        if hierarchy.version == CgroupVersion::V2 {
            // Children need the memory controller delegated; processes go into children.
            fs::write(dir.join("cgroup.subtree_control"), "+memory")
                .unwrap_or_else(|e| panic!("delegating memory in {}: {e}", dir.display()));
        }
        Self {
            hierarchy,
            rel,
            dir,
        }
    }

    /// Creates a child cgroup (`a/b` allowed) and returns its directory. On v2 the levels
    /// above it delegate the memory controller; the child itself can hold processes.
    pub fn child(&self, name: &str) -> PathBuf {
        let v2 = self.hierarchy.version == CgroupVersion::V2;
        cgroup_tree::create_dirs(&self.dir, name, v2)
            .unwrap_or_else(|e| panic!("creating {}: {e}", self.dir.join(name).display()))
    }

    /// Relative path of a child, as kernel events name it.
    pub fn child_rel(&self, name: &str) -> String {
        format!("{}/{name}", self.rel)
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        cgroup_tree::remove_tree(&self.dir);
    }
}

/// Kernel OOM kills so far (machine-wide; a v1 parent cgroup does not count its children's).
pub fn oom_kills() -> u64 {
    fs::read_to_string("/proc/vmstat")
        .expect("/proc/vmstat")
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill ")?.trim().parse().ok())
        .unwrap_or(0)
}

/// The cgroup id of a cgroup directory: its inode number.
pub fn cgroup_id(dir: &Path) -> u64 {
    fs::metadata(dir).expect("cgroup directory").ino()
}

/// Limits the memory of the cgroup `dir` (v1 `memory.limit_in_bytes`, v2 `memory.max`).
pub fn set_memory_limit(dir: &Path, bytes: u64) -> io::Result<()> {
    fs::write(dir.join("memory.limit_in_bytes"), bytes.to_string())
        .or_else(|_| fs::write(dir.join("memory.max"), bytes.to_string()))
}

/// Pids listed in a cgroup's `cgroup.procs`.
pub use cgroup_tree::pids_in as cgroup_pids;
