//! Data captured from real clusters (`tests/fixtures/corpus`, origins in its README): each
//! file parses, and `monitor rank` orders the pods as the kubelet would. The expected orders
//! were worked out by hand from the files with the kubelet's rules (active pods only, stats
//! by the kubelet's uid, then exceeds-request, priority, usage above request).
//!
//! Variants the captures do not contain (a CRI-O `"containers": null`, a BOM, an API error
//! saved as the summary, a fractional request) are made from the real files here, each
//! named after the shape it stands for.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use monitor::engine::eviction_config::{ConfigError, ConfigForm, EvictionConfig};
use monitor::engine::signal::Signal;
use serde_json::Value;

fn corpus(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/corpus")
        .join(name)
}

fn read(name: &str) -> String {
    std::fs::read_to_string(corpus(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn rank(pods: &Path, summary: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_monitor"))
        .arg("rank")
        .arg("--pods")
        .arg(pods)
        .arg("--summary")
        .arg(summary)
        .args(extra)
        .output()
        .expect("run monitor rank")
}

/// The JSON array `monitor rank --output json` printed, after checking it succeeded.
fn ranked(output: &Output, case: &str) -> Vec<Value> {
    assert!(
        output.status.success(),
        "case {case:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let value: Value = serde_json::from_slice(&output.stdout).expect("JSON output");
    value["pods"].as_array().expect("an array of pods").clone()
}

fn names(pods: &[Value]) -> Vec<String> {
    pods.iter()
        .map(|p| {
            format!(
                "{}/{}",
                p["namespace"].as_str().unwrap(),
                p["name"].as_str().unwrap()
            )
        })
        .collect()
}

/// Memory order of the kubeadm-style single-node clusters the corpus holds (minikube
/// with docker, kind-like nodes with containerd).
const ORDER_1_16: &[&str] = &[
    "scraper/e2e-container-creating",
    "scraper/e2e-hpa-6549c6db47-dcw84",
    "kube-system/storage-provisioner",
    "scraper/e2e-kube-state-metrics-887cff974-4jr26",
    "scraper/e2e-scraper-69dbfb44ff-l7c8h",
    "scraper/e2e-statefulset-1",
    "scraper/e2e-depl-86cf7fbbf8-p4h98",
    "scraper/e2e-statefulset-0",
    "scraper/e2e-ds-8zz8h",
    "kube-system/kube-apiserver-minikube",
    "kube-system/kube-controller-manager-minikube",
    "kube-system/etcd-minikube",
    "kube-system/kube-scheduler-minikube",
    "kube-system/kube-proxy-rz8xz",
    "kube-system/coredns-5644d7b6d9-nz2s7",
    "kube-system/metrics-server-6b79b4d69b-x2ps9",
];
const ORDER_1_28: &[&str] = &[
    "scraper/e2e-container-creating",
    "scraper/e2e-hpa-97d79d4cd-f48d7",
    "scraper/e2e-kube-state-metrics-86f7c9c6bb-crhql",
    "kube-system/storage-provisioner",
    "scraper/e2e-scraper-5f59f96497-8cs7p",
    "kube-system/kube-apiserver-datagen-1-28",
    "kube-system/kube-controller-manager-datagen-1-28",
    "kube-system/kube-scheduler-datagen-1-28",
    "kube-system/kube-proxy-2c7rb",
    "scraper/e2e-deployment-6c6fb66fd4-vjqkq",
    "scraper/e2e-deployment-6c6fb66fd4-htr49",
    "scraper/e2e-statefulset-0",
    "scraper/e2e-statefulset-1",
    "scraper/e2e-daemonset-xbvmt",
    "scraper/e2e-cronjob-28326620-xnd62",
    "kube-system/kindnet-znx27",
    "kube-system/coredns-5dd5756b68-xmx7l",
    "kube-system/metrics-server-7c66d45ddc-dtv62",
    "kube-system/etcd-datagen-1-28",
];
const ORDER_1_35: &[&str] = &[
    "scraper/e2e-container-creating",
    "scraper/e2e-kube-state-metrics-75b885dc9-97mtr",
    "kube-system/storage-provisioner",
    "scraper/e2e-hpa-6cd8d99884-tggnr",
    "scraper/e2e-scraper-5f97dc94d8-vkcjl",
    "kube-system/kube-apiserver-datagen-1-35",
    "kube-system/kube-controller-manager-datagen-1-35",
    "kube-system/kube-scheduler-datagen-1-35",
    "kube-system/kube-proxy-8k9zt",
    "scraper/e2e-daemonset-kb65b",
    "scraper/e2e-statefulset-1",
    "scraper/e2e-statefulset-0",
    "kube-system/kindnet-zkpn8",
    "kube-system/coredns-7d764666f9-qdcxt",
    "kube-system/metrics-server-9d74bb658-c6nnt",
    "scraper/e2e-deployment-79967c5968-8bnn8",
    "scraper/e2e-deployment-79967c5968-zjslc",
    "kube-system/etcd-datagen-1-35",
];

#[test]
fn real_clusters_rank_in_the_kubelets_order() {
    struct Case {
        name: &'static str,
        pods: &'static str,
        summary: &'static str,
        order: &'static [&'static str],
        /// Static pods: ranked with the stats the summary keys by the kubelet's uid.
        static_pods: &'static [&'static str],
        /// Pods in the file the kubelet does not rank (finished, not scheduled).
        left_out: &'static [&'static str],
    }
    let cases = [
        Case {
            name: "1.16, minikube, docker: mirror pods, a pending unscheduled pod",
            pods: "nri-1.16-pods.yaml",
            summary: "nri-1.16-summary.json",
            order: ORDER_1_16,
            static_pods: &[
                "kube-system/etcd-minikube",
                "kube-system/kube-apiserver-minikube",
                "kube-system/kube-controller-manager-minikube",
                "kube-system/kube-scheduler-minikube",
            ],
            left_out: &["scraper/e2e-pending"],
        },
        Case {
            name: "1.28, containerd: failed job pods and an unscheduled pod are left out",
            pods: "nri-1.28-pods.yaml",
            summary: "nri-1.28-summary.json",
            order: ORDER_1_28,
            static_pods: &[
                "kube-system/etcd-datagen-1-28",
                "kube-system/kube-apiserver-datagen-1-28",
            ],
            left_out: &[
                "scraper/e2e-container-pending",
                "scraper/e2e-failjob-9glzd",
                "scraper/e2e-failjob-zhnjp",
            ],
        },
        Case {
            name: "1.35, containerd 2.2: succeeded cron pods, failed job pods, mirror pods",
            pods: "nri-1.35-pods.yaml",
            summary: "nri-1.35-summary.json",
            order: ORDER_1_35,
            static_pods: &[
                "kube-system/etcd-datagen-1-35",
                "kube-system/kube-scheduler-datagen-1-35",
            ],
            left_out: &[
                "scraper/e2e-container-pending",
                "scraper/e2e-cronjob-29707813-dhlr2",
                "scraper/e2e-failjob-28dqq",
            ],
        },
        Case {
            name: "1.35, the kubelet's own /pods: static pods under the kubelet's uid",
            pods: "nri-1.35-kubelet-pods.json",
            summary: "nri-1.35-summary.json",
            order: ORDER_1_35,
            static_pods: &["kube-system/etcd-datagen-1-35"],
            left_out: &["scraper/e2e-failjob-28dqq"],
        },
    ];
    for case in cases {
        let output = rank(
            &corpus(case.pods),
            &corpus(case.summary),
            &["--output", "json"],
        );
        let pods = ranked(&output, case.name);
        assert_eq!(names(&pods), case.order, "case {:?}", case.name);
        for pod in &pods {
            let name = format!("{}/{}", pod["namespace"], pod["name"]);
            let expect_stats = pod["name"] != "e2e-container-creating";
            assert_eq!(
                pod["hasStats"], expect_stats,
                "case {:?}: {name}",
                case.name
            );
        }
        for wanted in case.static_pods {
            let pod = pods
                .iter()
                .find(|p| names(std::slice::from_ref(p))[0] == *wanted)
                .unwrap_or_else(|| panic!("case {:?}: {wanted} not ranked", case.name));
            assert_eq!(pod["hasStats"], true, "case {:?}: {wanted}", case.name);
            assert_eq!(pod["critical"], true, "case {:?}: {wanted}", case.name);
        }
        let ranked_names = names(&pods);
        let report: Value = serde_json::from_slice(&output.stdout).expect("JSON output");
        let named_left_out = names(report["leftOut"].as_array().expect("leftOut"));
        for absent in case.left_out {
            assert!(
                !ranked_names.iter().any(|n| n == absent),
                "case {:?}: {absent} is ranked",
                case.name
            );
            assert!(
                named_left_out.iter().any(|n| n == absent),
                "case {:?}: {absent} is not named as left out: {named_left_out:?}",
                case.name
            );
        }
    }
}

/// A temporary file holding `text`.
fn temp_file(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write temp file");
    path
}

/// The real 1.35 summary with `edit` applied to its JSON.
fn edited_summary(edit: impl FnOnce(&mut Value)) -> String {
    let mut summary: Value = serde_json::from_str(&read("nri-1.35-summary.json")).unwrap();
    edit(&mut summary);
    serde_json::to_string(&summary).unwrap()
}

fn pod_stats<'a>(summary: &'a mut Value, name: &str) -> &'a mut Value {
    summary["pods"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p["podRef"]["name"] == name)
        .unwrap_or_else(|| panic!("{name} in the summary"))
}

