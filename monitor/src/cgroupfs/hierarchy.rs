//! Finding the memory controller: a cgroup v1 `memory` hierarchy or the cgroup v2 unified
//! hierarchy with `memory` in its controllers.
use std::{
    fmt, fs,
    path::{Path, PathBuf},
};

/// Which cgroup interface the memory controller speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupVersion {
    V1,
    V2,
}

impl fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CgroupVersion::V1 => "v1",
            CgroupVersion::V2 => "v2",
        })
    }
}

/// Where the memory controller lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryHierarchy {
    pub version: CgroupVersion,
    /// Mount point of the hierarchy root.
    pub mount: PathBuf,
    /// Kernel hierarchy id, as the cgroup tracepoints report it: the `memory` line of
    /// /proc/cgroups on v1, 0 for the unified hierarchy.
    pub hierarchy_id: i32,
}

/// Why the memory controller could not be found.
#[derive(Debug, thiserror::Error)]
pub enum HierarchyError {
    /// /proc could not be read.
    #[error("reading {path}: {source}")]
    Proc {
        path: &'static str,
        source: std::io::Error,
    },
    /// Neither a v1 `memory` mount nor a cgroup2 mount with the memory controller exists.
    #[error(
        "no memory cgroup controller is mounted: expected a cgroup v1 hierarchy with the \
         `memory` option or a cgroup2 mount whose cgroup.controllers lists `memory`"
    )]
    NotMounted,
}

impl MemoryHierarchy {
    /// Finds the memory controller of the running system. A v1 memory hierarchy wins over a
    /// cgroup2 mount, because on hybrid systems the memory controller is bound to v1.
    pub fn discover() -> Result<Self, HierarchyError> {
        let mountinfo = read_proc("/proc/self/mountinfo")?;
        let proc_cgroups = read_proc("/proc/cgroups")?;
        Self::from_proc(&mountinfo, &proc_cgroups, |mount| {
            fs::read_to_string(mount.join("cgroup.controllers")).ok()
        })
        .ok_or(HierarchyError::NotMounted)
    }

    /// Picks the hierarchy from the text of /proc/self/mountinfo and /proc/cgroups;
    /// `controllers` reads a cgroup2 mount's cgroup.controllers.
    pub fn from_proc(
        mountinfo: &str,
        proc_cgroups: &str,
        controllers: impl Fn(&Path) -> Option<String>,
    ) -> Option<Self> {
        let mounts: Vec<(String, &str, &str)> = mountinfo.lines().filter_map(parse_mount).collect();
        let v1 = mounts.iter().find(|(_, fstype, options)| {
            *fstype == "cgroup" && options.split(',').any(|o| o == "memory")
        });
        if let Some((mount, _, _)) = v1 {
            let hierarchy_id = proc_cgroups.lines().find_map(|line| {
                let mut cols = line.split_whitespace();
                (cols.next()? == "memory").then_some(())?;
                cols.next()?.parse().ok()
            })?;
            return Some(Self {
                version: CgroupVersion::V1,
                mount: PathBuf::from(mount),
                hierarchy_id,
            });
        }
        mounts
            .iter()
            .filter(|(_, fstype, _)| *fstype == "cgroup2")
            .find(|(mount, _, _)| {
                controllers(Path::new(mount))
                    .is_some_and(|c| c.split_whitespace().any(|name| name == "memory"))
            })
            .map(|(mount, _, _)| Self {
                version: CgroupVersion::V2,
                mount: PathBuf::from(mount),
                hierarchy_id: 0,
            })
    }

    /// Absolute directory of a cgroup given its path relative to the root (`/a/b` or `a/b`).
    pub fn dir(&self, cgroup: impl AsRef<str>) -> PathBuf {
        self.mount.join(cgroup.as_ref().trim_start_matches('/'))
    }
}

