//! Checkpoint writes on a full and on a read-only file system: the write fails with a clear
//! error, the previous checkpoint stays intact and no temporary is left behind.
//!
//! Mounting needs root: without it the tests fail, unless skipping for `root` is allowed
//! (`MONITOR_TESTS_ALLOW_SKIP=root`).
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use monitor::checkpoint::{AtStart, StateError, StateManager};
use monitor::engine::checkpoint::{
    AgentState, MAX_RECENT_EVICTIONS, Memory, Mode, Now, SavedPod, decode,
};

fn have_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    test_skip::cannot_run(test_skip::Reason::Root, "mounting a tmpfs needs root");
    false
}

/// One test at a time: a child spawned by the other test (`mount`, `umount`) holds a copy of
/// every open file until it execs, so a filler file unlinked meanwhile would keep its space.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static MOUNTS: Mutex<()> = Mutex::new(());
    MOUNTS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A tmpfs mounted for one test and unmounted when dropped, even when the test fails.
struct TmpfsMount {
    path: PathBuf,
}

impl TmpfsMount {
    fn new(path: &Path, options: &str) -> Self {
        fs::create_dir_all(path).unwrap();
        run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                options,
                "tmpfs",
                path.to_str().unwrap(),
            ],
        );
        Self {
            path: path.to_owned(),
        }
    }

    fn remount_read_only(&self) {
        run("mount", &["-o", "remount,ro", self.path.to_str().unwrap()]);
    }
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        // Lazy, so an open file left by a failed assertion cannot keep the mount alive.
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

fn run(program: &str, args: &[&str]) {
    let status = Command::new(program).args(args).status().unwrap();
    assert!(status.success(), "{program} {args:?}: {status}");
}

fn state(generation: u64) -> AgentState {
    let now = Now {
        unix_ms: 1_767_268_800_000,
        boot_id: "fs-test".into(),
        boot_ms: 1,
    };
    let mut state = Memory::default();
    state.count_events(generation, 0);
    for i in 0..MAX_RECENT_EVICTIONS {
        let pod = SavedPod {
            namespace: "fs".into(),
            name: format!("pod-{generation}-{i}"),
            uid: format!("uid-{i}"),
        };
        state.record_eviction(pod, "memory.available", 1, &now);
    }
    AgentState {
        acting: state,
        written_by: Some(Mode::Acting),
        ..AgentState::default()
    }
}

fn assert_intact(dir: &Path, expected: &AgentState) {
    let decoded = decode(&fs::read(dir.join("agent_state")).unwrap()).unwrap();
    assert_eq!(&decoded.state, expected, "previous checkpoint intact");
    let leftovers: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .filter(|name| name.to_string_lossy().starts_with('.'))
        .collect();
    assert!(
        leftovers.is_empty(),
        "temporaries left behind: {leftovers:?}"
    );
}

#[test]
fn full_file_system_keeps_the_previous_checkpoint() {
    if !have_root() {
        return;
    }
    let _serial = one_at_a_time();
    let root = tempfile::tempdir().unwrap();
    let mount = TmpfsMount::new(&root.path().join("tiny"), "size=64k,mode=0700");
    let dir = mount.path.join("checkpoints");
    let (mut manager, _, _) =
        StateManager::load_or_init(&dir, Mode::Acting, AtStart::Load).unwrap();
    manager.save_if_changed(&state(1)).unwrap();

    let filler_path = mount.path.join("filler");
    let mut filler = OpenOptions::new()
        .create_new(true)
        .write(true)
        .open(&filler_path)
        .unwrap();
    while filler
        .write_all(&[0; 4096])
        .and_then(|()| filler.sync_all())
        .is_ok()
    {}
    drop(filler);

    let error = manager.save_if_changed(&state(2)).unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, StateError::Store(_)), "{error:?}");
    assert!(message.contains("No space left on device"), "{message}");
    assert!(
        message.contains(dir.to_str().unwrap()),
        "names the file: {message}"
    );
    assert_intact(&dir, &state(1));

    // Once space is back the same manager writes again.
    fs::remove_file(filler_path).unwrap();
    assert!(manager.save_if_changed(&state(2)).unwrap());
    assert_intact(&dir, &state(2));
}

#[test]
fn read_only_file_system_keeps_the_previous_checkpoint() {
    if !have_root() {
        return;
    }
    let _serial = one_at_a_time();
    let root = tempfile::tempdir().unwrap();
    let mount = TmpfsMount::new(&root.path().join("ro"), "size=1m,mode=0700");
    let dir = mount.path.join("checkpoints");
    let (mut manager, _, _) =
        StateManager::load_or_init(&dir, Mode::Acting, AtStart::Load).unwrap();
    manager.save_if_changed(&state(1)).unwrap();
    mount.remount_read_only();

    let message = manager.save_if_changed(&state(2)).unwrap_err().to_string();
    assert!(message.contains("Read-only file system"), "{message}");
    assert!(
        message.contains("create temporary file"),
        "says which step: {message}"
    );
    assert_intact(&dir, &state(1));
}