#[test]
fn summary_shapes_real_kubelets_emit_are_accepted() {
    struct Case {
        name: &'static str,
        summary: String,
        /// Pods expected without stats, in rank order from the top.
        no_stats: &'static [&'static str],
    }
    let cases = [
        Case {
            name: "a CRI-O sandbox without container stats: \"containers\": null",
            summary: edited_summary(|s| {
                pod_stats(s, "e2e-hpa-6cd8d99884-tggnr")["containers"] = Value::Null;
            }),
            no_stats: &["scraper/e2e-container-creating"],
        },
        Case {
            name: "a pod without any optional stats but its reference",
            summary: edited_summary(|s| {
                let pod = pod_stats(s, "e2e-hpa-6cd8d99884-tggnr");
                *pod = serde_json::json!({"podRef": pod["podRef"].clone(), "volume": null});
            }),
            // Present without memory stats: counts as zero working set, like the kubelet.
            no_stats: &["scraper/e2e-container-creating"],
        },
        Case {
            name: "\"pods\": null (a kubelet with no pod stats yet)",
            summary: edited_summary(|s| s["pods"] = Value::Null),
            // Every pod without stats: the order falls to priority, then namespace/name.
            no_stats: &[
                "kube-system/kindnet-zkpn8",
                "kube-system/storage-provisioner",
            ],
        },
        Case {
            name: "a UTF-8 byte order mark before the summary",
            summary: format!("\u{feff}{}", read("nri-1.35-summary.json")),
            no_stats: &["scraper/e2e-container-creating"],
        },
        Case {
            name: "null system containers on the node",
            summary: edited_summary(|s| s["node"]["systemContainers"] = Value::Null),
            no_stats: &["scraper/e2e-container-creating"],
        },
    ];
    let dir = tempfile::tempdir().unwrap();
    for case in cases {
        let summary = temp_file(&dir, "summary.json", &case.summary);
        let output = rank(
            &corpus("nri-1.35-pods.yaml"),
            &summary,
            &["--output", "json"],
        );
        let pods = ranked(&output, case.name);
        let without: Vec<String> = names(&pods)
            .into_iter()
            .zip(&pods)
            .filter(|(_, p)| p["hasStats"] == false)
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            &without[..case.no_stats.len().min(without.len())],
            case.no_stats,
            "case {:?}",
            case.name
        );
        if case.name.starts_with("\"pods\": null") {
            assert_eq!(without.len(), pods.len(), "case {:?}", case.name);
        } else {
            assert_eq!(without.len(), 1, "case {:?}: {without:?}", case.name);
        }
    }
}

