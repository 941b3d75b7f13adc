//! A kubepods tree below a test cgroup, laid out like the kubelet's cgroupfs driver does.
use std::path::PathBuf;

use monitor::cgroupfs::CgroupVersion;

use crate::{TestCgroup, cgroup_tree};

/// The kubelet's QoS classes, which place a pod's cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

/// A kubepods tree below a test cgroup, named like the kubelet's cgroupfs driver does:
/// `kubepods/pod<uid>`, `kubepods/burstable/pod<uid>`, `kubepods/besteffort/pod<uid>`.
/// Removed with the test cgroup.
pub struct Kubepods {
    /// The kubepods cgroup below the hierarchy root, for `--kubepods-cgroup`.
    pub rel: String,
    pub dir: PathBuf,
    v2: bool,
}

impl Kubepods {
    /// The kernel's OOM kills in the pods so far.
    pub fn oom_kills(&self) -> u64 {
        cgroup_tree::oom_kills_in(&self.dir)
            .unwrap_or_else(|e| panic!("the OOM kills in kubepods: {e}"))
    }

    /// Creates `kubepods` with its `burstable` and `besteffort` levels below `cgroup`.
    pub fn create(cgroup: &TestCgroup) -> Self {
        cgroup.child("kubepods/burstable");
        cgroup.child("kubepods/besteffort");
        Self {
            rel: cgroup.child_rel("kubepods"),
            dir: cgroup.dir.join("kubepods"),
            v2: cgroup.hierarchy.version == CgroupVersion::V2,
        }
    }

    /// The pod cgroup's directory for a pod (not created).
    pub fn pod_dir(&self, qos: Qos, uid: &str) -> PathBuf {
        self.dir.join(match qos {
            Qos::Guaranteed => format!("pod{uid}"),
            Qos::Burstable => format!("burstable/pod{uid}"),
            Qos::BestEffort => format!("besteffort/pod{uid}"),
        })
    }

    /// Creates the pod cgroup and one container cgroup in it, as a runtime would, and
    /// returns the container's directory (where the pod's processes go).
    pub fn create_pod(&self, qos: Qos, uid: &str) -> PathBuf {
        let pod = self.pod_dir(qos, uid);
        let rel = pod
            .strip_prefix(&self.dir)
            .expect("pod below kubepods")
            .join("container");
        cgroup_tree::create_dirs(&self.dir, &rel.to_string_lossy(), self.v2)
            .unwrap_or_else(|e| panic!("creating {}: {e}", pod.display()))
    }

    /// Kills the pod's processes and removes its cgroups, as the kubelet does once a pod is
    /// gone.
    pub fn remove_pod(&self, qos: Qos, uid: &str) {
        cgroup_tree::remove_tree(&self.pod_dir(qos, uid));
    }
}
