//! Reloading the manifests directory when it changes, through inotify (`crate::inotify`): a
//! change is seen as soon as the kernel reports it, without polling.
//!
//! Only completed changes are watched for (a file closed after writing, moved in or out,
//! deleted), so a file being written is read once it is whole. A change that leaves the pod
//! set and the skipped files as they were (a text file, a reformatted manifest, a field the
//! agent does not act on) yields nothing; a newly broken manifest is a change, so it is
//! reported when it appears. Pods are handed out as [`NodePod`]s, read file by file.
//!
//! A reload reads and parses on tokio's blocking pool, off the agent's event loop: however
//! long the manifests take to parse, the agent keeps reading memory and deciding meanwhile.
//!
//! The watch follows the path, not the directory it once named: a path that is a symbolic
//! link swapped to another directory (how Kubernetes' atomic writer updates projected volumes,
//! and how many deploy tools switch releases) is checked every second, watched anew and read
//! at once when it names another directory. Whatever inotify says, the directory is read
//! again every 20 s, as the kubelet's file source does, unless its [`DirFingerprint`] says
//! nothing in it changed since the last read.
use std::{
    io,
    path::{Path, PathBuf},
    time::Duration,
};

use tokio::{
    task::JoinHandle,
    time::{Instant, Interval, MissedTickBehavior},
};

use super::{
    dir_fingerprint::DirFingerprint,
    manifests::{Loaded, load_dir_as},
    node_pod::NodePod,
};
use crate::inotify::Inotify;

/// Why watching stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// inotify could not be set up for the directory.
    #[error("watching {dir}: {source}")]
    Watch { dir: PathBuf, source: io::Error },
    /// Reading inotify events failed.
    #[error("reading change events for {dir}: {source}")]
    Events { dir: PathBuf, source: io::Error },
    /// The directory was removed or moved away; a new watcher is needed.
    #[error("{dir} was removed or moved away")]
    DirectoryGone { dir: PathBuf },
    /// The directory could not be listed after a change.
    #[error("listing {dir}: {source}")]
    List { dir: PathBuf, source: io::Error },
    /// The reload task panicked or was cancelled.
    #[error("reloading {dir}: {source}")]
    Reload {
        dir: PathBuf,
        source: tokio::task::JoinError,
    },
}

/// Events that complete a change of the directory's content, and the directory's own end.
const CHANGE_MASK: u32 = libc::IN_CLOSE_WRITE
    | libc::IN_MOVED_TO
    | libc::IN_MOVED_FROM
    | libc::IN_DELETE
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF;
/// The watch is over: the directory went away, or its filesystem was unmounted.
const GONE_MASK: u32 =
    libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_IGNORED | libc::IN_UNMOUNT;

/// How often the path is checked for naming another directory than the one watched.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);
/// How often the directory is read whatever inotify says (the kubelet's file source period).
const RELIST_EVERY: Duration = Duration::from_secs(20);

/// A directory as the kernel knows it: device and inode.
type DirIdentity = (u64, u64);

/// Watches one manifests directory.
pub struct ManifestWatcher {
    dir: PathBuf,
    inotify: Inotify,
    /// The directory the watch is on; the path may come to name another.
    watched: DirIdentity,
    /// Ticks of the path check and of the periodic re-list.
    checks: Interval,
    /// When the directory was last read.
    last_read: Instant,
    /// The pod set last handed out, to recognise changes that change nothing.
    last: Vec<NodePod>,
    /// The reasons files and pods were skipped at the last reload, likewise.
    last_errors: Vec<String>,
    /// The directory's fingerprint taken just before its last read.
    read_fingerprint: Option<DirFingerprint>,
    /// A reload running on the blocking pool; kept across cancelled waits so no change is lost.
    reloading: Option<JoinHandle<Reloaded>>,
}

/// Why the directory is read again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reason {
    /// inotify reported a change, or the path names another directory.
    Changed,
    /// The periodic re-list.
    Relist,
}

/// What a reload found.
enum Reloaded {
    /// The re-list found the directory as it was at the last read: nothing was parsed.
    Unchanged,
    /// The directory as read, with its fingerprint taken just before.
    Read(Option<DirFingerprint>, io::Result<Loaded<NodePod>>),
}

impl ManifestWatcher {
    /// Starts watching `dir`, then reads it; the watch comes first so no change between the
    /// two is lost. Must be called inside a tokio runtime.
    pub fn start(dir: &Path) -> Result<(Self, Loaded<NodePod>), WatchError> {
        let (inotify, watched) = watch(dir)?;
        let mut checks = tokio::time::interval_at(Instant::now() + FOLLOW_EVERY, FOLLOW_EVERY);
        checks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut watcher = Self {
            dir: dir.to_path_buf(),
            inotify,
            watched,
            checks,
            last_read: Instant::now(),
            last: Vec::new(),
            last_errors: Vec::new(),
            read_fingerprint: DirFingerprint::of(dir).ok(),
            reloading: None,
        };
        // At start nothing is decided yet: read at once.
        let loaded = load_nodes(dir).map_err(|source| WatchError::List {
            dir: dir.to_path_buf(),
            source,
        })?;
        let loaded = watcher.changed(loaded).unwrap_or_default();
        Ok((watcher, loaded))
    }