#[test]
fn files_that_are_not_a_summary_are_refused_with_exit_2() {
    struct Case {
        name: &'static str,
        summary: String,
        /// What the message must say.
        says: &'static str,
    }
    let not_found = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"nodes \"datagen-1-36\" not found","reason":"NotFound","details":{"name":"datagen-1-36","kind":"nodes"},"code":404}"#;
    let cases = [
        Case {
            name: "a 404 Status saved by kubectl get --raw for a wrong node name",
            summary: not_found.into(),
            says: "nodes \"datagen-1-36\" not found",
        },
        Case {
            name: "the kubelet's PodList given as --summary",
            summary: read("nri-1.35-kubelet-pods.json"),
            says: "PodList",
        },
        Case {
            name: "an empty object",
            summary: "{}".into(),
            says: "no \"node\"",
        },
        Case {
            name: "an empty array",
            summary: "[]".into(),
            says: "an array",
        },
        Case {
            name: "the YAML pod list given as --summary",
            summary: read("nri-1.35-pods.yaml"),
            says: "not JSON",
        },
    ];
    let dir = tempfile::tempdir().unwrap();
    for case in cases {
        let summary = temp_file(&dir, "wrong.json", &case.summary);
        let output = rank(&corpus("nri-1.35-pods.yaml"), &summary, &[]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(2),
            "case {:?}: {stderr}",
            case.name
        );
        assert!(output.stdout.is_empty(), "case {:?}", case.name);
        assert!(
            stderr.contains("wrong.json") && stderr.contains(case.says),
            "case {:?}: {stderr}",
            case.name
        );
    }
}

