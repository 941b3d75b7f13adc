//! Thin readers of the node signals' inputs from /proc and cgroupfs. The kubepods cgroup's
//! working set is an ordinary cgroup's: [`crate::cgroupfs::stats::read`] gives it.
use std::{
    fs, io,
    path::{Path, PathBuf},
};

use monitor_common::Stat;

use super::pids::{max_pids, parse_limit, parse_loadavg_tasks, pid_available};
use crate::{
    cgroupfs::{CgroupVersion, MemoryHierarchy, StatsError, stats},
    engine::memory_signals::{MemoryLimit, parse_mem_total, parse_memory_limit},
    engine::threshold::SignalObservation,
};

/// The kernel's page size, the unit of its memory counters.
pub(crate) fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).unwrap_or(4096).max(1)
}

/// The CPUs online: how many can fault memory in at once. The node's, not the agent's share
/// (`available_parallelism` would count the agent's CPU quota).
pub(crate) fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).map_or(1, |n| n.max(1))
}

/// Why a node signal's input could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NodeError {
    /// A file could not be read.
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    /// A file did not hold what the kernel writes there.
    #[error("{path}: unexpected content {content:?}")]
    Malformed { path: PathBuf, content: String },
    /// The root cgroup's memory numbers could not be read.
    #[error("root cgroup memory: {0}")]
    Stats(#[from] StatsError),
}

const MEMINFO: &str = "/proc/meminfo";
const PID_MAX: &str = "/proc/sys/kernel/pid_max";
const THREADS_MAX: &str = "/proc/sys/kernel/threads-max";
const LOADAVG: &str = "/proc/loadavg";

/// Memory capacity: `MemTotal` in bytes, what cAdvisor reports as the machine's capacity.
pub(crate) fn read_mem_total() -> Result<u64, NodeError> {
    let text = read(Path::new(MEMINFO))?;
    parse_mem_total(&text).ok_or_else(|| malformed(Path::new(MEMINFO), "no MemTotal line"))
}

/// The node's working set: the root cgroup's usage minus its inactive file cache.
///
/// v1: the root's `memory.usage_in_bytes` - `total_inactive_file`. v2: the root cgroup has no
/// `memory.current`; the runc/opencontainers cgroup library that cAdvisor uses then takes
/// usage as `anon + file` from the root's memory.stat (older releases took MemTotal - MemFree
/// from /proc/meminfo), and cAdvisor subtracts `inactive_file` as for any cgroup.
pub(crate) fn node_working_set(hierarchy: &MemoryHierarchy) -> Result<u64, NodeError> {
    let root = &hierarchy.mount;
    match hierarchy.version {
        CgroupVersion::V1 => Ok(stats::read(root, CgroupVersion::V1)?.working_set()),
        CgroupVersion::V2 => {
            let stat = |s| stats::read_own(root, CgroupVersion::V2, s);
            let usage = stat(Stat::Anon)?.saturating_add(stat(Stat::File)?);
            Ok(usage.saturating_sub(stat(Stat::InactiveFile)?))
        }
    }
}

/// A cgroup's memory limit: v1 `memory.limit_in_bytes`, v2 `memory.max`.
pub(crate) fn read_memory_limit(
    dir: &Path,
    version: CgroupVersion,
) -> Result<MemoryLimit, NodeError> {
    let path = dir.join(match version {
        CgroupVersion::V1 => "memory.limit_in_bytes",
        CgroupVersion::V2 => "memory.max",
    });
    let text = read(&path)?;
    parse_memory_limit(&text).ok_or_else(|| malformed(&path, text.trim()))
}

/// `pid.available`, or `None` when neither task limit can be read (the kubelet then has no
/// observation either).
pub(crate) fn read_pid_available() -> Result<Option<SignalObservation>, NodeError> {
    let limit = |path: &str| {
        fs::read_to_string(path)
            .ok()
            .as_deref()
            .and_then(parse_limit)
    };
    let Some(max) = max_pids(limit(PID_MAX), limit(THREADS_MAX)) else {
        return Ok(None);
    };
    let text = read(Path::new(LOADAVG))?;
    let tasks =
        parse_loadavg_tasks(&text).ok_or_else(|| malformed(Path::new(LOADAVG), text.trim()))?;
    Ok(Some(pid_available(max, tasks)))
}

fn read(path: &Path) -> Result<String, NodeError> {
    fs::read_to_string(path).map_err(|source| NodeError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn malformed(path: &Path, content: &str) -> NodeError {
    NodeError::Malformed {
        path: path.to_path_buf(),
        content: content.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hierarchy(version: CgroupVersion, mount: &Path) -> MemoryHierarchy {
        MemoryHierarchy {
            version,
            mount: mount.to_path_buf(),
            hierarchy_id: 0,
        }
    }

    #[test]
    fn v2_root_uses_anon_plus_file_without_memory_current() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(
            tmp.path().join("memory.stat"),
            "anon 3000\nfile 5000\nkernel 700\nactive_file 1000\ninactive_file 4000\n",
        )
        .unwrap();
        let working_set = node_working_set(&hierarchy(CgroupVersion::V2, tmp.path())).unwrap();
        assert_eq!(working_set, 3000 + 5000 - 4000);
    }

    #[test]
    fn v1_root_uses_usage_and_total_inactive_file() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("memory.usage_in_bytes"), "10000\n").unwrap();
        fs::write(
            tmp.path().join("memory.stat"),
            "inactive_file 1\ntotal_inactive_file 2500\n",
        )
        .unwrap();
        let working_set = node_working_set(&hierarchy(CgroupVersion::V1, tmp.path())).unwrap();
        assert_eq!(working_set, 7500);
    }

    #[test]
    fn limits_are_read_per_version() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("memory.max"), "max\n").unwrap();
        fs::write(tmp.path().join("memory.limit_in_bytes"), "1073741824\n").unwrap();
        let limit = |v| read_memory_limit(tmp.path(), v).unwrap();
        assert_eq!(limit(CgroupVersion::V2), MemoryLimit::Unlimited);
        assert_eq!(limit(CgroupVersion::V1), MemoryLimit::Bytes(1 << 30));
        fs::write(tmp.path().join("memory.max"), "soon\n").unwrap();
        let error = read_memory_limit(tmp.path(), CgroupVersion::V2).unwrap_err();
        assert!(
            matches!(error, NodeError::Malformed { ref content, .. } if content == "soon"),
            "{error}"
        );
    }

    #[test]
    fn this_machine_has_capacity_working_set_and_tasks() {
        let capacity = read_mem_total().unwrap();
        assert!(capacity > 0);
        if let Ok(hierarchy) = MemoryHierarchy::discover() {
            let working_set = node_working_set(&hierarchy).unwrap();
            assert!(
                working_set > 0 && working_set < capacity,
                "{working_set} of {capacity}"
            );
        }
        let pids = read_pid_available().unwrap().expect("pid_max is readable");
        assert!(
            pids.capacity > 0 && pids.available < pids.capacity,
            "{pids:?}"
        );
    }
}