    /// The directory being watched.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Waits for a change of the directory that changes the pod set or what was skipped and
    /// returns the new full set, with the files and pods that were skipped. Cancel-safe.
    pub async fn next_change(&mut self) -> Result<Loaded<NodePod>, WatchError> {
        loop {
            let reload = if let Some(reload) = &mut self.reloading {
                reload
            } else {
                let reason = self.wait_for_reason_to_read().await?;
                self.last_read = Instant::now();
                let dir = self.dir.clone();
                let earlier = match reason {
                    Reason::Relist => self.read_fingerprint.clone(),
                    Reason::Changed => None,
                };
                self.reloading
                    .insert(tokio::task::spawn_blocking(move || reload(&dir, earlier)))
            };
            // Awaiting the handle by reference is cancel-safe: a cancelled wait resumes here.
            let joined = reload.await;
            self.reloading = None;
            let reloaded = joined.map_err(|source| WatchError::Reload {
                dir: self.dir.clone(),
                source,
            })?;
            let Reloaded::Read(fingerprint, loaded) = reloaded else {
                continue;
            };
            let loaded = loaded.map_err(|source| WatchError::List {
                dir: self.dir.clone(),
                source,
            })?;
            self.read_fingerprint = fingerprint;
            if let Some(loaded) = self.changed(loaded) {
                return Ok(loaded);
            }
        }
    }

    /// Records a fresh read of the directory; `None` when neither the pods nor the skipped
    /// files changed.
    fn changed(&mut self, loaded: Loaded<NodePod>) -> Option<Loaded<NodePod>> {
        let errors: Vec<String> = loaded.errors.iter().map(ToString::to_string).collect();
        if loaded.pods == self.last && errors == self.last_errors {
            return None;
        }
        self.last.clone_from(&loaded.pods);
        self.last_errors = errors;
        Some(loaded)
    }

    /// Waits until the directory should be read again: a change reported by inotify, the path
    /// naming another directory (watched from now on), or the periodic re-list. Cancel-safe:
    /// the only waits are for readiness and for a tick.
    async fn wait_for_reason_to_read(&mut self) -> Result<Reason, WatchError> {
        loop {
            let reason = tokio::select! {
                events = wait_for_events(&self.inotify, &self.dir) => Some(events),
                _ = self.checks.tick() => None,
            };
            match reason {
                Some(Ok(())) => return Ok(Reason::Changed),
                // The directory watched went; the path may name another one already.
                Some(Err(WatchError::DirectoryGone { dir })) => {
                    if !self.follow_path()? {
                        return Err(WatchError::DirectoryGone { dir });
                    }
                    return Ok(Reason::Changed);
                }
                Some(Err(e)) => return Err(e),
                None if self.follow_path()? => return Ok(Reason::Changed),
                None if self.last_read.elapsed() >= RELIST_EVERY => return Ok(Reason::Relist),
                None => {}
            }
        }
    }

    /// Watches the directory the path names now, when it is not the one watched; whether it
    /// did. A path that names no directory is left to the events (or the next check).
    fn follow_path(&mut self) -> Result<bool, WatchError> {
        match identity(&self.dir) {
            Ok(now) if now != self.watched => {}
            _ => return Ok(false),
        }
        let (inotify, watched) = watch(&self.dir)?;
        tracing::info!(
            "{} names another directory now: watching and reading that one",
            self.dir.display()
        );
        self.inotify = inotify;
        self.watched = watched;
        Ok(true)
    }
}

/// Sets up inotify on the directory `dir` names, and says which directory that is. The path
/// is looked up before and after adding the watch, so a swap in between is not missed.
fn watch(dir: &Path) -> Result<(Inotify, DirIdentity), WatchError> {
    let watch_error = |source| WatchError::Watch {
        dir: dir.to_path_buf(),
        source,
    };
    loop {
        let before = identity(dir).map_err(watch_error)?;
        let inotify = Inotify::new().map_err(watch_error)?;
        inotify
            .add_watch(dir, CHANGE_MASK | libc::IN_ONLYDIR)
            .map_err(watch_error)?;
        if identity(dir).map_err(watch_error)? == before {
            return Ok((inotify, before));
        }
    }
}

/// The directory `dir` names now, symbolic links followed.
fn identity(dir: &Path) -> io::Result<DirIdentity> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::from(io::ErrorKind::NotADirectory));
    }
    Ok((meta.dev(), meta.ino()))
}

/// Waits until events are queued, then drains all of them so a burst leads to one reload.
async fn wait_for_events(inotify: &Inotify, dir: &Path) -> Result<(), WatchError> {
    let masks = inotify
        .next_burst()
        .await
        .map_err(|source| WatchError::Events {
            dir: dir.to_path_buf(),
            source,
        })?;
    if masks & GONE_MASK != 0 {
        return Err(WatchError::DirectoryGone {
            dir: dir.to_path_buf(),
        });
    }
    Ok(())
}

/// The directory's pods as the agent keeps them.
fn load_nodes(dir: &Path) -> io::Result<Loaded<NodePod>> {
    load_dir_as(dir, |pod| NodePod::from_pod(&pod))
}

/// Reads the directory, taking its fingerprint first; with the fingerprint of the last read
/// (`earlier`, the re-list's), nothing is parsed when nothing changed since.
fn reload(dir: &Path, earlier: Option<DirFingerprint>) -> Reloaded {
    let fingerprint = DirFingerprint::of(dir).ok();
    if let (Some(now), Some(earlier)) = (&fingerprint, &earlier)
        && now.unchanged_since(earlier)
    {
        return Reloaded::Unchanged;
    }
    Reloaded::Read(fingerprint, load_nodes(dir))
}

#[cfg(test)]
mod tests;
