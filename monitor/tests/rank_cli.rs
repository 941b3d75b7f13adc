//! `monitor rank` end to end: the built binary on fixture files.
use std::path::PathBuf;
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/rank")
        .join(name)
}

fn monitor_rank(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_monitor"))
        .arg("rank")
        .args(args)
        .output()
        .expect("run monitor")
}

fn rank_with(pods: &str, summary: &str, extra: &[&str]) -> Output {
    let pods = fixture(pods);
    let summary = fixture(summary);
    let mut args = vec![
        "--pods",
        pods.to_str().expect("utf-8 path"),
        "--summary",
        summary.to_str().expect("utf-8 path"),
    ];
    args.extend_from_slice(extra);
    monitor_rank(&args)
}

/// Pod names in the order of the JSON output.
fn json_order(output: &Output) -> Vec<String> {
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let pods: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON output");
    pods.as_array()
        .expect("an array")
        .iter()
        .map(|p| p["name"].as_str().expect("name").to_string())
        .collect()
}

#[test]
fn ranks_in_the_kubelets_order() {
    struct Case {
        name: &'static str,
        pods: &'static str,
        summary: &'static str,
        args: &'static [&'static str],
        order: &'static [&'static str],
    }
    let cases = [
        Case {
            name: "memory: no stats, then over request by priority, then within request",
            pods: "pods.json",
            summary: "summary.json",
            args: &[],
            order: &[
                "no-stats",
                "hog",
                "greedy-high",
                "etcd-node-1",
                "low-within",
                "at-request",
                "sidecar-app",
            ],
        },
        Case {
            name: "pid: priority first, then process count",
            pods: "pods.json",
            summary: "summary.json",
            args: &["--signal", "pid.available"],
            order: &[
                "low-within",
                "at-request",
                "hog",
                "sidecar-app",
                "greedy-high",
                "no-stats",
                "etcd-node-1",
            ],
        },
        Case {
            name: "YAML PodList: a high-priority pod over its request goes before a pod within it",
            pods: "pods.yaml",
            summary: "summary-yaml-pods.json",
            args: &[],
            order: &["big", "small"],
        },
    ];
    for case in cases {
        let mut args = case.args.to_vec();
        args.extend(["--output", "json"]);
        let output = rank_with(case.pods, case.summary, &args);
        assert_eq!(json_order(&output), case.order, "case {:?}", case.name);
    }
}

#[test]
fn json_carries_the_rank_keys() {
    let output = rank_with("pods.json", "summary.json", &["--output", "json"]);
    let pods: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON output");
    let hog = &pods[1];
    assert_eq!(hog["namespace"], "shop");
    assert_eq!(hog["name"], "hog");
    assert_eq!(hog["rank"], 2);
    assert_eq!(hog["priority"], 0);
    assert_eq!(hog["exceedsRequest"], true);
    assert_eq!(hog["usage"], 900 << 20);
    assert_eq!(hog["request"], 100 << 20);
    assert_eq!(hog["aboveRequest"], 800 << 20);
    let at_request = &pods[5];
    assert_eq!(at_request["name"], "at-request");
    assert_eq!(
        at_request["exceedsRequest"], false,
        "usage equal to the request does not exceed it"
    );
    assert_eq!(pods[0]["hasStats"], false);
    assert_eq!(pods[3]["critical"], true);
}

#[test]
fn text_output_is_aligned_and_explains_the_order() {
    let output = rank_with("pods.json", "summary.json", &[]);
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("utf-8");
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("Eviction order for memory.available on node node-1"),
        "{text}"
    );
    let why_column = lines[1].find("WHY").expect("header");
    for line in &lines[2..] {
        assert_eq!(
            line.get(..why_column).map(str::len),
            Some(why_column),
            "short line: {line}"
        );
    }
    let hog = lines
        .iter()
        .find(|l| l.contains("shop/hog"))
        .expect("hog line");
    assert!(hog.starts_with("2 "), "{hog}");
    assert!(
        hog.contains("800Mi") && hog.contains("exceeds its request"),
        "{hog}"
    );
    let low = lines
        .iter()
        .find(|l| l.contains("batch/low-within"))
        .expect("low-within line");
    assert!(
        low.contains("after #4: pods over their request go first"),
        "{low}"
    );
    let etcd = lines
        .iter()
        .find(|l| l.contains("etcd-node-1"))
        .expect("etcd line");
    assert!(etcd.contains("critical"), "{etcd}");
    assert!(!text.contains("finished"), "finished pods are not ranked");
}

#[test]
fn bad_input_exits_2_naming_the_file() {
    struct Case {
        name: &'static str,
        pods: &'static str,
        summary: &'static str,
        blamed: &'static str,
    }
    let cases = [
        Case {
            name: "malformed pods",
            pods: "malformed-pods.json",
            summary: "summary.json",
            blamed: "malformed-pods.json",
        },
        Case {
            name: "malformed summary",
            pods: "pods.json",
            summary: "malformed-summary.json",
            blamed: "malformed-summary.json",
        },
        Case {
            name: "missing pods file",
            pods: "absent.json",
            summary: "summary.json",
            blamed: "absent.json",
        },
        Case {
            name: "a summary given as pods",
            pods: "summary.json",
            summary: "summary.json",
            blamed: "summary.json",
        },
    ];
    for case in cases {
        let output = rank_with(case.pods, case.summary, &[]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(2),
            "case {:?}: {stderr}",
            case.name
        );
        assert!(
            stderr.contains(case.blamed),
            "case {:?}: {stderr}",
            case.name
        );
        assert!(output.stdout.is_empty(), "case {:?}", case.name);
    }
}

#[test]
fn help_teaches_where_inputs_come_from() {
    let output = monitor_rank(&["--help"]);
    assert!(output.status.success());
    let help = String::from_utf8(output.stdout).expect("utf-8");
    for needle in [
        "kubectl get pods",
        "/proxy/stats/summary",
        "--signal",
        "pid.available",
        "Exit status",
    ] {
        assert!(help.contains(needle), "help lacks {needle:?}:\n{help}");
    }
}