#[test]
fn json_keeps_fractional_quantities_exact() {
    // The real 1.35 pods with a request of 500m ephemeral-storage on one pod.
    let mut pods: Value = serde_yaml::from_str(&read("nri-1.35-pods.yaml")).unwrap();
    let pod = pods["items"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p["metadata"]["name"] == "storage-provisioner")
        .unwrap();
    pod["spec"]["containers"][0]["resources"] =
        serde_json::json!({"requests": {"ephemeral-storage": "500m"}});
    let dir = tempfile::tempdir().unwrap();
    let pods = temp_file(&dir, "pods.json", &pods.to_string());
    let output = rank(
        &pods,
        &corpus("nri-1.35-summary.json"),
        &["--signal", "nodefs.available", "--output", "json"],
    );
    let ranked = ranked(&output, "fractional request");
    let pod = ranked
        .iter()
        .find(|p| p["name"] == "storage-provisioner")
        .unwrap();
    let usage = pod["usage"].as_i64().expect("whole usage is an integer");
    assert_eq!(pod["request"].as_f64(), Some(0.5), "{pod}");
    assert_eq!(
        pod["aboveRequest"].as_f64(),
        Some(usage as f64 - 0.5),
        "{pod}"
    );
    assert!(
        pod["aboveRequest"].to_string().ends_with(".5"),
        "exact, not rounded: {pod}"
    );
}

