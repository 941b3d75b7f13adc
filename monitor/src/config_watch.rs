//! Watching the configuration files, so an edit is put in force without a SIGHUP: inotify on
//! each file's directory (and on its target's, when the file is a symbolic link) reports a
//! change at once, and every second each file is looked at anyway (a change inotify cannot
//! see: a file bind-mounted into a container and rewritten on the host, a parent directory
//! swapped).
//!
//! What is compared is each file as its path names it now, symbolic links followed: device,
//! inode, size and times. So every way a file changes is one change: written in place,
//! renamed over by an editor, removed and created again, or swapped by the kubelet's atomic
//! writer for a ConfigMap volume (`config.yaml -> ..data/config.yaml`, the `..data` link
//! renamed over by a new one naming a new timestamped directory). A change is read once the
//! files have kept still for [`SETTLE`], so a writer's steps are not read half done; it is
//! read and parsed on tokio's blocking pool, off the event loop.
use std::{
    io,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    time::Duration,
};

use tokio::{
    task::JoinHandle,
    time::{Instant, Interval, MissedTickBehavior},
};

use crate::{
    config_file::{ConfigSources, LoadedConfig, load},
    inotify::Inotify,
};

/// How often the files are looked at whatever inotify says.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// How long the files must keep still before a change is read.
pub(crate) const SETTLE: Duration = Duration::from_millis(100);

/// What can change a file in a directory: written, moved in or out, created (a symbolic
/// link, a directory of the atomic writer), removed, its mode or owner changed; and the
/// directory's own end.
const CHANGE_MASK: u32 = libc::IN_CLOSE_WRITE
    | libc::IN_MOVED_TO
    | libc::IN_MOVED_FROM
    | libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_ATTRIB
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF
    | libc::IN_ONLYDIR;

/// Each file as its path names it: (device, inode, size, mtime ns, ctime ns), or the error's
/// kind when it cannot be looked at (gone, say).
type Fingerprint = Vec<Result<(u64, u64, u64, i64, i64), io::ErrorKind>>;

/// Watches the files of one [`ConfigSources`].
pub(crate) struct ConfigWatcher {
    sources: ConfigSources,
    /// `None` when inotify could not be set up; the files are then looked at every second.
    inotify: Option<Inotify>,
    /// The directories watched, as the kernel knew them when the watch was set.
    watched: Vec<(PathBuf, Option<(u64, u64)>)>,
    looks: Interval,
    /// The files when they were last read.
    last: Fingerprint,
    /// A change waiting to keep still until then, and how the files were.
    settling: Option<(Instant, Fingerprint)>,
    /// A read on the blocking pool; kept across cancelled waits so no change is lost.
    loading: Option<JoinHandle<anyhow::Result<LoadedConfig>>>,
}

impl ConfigWatcher {
    /// Starts watching the files `sources` names, as they are now; call it before they are
    /// first read, so no change between the two is lost. `None` without files. Must be
    /// called inside a tokio runtime.
    pub(crate) fn start(sources: &ConfigSources) -> Option<Self> {
        sources.files().next()?;
        let mut looks = tokio::time::interval_at(Instant::now() + LOOK_EVERY, LOOK_EVERY);
        looks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut watcher = Self {
            sources: sources.clone(),
            inotify: None,
            watched: Vec::new(),
            looks,
            last: fingerprint(sources),
            settling: None,
            loading: None,
        };
        watcher.watch();
        Some(watcher)
    }

    /// Waits until the files changed and kept still, then reads them: the configuration
    /// they give now, or why they give none. Cancel-safe.
    pub(crate) async fn next_change(&mut self) -> anyhow::Result<LoadedConfig> {
        loop {
            if let Some(loading) = &mut self.loading {
                // Awaiting the handle by reference is cancel-safe: a cancelled wait resumes
                // here.
                let joined = loading.await;
                self.loading = None;
                return joined.unwrap_or_else(|e| Err(anyhow::anyhow!("reading: {e}")));
            }
            if let Some((until, seen)) = self.settling.clone() {
                tokio::time::sleep_until(until).await;
                let now = fingerprint(&self.sources);
                self.settling = None;
                if now == self.last {
                    continue;
                }
                if now != seen {
                    self.settling = Some((Instant::now() + SETTLE, now));
                    continue;
                }
                self.last = now;
                let sources = self.sources.clone();
                self.loading = Some(tokio::task::spawn_blocking(move || load(&sources)));
                continue;
            }
            self.wait_for_reason_to_look().await;
            let now = fingerprint(&self.sources);
            if now != self.last {
                self.settling = Some((Instant::now() + SETTLE, now));
            }
        }
    }

    /// Waits for events of a watched directory, or the next look. At each look a watched
    /// directory that went (or another that took its path) is watched anew.
    async fn wait_for_reason_to_look(&mut self) {
        let burst = async {
            match &self.inotify {
                Some(inotify) => inotify.next_burst().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            burst = burst => match burst {
                Ok(masks) if masks & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_IGNORED) != 0 => {
                    self.watch();
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(
                        "reading the configuration watch's events: {e}; looking at the files \
                         every {LOOK_EVERY:?} instead"
                    );
                    self.inotify = None;
                }
            },
            _ = self.looks.tick() => {
                if self.watched_moved() {
                    self.watch();
                }
            }
        }
    }

    /// Whether a directory to watch is not the one watched.
    fn watched_moved(&self) -> bool {
        self.inotify.is_none() || self.directories() != self.watched
    }

    /// The directories to watch: each file's, and its target's when it is a link.
    fn directories(&self) -> Vec<(PathBuf, Option<(u64, u64)>)> {
        let mut dirs: Vec<(PathBuf, Option<(u64, u64)>)> = Vec::new();
        for file in self.sources.files() {
            let target = std::fs::canonicalize(file).ok();
            for dir in [file.parent(), target.as_deref().and_then(Path::parent)]
                .into_iter()
                .flatten()
            {
                let dir = if dir.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    dir
                };
                if !dirs.iter().any(|(d, _)| d == dir) {
                    let identity = std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()));
                    dirs.push((dir.to_path_buf(), identity));
                }
            }
        }
        dirs
    }

    /// Sets up inotify on the directories as they are now. A failure (no inotify instances
    /// left: EMFILE) is said once and the files are looked at every second.
    fn watch(&mut self) {
        let dirs = self.directories();
        let watched = Inotify::new().and_then(|inotify| {
            for (dir, identity) in &dirs {
                // A directory that is not there yet is watched once it is.
                if identity.is_some() {
                    inotify.add_watch(dir, CHANGE_MASK)?;
                }
            }
            Ok(inotify)
        });
        match watched {
            Ok(inotify) => self.inotify = Some(inotify),
            Err(e) => {
                if self.inotify.is_some() || self.watched.is_empty() {
                    tracing::warn!(
                        "watching the configuration files with inotify: {e}; looking at them \
                         every {LOOK_EVERY:?} instead"
                    );
                }
                self.inotify = None;
            }
        }
        self.watched = dirs;
    }
}

fn fingerprint(sources: &ConfigSources) -> Fingerprint {
    let nanos = |seconds: i64, nanos: i64| seconds.saturating_mul(1_000_000_000) + nanos;
    sources
        .files()
        .map(|file| {
            let m = std::fs::metadata(file).map_err(|e| e.kind())?;
            Ok((
                m.dev(),
                m.ino(),
                m.size(),
                nanos(m.mtime(), m.mtime_nsec()),
                nanos(m.ctime(), m.ctime_nsec()),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests;