/// Where the cgroup v1 hierarchy holding `controller` (`freezer`) is mounted with its root
/// (a bind mount of a subtree would map cgroup paths elsewhere), from the text of
/// /proc/self/mountinfo.
pub(crate) fn v1_controller_mount(mountinfo: &str, controller: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let root = line.split_whitespace().nth(3)?;
        let (mount, fstype, options) = parse_mount(line)?;
        (root == "/" && fstype == "cgroup" && options.split(',').any(|o| o == controller))
            .then(|| PathBuf::from(mount))
    })
}

fn read_proc(path: &'static str) -> Result<String, HierarchyError> {
    fs::read_to_string(path).map_err(|source| HierarchyError::Proc { path, source })
}

/// (mount point, filesystem type, super options) of one mountinfo line.
fn parse_mount(line: &str) -> Option<(String, &str, &str)> {
    let (left, right) = line.split_once(" - ")?;
    let mount_point = left.split_whitespace().nth(4)?;
    let mut right = right.split_whitespace();
    let fstype = right.next()?;
    let _source = right.next()?;
    let options = right.next().unwrap_or("");
    Some((unescape_octal(mount_point), fstype, options))
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_octal(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let text = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(text, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC_CGROUPS: &str = "#subsys_name\thierarchy\tnum_cgroups\tenabled\n\
        cpu\t1\t1\t1\nmemory\t4\t37\t1\npids\t8\t1\t1\n";

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    const UNIFIED: &str = "\
25 20 0:22 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate
";

    #[test]
    fn hybrid_system_uses_the_v1_memory_hierarchy() {
        let found = MemoryHierarchy::from_proc(HYBRID, PROC_CGROUPS, |_| Some("memory".into()));
        assert_eq!(
            found,
            Some(MemoryHierarchy {
                version: CgroupVersion::V1,
                mount: "/sys/fs/cgroup/memory".into(),
                hierarchy_id: 4,
            })
        );
    }

    #[test]
    fn unified_system_needs_memory_in_controllers() {
        let with = MemoryHierarchy::from_proc(UNIFIED, PROC_CGROUPS, |p| {
            assert_eq!(p, Path::new("/sys/fs/cgroup"));
            Some("cpuset cpu io memory pids\n".into())
        });
        assert_eq!(
            with.map(|h| (h.version, h.hierarchy_id)),
            Some((CgroupVersion::V2, 0))
        );
        let without =
            MemoryHierarchy::from_proc(UNIFIED, PROC_CGROUPS, |_| Some("cpu pids".into()));
        assert_eq!(without, None);
    }

    #[test]
    fn the_freezer_is_found_where_its_root_is_mounted() {
        let mountinfo = "\
37 31 0:34 /kubepods /mnt/pods-freezer rw - cgroup cgroup rw,freezer
38 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
";
        assert_eq!(
            v1_controller_mount(mountinfo, "freezer"),
            Some(PathBuf::from("/sys/fs/cgroup/freezer"))
        );
        assert_eq!(v1_controller_mount(HYBRID, "freezer"), None);
        assert_eq!(v1_controller_mount(UNIFIED, "freezer"), None);
    }

    #[test]
    fn escaped_mount_points_are_decoded() {
        let line = "35 31 0:32 / /mnt/my\\040cgroups rw - cgroup cgroup rw,memory";
        assert_eq!(
            parse_mount(line),
            Some(("/mnt/my cgroups".to_string(), "cgroup", "rw,memory"))
        );
    }

    #[test]
    fn dir_joins_relative_and_absolute_paths() {
        let h = MemoryHierarchy {
            version: CgroupVersion::V2,
            mount: "/sys/fs/cgroup".into(),
            hierarchy_id: 0,
        };
        assert_eq!(
            h.dir("/kubepods/pod1"),
            PathBuf::from("/sys/fs/cgroup/kubepods/pod1")
        );
        assert_eq!(h.dir("/"), PathBuf::from("/sys/fs/cgroup/"));
    }
}