#[test]
fn real_kubelet_configurations_read_as_the_kubelet_defaults_them() {
    struct Case {
        name: &'static str,
        file: &'static str,
        /// `signal<value` of each hard threshold, in order.
        hard: &'static [&'static str],
        transition: Duration,
    }
    let cases = [
        Case {
            name: "minikube's kubeadm --config file (4 documents, CRI-O): 0% thresholds drop, \
                   evictionHard replaces the defaults",
            file: "minikube-v1.25-crio-kubeadm.yaml",
            hard: &[],
            transition: Duration::from_secs(300),
        },
        Case {
            name: "EKS AL2 kubelet-config.json: no eviction fields, the Linux defaults",
            file: "eks-al2-kubelet-config.json",
            hard: &[
                "memory.available<100Mi",
                "allocatableMemory.available<100Mi",
                "nodefs.available<10%",
                "nodefs.inodesFree<5%",
                "imagefs.available<15%",
                "imagefs.inodesFree<5%",
            ],
            transition: Duration::from_secs(300),
        },
    ];
    for case in cases {
        let (config, _) = EvictionConfig::decode(&read(case.file))
            .unwrap_or_else(|e| panic!("case {:?}: {e}", case.name));
        let hard: Vec<String> = config
            .thresholds
            .iter()
            .map(|t| format!("{}<{}", t.signal, t.value))
            .collect();
        assert_eq!(hard, case.hard, "case {:?}", case.name);
        assert_eq!(
            config.pressure_transition_period, case.transition,
            "case {:?}",
            case.name
        );
    }
    let memory_only = Signal::MemoryAvailable;
    assert!(
        EvictionConfig::decode(&read("minikube-v1.25-crio-kubeadm.yaml"))
            .unwrap()
            .0
            .thresholds
            .iter()
            .all(|t| t.signal != memory_only),
        "minikube's file names no memory threshold, and evictionHard replaces the defaults"
    );
    // Only the KubeletConfiguration is read: the other documents of the kubeadm file alone
    // are not a configuration.
    let others: String = read("minikube-v1.25-crio-kubeadm.yaml")
        .split("\n---\n")
        .filter(|doc| !doc.contains("kind: KubeletConfiguration"))
        .collect::<Vec<_>>()
        .join("\n---\n");
    assert_eq!(
        EvictionConfig::decode(&others).map(|(config, _)| config),
        Err(ConfigError::NoKubeletConfiguration {
            kinds: vec![
                "InitConfiguration".into(),
                "ClusterConfiguration".into(),
                "KubeProxyConfiguration".into()
            ]
        })
    );
}

/// A configz answer from OpenShift on AWS, as a compliance project saved it: its eviction
/// maps name `imagefs.inodesfree` (a case the kubelet does not know) and soft thresholds
/// without grace periods, so it is a configuration the kubelet refuses. It is refused for
/// the first reason the kubelet gives, and each repair moves to the next reason, until the
/// repaired answer reads as the effective configuration: its thresholds as they are, no
/// defaults added, the hard memory threshold copied for allocatable (`enforceNodeAllocatable`
/// holds `pods`), the soft ones not.
#[test]
fn a_real_configz_answer_is_refused_for_what_the_kubelet_refuses_then_read_as_it_is() {
    let answer = read("openshift-configz.json");
    assert_eq!(
        EvictionConfig::decode(&answer).map(|(config, _)| config),
        Err(ConfigError::UnknownSignal {
            field: "evictionHard",
            signal: "imagefs.inodesfree".into(),
        })
    );
    let signals_fixed = answer.replace("imagefs.inodesfree", "imagefs.inodesFree");
    assert!(
        matches!(
            EvictionConfig::decode(&signals_fixed),
            Err(ConfigError::MissingGracePeriod { .. })
        ),
        "soft thresholds without grace periods: {:?}",
        EvictionConfig::decode(&signals_fixed).map(|(config, _)| config)
    );
    let mut repaired: Value = serde_json::from_str(&signals_fixed).unwrap();
    repaired["kubeletconfig"]["evictionSoftGracePeriod"] = serde_json::json!({
        "memory.available": "1m30s", "nodefs.available": "1m30s", "nodefs.inodesFree": "1m30s",
        "imagefs.available": "1m30s", "imagefs.inodesFree": "1m30s",
    });
    let (config, form) = EvictionConfig::decode(&repaired.to_string()).expect("repaired");
    assert_eq!(form, ConfigForm::Configz);
    let written = |hard: bool| -> Vec<String> {
        config
            .thresholds
            .iter()
            .filter(|t| t.grace_period.is_zero() == hard)
            .map(|t| format!("{}<{}", t.signal, t.value))
            .collect()
    };
    assert_eq!(
        written(true),
        [
            "memory.available<100Mi",
            "allocatableMemory.available<100Mi",
            "nodefs.available<10%",
            "nodefs.inodesFree<5%",
            "imagefs.available<15%",
            "imagefs.inodesFree<15%",
        ]
    );
    assert_eq!(
        written(false),
        [
            "memory.available<100Mi",
            "nodefs.available<10%",
            "nodefs.inodesFree<5%",
            "imagefs.available<15%",
            "imagefs.inodesFree<15%",
        ]
    );
    assert_eq!(config.pressure_transition_period, Duration::from_secs(300));
}

