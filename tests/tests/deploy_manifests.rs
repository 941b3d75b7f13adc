//! `deploy/`: every manifest validates strictly against the Kubernetes schemas (offline, with
//! the PyPI package kubernetes-validate, which ships them), the kustomization lists every
//! manifest, and the ClusterRole grants exactly the API calls the agent's code makes.
use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use tests::{TempDir, on_the_host};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests lives in the workspace")
        .to_path_buf()
}

fn deploy() -> PathBuf {
    workspace().join("deploy")
}

/// The Kubernetes manifests in deploy/ (every YAML file but the kustomization).
fn manifests() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(deploy())
        .expect("reading deploy/")
        .map(|e| e.expect("deploy/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| p.file_name().is_some_and(|n| n != "kustomization.yaml"))
        .collect();
    files.sort();
    files
}

/// The validator: KUBERNETES_VALIDATE, the virtualenv `cargo xtask test` installs it in, or
/// PATH; `None` when there is none.
fn validator() -> Option<PathBuf> {
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
    Command::new("kubernetes-validate")
        .arg("--version")
        .output()
        .is_ok()
        .then(|| "kubernetes-validate".into())
}

fn validate(validator: &Path, files: &[PathBuf]) -> (bool, String) {
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

#[test]
fn every_manifest_validates_strictly_against_the_kubernetes_schemas() {
    if !on_the_host("every_manifest_validates_strictly_against_the_kubernetes_schemas") {
        return;
    }
    let Some(validator) = validator() else {
        tests::cannot_run(
            tests::Reason::KubernetesValidate,
            "not installed (cargo xtask test installs it)",
        );
        return;
    };
    let files = manifests();
    assert!(files.len() >= 5, "deploy/ holds {files:?}");
    let (ok, output) = validate(&validator, &files);
    assert!(ok, "deploy/ does not validate:\n{output}");

    // Strict: a field the schema does not know is an error, not ignored.
    let dir = TempDir::new("deploy-strict");
    let daemonset = fs::read_to_string(deploy().join("daemonset.yaml")).unwrap();
    let unknown = daemonset.replace(
        "      hostNetwork: true\n",
        "      hostNetwork: true\n      hostNetworking: true\n",
    );
    assert_ne!(unknown, daemonset, "the daemonset sets hostNetwork");
    let bad = dir.join("daemonset.yaml");
    fs::write(&bad, unknown).unwrap();
    let (ok, output) = validate(&validator, &[bad]);
    assert!(!ok, "an unknown field passed:\n{output}");
    assert!(output.contains("hostNetworking"), "{output}");
}

#[test]
fn the_kustomization_lists_every_manifest() {
    if !on_the_host("the_kustomization_lists_every_manifest") {
        return;
    }
    let text = fs::read_to_string(deploy().join("kustomization.yaml")).unwrap();
    let kustomization: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let listed: BTreeSet<String> = kustomization["resources"]
        .as_sequence()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().expect("a file name").to_string())
        .collect();
    let present: BTreeSet<String> = manifests()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(listed, present);
}

/// One RBAC permission: API group, resource (with subresource), verb.
type Rule = (String, String, String);

fn rule(group: &str, resource: &str, verb: &str) -> Rule {
    (group.into(), resource.into(), verb.into())
}

/// The permissions a source file's API calls need. Recognizes kube's `Api<T>` for the kinds
/// the agent uses and the calls made on them; a file using `Api` with any other kind fails,
/// so a new call cannot go unchecked.
fn calls_in(file: &Path, source: &str) -> Vec<Rule> {
    let mut rules = Vec::new();
    for kind in api_kinds(source) {
        match kind.as_str() {
            "Pod" => {
                if source.contains("watcher(") {
                    rules.extend([rule("", "pods", "list"), rule("", "pods", "watch")]);
                }
                if source.contains(".list(") {
                    rules.push(rule("", "pods", "list"));
                }
                if source.contains("create_subresource") && source.contains("\"eviction\"") {
                    rules.push(rule("", "pods/eviction", "create"));
                }
                if source.contains(".delete(") {
                    rules.push(rule("", "pods", "delete"));
                }
            }
            "Event" => {
                let group = if source.contains("events::v1::Event") {
                    "events.k8s.io"
                } else {
                    ""
                };
                rules.push(rule(group, "events", "create"));
            }
            "Node" => {
                if source.contains("patch_status(") {
                    rules.push(rule("", "nodes/status", "patch"));
                }
                if source.contains(".get(") {
                    rules.push(rule("", "nodes", "get"));
                }
            }
            // Reviews are only ever created.
            "TokenReview" => rules.push(rule("authentication.k8s.io", "tokenreviews", "create")),
            "SubjectAccessReview" => rules.push(rule(
                "authorization.k8s.io",
                "subjectaccessreviews",
                "create",
            )),
            other => panic!(
                "{}: Api<{other}> is not known to this test; add its calls and the \
                 ClusterRole rule they need",
                file.display()
            ),
        }
    }
    // The Summary API through the API server's node proxy (from a file using kube's client;
    // help texts name the path for kubectl).
    if source.contains("kube::") && source.contains("/proxy/stats/summary") {
        rules.push(rule("", "nodes/proxy", "get"));
    }
    rules
}

/// The kinds named in `Api<...>` or `Api::<...>`, by their last path segment.
fn api_kinds(source: &str) -> BTreeSet<String> {
    let mut kinds = BTreeSet::new();
    for pattern in ["Api<", "Api::<"] {
        for (at, _) in source.match_indices(pattern) {
            let rest = &source[at + pattern.len()..];
            let end = rest.find('>').unwrap_or(rest.len());
            let kind = rest[..end].rsplit("::").next().unwrap_or("").trim();
            if !kind.is_empty() {
                kinds.insert(kind.to_string());
            }
        }
    }
    kinds
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap().map(Result::unwrap) {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn granted_rules() -> BTreeSet<Rule> {
    let text = fs::read_to_string(deploy().join("clusterrole.yaml")).unwrap();
    let role: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
    let strings = |v: &serde_yaml::Value| -> Vec<String> {
        v.as_sequence()
            .expect("a list")
            .iter()
            .map(|s| s.as_str().expect("a string").to_string())
            .collect()
    };
    let mut granted = BTreeSet::new();
    for r in role["rules"].as_sequence().expect("rules") {
        for group in strings(&r["apiGroups"]) {
            for resource in strings(&r["resources"]) {
                for verb in strings(&r["verbs"]) {
                    granted.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    granted
}

#[test]
fn the_cluster_role_grants_exactly_the_api_calls_the_code_makes() {
    if !on_the_host("the_cluster_role_grants_exactly_the_api_calls_the_code_makes") {
        return;
    }
    let mut files = Vec::new();
    rust_files(&workspace().join("monitor/src"), &mut files);
    let needed: BTreeSet<Rule> = files
        .iter()
        .flat_map(|f| calls_in(f, &fs::read_to_string(f).unwrap()))
        .collect();
    assert!(
        needed.contains(&rule("", "pods/eviction", "create")),
        "the scan found the eviction call: {needed:?}"
    );
    let granted = granted_rules();
    let missing: Vec<_> = needed.difference(&granted).collect();
    let unused: Vec<_> = granted.difference(&needed).collect();
    assert!(
        missing.is_empty() && unused.is_empty(),
        "deploy/clusterrole.yaml: missing {missing:?} (called by the code), unused {unused:?}"
    );
}

#[test]
fn api_calls_are_recognized() {
    let cases = [
        (
            "pod watch",
            "let api = Api::<Pod>::all(c); watcher(api, cfg)",
            vec![rule("", "pods", "list"), rule("", "pods", "watch")],
        ),
        (
            "eviction",
            "let api: Api<k8s_openapi::api::core::v1::Pod> = x; api.create_subresource(\n\"eviction\", ..)",
            vec![rule("", "pods/eviction", "create")],
        ),
        (
            "events.k8s.io event",
            "use k8s_openapi::api::events::v1::Event; let e: Api<Event> = x; e.create(..)",
            vec![rule("events.k8s.io", "events", "create")],
        ),
        (
            "node status and summary",
            "use kube::Api; let n: Api<Node> = x; n.patch_status(..); format!(\"/api/v1/nodes/{n}/proxy/stats/summary\")",
            vec![
                rule("", "nodes/status", "patch"),
                rule("", "nodes/proxy", "get"),
            ],
        ),
        (
            "the proxy path in a help text",
            "/// kubectl get --raw /api/v1/nodes/NODE/proxy/stats/summary",
            vec![],
        ),
        (
            "token reviews",
            "Api::<TokenReview>::all(c).create(..); Api::<SubjectAccessReview>::all(c).create(..)",
            vec![
                rule("authorization.k8s.io", "subjectaccessreviews", "create"),
                rule("authentication.k8s.io", "tokenreviews", "create"),
            ],
        ),
        ("no API", "fn main() {}", vec![]),
    ];
    for (name, source, expected) in cases {
        assert_eq!(calls_in(Path::new(name), source), expected, "{name}");
    }
}

#[test]
#[should_panic(expected = "Api<Secret> is not known to this test")]
fn an_unknown_api_kind_fails() {
    calls_in(Path::new("x.rs"), "let s: Api<Secret> = x;");
}

/// The enforce overlay's JSON patch applied to the base DaemonSet: RFC 6902 `test` and
/// `remove` on the container's args, the only operations it uses.
fn enforced_daemonset() -> serde_yaml::Value {
    let overlay = deploy().join("overlays/enforce/kustomization.yaml");
    let kustomization: serde_yaml::Value =
        serde_yaml::from_str(&fs::read_to_string(overlay).unwrap()).unwrap();
    assert_eq!(
        kustomization["resources"][0], "../..",
        "the overlay builds on the base"
    );
    let patch = &kustomization["patches"][0];
    assert_eq!(patch["target"]["kind"], "DaemonSet");
    let ops: Vec<serde_yaml::Value> =
        serde_yaml::from_str(patch["patch"].as_str().expect("a JSON patch")).unwrap();
    let mut daemonset: serde_yaml::Value =
        serde_yaml::from_str(&fs::read_to_string(deploy().join("daemonset.yaml")).unwrap())
            .unwrap();
    for op in ops {
        let path = op["path"].as_str().unwrap();
        let index: usize = path
            .strip_prefix("/spec/template/spec/containers/0/args/")
            .and_then(|i| i.parse().ok())
            .unwrap_or_else(|| panic!("the overlay patches only the args: {path}"));
        let args = daemonset["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_sequence_mut()
            .expect("args");
        match op["op"].as_str().unwrap() {
            "test" => assert_eq!(args[index], op["value"], "{path}"),
            "remove" => {
                args.remove(index);
            }
            other => panic!("unexpected op {other}"),
        }
    }
    daemonset
}

#[test]
fn the_base_observes_and_the_enforce_overlay_acts_and_both_validate() {
    if !on_the_host("the_base_observes_and_the_enforce_overlay_acts") {
        return;
    }
    let args = |daemonset: &serde_yaml::Value| -> Vec<String> {
        daemonset["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect()
    };
    let base: serde_yaml::Value =
        serde_yaml::from_str(&fs::read_to_string(deploy().join("daemonset.yaml")).unwrap())
            .unwrap();
    let base_args = args(&base);
    assert!(
        base_args.contains(&"--dry-run".into()) && base_args.contains(&"--dry-run-events".into()),
        "kubectl apply -k deploy/ observes: {base_args:?}"
    );
    let enforced = enforced_daemonset();
    let enforced_args = args(&enforced);
    let expected: Vec<String> = base_args
        .iter()
        .filter(|a| !a.starts_with("--dry-run"))
        .cloned()
        .collect();
    assert_eq!(
        enforced_args, expected,
        "the overlay drops exactly the dry run"
    );

    let Some(validator) = validator() else {
        tests::cannot_run(
            tests::Reason::KubernetesValidate,
            "not installed (cargo xtask test installs it)",
        );
        return;
    };
    let dir = TempDir::new("deploy-enforce");
    let file = dir.join("daemonset.yaml");
    fs::write(&file, serde_yaml::to_string(&enforced).unwrap()).unwrap();
    let (ok, output) = validate(&validator, &[file]);
    assert!(ok, "the enforced DaemonSet does not validate:\n{output}");
}

#[test]
fn the_scrapers_identity_in_deploy_monitoring_validates() {
    if !on_the_host("the_scrapers_identity_in_deploy_monitoring_validates") {
        return;
    }
    let Some(validator) = validator() else {
        tests::cannot_run(
            tests::Reason::KubernetesValidate,
            "not installed (cargo xtask test installs it)",
        );
        return;
    };
    // The rest of deploy/monitoring is the Prometheus Operator's kinds, not in the schemas.
    let files =
        ["metrics-reader.yaml", "scraper.yaml"].map(|f| deploy().join("monitoring").join(f));
    let (ok, output) = validate(&validator, &files);
    assert!(ok, "deploy/monitoring does not validate:\n{output}");
}
