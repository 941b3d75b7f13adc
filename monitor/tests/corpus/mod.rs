//! What the corpus tests share: the captured files (`tests/fixtures/corpus`, origins in its
//! README), `monitor rank` run on them, and the memory order of the 1.35 cluster.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The path of a corpus file.
pub(crate) fn corpus(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/corpus")
        .join(name)
}

/// A corpus file's text.
pub(crate) fn read(name: &str) -> String {
    std::fs::read_to_string(corpus(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// `monitor rank` on a pods directory or file and a Summary API answer.
pub(crate) fn rank(pods: &Path, summary: &Path, extra: &[&str]) -> Output {
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
pub(crate) fn ranked(output: &Output, case: &str) -> Vec<Value> {
    assert!(
        output.status.success(),
        "case {case:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let value: Value = serde_json::from_slice(&output.stdout).expect("JSON output");
    value["pods"].as_array().expect("an array of pods").clone()
}

/// `namespace/name` of each ranked pod, in order.
pub(crate) fn names(pods: &[Value]) -> Vec<String> {
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

/// A temporary file holding `text`.
pub(crate) fn temp_file(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write temp file");
    path
}

pub(crate) const ORDER_1_35: &[&str] = &[
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
