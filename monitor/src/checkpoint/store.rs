//! A directory of checkpoint files, each named by its [`Key`], written atomically.
//!
//! A write goes to a temporary file in the same directory (named with a `.` prefix so listings
//! skip it), is flushed with fsync, renamed over the target and followed by an fsync of the
//! directory. rename(2) within one file system is atomic, so after a crash at any moment the key
//! holds either the previous content or the new one, never a mix; the directory fsync makes the
//! rename itself durable. Temporaries left by a crash are removed by [`FileStore::prepare`].
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::key::Key;

const TEMP_PREFIX: char = '.';
// Marks our temporaries among other hidden files, so only they are removed.
const TEMP_MARKER: &str = ".tmp-";
const FILE_MODE: u32 = 0o600;
const DIR_MODE: u32 = 0o700;

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Nothing is stored under the key.
    #[error("{} does not exist", path.display())]
    NotFound { path: PathBuf },
    /// Something other than a regular file stands at the checkpoint's path (a FIFO would
    /// block the read forever, a device could act on it); it was not opened.
    #[error(
        "could not read {}: it is {kind}, not a regular file (not opened)",
        path.display()
    )]
    NotRegular { path: PathBuf, kind: &'static str },
    /// The file is larger than any checkpoint the agent writes; it was not read whole.
    #[error(
        "{} is larger than {limit} bytes, far more than a checkpoint holds; not loaded",
        path.display()
    )]
    TooLarge { path: PathBuf, limit: u64 },
    /// A file system call failed; `action` says which step.
    #[error("could not {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Checkpoint files in one directory.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
}

impl FileStore {
    /// A store over `dir`; nothing is touched until an operation runs.
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file that holds `key`.
    pub fn path_of(&self, key: &Key) -> PathBuf {
        self.dir.join(key.as_str())
    }

    /// Creates the directory (mode 0700) if needed, restricts it to its owner, and removes
    /// temporaries left by a writer that died. The agent locks the directory in between
    /// (see [`super::manager::StateManager::open`]).
    #[cfg(test)]
    pub(crate) fn prepare(&self) -> Result<(), StoreError> {
        self.create_dir()?;
        self.remove_stale_temporaries()
    }

