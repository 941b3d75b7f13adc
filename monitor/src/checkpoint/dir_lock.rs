//! One agent per checkpoint directory: two agents on one node would each decide and each
//! signal, and one's start-up would remove the other's temporary file. The directory itself is
//! locked with `flock` before anything in it is touched (the kernel drops the lock when the
//! process dies, so a crash leaves nothing to clean), and the holder's pid is written beside
//! it so a second agent can name it, as container runtimes and systemd do.
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// The file that names the holder, beside the checkpoint files.
const PID_FILE: &str = "agent.pid";

/// The checkpoint directory held by another process.
#[derive(Debug, thiserror::Error)]
#[error(
    "refusing to start: another agent{} holds the checkpoint directory {}; two agents on one \
     node would both evict. Stop it first, or give this one its own --checkpoint-dir",
    holder.map(|pid| format!(" (pid {pid})")).unwrap_or_default(),
    dir.display()
)]
pub struct Held {
    pub dir: PathBuf,
    /// The holder's pid, when its pid file could be read.
    pub holder: Option<u32>,
}

/// The lock on a checkpoint directory, held until dropped or the process ends.
#[derive(Debug)]
pub struct DirLock {
    _dir: File,
}

impl DirLock {
    /// Locks `dir` for this process. `Ok(None)` when the directory cannot be opened at all (it
    /// could not be created): nothing can be written there either, and the caller reports that.
    pub fn take(dir: &Path) -> Result<Option<DirLock>, Held> {
        let Ok(handle) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(dir)
        else {
            return Ok(None);
        };
        // SAFETY: a valid open descriptor; LOCK_NB makes the call return at once.
        if unsafe { libc::flock(handle.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::WouldBlock {
                return Err(Held {
                    dir: dir.to_owned(),
                    holder: read_holder(dir),
                });
            }
            // A file system without flock: carry on unlocked rather than not protect the node.
            tracing::warn!(
                "checkpoint directory {} cannot be locked ({error}); a second agent on it would \
                 not be refused",
                dir.display()
            );
            return Ok(None);
        }
        // Best effort: a read-only directory keeps the lock without naming its holder.
        let _ = fs::write(dir.join(PID_FILE), format!("{}\n", std::process::id()));
        Ok(Some(DirLock { _dir: handle }))
    }
}

/// The pid in the holder's pid file, read only when it is a small regular file.
fn read_holder(dir: &Path) -> Option<u32> {
    let path = dir.join(PID_FILE);
    if !fs::symlink_metadata(&path).ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    File::open(path)
        .ok()?
        .take(32)
        .read_to_string(&mut text)
        .ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid_until_it_lets_go() {
        let root = tempfile::tempdir().unwrap();
        let first = DirLock::take(root.path()).unwrap().expect("locked");
        // flock locks belong to the open file description: a second open in this process
        // stands for a second agent.
        let refused = DirLock::take(root.path()).unwrap_err();
        assert_eq!(refused.holder, Some(std::process::id()));
        assert!(
            refused
                .to_string()
                .contains(&format!("(pid {})", std::process::id())),
            "{refused}"
        );
        drop(first);
        assert!(DirLock::take(root.path()).unwrap().is_some(), "free again");
    }

    #[test]
    fn a_missing_directory_is_not_locked_and_not_refused() {
        let root = tempfile::tempdir().unwrap();
        assert!(
            DirLock::take(&root.path().join("absent"))
                .unwrap()
                .is_none()
        );
    }
}
