//! A cgroup's memory numbers from cgroupfs, in the kubelet's terms.
//!
//! The kubelet (through cAdvisor) defines a cgroup's working set as usage minus inactive page
//! cache, floored at zero: on v1 `memory.usage_in_bytes - total_inactive_file`, on v2
//! `memory.current - inactive_file`.
use std::{fs, io, path::Path};

use monitor_common::Stat;

use super::CgroupVersion;

/// Memory of one cgroup, hierarchical (children included), in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryStats {
    pub usage: u64,
    pub inactive_file: u64,
    pub active_file: u64,
    pub anon: u64,
    pub file: u64,
}

impl MemoryStats {
    /// Usage minus inactive file cache, floored at zero.
    pub fn working_set(&self) -> u64 {
        self.usage.saturating_sub(self.inactive_file)
    }
}

/// Why a cgroup's memory could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// The cgroup was removed; callers treat this as the pod going away, not as a failure.
    #[error("cgroup {0} no longer exists")]
    Gone(String),
    /// Reading a file failed for another reason.
    #[error("reading {path}: {source}")]
    Io { path: String, source: io::Error },
    /// A file did not hold what the kernel writes there.
    #[error("{path}: unexpected content {content:?}")]
    Malformed { path: String, content: String },
}

/// Reads `dir`'s usage and memory.stat.
pub fn read(dir: &Path, version: CgroupVersion) -> Result<MemoryStats, StatsError> {
    let (usage_file, prefix) = match version {
        CgroupVersion::V1 => ("memory.usage_in_bytes", "total_"),
        CgroupVersion::V2 => ("memory.current", ""),
    };
    let usage_path = dir.join(usage_file);
    let usage_text = read_file(&usage_path)?;
    let usage = usage_text
        .trim()
        .parse()
        .map_err(|_| StatsError::Malformed {
            path: usage_path.display().to_string(),
            content: usage_text.trim().to_string(),
        })?;
    let stat = read_file(&dir.join("memory.stat"))?;
    Ok(from_stat(usage, &stat, prefix))
}

/// Fills the stats from memory.stat text; v1 names its hierarchical totals `total_<name>`, and
/// calls anonymous memory `rss` and page cache `cache`.
fn from_stat(usage: u64, stat: &str, prefix: &str) -> MemoryStats {
    // One pass over the lines (a v1 memory.stat has about 70, its totals last): the reads of
    // every pod at a resync spent a quarter of their time looking names up line by line.
    let [
        mut inactive_file,
        mut active_file,
        mut anon,
        mut rss,
        mut file,
        mut cache,
    ] = [None; 6];
    for line in stat.lines() {
        let Some((key, value)) = line.split_once(' ') else {
            continue;
        };
        let slot = match key.strip_prefix(prefix) {
            Some("inactive_file") => &mut inactive_file,
            Some("active_file") => &mut active_file,
            Some("anon") => &mut anon,
            Some("rss") => &mut rss,
            Some("file") => &mut file,
            Some("cache") => &mut cache,
            _ => continue,
        };
        if slot.is_none() {
            *slot = value.trim().parse().ok();
        }
    }
    MemoryStats {
        usage,
        inactive_file: inactive_file.unwrap_or(0),
        active_file: active_file.unwrap_or(0),
        anon: anon.or(rss).unwrap_or(0),
        file: file.or(cache).unwrap_or(0),
    }
}

/// The cgroup's own value of one stat, the quantity the kernel programs count for it.
/// Kernel memory has no own-value line in v1's memory.stat; it is read from
/// memory.kmem.usage_in_bytes there.
pub fn read_own(dir: &Path, version: CgroupVersion, stat: Stat) -> Result<u64, StatsError> {
    let key = match (version, stat) {
        (CgroupVersion::V1, Stat::Kernel) => {
            let path = dir.join("memory.kmem.usage_in_bytes");
            let text = read_file(&path)?;
            return text.trim().parse().map_err(|_| StatsError::Malformed {
                path: path.display().to_string(),
                content: text.trim().to_string(),
            });
        }
        (CgroupVersion::V1, Stat::Anon) => "rss",
        (CgroupVersion::V1, Stat::File) => "cache",
        (_, stat) => stat.name(),
    };
    let stat_text = read_file(&dir.join("memory.stat"))?;
    Ok(stat_value(&stat_text, key).unwrap_or(0))
}

