//! The container image with exactly the privileges the README documents: Debian's podman runs
//! `monitor doctor` and the agent from the image built by `cargo xtask image`, against a
//! kubepods tree of real cgroups and processes. With every listed capability and mount the
//! doctor says ok and the agent evicts the right pod (whose process runs as another user, so
//! the kill needs CAP_KILL); without any one of them the doctor names what is missing.
//!
//! Needs root, podman and the image archive (`target/image/monitor.oci.tar`, or
//! MONITOR_IMAGE); without them the test fails unless skipping for `image` is allowed.
use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::Duration,
};

use tests::{AgentScene, Allocator, MonitorProcess, Reason, TestPod, cannot_run, running_as_root};

/// The capabilities the agent is given, as in deploy/base/daemonset.yaml.
const CAPABILITIES: [&str; 3] = ["CAP_BPF", "CAP_PERFMON", "CAP_KILL"];
/// An unprivileged user for the pods' processes: signalling them needs CAP_KILL.
const NOBODY: u32 = 65534;

/// Everything a `podman run` is given besides the command.
#[derive(Clone)]
struct Privileges {
    capabilities: Vec<&'static str>,
    host_pid: bool,
    /// Host paths, mounted at the same path in the container: (label, path, read-only).
    mounts: Vec<(&'static str, PathBuf, bool)>,
}

impl Privileges {
    fn documented(scene: &AgentScene) -> Self {
        Self {
            capabilities: CAPABILITIES.to_vec(),
            host_pid: true,
            mounts: vec![
                ("cgroupfs", "/sys/fs/cgroup".into(), false),
                ("tracefs", "/sys/kernel/tracing".into(), true),
                ("checkpoint directory", scene.checkpoint.path.clone(), false),
                ("configuration", scene.config.clone(), true),
                ("pods directory", scene.manifests.path.clone(), true),
            ],
        }
    }

    fn without_capability(&self, cap: &str) -> Self {
        let mut less = self.clone();
        less.capabilities.retain(|c| *c != cap);
        less
    }

