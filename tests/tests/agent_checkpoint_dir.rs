//! The checkpoint directory as others may leave it (root only): a second agent already on it,
//! or something other than a regular file where the checkpoint belongs. Each test asserts
//! that the agent neither hangs nor acts twice, and that the right pod dies.
use std::{fs, path::Path, process::Command, time::Duration};

use tests::{AgentScene, MonitorProcess, TestPod, monitor_bin, process_alive, running_as_root};

/// How long a decision may take once the threshold is crossed (a slow VM included).
const DECIDE: Duration = Duration::from_secs(20);
/// The hard grace period of 1 s, then force, on a slow VM.
const KILL: Duration = Duration::from_secs(15);
/// A refusal comes at start, long before this.
const REFUSED_WITHIN: Duration = Duration::from_secs(15);

fn mkfifo(path: &Path) {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(
        unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) },
        0,
        "mkfifo {path:?}"
    );
}

/// The hog grows past the threshold beside a calm pod; exactly one decision, for the hog.
fn hog_is_evicted_once(scene: &AgentScene, agent: &mut MonitorProcess) {
    let hog = TestPod::new("hog").request_mib(20);
    let calm = TestPod::new("calm").request_mib(100);
    let calm_proc = scene.start_pod(&calm);
    let mut hog_proc = scene.start_pod(&hog);
    hog_proc.command("alloc 230");
    let decision = agent.next_decision(DECIDE);
    assert_eq!(decision["name"], "hog", "{decision:#}");
    scene.wait_until_empty(&hog, KILL);
    assert!(process_alive(calm_proc.pid()), "only the hog died");
    assert!(agent.running(), "the agent died:\n{}", agent.stderr());
}

#[test]
fn a_second_agent_on_the_same_checkpoint_directory_is_refused_naming_the_first() {
    if !running_as_root("a_second_agent_on_the_same_checkpoint_directory_is_refused") {
        return;
    }
    let scene = AgentScene::new("ckpt-two-agents", "10s", "10s");
    let mut first = scene.start_agent(&[]);
    // What a write of the first agent leaves for an instant; a second start-up removed it.
    let temporary = scene
        .checkpoint
        .join(&format!(".agent_state.tmp-{}-999", first.pid()));
    fs::write(&temporary, b"in flight").unwrap();

    let mut second = MonitorProcess::start(scene.agent_args(&[]));
    let status = second
        .wait(REFUSED_WITHIN)
        .expect("the second agent ends at once");
    assert!(!status.success(), "{status:?}");
    let stderr = second.stderr();
    assert!(
        stderr.contains(&format!("(pid {})", first.pid())) && stderr.contains("--checkpoint-dir"),
        "the refusal names the holder and the way out: {stderr}"
    );
    assert!(
        temporary.exists(),
        "the first agent's temporary file was left alone"
    );
    fs::remove_file(&temporary).unwrap();

    hog_is_evicted_once(&scene, &mut first);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(first.stdout_lines().len(), 1, "one decision, one agent");
    first.stop();

    // Once the first is gone, the directory is free again.
    let mut third = scene.start_agent(&[]);
    third
        .wait_stderr(Duration::from_secs(10), |l| l.contains(" known"))
        .expect("the third agent runs on the freed directory");
    assert!(third.running(), "{}", third.stderr());
    third.terminate();
    third
        .wait(Duration::from_secs(10))
        .expect("it ends on SIGTERM");
}

#[test]
fn a_fifo_or_a_directory_as_the_checkpoint_is_refused_without_hanging_and_reset_sets_it_aside() {
    if !running_as_root("a_fifo_or_a_directory_as_the_checkpoint_is_refused") {
        return;
    }
    for (kind, make) in [
        ("a FIFO", mkfifo as fn(&Path)),
        ("a directory", |p: &Path| fs::create_dir(p).unwrap()),
    ] {
        let scene = AgentScene::new("ckpt-not-a-file", "10s", "10s");
        let checkpoint = scene.checkpoint.join("agent_state");
        make(&checkpoint);
        let dir = scene.checkpoint.path.display().to_string();

        // The subcommands refuse it too, at once.
        for sub in ["verify", "show"] {
            let mut command = Command::new(monitor_bin());
            command.args(["checkpoint", sub, "--checkpoint-dir", &dir]);
            let mut run = MonitorProcess::spawn(command);
            // Dropped on the panic, which kills it.
            let Some(status) = run.wait(REFUSED_WITHIN) else {
                panic!("{kind}: monitor checkpoint {sub} hung");
            };
            let stderr = run.stderr();
            assert!(!status.success(), "{kind}, {sub}: {stderr}");
            assert!(stderr.contains(kind), "{kind}, {sub}: {stderr}");
        }

        let mut refused = MonitorProcess::start(scene.agent_args(&[]));
        let Some(status) = refused.wait(REFUSED_WITHIN) else {
            panic!("{kind}: the agent hung at start");
        };
        assert!(!status.success());
        let stderr = refused.stderr();
        assert!(
            stderr.contains(kind) && stderr.contains("--reset-state"),
            "{kind}: {stderr}"
        );

        let mut agent = scene.start_agent(&["--reset-state"]);
        let set_aside: Vec<_> = fs::read_dir(&scene.checkpoint.path)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("agent_state.corrupt-")
            })
            .collect();
        assert_eq!(set_aside.len(), 1, "{kind} kept aside");
        hog_is_evicted_once(&scene, &mut agent);
        agent.stop();
        assert!(
            fs::symlink_metadata(&checkpoint).unwrap().is_file(),
            "{kind}: a fresh checkpoint was written"
        );
    }
}