    /// Creates the directory (mode 0700) if needed and restricts it to its owner.
    pub fn create_dir(&self) -> Result<(), StoreError> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(&self.dir)
            .map_err(|e| self.io("create directory", &self.dir, e))?;
        fs::set_permissions(&self.dir, fs::Permissions::from_mode(DIR_MODE))
            .map_err(|e| self.io("restrict permissions of", &self.dir, e))
    }

    /// Removes temporaries left by a writer that died.
    pub fn remove_stale_temporaries(&self) -> Result<(), StoreError> {
        for name in self.file_names()? {
            if name.starts_with(TEMP_PREFIX) && name.contains(TEMP_MARKER) {
                let path = self.dir.join(&name);
                fs::remove_file(&path).map_err(|e| self.io("remove stale temporary", &path, e))?;
            }
        }
        Ok(())
    }

    /// Reads the content stored under `key`.
    pub fn read(&self, key: &Key) -> Result<Vec<u8>, StoreError> {
        read_file(&self.path_of(key))
    }

    /// Replaces the content under `key` atomically and durably; on error the previous content is
    /// untouched and no temporary is left behind.
    pub fn write(&self, key: &Key, data: &[u8]) -> Result<(), StoreError> {
        self.replace(key, data, true)?;
        self.sync_dir()
    }

    /// Replaces the content under `key` atomically, without waiting for the disk: for a record
    /// of kernel state that a reboot clears anyway (a cgroup's `memory.high`), which must
    /// outlive the process, not the node. A process killed at any point leaves the old content
    /// or the new, never a torn file; the page cache keeps it for the next start.
    pub fn write_for_this_boot(&self, key: &Key, data: &[u8]) -> Result<(), StoreError> {
        self.replace(key, data, false)
    }

    fn replace(&self, key: &Key, data: &[u8], durable: bool) -> Result<(), StoreError> {
        let temp = self.temp_path(key);
        let result = self.write_temp(&temp, data, durable).and_then(|()| {
            let target = self.path_of(key);
            fs::rename(&temp, &target).map_err(|e| self.io("rename into place", &target, e))
        });
        if result.is_err() {
            // Best effort: the error being returned is the one worth reporting.
            let _ = fs::remove_file(&temp);
        }
        result
    }

    /// Removes what is stored under `key`, durably; nothing stored is no error.
    pub fn remove(&self, key: &Key) -> Result<(), StoreError> {
        let path = self.path_of(key);
        match fs::remove_file(&path) {
            Ok(()) => self.sync_dir(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.io("remove", &path, e)),
        }
    }

    /// The stored keys, sorted; temporaries and names that are not keys are skipped.
    pub fn list(&self) -> Result<Vec<Key>, StoreError> {
        let mut keys: Vec<Key> = self
            .file_names()?
            .iter()
            .filter_map(|name| Key::new(name).ok())
            .collect();
        keys.sort();
        Ok(keys)
    }

    /// Renames `key`'s file to `<key>.<suffix>` so that it is kept but no longer loaded, and
    /// returns the new path. An existing file is never replaced: `-2`, `-3`, ... is appended
    /// instead, after the highest taken, so the names keep their order.
    pub fn move_aside(&self, key: &Key, suffix: &str) -> Result<PathBuf, StoreError> {
        let source = self.path_of(key);
        let base = format!("{key}.{suffix}");
        let taken = self
            .file_names()
            .unwrap_or_default()
            .iter()
            .filter(|name| name.starts_with(&base))
            .map(|name| copy_order(name).1)
            .max()
            .unwrap_or(0);
        for attempt in taken + 1..=taken + 100 {
            let name = match attempt {
                1 => base.clone(),
                n => format!("{base}-{n}"),
            };
            let target = self.dir.join(name);
            // A hard link fails instead of replacing an existing file, which rename would not.
            match fs::hard_link(&source, &target) {
                Ok(()) => {
                    fs::remove_file(&source).map_err(|e| self.io("remove", &source, e))?;
                    self.sync_dir()?;
                    return Ok(target);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                // A directory cannot be hard-linked: renamed instead, once the name is free
                // (the directory is the agent's own, 0700, so nothing races for the name).
                Err(e) if e.raw_os_error() == Some(libc::EPERM) && source.is_dir() => {
                    if fs::symlink_metadata(&target).is_ok() {
                        continue;
                    }
                    fs::rename(&source, &target).map_err(|e| self.io("move aside", &source, e))?;
                    self.sync_dir()?;
                    return Ok(target);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(StoreError::NotFound { path: source });
                }
                Err(e) => return Err(self.io("move aside", &source, e)),
            }
        }
        Err(self.io(
            "move aside",
            &source,
            io::Error::new(
                io::ErrorKind::AlreadyExists,
                "100 set-aside copies already exist",
            ),
        ))
    }

    /// Removes copies of `key` set aside with `marker` (`<key>.<marker>...`) beyond `keep`:
    /// the oldest (the first damage found) and the newest stay. Only regular files are
    /// removed; returns what was. Names sort by the time in them.
    pub fn prune_set_aside(
        &self,
        key: &Key,
        marker: &str,
        keep: usize,
    ) -> Result<Vec<PathBuf>, StoreError> {
        let prefix = format!("{key}.{marker}");
        let mut copies: Vec<String> = self
            .file_names()?
            .into_iter()
            .filter(|name| name.starts_with(&prefix))
            .collect();
        copies.sort_by(|a, b| copy_order(a).cmp(&copy_order(b)));
        let excess = copies.len().saturating_sub(keep.max(2));
        let mut removed = Vec::new();
        for name in copies.iter().skip(1).take(excess) {
            let path = self.dir.join(name);
            fs::remove_file(&path).map_err(|e| self.io("remove", &path, e))?;
            removed.push(path);
        }
        if !removed.is_empty() {
            self.sync_dir()?;
        }
        Ok(removed)
    }

    fn write_temp(&self, temp: &Path, data: &[u8], durable: bool) -> Result<(), StoreError> {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(FILE_MODE)
            .open(temp)
            .map_err(|e| self.io("create temporary file", temp, e))?;
        file.write_all(data)
            .map_err(|e| self.io("write temporary file", temp, e))?;
        if !durable {
            return Ok(());
        }
        // sync_all reports any write-back error; once it succeeded the close that follows (whose
        // result std discards) cannot lose data.
        file.sync_all()
            .map_err(|e| self.io("fsync temporary file", temp, e))
    }

    fn sync_dir(&self) -> Result<(), StoreError> {
        File::open(&self.dir)
            .and_then(|dir| dir.sync_all())
            .map_err(|e| self.io("fsync directory", &self.dir, e))
    }

    /// A temporary name unique among live writers: the pid tells processes apart and the
    /// counter tells writes in one process apart. A leftover with the same name belongs to a
    /// dead process and may be overwritten.
    fn temp_path(&self, key: &Key) -> PathBuf {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        self.dir.join(format!(
            "{TEMP_PREFIX}{key}{TEMP_MARKER}{}-{n}",
            std::process::id()
        ))
    }

    fn file_names(&self) -> Result<Vec<String>, StoreError> {
        let entries = fs::read_dir(&self.dir).map_err(|e| self.io("list", &self.dir, e))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| self.io("list", &self.dir, e))?;
            let is_file = entry
                .file_type()
                .map_err(|e| self.io("inspect", &entry.path(), e))?
                .is_file();
            if let (true, Ok(name)) = (is_file, entry.file_name().into_string()) {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn io(&self, action: &'static str, path: &Path, source: io::Error) -> StoreError {
        StoreError::Io {
            action,
            path: path.to_owned(),
            source,
        }
    }
}

/// How set-aside copies sort: by the name before a `-N` that [`FileStore::move_aside`]
/// appended, then by N (1 without one).
fn copy_order(name: &str) -> (&str, u32) {
    name.rsplit_once('-')
        .and_then(|(base, n)| Some((base, n.parse().ok()?)))
        .unwrap_or((name, 1))
}

/// The largest checkpoint file read. The state is bounded (64 recent evictions, one pending
/// eviction, counters) and takes a few KiB; the limit keeps a stray file from filling memory.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// Reads one checkpoint file by path, telling a missing file apart from other failures. The
/// reader stops one byte past [`MAX_FILE_BYTES`], so a larger file is refused without being
/// read whole.
pub fn read_file(path: &Path) -> Result<Vec<u8>, StoreError> {
    let io_error = |source: io::Error| match source.kind() {
        io::ErrorKind::NotFound => StoreError::NotFound {
            path: path.to_owned(),
        },
        _ => StoreError::Io {
            action: "read",
            path: path.to_owned(),
            source,
        },
    };
    let not_regular = |file_type: fs::FileType| StoreError::NotRegular {
        path: path.to_owned(),
        kind: crate::file_kind::describe(file_type),
    };
    // Looked at before it is opened, so a FIFO or a device is never opened at all.
    let file_type = fs::symlink_metadata(path).map_err(io_error)?.file_type();
    if !file_type.is_file() {
        return Err(not_regular(file_type));
    }
    // Opened so that a swap after the look cannot block or follow a link either.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(io_error)?;
    let file_type = file.metadata().map_err(io_error)?.file_type();
    if !file_type.is_file() {
        return Err(not_regular(file_type));
    }
    let mut bytes = Vec::new();
    io::Read::take(file, MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io_error)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(StoreError::TooLarge {
            path: path.to_owned(),
            limit: MAX_FILE_BYTES,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn key(name: &str) -> Key {
        Key::new(name).unwrap()
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn write_read_and_permissions() {
        let root = tempfile::tempdir().unwrap();
        let store = FileStore::at(root.path().join("a/checkpoints"));
        store.prepare().unwrap();
        store.write(&key("one"), b"first").unwrap();
        store.write(&key("one"), b"second").unwrap();
        assert_eq!(store.read(&key("one")).unwrap(), b"second");
        store.write_for_this_boot(&key("one"), b"third").unwrap();
        assert_eq!(store.read(&key("one")).unwrap(), b"third");
        assert_eq!(store.list().unwrap(), vec![key("one")], "no temporary left");
        assert_eq!(
            fs::read_dir(store.dir()).unwrap().count(),
            1,
            "no temporary left"
        );
        assert_eq!(mode(store.dir()), 0o700);
        assert_eq!(mode(&store.path_of(&key("one"))), 0o600);
        assert!(matches!(
            store.read(&key("missing")),
            Err(StoreError::NotFound { .. })
        ));
    }

    #[test]
    fn prepare_tightens_an_open_directory() {
        let root = tempfile::tempdir().unwrap();
        fs::set_permissions(root.path(), fs::Permissions::from_mode(0o755)).unwrap();
        FileStore::at(root.path()).prepare().unwrap();
        assert_eq!(mode(root.path()), 0o700);
    }

    #[test]
    fn listing_skips_temporaries_and_prepare_removes_stale_ones() {
        let root = tempfile::tempdir().unwrap();
        let store = FileStore::at(root.path());
        store.prepare().unwrap();
        store.write(&key("b"), b"x").unwrap();
        store.write(&key("a"), b"x").unwrap();
        let stale = root.path().join(".a.tmp-999-0");
        let foreign_hidden = root.path().join(".keep");
        fs::write(&stale, b"torn").unwrap();
        fs::write(&foreign_hidden, b"").unwrap();
        fs::create_dir(root.path().join("subdir")).unwrap();

        assert_eq!(store.list().unwrap(), [key("a"), key("b")]);
        store.prepare().unwrap();
        assert!(!stale.exists(), "stale temporary removed");
        assert!(
            foreign_hidden.exists(),
            "other hidden files are not ours to remove"
        );
    }

    #[test]
    fn move_aside_never_replaces() {
        let root = tempfile::tempdir().unwrap();
        let store = FileStore::at(root.path());
        store.prepare().unwrap();
        store.write(&key("state"), b"bad one").unwrap();
        let first = store.move_aside(&key("state"), "corrupt-x").unwrap();
        store.write(&key("state"), b"bad two").unwrap();
        let second = store.move_aside(&key("state"), "corrupt-x").unwrap();

        assert_eq!(first, root.path().join("state.corrupt-x"));
        assert_eq!(second, root.path().join("state.corrupt-x-2"));
        assert_eq!(fs::read(first).unwrap(), b"bad one");
        assert_eq!(fs::read(second).unwrap(), b"bad two");
        assert!(matches!(
            store.move_aside(&key("state"), "corrupt-x"),
            Err(StoreError::NotFound { .. })
        ));
    }

    #[test]
    fn set_aside_copies_are_bounded_keeping_the_first_and_the_newest() {
        let root = tempfile::tempdir().unwrap();
        let store = FileStore::at(root.path());
        store.prepare().unwrap();
        for second in 1..=7 {
            store.write(&key("state"), b"bad").unwrap();
            store
                .move_aside(&key("state"), &format!("corrupt-2026T00000{second}Z"))
                .unwrap();
            store.prune_set_aside(&key("state"), "corrupt-", 4).unwrap();
        }
        store.write(&key("state.keep"), b"another key's").unwrap();
        let mut names: Vec<String> = fs::read_dir(root.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "state.corrupt-2026T000001Z",
                "state.corrupt-2026T000005Z",
                "state.corrupt-2026T000006Z",
                "state.corrupt-2026T000007Z",
                "state.keep",
            ]
        );
    }

    /// Makes a FIFO at `path`.
    fn mkfifo(path: &Path) {
        let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn what_is_not_a_regular_file_is_refused_unopened_and_can_be_set_aside() {
        let root = tempfile::tempdir().unwrap();
        let store = FileStore::at(root.path());
        store.prepare().unwrap();
        let path = store.path_of(&key("state"));
        let regular = root.path().join("elsewhere");
        fs::write(&regular, b"state").unwrap();
        let socket = std::os::unix::net::UnixListener::bind(root.path().join("sock")).unwrap();
        type Maker<'a> = &'a dyn Fn(&Path);
        let makers: [(&str, Maker<'_>); 4] = [
            ("a FIFO", &|p| mkfifo(p)),
            ("a directory", &|p| fs::create_dir(p).unwrap()),
            ("a symbolic link", &|p| {
                std::os::unix::fs::symlink(&regular, p).unwrap();
            }),
            ("a socket", &|p| {
                fs::rename(root.path().join("sock"), p).unwrap();
            }),
        ];
        for (kind, make) in makers {
            make(&path);
            // A FIFO read would block this test forever; the refusal must come first.
            match store.read(&key("state")) {
                Err(StoreError::NotRegular { kind: got, .. }) => assert_eq!(got, kind),
                other => panic!("{kind}: {other:?}"),
            }
            let aside = store.move_aside(&key("state"), "corrupt-x").unwrap();
            assert!(
                fs::symlink_metadata(&aside).is_ok(),
                "{kind} kept at {aside:?}"
            );
            assert!(fs::symlink_metadata(&path).is_err(), "{kind} moved away");
            // The key is free for the next write.
            store.write(&key("state"), b"fresh").unwrap();
            assert_eq!(store.read(&key("state")).unwrap(), b"fresh");
            fs::remove_file(&path).unwrap();
        }
        drop(socket);
    }
}
