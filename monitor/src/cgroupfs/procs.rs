//! Processes in a cgroup subtree, from every `cgroup.procs` in it; and a process's memory
//! cgroup, from its `/proc/<pid>/cgroup`.
use std::{
    fs, io,
    path::{Path, PathBuf},
};

use super::CgroupVersion;

/// Distinct pids listed in `dir`'s and its descendants' `cgroup.procs`, sorted. Cgroups
/// removed during the walk are skipped; a missing `dir` gives an empty list.
pub fn subtree_pids(dir: &Path) -> io::Result<Vec<i32>> {
    let mut pids = Vec::new();
    for dir in subtree_dirs(dir)? {
        match fs::read_to_string(dir.join("cgroup.procs")) {
            Ok(text) => pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok())),
            Err(e) if is_gone(&e) => {}
            Err(e) => return Err(e),
        }
    }
    pids.sort_unstable();
    pids.dedup();
    Ok(pids)
}

/// `dir` and every cgroup below it, parents before their children. Cgroups removed during
/// the walk are skipped; a missing `dir` gives an empty list.
pub fn subtree_dirs(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut dirs = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if is_gone(&e) => continue,
            Err(e) => return Err(e),
        };
        pending.extend(
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path()),
        );
        dirs.push(dir);
    }
    Ok(dirs)
}

/// A cgroup removed while it is read: not found, or ENODEV for a file of a dying cgroup.
pub fn is_gone(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::NotFound || error.raw_os_error() == Some(libc::ENODEV)
}

/// The memory cgroup path in the text of `/proc/<pid>/cgroup`: the `memory` controller's line
/// on cgroup v1, the unified (`0::`) line on v2; `None` when there is no such line.
pub(crate) fn memory_cgroup_in_proc(text: &str, version: CgroupVersion) -> Option<String> {
    text.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (id, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let wanted = match version {
            CgroupVersion::V1 => controllers.split(',').any(|c| c == "memory"),
            CgroupVersion::V2 => id == "0" && controllers.is_empty(),
        };
        wanted.then(|| path.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_cgroup_lines_by_version() {
        let text = "9:name=systemd:/\n4:memory:/process_api/x\n3:cpu,cpuacct:/\n0::/user.slice/s\n";
        let cases = [
            (
                "v1 picks the memory controller",
                CgroupVersion::V1,
                Some("/process_api/x"),
            ),
            (
                "v2 picks the unified line",
                CgroupVersion::V2,
                Some("/user.slice/s"),
            ),
        ];
        for (name, version, expected) in cases {
            assert_eq!(
                memory_cgroup_in_proc(text, version).as_deref(),
                expected,
                "{name}"
            );
        }
        assert_eq!(
            memory_cgroup_in_proc("", CgroupVersion::V1),
            None,
            "exited process"
        );
        assert_eq!(
            memory_cgroup_in_proc("5:cpu,memory:/a\n", CgroupVersion::V1).as_deref(),
            Some("/a"),
            "co-mounted controllers"
        );
    }

    #[test]
    fn walks_the_subtree_and_dedups() {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir_all(tmp.path().join("a/b")).unwrap();
        fs::write(tmp.path().join("cgroup.procs"), "3\n1\n").unwrap();
        fs::write(tmp.path().join("a/cgroup.procs"), "").unwrap();
        fs::write(tmp.path().join("a/b/cgroup.procs"), "7\n3\n").unwrap();
        assert_eq!(subtree_pids(tmp.path()).unwrap(), vec![1, 3, 7]);
        assert_eq!(
            subtree_pids(&tmp.path().join("gone")).unwrap(),
            Vec::<i32>::new()
        );
    }
}
