//! The manifests of `deploy/` as tests read them.
use std::{
    fs,
    path::{Path, PathBuf},
};

/// The workspace's `deploy/`.
pub fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests lives in the workspace")
        .join("deploy")
}

/// `deploy/monitoring/`.
pub fn monitoring_dir() -> PathBuf {
    deploy_dir().join("monitoring")
}

/// A YAML file, parsed; panics naming the file.
pub fn yaml(path: &Path) -> serde_yaml::Value {
    let text =
        fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// The documents of a multi-document YAML file (separated by `---` lines), parsed.
pub fn yaml_documents(path: &Path) -> Vec<serde_yaml::Value> {
    let text =
        fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.split("\n---\n")
        .map(|document| {
            serde_yaml::from_str(document)
                .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
        })
        .collect()
}