/// The real 1.35 pod list with `e2e-statefulset-0` resized from 15Mi to 28G of memory (the
/// resize of the GKE capture) and that capture's `PodResizePending: Infeasible` condition
/// added to its status; `keep` edits the container status first.
fn resized_pods(dir: &tempfile::TempDir, condition: bool, keep: impl Fn(&mut Value)) -> PathBuf {
    let mut pods: Value = serde_yaml::from_str(&read("nri-1.35-pods.yaml")).unwrap();
    let pending: Value = serde_yaml::from_str(&read("gke-1.33-resize-infeasible.yaml")).unwrap();
    let pod = pods["items"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p["metadata"]["name"] == "e2e-statefulset-0")
        .expect("e2e-statefulset-0 in the capture");
    let resources = &mut pod["spec"]["containers"][0]["resources"];
    resources["requests"]["memory"] = "28G".into();
    resources["limits"]["memory"] = "28G".into();
    keep(&mut pod["status"]["containerStatuses"][0]);
    if condition {
        pod["status"]["conditions"].as_array_mut().unwrap().extend(
            pending["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .cloned(),
        );
    }
    temp_file(dir, "pods.json", &pods.to_string())
}

/// An in-place resize the node cannot grant (a GKE 1.33 capture's condition, on a real 1.35
/// pod list): the kubelet ranks the pod on what it allocated, so the order is the capture's
/// own, whether the allocation is published in `allocatedResources` (1.35) or only in the
/// status's `resources` (1.33-1.35 by default). Taken from the spec alone, the 28G request
/// would rank the pod below kindnet: the case that shows the test can tell.
#[test]
fn a_real_infeasible_resize_ranks_on_the_kubelets_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let summary = corpus("nri-1.35-summary.json");
    struct Case {
        name: &'static str,
        condition: bool,
        keep: fn(&mut Value),
        order_kept: bool,
        source: Value,
    }
    let cases = [
        Case {
            name: "1.35: allocatedResources published",
            condition: true,
            keep: |_| {},
            order_kept: true,
            source: "allocatedResources".into(),
        },
        Case {
            name: "1.33 default: the status's resources stand in while the resize is pending",
            condition: true,
            keep: |status| {
                status.as_object_mut().unwrap().remove("allocatedResources");
            },
            order_kept: true,
            source: "statusResources".into(),
        },
        Case {
            name: "no allocation published, no pending resize: the spec is the allocation",
            condition: false,
            keep: |status| {
                let status = status.as_object_mut().unwrap();
                status.remove("allocatedResources");
                status.remove("resources");
            },
            order_kept: false,
            source: Value::Null,
        },
    ];
    for case in cases {
        let pods = resized_pods(&dir, case.condition, case.keep);
        let out = rank(&pods, &summary, &["--output", "json"]);
        let ranked = ranked(&out, case.name);
        let order = names(&ranked);
        let position = |name: &str| order.iter().position(|n| n == name).unwrap();
        let (resized, kindnet) = (
            position("scraper/e2e-statefulset-0"),
            position("kube-system/kindnet-zkpn8"),
        );
        assert_eq!(
            order == ORDER_1_35,
            case.order_kept,
            "{}: {order:#?}",
            case.name
        );
        assert_eq!(
            resized < kindnet,
            case.order_kept,
            "{}: {order:#?}",
            case.name
        );
        let pod = &ranked[resized];
        assert_eq!(
            pod["resize"]["source"], case.source,
            "{}: {pod:#}",
            case.name
        );
        if case.condition {
            assert_eq!(
                pod["resize"]["state"], "Infeasible",
                "{}: {pod:#}",
                case.name
            );
        }
    }
}