fn stat_value(stat: &str, key: &str) -> Option<u64> {
    stat.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

fn read_file(path: &Path) -> Result<String, StatsError> {
    fs::read_to_string(path).map_err(|source| {
        if super::procs::is_gone(&source) {
            StatsError::Gone(parent_of(path))
        } else {
            StatsError::Io {
                path: path.display().to_string(),
                source,
            }
        }
    })
}

fn parent_of(path: &Path) -> String {
    path.parent().unwrap_or(path).display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_uses_hierarchical_totals() {
        let stat = "cache 10\nrss 20\ninactive_file 5\ntotal_cache 4096\ntotal_rss 8192\n\
                    total_inactive_file 1024\ntotal_active_file 3072\n";
        let s = from_stat(20000, stat, "total_");
        assert_eq!(
            (s.file, s.anon, s.inactive_file, s.active_file),
            (4096, 8192, 1024, 3072)
        );
        assert_eq!(s.working_set(), 20000 - 1024);
    }

    #[test]
    fn v2_names_and_floor_at_zero() {
        let stat = "anon 100\nfile 900\nkernel 7\nactive_file 100\ninactive_file 800\n";
        let s = from_stat(500, stat, "");
        assert_eq!((s.anon, s.file, s.inactive_file), (100, 900, 800));
        assert_eq!(
            s.working_set(),
            0,
            "inactive file above usage floors at zero"
        );
    }

    #[test]
    fn own_values_use_each_version_names() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(
            tmp.path().join("memory.stat"),
            "cache 8192\nrss 4096\ntotal_rss 99999\ninactive_file 512\n",
        )
        .unwrap();
        fs::write(tmp.path().join("memory.kmem.usage_in_bytes"), "123\n").unwrap();
        let own = |stat| read_own(tmp.path(), CgroupVersion::V1, stat).unwrap();
        assert_eq!(own(Stat::Anon), 4096, "v1 own anon is rss, not total_rss");
        assert_eq!(own(Stat::File), 8192);
        assert_eq!(own(Stat::InactiveFile), 512);
        assert_eq!(own(Stat::Kernel), 123);
        assert_eq!(own(Stat::ActiveFile), 0, "absent lines read as zero");
        fs::write(tmp.path().join("memory.stat"), "anon 7\nkernel 9\n").unwrap();
        assert_eq!(
            read_own(tmp.path(), CgroupVersion::V2, Stat::Kernel).unwrap(),
            9
        );
        assert_eq!(
            read_own(tmp.path(), CgroupVersion::V2, Stat::Anon).unwrap(),
            7
        );
    }

    #[test]
    fn removed_cgroup_reads_as_gone() {
        let tmp = tempfile::tempdir().unwrap();
        let err = read(&tmp.path().join("vanished"), CgroupVersion::V2).unwrap_err();
        assert!(matches!(err, StatsError::Gone(_)), "{err:?}");
    }

    #[test]
    fn reads_files_in_a_directory() {
        let tmp = tempfile::tempdir().unwrap();
        fs::write(tmp.path().join("memory.current"), "4096\n").unwrap();
        fs::write(
            tmp.path().join("memory.stat"),
            "anon 4096\ninactive_file 0\n",
        )
        .unwrap();
        let s = read(tmp.path(), CgroupVersion::V2).unwrap();
        assert_eq!((s.usage, s.anon, s.working_set()), (4096, 4096, 4096));
        fs::write(tmp.path().join("memory.current"), "lots\n").unwrap();
        assert!(matches!(
            read(tmp.path(), CgroupVersion::V2),
            Err(StatsError::Malformed { .. })
        ));
    }
}