    fn without_mount(&self, label: &str) -> Self {
        let mut less = self.clone();
        less.mounts.retain(|(l, _, _)| *l != label);
        less
    }
}

/// The image loaded into podman's storage; removed on drop with the containers named here.
struct Image {
    reference: String,
    containers: std::sync::Mutex<Vec<String>>,
}

impl Image {
    fn load(archive: &Path) -> Self {
        let out = podman(&["load", "--quiet", "--input", &archive.display().to_string()]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let reference = stdout
            .lines()
            .find_map(|l| l.strip_prefix("Loaded image:"))
            .map_or_else(
                || panic!("no loaded image in podman's answer: {stdout}"),
                |r| r.trim().to_string(),
            );
        Self {
            reference,
            containers: Default::default(),
        }
    }

    /// `podman run` of the image with `privileges` and `args` for `monitor`.
    fn run(&self, privileges: &Privileges, args: &[String]) -> Command {
        let name = format!(
            "monitor-test-{}-{}",
            std::process::id(),
            self.containers.lock().unwrap().len()
        );
        self.containers.lock().unwrap().push(name.clone());
        let mut cmd = Command::new("podman");
        cmd.args(["run", "--rm", "--name", &name, "--runtime", "runc"])
            // Explicit limits: without CAP_SYS_RESOURCE the runtime cannot raise them.
            .args(["--network", "host", "--ulimit", "nofile=4096:4096"])
            .args(["--ulimit", "nproc=4096:4096"])
            // A read-only root as in deploy/ (readOnlyRootFilesystem), without podman's
            // writable /tmp: the scene's directories live below /tmp on the host.
            .args([
                "--read-only",
                "--read-only-tmpfs=false",
                "--cap-drop",
                "all",
            ]);
        if !privileges.capabilities.is_empty() {
            cmd.args(["--cap-add", &privileges.capabilities.join(",")]);
        }
        if privileges.host_pid {
            cmd.args(["--pid", "host"]);
        }
        for (_, path, read_only) in &privileges.mounts {
            let ro = if *read_only { ":ro" } else { "" };
            cmd.arg("--volume")
                .arg(format!("{}:{}{ro}", path.display(), path.display()));
        }
        cmd.arg(&self.reference).args(args);
        cmd
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        for name in self.containers.lock().unwrap().iter() {
            let _ = Command::new("podman")
                .args(["rm", "--force", "--ignore", "--time", "0", name])
                .output();
        }
        let _ = Command::new("podman")
            .args(["rmi", "--force", &self.reference])
            .output();
    }
}

fn podman(args: &[&str]) -> Output {
    let out = Command::new("podman")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("starting podman");
    assert!(
        out.status.success(),
        "podman {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The image archive, or why the test cannot run.
fn archive() -> Result<PathBuf, String> {
    if std::env::var_os("MONITOR_VM").is_none()
        && Command::new("podman").arg("--version").output().is_err()
    {
        return Err("podman is not installed (cargo xtask test installs it)".into());
    }
    tests::image_archive()
}

/// The doctor's flags for the scene's paths.
fn doctor_args(scene: &AgentScene) -> Vec<String> {
    let path = |p: &Path| p.display().to_string();
    [
        "doctor",
        "--checkpoint-dir",
        &path(&scene.checkpoint.path),
        "--config",
        &path(&scene.config),
        "--pods",
        &path(&scene.manifests.path),
        "--kubepods-cgroup",
        &scene.kubepods.rel,
    ]
    .map(String::from)
    .to_vec()
}

/// Runs the doctor in the image; its exit status and output.
fn doctor(image: &Image, privileges: &Privileges, scene: &AgentScene) -> (bool, String) {
    let out = image
        .run(privileges, &doctor_args(scene))
        .stdin(Stdio::null())
        .output()
        .expect("starting podman");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The doctor's line for one privilege.
fn line_of<'a>(text: &'a str, name: &str) -> &'a str {
    let prefix = format!("  {name} ");
    text.lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no line for {name}:\n{text}"))
}

#[test]
fn the_image_runs_with_the_documented_privileges_and_not_with_less() {
    if !running_as_root("the_image_runs_with_the_documented_privileges") {
        return;
    }
    let archive = match archive() {
        Ok(archive) => archive,
        Err(reason) => {
            cannot_run(Reason::Image, &reason);
            return;
        }
    };
    let image = Image::load(&archive);
    let scene = AgentScene::new("container", "10s", "10s");
    let documented = Privileges::documented(&scene);

    let (ok, text) = doctor(&image, &documented, &scene);
    assert!(ok, "the doctor refuses the documented privileges:\n{text}");
    assert!(
        text.lines()
            .last()
            .is_some_and(|l| l.starts_with("ok: agent will use ebpf")),
        "{text}"
    );
    for cap in CAPABILITIES {
        let (ok, text) = doctor(&image, &documented.without_capability(cap), &scene);
        assert!(!ok, "without {cap} the doctor still says ok:\n{text}");
        assert!(line_of(&text, cap).contains("MISSING"), "{text}");
        assert!(text.lines().last().unwrap().contains(cap), "{text}");
    }
    let mut own_pid = documented.clone();
    own_pid.host_pid = false;
    let (ok, text) = doctor(&image, &own_pid, &scene);
    assert!(
        !ok,
        "in its own PID namespace the doctor still says ok:\n{text}"
    );
    assert!(
        line_of(&text, "host PID namespace").contains("MISSING"),
        "{text}"
    );
    for (label, _, _) in &documented.mounts {
        let (ok, text) = doctor(&image, &documented.without_mount(label), &scene);
        let line = line_of(&text, label);
        if *label == "tracefs" {
            // Without tracepoint ids the agent still runs, by polling; the doctor says so.
            assert!(ok && line.contains("not granted"), "{text}");
            assert!(
                text.lines().last().unwrap().contains("agent will use poll"),
                "{text}"
            );
        } else {
            assert!(!ok && line.contains("MISSING"), "without {label}:\n{text}");
        }
    }

    // The eviction scenario: the pod far over its request goes, the other stays.
    let hog = TestPod::new("hog").request_mib(20);
    let keeper = TestPod::new("keeper").request_mib(150);
    scene.write_manifest(&hog);
    scene.write_manifest(&keeper);
    let mut hog_proc = Allocator::start_as(&scene.kubepods.create_pod(hog.qos(), &hog.uid), NOBODY);
    let mut keeper_proc = Allocator::start_as(
        &scene.kubepods.create_pod(keeper.qos(), &keeper.uid),
        NOBODY,
    );
    let mut command = image.run(&documented, &scene.agent_args(&["--duration", "40s"]));
    command.env("RUST_LOG", "info");
    let mut agent = MonitorProcess::spawn(command);
    let ready = agent.wait_stderr(Duration::from_secs(60), |l| {
        l.contains(" thresholds ") || l.contains("Error")
    });
    assert!(
        ready.is_some_and(|l| l.contains(" thresholds ")),
        "the agent did not start in the container: {}",
        agent.stderr()
    );
    hog_proc.alloc(150);
    keeper_proc.alloc(80);
    let decision = agent.next_decision(Duration::from_secs(20));
    assert_eq!(decision["action"], "evict", "{decision:#}");
    assert_eq!(decision["name"], "hog", "{decision:#}");
    assert_eq!(decision["uid"], hog.uid.as_str(), "{decision:#}");
    scene.wait_until_empty(&hog, Duration::from_secs(15));
    assert!(
        !scene.pod_pids(&keeper).is_empty(),
        "the keeper runs on: {}",
        agent.stderr()
    );
    agent.stop();
}
