use std::{fs, os::unix::fs::symlink};

use super::*;

/// Seen within the settle time and one look, with room for a loaded machine.
const WITHIN: Duration = Duration::from_secs(3);

fn config(threshold: &str) -> String {
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         evictionHard:\n  memory.available: {threshold}\n"
    )
}

fn threshold(loaded: &LoadedConfig) -> String {
    loaded.config.thresholds[0].value.to_string()
}

async fn change(watcher: &mut ConfigWatcher) -> anyhow::Result<LoadedConfig> {
    tokio::time::timeout(WITHIN, watcher.next_change())
        .await
        .expect("a change seen")
}

async fn quiet(watcher: &mut ConfigWatcher, why: &str) {
    let nothing = tokio::time::timeout(Duration::from_millis(1500), watcher.next_change()).await;
    assert!(
        nothing.is_err(),
        "{why}: {:?}",
        nothing.map(|l| l.map(|l| threshold(&l)))
    );
}

/// A ConfigMap volume as the kubelet's atomic writer lays it out: the data in a timestamped
/// directory, `..data` naming it, the key a link through `..data`.
fn atomic_volume(dir: &Path, stamp: &str, text: &str) {
    let data = dir.join(stamp);
    fs::create_dir(&data).unwrap();
    fs::write(data.join("config.yaml"), text).unwrap();
    let link = dir.join("..data_tmp");
    symlink(stamp, &link).unwrap();
    // The writer's swap: a new link renamed over `..data`, then the old directory removed.
    fs::rename(&link, dir.join("..data")).unwrap();
    if !dir.join("config.yaml").exists() {
        symlink("..data/config.yaml", dir.join("config.yaml")).unwrap();
    }
}

fn overlay(path: &Path) -> ConfigSources {
    ConfigSources {
        kubelet: None,
        overlay: Some(path.to_path_buf()),
    }
}

#[tokio::test]
async fn the_kubelets_atomic_writer_swap_is_seen() {
    let tmp = tempfile::tempdir().unwrap();
    let volume = tmp.path();
    atomic_volume(volume, "..2026_12_06_10_00_00.1", &config("100Mi"));
    let sources = overlay(&volume.join("config.yaml"));
    let mut watcher = ConfigWatcher::start(&sources).unwrap();

    atomic_volume(volume, "..2026_12_06_10_05_00.2", &config("200Mi"));
    fs::remove_dir_all(volume.join("..2026_12_06_10_00_00.1")).unwrap();
    let started = std::time::Instant::now();
    assert_eq!(threshold(&change(&mut watcher).await.unwrap()), "200Mi");
    assert!(
        started.elapsed() < LOOK_EVERY,
        "inotify, not the look: {:?}",
        started.elapsed()
    );
    quiet(&mut watcher, "the old directory's removal changes nothing").await;
}

#[tokio::test]
async fn edits_renames_removal_and_recreation_are_seen() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("config.yaml");
    fs::write(&file, config("100Mi")).unwrap();
    let mut watcher = ConfigWatcher::start(&overlay(&file)).unwrap();

    fs::write(&file, config("150Mi")).unwrap();
    assert_eq!(
        threshold(&change(&mut watcher).await.unwrap()),
        "150Mi",
        "in place"
    );

    // An editor's save: written aside, renamed over.
    fs::write(tmp.path().join(".config.yaml.swp"), config("250Mi")).unwrap();
    fs::rename(tmp.path().join(".config.yaml.swp"), &file).unwrap();
    assert_eq!(
        threshold(&change(&mut watcher).await.unwrap()),
        "250Mi",
        "renamed over"
    );

    fs::remove_file(&file).unwrap();
    let gone = format!("{:#}", change(&mut watcher).await.unwrap_err());
    assert!(gone.contains("No such file"), "{gone}");
    fs::write(&file, config("300Mi")).unwrap();
    assert_eq!(
        threshold(&change(&mut watcher).await.unwrap()),
        "300Mi",
        "created again"
    );

    // The same bytes written again: a change of the file, read, the same configuration.
    fs::write(&file, config("300Mi")).unwrap();
    assert_eq!(threshold(&change(&mut watcher).await.unwrap()), "300Mi");
}

/// The kubelet's file reached through a link to another directory (how some nodes point
/// /var/lib/kubelet/config.yaml elsewhere): its target's directory is watched too.
#[tokio::test]
async fn a_link_to_another_directory_is_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let (here, there) = (tmp.path().join("here"), tmp.path().join("there"));
    fs::create_dir(&here).unwrap();
    fs::create_dir(&there).unwrap();
    fs::write(there.join("real.yaml"), config("100Mi")).unwrap();
    symlink(there.join("real.yaml"), here.join("config.yaml")).unwrap();
    let sources = ConfigSources {
        kubelet: Some(here.join("config.yaml")),
        overlay: None,
    };
    let mut watcher = ConfigWatcher::start(&sources).unwrap();
    fs::write(there.join("real.yaml"), config("400Mi")).unwrap();
    let started = std::time::Instant::now();
    assert_eq!(threshold(&change(&mut watcher).await.unwrap()), "400Mi");
    assert!(started.elapsed() < LOOK_EVERY, "{:?}", started.elapsed());
}

/// A change keeps being watched for while the caller's loop cancels the wait over and
/// over (as the agent's select does whenever another input comes first).
#[tokio::test]
async fn a_wait_cancelled_over_and_over_loses_no_change() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("config.yaml");
    fs::write(&file, config("100Mi")).unwrap();
    let mut watcher = ConfigWatcher::start(&overlay(&file)).unwrap();
    fs::write(&file, config("500Mi")).unwrap();
    let deadline = std::time::Instant::now() + WITHIN;
    let loaded = loop {
        assert!(std::time::Instant::now() < deadline, "never seen");
        // Cancelled every 10 ms, far less than the settle time.
        if let Ok(loaded) =
            tokio::time::timeout(Duration::from_millis(10), watcher.next_change()).await
        {
            break loaded.unwrap();
        }
    };
    assert_eq!(threshold(&loaded), "500Mi");
}

#[test]
fn without_files_nothing_is_watched() {
    assert!(ConfigWatcher::start(&ConfigSources::default()).is_none());
}
