//! Data captured from real clusters (`tests/fixtures/corpus`, origins in its README): each
//! file parses, and `monitor rank` orders the pods as the kubelet would. The expected orders
//! were worked out by hand from the files with the kubelet's rules (active pods only, stats
//! by the kubelet's uid, then exceeds-request, priority, usage above request).
//!
//! Variants the captures do not contain (a CRI-O `"containers": null`, a BOM, an API error
//! saved as the summary, a fractional request) are made from the real files here, each
//! named after the shape it stands for.
mod corpus;

use corpus::{ORDER_1_35, corpus, names, rank, ranked, read, temp_file};
use serde_json::Value;

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
    let mut pods: Value = serde_norway::from_str(&read("nri-1.35-pods.yaml")).unwrap();
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
