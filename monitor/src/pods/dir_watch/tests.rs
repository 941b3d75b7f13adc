//! The manifests watch against a real directory and inotify.
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
    // Old enough for the fingerprint to count: the re-list reads because the file changed.
    std::thread::sleep(Duration::from_millis(1100));
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
fn the_re_list_parses_nothing_when_nothing_changed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    fs::write(dir.join("a.yaml"), pod("a")).unwrap();
    let fresh = DirFingerprint::of(dir).unwrap();
    let read = |earlier| match reload(dir, earlier) {
        Reloaded::Unchanged => None,
        Reloaded::Read(_, loaded) => Some(uids(&loaded.unwrap()).join(",")),
    };
    assert_eq!(
        read(Some(fresh)).as_deref(),
        Some("a"),
        "a file written just now is read again"
    );
    std::thread::sleep(Duration::from_millis(1100));
    let settled = DirFingerprint::of(dir).unwrap();
    assert_eq!(
        read(Some(settled.clone())),
        None,
        "nothing changed: nothing parsed"
    );
    assert_eq!(
        read(None).as_deref(),
        Some("a"),
        "a reload inotify asked for always reads"
    );
    fs::write(dir.join("a.yaml"), pod("b")).unwrap();
    assert_eq!(read(Some(settled)).as_deref(), Some("b"));
}

#[test]
fn missing_directory_cannot_be_watched() {
    let started = ManifestWatcher::start(Path::new("/nonexistent/manifests"));
    assert!(matches!(started, Err(WatchError::Watch { .. })));
}
