//! Cgroup id -> path cache.
//!
//! Kernel events name a cgroup by its id, which is the inode number of the cgroup's directory.
//! The cache is filled by one walk of the hierarchy at start and then kept current from the
//! kernel's mkdir/rmdir events, so resolving an id never touches the filesystem.
use std::{
    collections::HashMap,
    fs, io,
    os::unix::fs::{DirEntryExt as _, MetadataExt as _},
    path::{Path, PathBuf},
};

use crate::engine::ids::CgroupRel;

/// Paths are relative to the hierarchy root and start with `/` (the root itself is `/`), the
/// form the kernel's cgroup tracepoints use.
#[derive(Clone, Debug, Default)]
pub struct CgroupPaths {
    by_id: HashMap<u64, String>,
}

impl CgroupPaths {
    /// Walks the hierarchy mounted at `mount`. Cgroups removed during the walk are skipped.
    pub fn scan(mount: &Path) -> io::Result<Self> {
        let mut walk = CgroupWalk::start(mount)?;
        while !walk.step(usize::MAX)? {}
        Ok(walk.paths)
    }

    /// Records a cgroup, replacing what was known under the same id.
    pub fn insert(&mut self, id: u64, path: String) {
        self.by_id.insert(id, path);
    }

    /// Forgets a removed cgroup.
    pub fn remove(&mut self, id: u64) -> Option<String> {
        self.by_id.remove(&id)
    }

    /// The path of a cgroup id, if known.
    pub fn get(&self, id: u64) -> Option<&str> {
        self.by_id.get(&id).map(String::as_str)
    }

    /// The id of a path (`/a/b`; spelled in any form [`CgroupRel`] accepts). Linear: meant
    /// for setup, not for events.
    pub fn id_of(&self, path: &str) -> Option<u64> {
        let wanted = CgroupRel::new(path).ok()?;
        self.rels().find(|(_, p)| *p == wanted).map(|(id, _)| id)
    }

    /// Ids of `path` and every cgroup below it.
    pub fn subtree(&self, path: &str) -> Vec<u64> {
        let Ok(root) = CgroupRel::new(path) else {
            return Vec::new();
        };
        self.rels()
            .filter(|(_, p)| p.is_within(&root))
            .map(|(id, _)| id)
            .collect()
    }

    /// Every known cgroup whose path names one.
    fn rels(&self) -> impl Iterator<Item = (u64, CgroupRel)> {
        self.by_id
            .iter()
            .filter_map(|(id, p)| Some((*id, CgroupRel::new(p).ok()?)))
    }

