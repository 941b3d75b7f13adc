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
//! again every 20 s, as the kubelet's file source does.
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
    /// A reload running on the blocking pool; kept across cancelled waits so no change is lost.
    reloading: Option<JoinHandle<io::Result<Loaded<NodePod>>>>,
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
                self.wait_for_reason_to_read().await?;
                self.last_read = Instant::now();
                let dir = self.dir.clone();
                self.reloading
                    .insert(tokio::task::spawn_blocking(move || load_nodes(&dir)))
            };
            // Awaiting the handle by reference is cancel-safe: a cancelled wait resumes here.
            let joined = reload.await;
            self.reloading = None;
            let loaded = joined
                .map_err(|source| WatchError::Reload {
                    dir: self.dir.clone(),
                    source,
                })?
                .map_err(|source| WatchError::List {
                    dir: self.dir.clone(),
                    source,
                })?;
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
    async fn wait_for_reason_to_read(&mut self) -> Result<(), WatchError> {
        loop {
            let reason = tokio::select! {
                events = wait_for_events(&self.inotify, &self.dir) => Some(events),
                _ = self.checks.tick() => None,
            };
            match reason {
                Some(Ok(())) => return Ok(()),
                // The directory watched went; the path may name another one already.
                Some(Err(WatchError::DirectoryGone { dir })) => {
                    if !self.follow_path()? {
                        return Err(WatchError::DirectoryGone { dir });
                    }
                    return Ok(());
                }
                Some(Err(e)) => return Err(e),
                None if self.follow_path()? => return Ok(()),
                None if self.last_read.elapsed() >= RELIST_EVERY => return Ok(()),
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

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    const WITHIN: Duration = Duration::from_secs(1);

    /// The names of the pods loaded.
    fn uids(loaded: &Loaded<NodePod>) -> Vec<&str> {
        loaded
            .pods
            .iter()
            .map(|p| p.facts.as_ref().map_or("", |f| f.pod.name.as_str()))
            .collect()
    }

    /// A valid pod manifest named `name`, its uid made from the name.
    fn pod(name: &str) -> String {
        let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
        format!(
            "kind: Pod\nmetadata: {{name: {name}, uid: 00000000-0000-4000-8000-{hex:0>12}}}\n\
             spec: {{containers: []}}\n"
        )
    }

    async fn change(watcher: &mut ManifestWatcher) -> Loaded<NodePod> {
        tokio::time::timeout(WITHIN, watcher.next_change())
            .await
            .expect("change seen within a second")
            .expect("watching")
    }

    #[tokio::test]
    async fn changes_are_seen_and_no_op_changes_are_not() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        fs::write(dir.join("a.yaml"), pod("a")).unwrap();
        let (mut watcher, initial) = ManifestWatcher::start(dir).unwrap();
        assert_eq!(uids(&initial), ["a"]);

        fs::write(dir.join("b.json"), pod("b")).unwrap();
        assert_eq!(uids(&change(&mut watcher).await), ["a", "b"], "new file");

        // Written elsewhere, then moved in: the way tools replace manifests atomically.
        fs::write(dir.join(".a.yaml.tmp"), pod("a2")).unwrap();
        fs::rename(dir.join(".a.yaml.tmp"), dir.join("a.yaml")).unwrap();
        assert_eq!(
            uids(&change(&mut watcher).await),
            ["a2", "b"],
            "replaced file"
        );

        fs::write(dir.join("notes.txt"), "not a manifest").unwrap();
        // Reformatted, and a field the agent does not act on added.
        fs::write(
            dir.join("b.json"),
            format!("{}# reformatted\nstatus: {{podIP: 10.0.0.1}}\n", pod("b")),
        )
        .unwrap();
        let quiet = tokio::time::timeout(Duration::from_millis(300), watcher.next_change()).await;
        assert!(
            quiet.is_err(),
            "a change of nothing yields nothing: {quiet:?}"
        );

        // A broken manifest leaves the pods as they were but is news: it is reported when it
        // appears, and its removal clears the report.
        fs::write(dir.join("e.yaml"), "kind: Pod\nmetadata: [not, a, map\n").unwrap();
        let broken = change(&mut watcher).await;
        assert_eq!(uids(&broken), ["a2", "b"]);
        assert!(
            broken.errors.len() == 1 && broken.errors[0].to_string().contains("e.yaml"),
            "{:?}",
            broken.errors
        );
        fs::remove_file(dir.join("e.yaml")).unwrap();
        assert!(change(&mut watcher).await.errors.is_empty());

        fs::remove_file(dir.join("a.yaml")).unwrap();
        assert_eq!(uids(&change(&mut watcher).await), ["b"], "deleted file");

        fs::write(dir.join("c.yaml"), "kind: Pod\nmetadata: {name: no-uid}\n").unwrap();
        fs::write(dir.join("d.yaml"), pod("d")).unwrap();
        let loaded = change(&mut watcher).await;
        // The two writes may arrive as one change or two; the last state is what counts.
        let loaded = if uids(&loaded) == ["b"] {
            change(&mut watcher).await
        } else {
            loaded
        };
        assert_eq!(uids(&loaded), ["b", "d"]);
        assert_eq!(
            loaded.errors.len(),
            1,
            "the pod without uid is reported: {:?}",
            loaded.errors
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_event_loop_runs_on_while_a_reload_parses() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let (mut watcher, _) = ManifestWatcher::start(dir).unwrap();
        // Thousands of pods, slow to parse, within the token bound (yaml_bounds::LIMITS).
        let mut list = String::from("kind: PodList\nitems:\n");
        let mut pods = 0;
        while pods < 2_000 {
            let hex = format!("{pods:012x}");
            list.push_str(&format!(
                "- metadata: {{name: p{pods}, namespace: default, uid: 00000000-0000-4000-8000-{hex}}}\n  \
                 spec: {{containers: [{{name: main, image: pause, resources: {{requests: {{memory: 1Mi}}}}}}]}}\n"
            ));
            pods += 1;
        }
        fs::write(dir.join("many.yaml"), &list).unwrap();

        // The single-threaded loop ticks every 5 ms while the reload runs; the longest gap
        // between ticks is how long the agent could not decide.
        let mut ticks = tokio::time::interval(Duration::from_millis(5));
        let mut longest = Duration::ZERO;
        let mut last = std::time::Instant::now();
        let reload_start = std::time::Instant::now();
        let loaded = loop {
            tokio::select! {
                change = watcher.next_change() => {
                    longest = longest.max(last.elapsed());
                    break change.expect("watching");
                }
                _ = ticks.tick() => {
                    longest = longest.max(last.elapsed());
                    last = std::time::Instant::now();
                }
            }
        };
        let reload = reload_start.elapsed();
        assert_eq!(loaded.pods.len(), pods, "{:?}", loaded.errors);
        assert!(
            longest < Duration::from_millis(200) && longest * 2 < reload,
            "the loop stalled {longest:?} during a reload of {reload:?}"
        );
    }

    #[tokio::test]
    async fn removing_the_directory_ends_the_watch() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("manifests");
        fs::create_dir(&dir).unwrap();
        let (mut watcher, _) = ManifestWatcher::start(&dir).unwrap();
        fs::remove_dir(&dir).unwrap();
        let ended = tokio::time::timeout(WITHIN, watcher.next_change())
            .await
            .expect("seen within a second");
        assert!(
            matches!(ended, Err(WatchError::DirectoryGone { .. })),
            "{ended:?}"
        );
    }

    #[tokio::test]
    async fn a_symlink_swapped_to_another_directory_is_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let (old, new) = (tmp.path().join("1"), tmp.path().join("2"));
        for dir in [&old, &new] {
            fs::create_dir(dir).unwrap();
        }
        fs::write(old.join("a.yaml"), pod("a")).unwrap();
        fs::write(new.join("b.yaml"), pod("b")).unwrap();
        let link = tmp.path().join("current");
        std::os::unix::fs::symlink(&old, &link).unwrap();
        let (mut watcher, first) = ManifestWatcher::start(&link).unwrap();
        assert_eq!(uids(&first), ["a"]);

        let staged = tmp.path().join("current.new");
        std::os::unix::fs::symlink(&new, &staged).unwrap();
        fs::rename(&staged, &link).unwrap();
        let followed = tokio::time::timeout(FOLLOW_EVERY * 3, watcher.next_change())
            .await
            .expect("followed within three checks")
            .unwrap();
        assert_eq!(uids(&followed), ["b"]);

        // The new directory is the one watched now, through inotify; the old one is not.
        fs::write(old.join("c.yaml"), pod("c")).unwrap();
        fs::write(new.join("d.yaml"), pod("d")).unwrap();
        assert_eq!(uids(&change(&mut watcher).await), ["b", "d"]);

        // The old directory removed, as the atomic writer does: nothing ends.
        fs::remove_dir_all(&old).unwrap();
        let quiet = tokio::time::timeout(FOLLOW_EVERY * 2, watcher.next_change()).await;
        assert!(quiet.is_err(), "{quiet:?}");
    }

    #[tokio::test]
    async fn the_directory_is_read_again_every_twenty_seconds_whatever_inotify_says() {
        // A manifest that is a link to a file elsewhere: its change raises no event here.
        let tmp = tempfile::tempdir().unwrap();
        let (dir, elsewhere) = (tmp.path().join("pods"), tmp.path().join("store"));
        fs::create_dir(&dir).unwrap();
        fs::create_dir(&elsewhere).unwrap();
        fs::write(elsewhere.join("p.yaml"), pod("a")).unwrap();
        std::os::unix::fs::symlink(elsewhere.join("p.yaml"), dir.join("p.yaml")).unwrap();
        let (mut watcher, first) = ManifestWatcher::start(&dir).unwrap();
        assert_eq!(uids(&first), ["a"]);
        fs::write(elsewhere.join("p.yaml"), pod("b")).unwrap();

        tokio::time::pause();
        let started = Instant::now();
        let relisted = tokio::time::timeout(RELIST_EVERY * 2, watcher.next_change())
            .await
            .expect("read again")
            .unwrap();
        assert_eq!(uids(&relisted), ["b"]);
        let after = started.elapsed();
        assert!(
            after + FOLLOW_EVERY >= RELIST_EVERY && after <= RELIST_EVERY + FOLLOW_EVERY,
            "read again after {after:?}"
        );
    }

    #[test]
    fn missing_directory_cannot_be_watched() {
        let started = ManifestWatcher::start(Path::new("/nonexistent/manifests"));
        assert!(matches!(started, Err(WatchError::Watch { .. })));
    }
}
