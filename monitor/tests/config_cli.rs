//! `monitor config` end to end: the built binary on real configurations from the corpus and
//! on files the kubelet would not be given.
use std::path::PathBuf;
use std::process::{Command, Output};

fn corpus(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/corpus")
        .join(name)
}

fn monitor_config(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_monitor"))
        .arg("config")
        .args(args)
        .output()
        .expect("run monitor")
}

fn settings(output: &Output) -> Vec<(String, String, String)> {
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    json["settings"]
        .as_array()
        .expect("settings")
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_string(),
                s["value"].as_str().unwrap().to_string(),
                s["origin"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn has(all: &[(String, String, String)], name: &str, value: &str, origin: &str) -> bool {
    all.iter()
        .any(|(n, v, o)| n == name && v == value && o == origin)
}

#[test]
fn a_kubeadm_file_that_turns_disk_thresholds_off_shows_them_off_and_the_rest_defaulted() {
    let file = corpus("minikube-v1.25-crio-kubeadm.yaml");
    let all = settings(&monitor_config(&[
        "--config",
        file.to_str().unwrap(),
        "--output",
        "json",
    ]));
    for signal in ["nodefs.available", "nodefs.inodesFree", "imagefs.available"] {
        assert!(
            has(&all, &format!("evictionHard.{signal}"), "off", "file"),
            "{all:?}"
        );
    }
    // evictionHard is present, so it replaces the defaults: no memory threshold at all.
    assert!(
        !all.iter()
            .any(|(n, _, _)| n == "evictionHard.memory.available"),
        "{all:?}"
    );
    assert!(has(
        &all,
        "evictionPressureTransitionPeriod",
        "5m0s",
        "kubelet_default"
    ));
    assert!(has(
        &all,
        "monitor.evictionInterval",
        "10s",
        "agent_default"
    ));

    let text = monitor_config(&["--config", file.to_str().unwrap()]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("it will evict nothing"), "{text}");
}

#[test]
fn without_a_file_the_kubelets_defaults_and_their_origins() {
    let all = settings(&monitor_config(&["--output", "json"]));
    assert!(has(
        &all,
        "evictionHard.memory.available",
        "100Mi",
        "kubelet_default"
    ));
    assert!(has(
        &all,
        "evictionHard.allocatableMemory.available",
        "100Mi",
        "node_allocatable_copy"
    ));
    assert!(has(
        &all,
        "evictionHard.imagefs.available",
        "15%",
        "kubelet_default"
    ));
}

#[test]
fn a_fifo_a_directory_and_a_bad_value_are_refused_with_the_reason() {
    let dir = std::env::temp_dir().join(format!("monitor-config-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("fifo");
    let status = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(status.success());
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         evictionHard:\n  memory.available: lots\n",
    )
    .unwrap();
    let headless = dir.join("headless.yaml");
    std::fs::write(&headless, "evictionHard:\n  memory.available: 200Mi\n").unwrap();
    for (path, reason) in [
        (&fifo, "a FIFO"),
        (&dir, "a directory"),
        (&bad, "memory.available"),
        // The kubelet's decoder refuses a document without kind and apiVersion.
        (&headless, "no kind and apiVersion"),
    ] {
        // A FIFO must be refused without blocking on its read: the test would hang otherwise.
        let output = monitor_config(&["--config", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{path:?}");
        assert!(stderr.contains(reason), "{path:?}: {stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
