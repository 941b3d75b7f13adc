//! How often a pod hit its own memory limit (its or a container's), which tells a kernel OOM
//! kill at a pod's own limit (neither the kubelet's nor the agent's to prevent) from one under
//! the node's or kubepods' pressure.
//!
//! cgroup v2: the `oom` count of the pod's `memory.events`, which counts an OOM at the pod's
//! limit and at its containers' (it is hierarchical upward, so kubepods' own OOMs are not in
//! it). cgroup v1 counts no OOMs per cgroup: the sum of `memory.failcnt` over the pod's
//! cgroups, which grows each time a charge hits that cgroup's own limit (and only that
//! cgroup's, not its ancestors'), OOM or not: a pod that runs at its limit reclaiming looks
//! the same.
use std::{fs, io, path::Path};

use super::{CgroupVersion, procs::subtree_dirs};

/// The pod's count of hits of its own limits, as above.
pub(crate) fn limit_hits(pod_dir: &Path, version: CgroupVersion) -> io::Result<u64> {
    match version {
        CgroupVersion::V2 => {
            let text = fs::read_to_string(pod_dir.join("memory.events"))?;
            Ok(events_oom(&text))
        }
        CgroupVersion::V1 => {
            let mut sum = 0u64;
            for dir in subtree_dirs(pod_dir)? {
                // A container's cgroup removed during the walk counts nothing.
                if let Ok(text) = fs::read_to_string(dir.join("memory.failcnt")) {
                    sum = sum.saturating_add(text.trim().parse().unwrap_or(0));
                }
            }
            Ok(sum)
        }
    }
}

/// The `oom` line of a `memory.events` (0 when absent).
fn events_oom(text: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix("oom ")?.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_version_its_way() {
        let tmp = tempfile::tempdir().unwrap();
        let pod = tmp.path();
        fs::write(
            pod.join("memory.events"),
            "low 0\nhigh 0\nmax 7\noom 3\noom_kill 2\noom_group_kill 0\n",
        )
        .unwrap();
        assert_eq!(
            limit_hits(pod, CgroupVersion::V2).unwrap(),
            3,
            "oom, not oom_kill"
        );
        fs::write(pod.join("memory.failcnt"), "5\n").unwrap();
        fs::create_dir(pod.join("container")).unwrap();
        fs::write(pod.join("container/memory.failcnt"), "2\n").unwrap();
        fs::create_dir(pod.join("empty")).unwrap();
        assert_eq!(
            limit_hits(pod, CgroupVersion::V1).unwrap(),
            7,
            "summed over the pod"
        );
        assert!(limit_hits(&pod.join("gone"), CgroupVersion::V2).is_err());
        assert_eq!(events_oom("oom_kill 4\n"), 0, "oom_kill is not oom");
    }
}
