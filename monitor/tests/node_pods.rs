//! The agent keeps each pod as a compact [`NodePod`] instead of the whole Pod object. Fed the
//! same manifests (the pods of real clusters in `tests/fixtures/corpus`, and hostile ones),
//! the compact path must accept and refuse exactly the pods the whole-Pod path does, with the
//! same reasons, and give every pod the same facts, QoS class and standing, so rankings and
//! decisions cannot change.
use std::{fs, path::PathBuf};

use monitor::{
    engine::{kubelet_view, pod_facts::PodFacts, qos::pod_qos},
    pods::{
        NodePod,
        manifests::{load_dir, load_dir_as},
        node_pod,
    },
};

fn corpus(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/corpus")
        .join(name)
}

#[test]
fn compact_pods_answer_as_the_whole_pods_of_real_clusters_and_hostile_manifests() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "nri-1.16-pods.yaml",
        "nri-1.28-pods.yaml",
        "nri-1.35-pods.yaml",
        "nri-1.35-kubelet-pods.json",
    ] {
        fs::copy(corpus(name), dir.path().join(name)).unwrap();
    }
    let uid = "0f1e2d3c-aaaa-4bbb-8ccc-123456789abc";
    let hostile = [
        ("climb.yaml", format!("kind: Pod\nmetadata: {{name: x, uid: \"{uid}/../../x\"}}\n")),
        ("forged.yaml", format!("kind: Pod\nmetadata: {{name: \"a\\nb\", uid: {uid}}}\n")),
        ("mirror.yaml", format!(
            "kind: Pod\nmetadata: {{name: m, uid: {uid}, annotations: {{kubernetes.io/config.mirror: ../x}}}}\n"
        )),
        ("deep.yaml", format!("kind: Pod\nx: {}\n", "[".repeat(1000))),
        ("dup.yaml", "kind: Pod\nmetadata: {name: d, uid: 3ea3ef66-5f89-43b7-b88b-6ee26f5b18a4}\nspec: {containers: []}\n".to_string()),
        ("bad-quantity.yaml", "kind: Pod\nmetadata: {name: q, uid: 1f1e2d3c-aaaa-4bbb-8ccc-123456789abc}\nspec: {containers: [{name: a, resources: {requests: {memory: lots}}}]}\n".to_string()),
        ("no-spec.yaml", "kind: Pod\nmetadata: {name: s, uid: 2f1e2d3c-aaaa-4bbb-8ccc-123456789abc}\n".to_string()),
    ];
    for (name, text) in &hostile {
        fs::write(dir.path().join(name), text).unwrap();
    }

    let whole = load_dir(dir.path()).unwrap();
    let compact = load_dir_as(dir.path(), |pod| NodePod::from_pod(&pod)).unwrap();

    let reasons = |errors: &[monitor::pods::ManifestError]| -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    };
    assert_eq!(reasons(&compact.errors), reasons(&whole.errors));
    // The hostile files each refused (the duplicate uid and bad pods too, or loaded as the
    // whole path loads them); the corpus loads.
    assert!(whole.errors.len() >= 4, "{:?}", reasons(&whole.errors));
    assert!(whole.pods.len() > 30, "{} pods", whole.pods.len());
    assert_eq!(compact.pods.len(), whole.pods.len());
    let mut with_facts = 0;
    for (kept, pod) in compact.pods.iter().zip(&whole.pods) {
        let label = format!("{:?}", pod.metadata.name);
        assert_eq!(kept.facts, PodFacts::from_pod(pod), "{label}");
        assert_eq!(kept.qos, pod_qos(pod), "{label}");
        for node in [
            None,
            Some("minikube"),
            Some("kind-control-plane"),
            Some("other"),
        ] {
            assert_eq!(
                kept.standing(node),
                kubelet_view::standing(pod, node),
                "{label} {node:?}"
            );
            let (here, _) = node_pod::split_by_standing([kept.clone()], node, true);
            assert_eq!(
                here.len() == 1,
                kubelet_view::runs_here(pod, node),
                "{label} {node:?}"
            );
        }
        with_facts += usize::from(kept.facts.is_ok());
    }
    assert!(with_facts > 30, "{with_facts} pods with facts");
}