    /// Every known cgroup: (id, path).
    pub fn iter(&self) -> impl Iterator<Item = (u64, &str)> {
        self.by_id.iter().map(|(id, path)| (*id, path.as_str()))
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

/// A walk of the hierarchy taken a few directories at a time, so a long one can make way for
/// other work between its steps ([`CgroupPaths::scan`] walks in one go). A cgroup created
/// during the walk in a directory already read is not seen; one removed is skipped, or seen
/// when it went after its directory was read.
#[derive(Debug)]
pub struct CgroupWalk {
    /// Directories still to read: (path, relative path).
    pending: Vec<(PathBuf, String)>,
    paths: CgroupPaths,
}

impl CgroupWalk {
    pub fn start(mount: &Path) -> io::Result<Self> {
        let mut paths = CgroupPaths::default();
        let root = fs::metadata(mount)?;
        paths.insert(root.ino(), "/".into());
        Ok(Self {
            pending: vec![(mount.to_path_buf(), String::new())],
            paths,
        })
    }

    /// Reads up to `dirs` more directories; true once every one is read.
    pub fn step(&mut self, dirs: usize) -> io::Result<bool> {
        for _ in 0..dirs {
            let Some((dir, rel)) = self.pending.pop() else {
                break;
            };
            let entries = match fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            // The type and inode come with the directory entry: a cgroup holds dozens of
            // files, and stat-ing each made the walk of 10,000 cgroups take most of a second.
            for entry in entries.flatten() {
                if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let child = format!("{rel}/{}", entry.file_name().to_string_lossy());
                self.paths.insert(entry.ino(), child.clone());
                self.pending.push((entry.path(), child));
            }
        }
        Ok(self.pending.is_empty())
    }

    /// The cgroups found so far: all of them once [`Self::step`] said the walk is done.
    pub fn paths(&self) -> &CgroupPaths {
        &self.paths
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_keep_the_cache_current() {
        let mut paths = CgroupPaths::default();
        paths.insert(1, "/".into());
        paths.insert(42, "/kubepods/pod-a".into());
        assert_eq!(paths.get(42), Some("/kubepods/pod-a"));
        assert_eq!(paths.id_of("kubepods/pod-a/"), Some(42));
        assert_eq!(paths.remove(42), Some("/kubepods/pod-a".into()));
        assert_eq!(paths.get(42), None);
        assert_eq!(paths.len(), 1);
    }

    #[test]
    fn subtree_matches_whole_components_only() {
        let mut paths = CgroupPaths::default();
        for (id, p) in [
            (1, "/"),
            (2, "/a"),
            (3, "/a/b"),
            (4, "/a/b/c"),
            (5, "/a/bc"),
        ] {
            paths.insert(id, p.into());
        }
        let mut below = paths.subtree("/a/b");
        below.sort_unstable();
        assert_eq!(below, vec![3, 4]);
        assert_eq!(paths.subtree("/").len(), 5);
    }

    #[test]
    fn scan_records_directory_inodes() {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir_all(tmp.path().join("x/y")).unwrap();
        fs::write(tmp.path().join("x/memory.stat"), "").unwrap();
        let paths = CgroupPaths::scan(tmp.path()).unwrap();
        let y = fs::metadata(tmp.path().join("x/y")).unwrap().ino();
        assert_eq!(paths.get(y), Some("/x/y"));
        assert_eq!(paths.len(), 3, "root, x and x/y; files are not cgroups");
    }

    #[test]
    fn a_walk_in_steps_finds_what_a_scan_finds() {
        let tmp = tempfile::tempdir().unwrap();
        for dir in ["a/b/c", "a/d", "e"] {
            fs::create_dir_all(tmp.path().join(dir)).unwrap();
        }
        let mut walk = CgroupWalk::start(tmp.path()).unwrap();
        let mut steps = 1;
        while !walk.step(2).unwrap() {
            steps += 1;
        }
        assert_eq!(
            steps, 3,
            "the root and five cgroups, two directories a step"
        );
        let scanned = CgroupPaths::scan(tmp.path()).unwrap();
        let mut walked: Vec<_> = walk.paths().iter().collect();
        let mut expected: Vec<_> = scanned.iter().collect();
        walked.sort_unstable();
        expected.sort_unstable();
        assert_eq!(walked, expected);
        assert_eq!(walked.len(), 6);
    }

    #[test]
    fn a_walk_skips_a_cgroup_removed_before_its_turn_and_fails_on_any_other_error() {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir_all(tmp.path().join("a/b")).unwrap();
        fs::create_dir(tmp.path().join("c")).unwrap();
        let mut walk = CgroupWalk::start(tmp.path()).unwrap();
        assert!(!walk.step(1).unwrap(), "the root read, a and c pending");
        // c goes before its turn (its pod was deleted): skipped, the walk goes on.
        fs::remove_dir(tmp.path().join("c")).unwrap();
        // a is no longer a directory: a failure the walk cannot step over (a sweep built on
        // a walk that missed a part would delete live cgroups' aggregates).
        fs::remove_dir_all(tmp.path().join("a")).unwrap();
        fs::write(tmp.path().join("a"), "").unwrap();
        let err = loop {
            match walk.step(1) {
                Ok(false) => {}
                Ok(true) => panic!("the walk ended over an unreadable directory"),
                Err(e) => break e,
            }
        };
        assert_eq!(err.raw_os_error(), Some(libc::ENOTDIR), "{err}");
    }
}
