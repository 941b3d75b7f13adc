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
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON output");
    report["pods"]
        .as_array()
        .expect("an array of pods")
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
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON output");
    let pods = &report["pods"];
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
    for line in lines[2..].iter().take_while(|l| !l.starts_with("left out")) {
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
    let left_out = "left out, finished (phase Succeeded or Failed): 1 (shop/finished)";
    assert_eq!(lines.last(), Some(&left_out), "{text}");
    assert_eq!(
        text.matches("shop/finished").count(),
        1,
        "finished pods are named, not ranked: {text}"
    );
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

/// Writes `pods` and a Summary of node n1 with each `(name, uid, working set MiB)`, and ranks.
fn rank_values(pods: &serde_json::Value, usage: &[(&str, &str, u64)], extra: &[&str]) -> Output {
    let dir = tempfile::tempdir().expect("temp dir");
    let pods_path = dir.path().join("pods.json");
    let summary_path = dir.path().join("summary.json");
    std::fs::write(&pods_path, pods.to_string()).expect("pods file");
    let stats: Vec<serde_json::Value> = usage
        .iter()
        .map(|(name, uid, mib)| {
            serde_json::json!({
                "podRef": {"name": name, "namespace": "default", "uid": uid},
                "memory": {"workingSetBytes": mib << 20, "usageBytes": mib << 20},
            })
        })
        .collect();
    let summary = serde_json::json!({"node": {"nodeName": "n1"}, "pods": stats});
    std::fs::write(&summary_path, summary.to_string()).expect("summary file");
    let mut args = vec![
        "--pods",
        pods_path.to_str().expect("utf-8 path"),
        "--summary",
        summary_path.to_str().expect("utf-8 path"),
    ];
    args.extend_from_slice(extra);
    monitor_rank(&args)
}

/// The kubelet ranks on allocated resources: a pod resized from 512Mi to 1Gi whose resize
/// is pending, using 768Mi, exceeds its 512Mi allocation and goes before a BestEffort
/// neighbour, in each version's status shape; once the kubelet has allocated the 1Gi, the
/// neighbour goes first.
#[test]
fn a_pending_resize_ranks_on_the_allocation() {
    use serde_json::json;
    let container_status = |allocated: bool| {
        let mut status = json!({
            "name": "app", "ready": true, "restartCount": 0, "image": "app:1", "imageID": "",
            "state": {"running": {"startedAt": "2026-01-02T03:04:05Z"}},
            "resources": {"requests": {"memory": "512Mi"}, "limits": {"memory": "2Gi"}},
        });
        if allocated {
            status["allocatedResources"] = json!({"memory": "512Mi"});
        }
        status
    };
    let pending = |reason: &str| {
        json!([{"type": "PodResizePending", "status": "True", "reason": reason,
            "message": "Node didn't have enough resource: memory", "lastProbeTime": null,
            "lastTransitionTime": "2026-01-02T03:04:06Z"}])
    };
    struct Case {
        name: &'static str,
        status: serde_json::Value,
        first: &'static str,
        why: &'static str,
    }
    let cases = [
        Case {
            name: "1.27-1.31: status.resize Deferred and allocatedResources",
            status: json!({"phase": "Running", "resize": "Deferred",
                "containerStatuses": [container_status(true)]}),
            first: "resized",
            why: "resize Deferred: ranked on the kubelet's allocation, the spec asks 1Gi",
        },
        Case {
            name: "1.32: status.resize Infeasible, no allocatedResources",
            status: json!({"phase": "Running", "resize": "Infeasible",
                "containerStatuses": [container_status(false)]}),
            first: "resized",
            why: "resize Infeasible: ranked on the kubelet's allocation",
        },
        Case {
            name: "1.33-1.35: PodResizePending Deferred",
            status: json!({"phase": "Running", "conditions": pending("Deferred"),
                "containerStatuses": [container_status(false)]}),
            first: "resized",
            why: "resize Deferred: ranked on the kubelet's allocation",
        },
        Case {
            name: "1.36: PodResizePending Infeasible and allocatedResources",
            status: json!({"phase": "Running", "conditions": pending("Infeasible"),
                "containerStatuses": [container_status(true)]}),
            first: "resized",
            why: "resize Infeasible: ranked on the kubelet's allocation",
        },
        Case {
            name: "1.33-1.35: PodResizeInProgress: 1Gi allocated",
            status: json!({"phase": "Running", "conditions": [{"type": "PodResizeInProgress", "status": "True"}],
                "containerStatuses": [container_status(false)]}),
            first: "best-effort",
            why: "resize InProgress: the spec is allocated",
        },
    ];
    for case in cases {
        let pods = json!({"apiVersion": "v1", "kind": "PodList", "items": [
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "resized", "namespace": "default", "uid": "u-resized"},
             "spec": {"nodeName": "n1", "containers": [{"name": "app", "resources": {
                 "requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}}}]},
             "status": case.status},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "best-effort", "namespace": "default", "uid": "u-be"},
             "spec": {"nodeName": "n1", "containers": [{"name": "app"}]},
             "status": {"phase": "Running"}},
        ]});
        let usage = [("resized", "u-resized", 768), ("best-effort", "u-be", 100)];
        let order = json_order(&rank_values(&pods, &usage, &["--output", "json"]));
        assert_eq!(order[0], case.first, "{}", case.name);
        let text = String::from_utf8(rank_values(&pods, &usage, &[]).stdout).expect("utf-8");
        let line = text
            .lines()
            .find(|l| l.contains("default/resized"))
            .unwrap_or_else(|| panic!("{}: {text}", case.name));
        assert!(line.contains(case.why), "{}: {line}", case.name);
    }
}

/// Pods that are not ranked are named with the reason, in text and JSON, and a pod the
/// node's Summary lists is ranked although its object lacks spec.nodeName.
#[test]
fn says_what_it_left_out_and_why() {
    use serde_json::json;
    let pod = |name: &str, node: Option<&str>, phase: &str| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": format!("u-{name}")},
            "spec": {"nodeName": node, "containers": [{"name": "app"}]},
            "status": {"phase": phase}})
    };
    let only_left_out = json!({"kind": "List", "items": [
        pod("queued", None, "Pending"),
        pod("done", Some("n1"), "Succeeded"),
        pod("elsewhere", Some("n2"), "Running"),
    ]});
    let output = rank_values(&only_left_out, &[], &[]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("utf-8");
    for expected in [
        "no pods to rank",
        "left out, not scheduled (no spec.nodeName): 1 (default/queued)",
        "left out, finished (phase Succeeded or Failed): 1 (default/done)",
        "left out, bound to another node: 1 (default/elsewhere (on n2))",
    ] {
        assert!(text.contains(expected), "{expected:?} in {text}");
    }
    let output = rank_values(&only_left_out, &[], &["--output", "json"]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["pods"], json!([]));
    assert_eq!(
        report["leftOut"],
        json!([
            {"namespace": "default", "name": "queued", "reason": "notScheduled"},
            {"namespace": "default", "name": "done", "reason": "finished"},
            {"namespace": "default", "name": "elsewhere", "reason": "otherNode", "node": "n2"},
        ])
    );

    let listed = json!({"kind": "List", "items": [pod("queued", None, "Running")]});
    let output = rank_values(
        &listed,
        &[("queued", "u-queued", 50)],
        &["--output", "json"],
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["pods"][0]["name"], "queued");
    assert_eq!(report["pods"][0]["missingNodeName"], true);
    assert_eq!(report["leftOut"], json!([]));
    let text = String::from_utf8(rank_values(&listed, &[("queued", "u-queued", 50)], &[]).stdout)
        .expect("utf-8");
    assert!(
        text.contains("no spec.nodeName in its pod object, but the node's Summary lists it"),
        "{text}"
    );
}

