//! A real pids cgroup capping a pod's tasks, as the kubelet's pod PIDs limit does: the fork
//! that would pass `pids.max` fails, and `pids.events` counts it.
use std::{
    fs, io,
    path::{Path, PathBuf},
};

use crate::cgroup_tree;

const PIDS_V1: &str = "/sys/fs/cgroup/pids";

/// `pids.max` on the cgroup a pod's processes run in.
pub struct PidsCap {
    dir: PathBuf,
    /// On cgroup v1 a cgroup of the pids hierarchy this test created, removed on drop; on v2
    /// the pod's own cgroup, removed with the pod.
    owned: bool,
}

impl PidsCap {
    /// Caps the tasks of `leaf` (a pod's cgroup of the memory hierarchy, where its processes
    /// run) at `max`. On v2 that cgroup itself, with the pids controller delegated from the
    /// root down; on v1 a new cgroup `name` of the pids hierarchy, which processes join beside
    /// `leaf` (see [`PidsCap::procs`]).
    pub fn new(leaf: &Path, name: &str, max: u64) -> io::Result<Self> {
        let (mount, v2) = cgroup_tree::memory_mount()?;
        let cap = if v2 {
            let rel = leaf.strip_prefix(&mount).map_err(|_| {
                io::Error::other(format!(
                    "{} is not below {}",
                    leaf.display(),
                    mount.display()
                ))
            })?;
            let mut dir = mount.clone();
            for part in rel {
                fs::write(dir.join("cgroup.subtree_control"), "+pids")?;
                dir.push(part);
            }
            Self { dir, owned: false }
        } else {
            let dir =
                Path::new(PIDS_V1).join(format!("monitor-test-{}-{name}", std::process::id()));
            if dir.exists() {
                cgroup_tree::remove_tree(&dir);
            }
            fs::create_dir(&dir)?;
            Self { dir, owned: true }
        };
        fs::write(cap.dir.join("pids.max"), max.to_string())?;
        Ok(cap)
    }

    /// The `cgroup.procs` files a process writes itself into to run under the cap: the
    /// memory cgroup's and, on v1, the pids cgroup's.
    pub fn procs(&self, leaf: &Path) -> Vec<PathBuf> {
        let mut procs = vec![leaf.join("cgroup.procs")];
        if self.owned {
            procs.push(self.dir.join("cgroup.procs"));
        }
        procs
    }

    /// Forks the cap refused (`pids.events`' `max`).
    pub fn refused(&self) -> u64 {
        fs::read_to_string(self.dir.join("pids.events"))
            .unwrap_or_else(|e| panic!("reading {}/pids.events: {e}", self.dir.display()))
            .lines()
            .find_map(|l| l.strip_prefix("max "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no max count in {}/pids.events", self.dir.display()))
    }
}

impl Drop for PidsCap {
    fn drop(&mut self) {
        if self.owned {
            cgroup_tree::remove_tree(&self.dir);
        }
    }
}
