//! A damaged checkpoint never disables the agent (root only; real cgroups and processes): a
//! zero-length, truncated or bit-flipped `agent_state`, or a directory or a FIFO where it
//! belongs, is set aside with the time in its name, said loudly (log, metric, `monitor
//! doctor`, `monitor checkpoint`, with `--kube` an Event on the Node), and the agent starts
//! empty, is ready and evicts the hog.
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use tests::{
    AgentScene, KubeScene, MonitorProcess, http_get, in_own_network_namespace, metric,
    metrics_addr, monitor_bin, running_as_root, scene_decisions::hog_is_evicted_once,
};

/// A subcommand answers at once, long before this.
const ANSWERS_WITHIN: Duration = Duration::from_secs(15);

fn mkfifo(path: &Path) {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(
        unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) },
        0,
        "mkfifo {path:?}"
    );
}

/// A valid checkpoint of this scene, as an agent that ran for a second leaves it.
fn valid_checkpoint(scene: &AgentScene) -> Vec<u8> {
    let mut agent = scene.start_agent(&["--duration", "1s"]);
    let status = agent
        .wait(Duration::from_secs(20))
        .expect("stops at --duration");
    assert!(status.success(), "{}", agent.stderr());
    fs::read(scene.checkpoint.join("agent_state")).expect("the checkpoint")
}

/// Damages the checkpoint the way `kind` says; returns the bytes it holds now (none for a
/// directory or a FIFO).
fn damage(kind: &str, path: &Path, valid: &[u8]) -> Option<Vec<u8>> {
    let bytes = match kind {
        "zero-length" => Vec::new(),
        "truncated" => valid[..valid.len() / 2].to_vec(),
        "bit-flipped" => {
            // One bit of a counter: still JSON, still a number, the checksums no longer match.
            let mut bytes = valid.to_vec();
            let field = b"\"events_received\": ";
            let at = bytes
                .windows(field.len())
                .position(|w| w == field)
                .expect("a counter in the checkpoint")
                + field.len();
            bytes[at] ^= 0x01;
            bytes
        }
        "a directory" => {
            fs::remove_file(path).unwrap();
            fs::create_dir(path).unwrap();
            return None;
        }
        "a FIFO" => {
            fs::remove_file(path).unwrap();
            mkfifo(path);
            return None;
        }
        other => panic!("no damage {other}"),
    };
    fs::write(path, &bytes).unwrap();
    Some(bytes)
}

/// The files the agent set aside in `dir`.
fn set_aside(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("agent_state.corrupt-"))
        })
        .collect()
}

/// Runs `monitor ARGS` to its end; its status and stdout plus stderr.
fn monitor(args: &[&str]) -> (std::process::ExitStatus, String) {
    let mut command = Command::new(monitor_bin());
    command.args(args);
    let mut run = MonitorProcess::spawn(command);
    let status = run.wait(ANSWERS_WITHIN).expect("it answers at once");
    (
        status,
        format!("{}\n{}", run.stdout_lines().join("\n"), run.stderr()),
    )
}

#[test]
fn an_agent_on_a_damaged_checkpoint_sets_it_aside_is_ready_and_evicts() {
    if !running_as_root("an_agent_on_a_damaged_checkpoint_sets_it_aside_is_ready_and_evicts") {
        return;
    }
    for kind in [
        "zero-length",
        "truncated",
        "bit-flipped",
        "a directory",
        "a FIFO",
    ] {
        let scene = AgentScene::new("ckpt-damage", "10s", "10s");
        let path = scene.checkpoint.join("agent_state");
        let dir = scene.checkpoint.path.display().to_string();
        let damaged = damage(kind, &path, &valid_checkpoint(&scene));

        // Said before the agent starts: verify fails (it does not hang on a FIFO), and the
        // doctor says what the agent will do.
        let (status, output) = monitor(&["checkpoint", "verify", "--checkpoint-dir", &dir]);
        assert!(!status.success(), "{kind}: {output}");
        let (_, doctor) = monitor(&["doctor", "--checkpoint-dir", &dir]);
        assert!(
            doctor.contains("DAMAGED") && doctor.contains("sets it aside"),
            "{kind}: {doctor}"
        );

        in_own_network_namespace(|| {
            let mut agent = scene.start_agent(&["--metrics-addr", "127.0.0.1:0"]);
            assert!(
                agent.stderr().contains("DAMAGED, not used")
                    && agent.stderr().contains("starts with an empty state"),
                "{kind}: said loudly: {}",
                agent.stderr()
            );
            let kept = set_aside(&scene.checkpoint.path);
            assert_eq!(kept.len(), 1, "{kind}: {kept:?}");
            match &damaged {
                Some(bytes) => assert_eq!(&fs::read(&kept[0]).unwrap(), bytes, "{kind}"),
                None => assert!(!fs::symlink_metadata(&kept[0]).unwrap().is_file(), "{kind}"),
            }
            let addr = metrics_addr(&agent);
            let deadline = Instant::now() + Duration::from_secs(10);
            let mut ready = http_get(addr, "/readyz");
            while !ready.starts_with("HTTP/1.1 200") && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
                ready = http_get(addr, "/readyz");
            }
            assert!(ready.starts_with("HTTP/1.1 200"), "{kind}: {ready}");
            let metrics = http_get(addr, "/metrics");
            assert_eq!(
                metric(&metrics, "monitor_checkpoint_damaged_at_start"),
                Some(1),
                "{kind}: {metrics}"
            );
            hog_is_evicted_once(&scene, &mut agent);
            agent.stop();
        });
        assert!(
            fs::symlink_metadata(&path).unwrap().is_file(),
            "{kind}: a fresh checkpoint was written"
        );
        let (status, output) = monitor(&["checkpoint", "verify", "--checkpoint-dir", &dir]);
        assert!(status.success(), "{kind}: {output}");
        assert!(
            output.contains("damaged checkpoints set aside by the agent: 1"),
            "{kind}: {output}"
        );
    }
}

#[test]
fn with_kube_a_damaged_checkpoint_is_an_event_on_the_node() {
    if !running_as_root("with_kube_a_damaged_checkpoint_is_an_event_on_the_node") {
        return;
    }
    let kube = KubeScene::new("ckpt-damage-kube");
    fs::write(kube.scene.checkpoint.join("agent_state"), b"").unwrap();
    let agent = kube
        .scene
        .start_kube_agent(&kube.kubeconfig, KubeScene::NODE, &[]);
    let event = kube
        .api
        .wait_until(Duration::from_secs(10), |api| {
            api.events()
                .into_iter()
                .find(|e| e["reason"] == "MonitorCheckpointDamaged")
        })
        .unwrap_or_else(|| panic!("no node event; stderr:\n{}", agent.stderr()));
    assert_eq!(event["type"], "Warning", "{event:#}");
    assert_eq!(event["metadata"]["namespace"], "default", "{event:#}");
    assert_eq!(event["involvedObject"]["kind"], "Node", "{event:#}");
    assert_eq!(
        event["involvedObject"]["name"],
        KubeScene::NODE,
        "{event:#}"
    );
    let message = event["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("agent_state.corrupt-") && message.contains("empty state"),
        "{message}"
    );
}
