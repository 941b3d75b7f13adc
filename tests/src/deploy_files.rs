//! The manifests in `deploy/` as a cluster gets them: each kustomization rendered by kubectl's
//! built-in kustomize (the `kubectl apply -k` the docs give), and checked strictly against the
//! Kubernetes schemas with the PyPI package kubernetes-validate, which ships them (offline).
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use crate::{Reason, cannot_run};

/// The repository's `deploy/`.
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
pub fn yaml(path: &Path) -> serde_norway::Value {
    let text =
        fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// The documents of a multi-document YAML file (separated by `---` lines), parsed.
pub fn yaml_documents(path: &Path) -> Vec<serde_norway::Value> {
    let text =
        fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.split("\n---\n")
        .map(|document| {
            serde_norway::from_str(document)
                .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
        })
        .collect()
}

/// kubectl's client and kustomize versions, or why there is no kubectl.
pub fn kubectl_version() -> Result<String, String> {
    let out = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .map_err(|e| format!("no kubectl on PATH: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout)
        .trim()
        .replace('\n', ", ");
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!("`kubectl version --client` failed: {text}"))
    }
}

/// `kubectl kustomize DIR`: the objects, in kustomize's order; `None` (and the test reported
/// as not run for `kubectl`) without kubectl. Panics with kustomize's message when the
/// directory does not render.
pub fn kustomize(dir: &Path) -> Option<Vec<serde_norway::Value>> {
    let version = match kubectl_version() {
        Ok(version) => version,
        Err(why) => {
            cannot_run(Reason::Kubectl, &why);
            return None;
        }
    };
    let text = render(dir).unwrap_or_else(|e| panic!("{e}\n(kubectl: {version})"));
    Some(objects(&text))
}

/// The YAML `kubectl kustomize DIR` prints, or its error.
pub fn render(dir: &Path) -> Result<String, String> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .map_err(|e| format!("starting kubectl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "kubectl kustomize {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The documents of a YAML stream as kustomize prints it: separated by `---` lines (inside a
/// block scalar such a line would be indented).
pub fn objects(text: &str) -> Vec<serde_norway::Value> {
    text.split("\n---\n")
        .map(|doc| serde_norway::from_str(doc).unwrap_or_else(|e| panic!("{e}:\n{doc}")))
        .collect()
}

/// The one object of `kind` among `objects`.
pub fn object_of<'a>(objects: &'a [serde_norway::Value], kind: &str) -> &'a serde_norway::Value {
    let mut found = objects.iter().filter(|o| o["kind"] == kind);
    let object = found.next().unwrap_or_else(|| panic!("no {kind}"));
    assert!(found.next().is_none(), "more than one {kind}");
    object
}

/// The agent container's arguments in a DaemonSet.
pub fn agent_args(daemonset: &serde_norway::Value) -> Vec<String> {
    daemonset["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .expect("the container's args")
        .iter()
        .map(|a| a.as_str().expect("a string argument").to_string())
        .collect()
}

/// The validator: KUBERNETES_VALIDATE, the virtualenv `cargo xtask test` installs it in, or
/// PATH; `None` (and the test reported as not run for `kubernetes-validate`) without one.
pub fn kubernetes_validate() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("KUBERNETES_VALIDATE") {
        return Some(path.into());
    }
    let exe = std::env::current_exe().expect("test executable path");
    let venv = exe
        .ancestors()
        .nth(3)
        .expect("target directory")
        .join("kubernetes-validate/bin/kubernetes-validate");
    if venv.exists() {
        return Some(venv);
    }
    let on_path = Command::new("kubernetes-validate")
        .arg("--version")
        .output()
        .is_ok();
    if !on_path {
        cannot_run(
            Reason::KubernetesValidate,
            "not installed (cargo xtask test installs it)",
        );
    }
    on_path.then(|| "kubernetes-validate".into())
}

/// `kubernetes-validate --strict --quiet FILES`: whether all passed, and what it printed (a
/// line for each failure or warning).
pub fn validate(validator: &Path, files: &[PathBuf]) -> (bool, String) {
    let out = Command::new(validator)
        .args(["--strict", "--quiet"])
        .args(files)
        .output()
        .unwrap_or_else(|e| panic!("starting {}: {e}", validator.display()));
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}
