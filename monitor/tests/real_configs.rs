//! Kubelet configurations captured from real clusters (`tests/fixtures/corpus`, origins in
//! its README) read as the kubelet defaults them, a real configz answer refused for what the
//! kubelet refuses, and a real infeasible resize ranked on the kubelet's allocation.
mod corpus;

use std::path::PathBuf;
use std::time::Duration;

use corpus::{ORDER_1_35, corpus, names, rank, ranked, read, temp_file};
use monitor::engine::eviction_config::{ConfigError, ConfigForm, EvictionConfig};
use monitor::engine::signal::Signal;
use serde_json::Value;

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
    let mut pods: Value = serde_norway::from_str(&read("nri-1.35-pods.yaml")).unwrap();
    let pending: Value = serde_norway::from_str(&read("gke-1.33-resize-infeasible.yaml")).unwrap();
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