/// `--config` takes a KubeletConfiguration or the node's configz answer and says which
/// thresholds of the signal the summary's node stats meet (80Mi available of 8Gi); a
/// document the kubelet refuses is refused with the reason, exit 2.
#[test]
fn config_says_which_thresholds_the_node_meets() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("config file");
        path.display().to_string()
    };
    let configz = write(
        "configz.json",
        r#"{"kubeletconfig":{"evictionHard":{"memory.available":"100Mi"},"evictionSoft":{"memory.available":"50Mi"},"evictionSoftGracePeriod":{"memory.available":"1m"},"enforceNodeAllocatable":["pods"]}}"#,
    );
    let output = rank_with("pods.json", "summary.json", &["--config", &configz]);
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).expect("utf-8");
    assert!(
        text.contains("hard threshold memory.available<100Mi: met (below 100Mi)"),
        "{text}"
    );
    assert!(
        text.contains("soft threshold memory.available<50Mi: not met (at 50Mi)"),
        "{text}"
    );
    let output = rank_with(
        "pods.json",
        "summary.json",
        &["--config", &configz, "--output", "json"],
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["thresholds"][0]["met"], true, "{report}");
    assert_eq!(report["thresholds"][0]["level"], 100 << 20, "{report}");

    // Without kind and apiVersion the kubelet refuses the file; so does rank.
    let bare = write("bare.yaml", "evictionHard:\n  memory.available: 100Mi\n");
    let output = rank_with("pods.json", "summary.json", &["--config", &bare]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("bare.yaml") && stderr.contains("no kind and apiVersion"),
        "{stderr}"
    );
}
