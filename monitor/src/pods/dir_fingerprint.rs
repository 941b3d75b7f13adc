//! What the periodic re-list of the manifests directory compares before it reads: each
//! entry's name, the file it names (device and inode, symbolic links followed), its size and
//! its modification and change times to the nanosecond. A file written, replaced, added or
//! removed changes it, and the kernel sets the change time on every write, so an equal
//! fingerprint means no manifest can have changed and the files need not be parsed again:
//! parsing 10,000 pods took a quarter of a second of CPU every 20 s, which under a CPU limit
//! held the agent's decisions back for seconds. The kernel's file times move in ticks of a
//! few milliseconds, so two writes in one tick may leave the same times: a fingerprint
//! counts as a base for comparison only once every entry is [`SETTLED_AFTER`] old.
use std::{
    ffi::OsString,
    fs, io,
    os::unix::fs::MetadataExt as _,
    path::Path,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

/// How old every entry's change time must be for the fingerprint to count: far more than a
/// file time's tick.
const SETTLED_AFTER: Duration = Duration::from_secs(1);

/// One entry: name, device, inode, size, mtime (s, ns), ctime (s, ns).
type Entry = (OsString, u64, u64, u64, i64, i64, i64, i64);

/// A directory's entries as the re-list compares them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DirFingerprint {
    entries: Vec<Entry>,
    /// Every entry was last changed [`SETTLED_AFTER`] or more before it was taken.
    settled: bool,
}

impl DirFingerprint {
    /// The fingerprint of `dir` now. An entry that vanishes while it is taken is left out
    /// (the next one differs if it stays away).
    pub(crate) fn of(dir: &Path) -> io::Result<Self> {
        let mut entries = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let Ok(meta) = fs::metadata(entry.path()) else {
                continue;
            };
            entries.push((
                entry.file_name(),
                meta.dev(),
                meta.ino(),
                meta.size(),
                meta.mtime(),
                meta.mtime_nsec(),
                meta.ctime(),
                meta.ctime_nsec(),
            ));
        }
        entries.sort_unstable();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let settled = entries.iter().all(|e| {
            let changed = e.6 as f64 + e.7 as f64 / 1e9;
            now - changed >= SETTLED_AFTER.as_secs_f64()
        });
        Ok(Self { entries, settled })
    }

    /// Whether nothing in the directory can have changed since `earlier` was taken: the
    /// same entries, and `earlier` settled.
    pub(crate) fn unchanged_since(&self, earlier: &Self) -> bool {
        earlier.settled && self.entries == earlier.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fingerprint of `dir` once its entries have settled.
    fn settled(dir: &Path) -> DirFingerprint {
        std::thread::sleep(SETTLED_AFTER + Duration::from_millis(50));
        DirFingerprint::of(dir).unwrap()
    }

    #[test]
    fn any_write_rename_or_removal_changes_it_and_a_read_does_not() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        fs::write(dir.join("a.json"), "{}").unwrap();
        let fresh = DirFingerprint::of(dir).unwrap();
        assert!(
            !DirFingerprint::of(dir).unwrap().unchanged_since(&fresh),
            "a file written just now may be written again within its time's tick"
        );
        let first = settled(dir);
        let _ = fs::read(dir.join("a.json")).unwrap();
        assert!(
            DirFingerprint::of(dir).unwrap().unchanged_since(&first),
            "reading changes nothing"
        );
        // The same bytes written again: the change time moves.
        fs::write(dir.join("a.json"), "{}").unwrap();
        assert!(
            !DirFingerprint::of(dir).unwrap().unchanged_since(&first),
            "rewritten"
        );
        let rewritten = settled(dir);
        fs::write(dir.join(".b.tmp"), "{}").unwrap();
        fs::rename(dir.join(".b.tmp"), dir.join("a.json")).unwrap();
        assert!(
            !DirFingerprint::of(dir).unwrap().unchanged_since(&rewritten),
            "replaced"
        );
        let replaced = settled(dir);
        fs::remove_file(dir.join("a.json")).unwrap();
        assert!(
            !DirFingerprint::of(dir).unwrap().unchanged_since(&replaced),
            "removed"
        );
    }

    #[test]
    fn a_swapped_link_target_changes_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        for data in ["v1", "v2"] {
            fs::create_dir(dir.join(data)).unwrap();
            fs::write(dir.join(data).join("pods.json"), "{}").unwrap();
        }
        let watched = dir.join("watched");
        fs::create_dir(&watched).unwrap();
        std::os::unix::fs::symlink(dir.join("v1/pods.json"), watched.join("pods.json")).unwrap();
        let before = settled(&watched);
        fs::remove_file(watched.join("pods.json")).unwrap();
        std::os::unix::fs::symlink(dir.join("v2/pods.json"), watched.join("pods.json")).unwrap();
        assert!(
            !DirFingerprint::of(&watched)
                .unwrap()
                .unchanged_since(&before)
        );
    }
}
