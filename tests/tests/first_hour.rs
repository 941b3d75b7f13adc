//! The first hour with `monitor`, as a new user meets it: the README's first command pointed at
//! a pods directory that is not there, `doctor` on a machine where the agent cannot run (and
//! on one where it can), a flag given before a subcommand, and the one duration and address
//! syntax every command takes. Each runs the real binary; the doctor's and the agent's runs on
//! a kubepods tree of real cgroups need root.
use std::{
    fs,
    path::Path,
    process::{Command, Output},
};

use tests::{AgentScene, TempDir, http_get_as, metrics_addr, monitor_bin, running_as_root};

/// `monitor ARGS`, run to its end.
fn monitor(args: &[&str]) -> Output {
    Command::new(monitor_bin())
        .args(args)
        .env_remove("NODE_NAME")
        .output()
        .expect("running monitor")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What every refusal of a pods directory must teach.
const PODS_DIR_TEACHES: [&str; 4] = [
    "--pods names a directory of this node's pod manifests",
    "a Pod, a PodList or a List of pods",
    "kubectl get pods -A --field-selector spec.nodeName=NODE -o yaml",
    "`--kube --node-name NODE`",
];

#[test]
fn a_missing_pods_directory_is_told_what_belongs_there() {
    let files = TempDir::new("first-hour-pods");
    let not_a_dir = files.join("pods.yaml");
    fs::write(&not_a_dir, "apiVersion: v1\nkind: Pod\n").unwrap();
    let state = files.join("state");
    for (name, pods, why) in [
        ("missing", files.join("pods"), "no such directory"),
        ("a file", not_a_dir, "not a directory"),
    ] {
        let out = monitor(&[
            "--dry-run",
            "--pods",
            pods.to_str().unwrap(),
            "--checkpoint-dir",
            state.to_str().unwrap(),
            "--no-metrics",
            "--no-mlock",
            "--duration",
            "5s",
        ]);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{name}: {text}");
        let said = format!("{}: {why}.", pods.display());
        assert!(text.contains(&said), "{name}: {said:?} in {text}");
        for part in PODS_DIR_TEACHES {
            assert!(text.contains(part), "{name}: {part:?} in {text}");
        }
    }
}

#[test]
fn doctor_fails_where_the_agent_cannot_run_and_passes_where_it_can() {
    if !running_as_root("doctor_fails_where_the_agent_cannot_run_and_passes_where_it_can") {
        return;
    }
    let scene = AgentScene::new("first-hour-doctor", "10s", "10s");
    let path = |p: &Path| p.display().to_string();
    let (checkpoint, config) = (path(&scene.checkpoint.path), path(&scene.config));
    let pods = path(&scene.manifests.path);
    let absent = format!("/monitor-first-hour-absent-{}", std::process::id());
    let flags = |kubepods: &str, config: &str| {
        [
            "--checkpoint-dir",
            &checkpoint,
            "--config",
            config,
            "--pods",
            &pods,
            "--kubepods-cgroup",
            kubepods,
        ]
        .map(String::from)
        .to_vec()
    };
    let doctor = |flags: &[String]| {
        let mut args = vec!["doctor"];
        args.extend(flags.iter().map(String::as_str));
        monitor(&args)
    };
    let verdict = |out: &Output| stdout(out).lines().last().unwrap_or_default().to_string();

    // No kubepods cgroup: the agent refuses to start, and the doctor says so and why.
    let without = flags(&absent, &config);
    let out = doctor(&without);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let last = verdict(&out);
    assert!(
        last.starts_with("error: the agent cannot run here: missing cgroupfs ("),
        "{last}"
    );
    assert!(
        last.contains("does not exist: give --kubepods-cgroup the kubelet's pod cgroup root"),
        "{last}"
    );
    let mut agent_args = vec!["--dry-run", "--no-metrics", "--duration", "5s"];
    agent_args.extend(without.iter().map(String::as_str));
    let agent = monitor(&agent_args);
    assert!(!agent.status.success(), "the agent ran: {}", stderr(&agent));
    assert!(
        stderr(&agent).contains("does not exist"),
        "{}",
        stderr(&agent)
    );

    // A configuration the agent would refuse is as good as none.
    let files = TempDir::new("first-hour-doctor-files");
    let broken = files.join("kubelet-config.yaml");
    fs::write(&broken, "kind: KubeletConfiguration\nevictionHard: [\n").unwrap();
    let out = doctor(&flags(&scene.kubepods.rel, &path(&broken)));
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        verdict(&out).contains("configuration ("),
        "{}",
        verdict(&out)
    );

    // The same flags with the scene's kubepods cgroup: the agent can run.
    let out = doctor(&flags(&scene.kubepods.rel, &config));
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        verdict(&out).starts_with("ok: agent will use "),
        "{}",
        stdout(&out)
    );
}

#[test]
fn an_agent_flag_before_a_subcommand_is_refused_and_after_it_taken() {
    let files = TempDir::new("first-hour-order");
    let config = files.join("kubelet-config.yaml");
    fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         evictionHard:\n  memory.available: 777Mi\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();

    let before = monitor(&["--config", config, "config"]);
    assert_eq!(before.status.code(), Some(2), "{}", stdout(&before));
    let text = stderr(&before);
    assert!(
        text.contains("--config was given before the subcommand `config`")
            && text.contains("put it after the subcommand: monitor config --config"),
        "{text}"
    );
    assert!(stdout(&before).is_empty(), "nothing printed as if it ran");

    let after = monitor(&["config", "--config", config]);
    assert!(after.status.success(), "{}", stderr(&after));
    assert!(stdout(&after).contains("777Mi"), "{}", stdout(&after));

    let elsewhere = monitor(&["--dry-run", "top"]);
    assert_eq!(elsewhere.status.code(), Some(2));
    assert!(
        stderr(&elsewhere).contains("`monitor top` does not take it"),
        "{}",
        stderr(&elsewhere)
    );
}

#[test]
fn every_command_takes_the_same_durations_and_host_names() {
    for args in [
        &["trace", "--duration", "10"][..],
        &["--duration", "10", "--pods", "x"][..],
        &["top", "--interval", "10"][..],
    ] {
        let out = monitor(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&out).contains("10 has no unit: write 10s for seconds"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    for args in [
        &["top", "--addr", "localhost"][..],
        &["--metrics-addr", "localhost", "--pods", "x"][..],
    ] {
        let out = monitor(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains("has no port"), "{}", stderr(&out));
    }
    if !running_as_root("every_command_takes_the_same_durations_and_host_names") {
        return;
    }
    // The agent serves at a host name as at an address.
    let scene = AgentScene::new("first-hour-addr", "10s", "10s");
    let mut agent = scene.start_agent(&["--dry-run", "--metrics-addr", "localhost:0"]);
    let addr = metrics_addr(&agent);
    assert!(addr.ip().is_loopback(), "{addr}");
    let host = format!("localhost:{}", addr.port());
    // Served from start; healthy once the event loop has turned (503 until then).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut health = http_get_as(addr, "/healthz", &host);
    while health.contains("event loop not started yet") && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        health = http_get_as(addr, "/healthz", &host);
    }
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    agent.stop();
}
