//! `deploy/` as a cluster gets it: every kustomization (deploy/ itself, the base, each overlay,
//! the monitoring) renders with real kustomize (kubectl's, as `kubectl apply -k` runs it) and
//! its output validates strictly against the Kubernetes schemas (offline, with the PyPI package
//! kubernetes-validate, which ships them); deploy/ is the base, the enforce overlay differs
//! from it only by the dry run, the opt-in overlay only by deleting pods. The RBAC is checked
//! in deploy_rbac.rs.
use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
};

use serde_norway::Value;
use tests::{
    TempDir,
    deploy_files::{
        agent_args, deploy_dir, kubectl_version, kubernetes_validate, kustomize, object_of, render,
        validate,
    },
    on_the_host,
};

/// The manifests of deploy/base (every YAML file but the kustomization).
fn base_manifests() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(deploy_dir().join("base"))
        .expect("reading deploy/base")
        .map(|e| e.expect("deploy/base entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| p.file_name().is_some_and(|n| n != "kustomization.yaml"))
        .collect();
    files.sort();
    files
}

fn yaml(path: &Path) -> Value {
    let text =
        fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

#[test]
fn every_manifest_validates_strictly_against_the_kubernetes_schemas() {
    if !on_the_host("every_manifest_validates_strictly_against_the_kubernetes_schemas") {
        return;
    }
    let Some(validator) = kubernetes_validate() else {
        return;
    };
    let files = base_manifests();
    assert!(files.len() >= 5, "deploy/base holds {files:?}");
    let (ok, output) = validate(&validator, &files);
    assert!(ok, "deploy/base does not validate:\n{output}");

    // Strict: a field the schema does not know is an error, not ignored.
    let dir = TempDir::new("deploy-strict");
    let daemonset = fs::read_to_string(deploy_dir().join("base/daemonset.yaml")).unwrap();
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
fn the_base_kustomization_lists_every_manifest() {
    if !on_the_host("the_base_kustomization_lists_every_manifest") {
        return;
    }
    let kustomization = yaml(&deploy_dir().join("base/kustomization.yaml"));
    let listed: BTreeSet<String> = kustomization["resources"]
        .as_sequence()
        .expect("resources")
        .iter()
        .map(|r| r.as_str().expect("a file name").to_string())
        .collect();
    let present: BTreeSet<String> = base_manifests()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(listed, present);
}

/// The directories under deploy/ holding a kustomization, relative to it ("" for deploy/
/// itself), each with its kind: Kustomization or Component.
fn kustomizations() -> Vec<(String, String)> {
    fn walk(dir: &Path, found: &mut Vec<(String, String)>) {
        let file = dir.join("kustomization.yaml");
        if file.exists() {
            let relative = dir.strip_prefix(deploy_dir()).unwrap();
            let kind = yaml(&file)["kind"]
                .as_str()
                .unwrap_or("Kustomization")
                .into();
            found.push((relative.display().to_string(), kind));
        }
        for entry in fs::read_dir(dir).unwrap().map(Result::unwrap) {
            if entry.file_type().unwrap().is_dir() {
                walk(&entry.path(), found);
            }
        }
    }
    let mut found = Vec::new();
    walk(&deploy_dir(), &mut found);
    found.sort();
    found
}

/// Kinds whose schemas kubernetes-validate does not ship: the Prometheus Operator's, which
/// deploy/monitoring uses (its own test checks them against the rules and the DaemonSet).
const OPERATOR_KINDS: [&str; 2] = ["PodMonitor", "PrometheusRule"];

#[test]
fn every_kustomization_renders_with_kubectl_and_validates_strictly() {
    if !on_the_host("every_kustomization_renders_with_kubectl_and_validates_strictly") {
        return;
    }
    let found = kustomizations();
    let builds: Vec<&str> = found
        .iter()
        .filter(|(_, kind)| kind == "Kustomization")
        .map(|(dir, _)| dir.as_str())
        .collect();
    // The ones the docs name; a new one is added here with what it must render.
    assert_eq!(
        builds,
        [
            "",
            "base",
            "monitoring",
            "overlays/enforce",
            "overlays/enforce-ignore-disruption-budgets"
        ]
    );
    let Some(validator) = kubernetes_validate() else {
        return;
    };
    let dir = TempDir::new("deploy-rendered");
    let mut components_used = BTreeSet::new();
    for build in builds {
        let Some(objects) = kustomize(&deploy_dir().join(build)) else {
            return;
        };
        assert!(!objects.is_empty(), "deploy/{build} renders nothing");
        let file = dir.join(&format!("{}.yaml", build.replace('/', "-")));
        let text: Vec<String> = objects
            .iter()
            .map(|o| serde_norway::to_string(o).unwrap())
            .collect();
        fs::write(&file, text.join("---\n")).unwrap();
        let (ok, output) = validate(&validator, &[file]);
        assert!(ok, "deploy/{build}, rendered, does not validate:\n{output}");
        // Only the Operator's kinds may go unchecked, and only for want of their schema.
        for line in output.lines() {
            let unchecked = OPERATOR_KINDS.iter().any(|kind| {
                line.contains(&format!(
                    "Couldn't find schema for kind {kind} with api version monitoring.coreos.com/"
                ))
            });
            assert!(unchecked, "deploy/{build}: {line}");
        }
        let kustomization = yaml(&deploy_dir().join(build).join("kustomization.yaml"));
        for component in kustomization["components"]
            .as_sequence()
            .into_iter()
            .flatten()
        {
            let path = deploy_dir().join(build).join(component.as_str().unwrap());
            components_used.insert(fs::canonicalize(path).unwrap());
        }
    }
    // A component renders nothing alone: each is rendered inside an overlay that uses it.
    for (component, _) in found.iter().filter(|(_, kind)| kind == "Component") {
        let path = fs::canonicalize(deploy_dir().join(component)).unwrap();
        assert!(
            components_used.contains(&path),
            "deploy/{component}: no overlay renders it"
        );
    }
}

/// The bug this layout fixed: an overlay whose resources hold a directory that contains the
/// overlay does not render ("cycle detected"), which a test applying the patch itself missed.
#[test]
fn an_overlay_inside_its_own_base_does_not_render() {
    if !on_the_host("an_overlay_inside_its_own_base_does_not_render") {
        return;
    }
    if let Err(why) = kubectl_version() {
        tests::cannot_run(tests::Reason::Kubectl, &why);
        return;
    }
    let copy = TempDir::new("deploy-cycle");
    copy_tree(&deploy_dir(), &copy.path);
    let overlay = copy.path.join("overlays/enforce/kustomization.yaml");
    let text = fs::read_to_string(&overlay).unwrap();
    let cyclic = text.replace("- ../../base\n", "- ../..\n");
    assert_ne!(cyclic, text, "the overlay builds on ../../base");
    render(&copy.path.join("overlays/enforce")).expect("the copy renders before the change");
    fs::write(&overlay, cyclic).unwrap();
    let error = render(&copy.path.join("overlays/enforce")).expect_err("a cycle rendered");
    assert!(error.contains("cycle detected"), "{error}");
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap().map(Result::unwrap) {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The rendered objects of deploy/`dir`, `None` without kubectl.
fn rendered(dir: &str) -> Option<Vec<Value>> {
    kustomize(&deploy_dir().join(dir))
}

/// `objects` with the DaemonSet's args and the ClusterRole's rules changed by `edit`.
fn edited(objects: &[Value], edit: impl Fn(&str, &mut Vec<Value>)) -> Vec<Value> {
    let mut objects = objects.to_vec();
    for object in &mut objects {
        let (kind, list) = match object["kind"].as_str() {
            Some("DaemonSet") => (
                "DaemonSet",
                &mut object["spec"]["template"]["spec"]["containers"][0]["args"],
            ),
            Some("ClusterRole") => ("ClusterRole", &mut object["rules"]),
            _ => continue,
        };
        edit(kind, list.as_sequence_mut().expect("a list"));
    }
    objects
}

#[test]
fn deploy_applies_the_base_which_observes() {
    if !on_the_host("deploy_applies_the_base_which_observes") {
        return;
    }
    let Some(deploy) = rendered("") else { return };
    let Some(base) = rendered("base") else { return };
    assert_eq!(deploy, base, "kubectl apply -k deploy/ applies deploy/base");
    let args = agent_args(object_of(&base, "DaemonSet"));
    for flag in ["--dry-run", "--dry-run-events"] {
        let count = args.iter().filter(|a| *a == flag).count();
        assert_eq!(count, 1, "{flag} in {args:?}");
    }
}

#[test]
fn the_enforce_overlay_differs_from_the_base_only_by_the_dry_run_flags() {
    if !on_the_host("the_enforce_overlay_differs_from_the_base_only_by_the_dry_run_flags") {
        return;
    }
    let Some(base) = rendered("base") else { return };
    let Some(enforce) = rendered("overlays/enforce") else {
        return;
    };
    let expected = edited(&base, |kind, list| {
        if kind == "DaemonSet" {
            list.retain(|a| a != "--dry-run" && a != "--dry-run-events");
        }
    });
    assert_ne!(expected, base, "the base runs in dry run");
    assert_eq!(enforce, expected, "the overlay drops exactly the dry run");
}

#[test]
fn the_disruption_budget_overlay_adds_only_the_flag_and_deleting_pods() {
    if !on_the_host("the_disruption_budget_overlay_adds_only_the_flag_and_deleting_pods") {
        return;
    }
    let Some(enforce) = rendered("overlays/enforce") else {
        return;
    };
    let Some(ignoring) = rendered("overlays/enforce-ignore-disruption-budgets") else {
        return;
    };
    let delete: Value =
        serde_norway::from_str("{apiGroups: [''], resources: [pods], verbs: [delete]}").unwrap();
    let expected = edited(&enforce, |kind, list| match kind {
        "DaemonSet" => list.push("--ignore-disruption-budgets".into()),
        _ => list.push(delete.clone()),
    });
    assert_eq!(ignoring, expected);
}

/// The kubelet's configuration as kubeadm writes it: its thresholds are the kubelet's
/// defaults, made explicit.
const KUBEADM_KUBELET_CONFIG: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\n\
    kind: KubeletConfiguration\ncgroupDriver: systemd\nevictionPressureTransitionPeriod: 0s\n\
    staticPodPath: /etc/kubernetes/manifests\nmaxPods: 110\n";

/// The shipped ConfigMap lays nothing over the kubelet's thresholds: with it, the agent's
/// thresholds are exactly the kubelet's (the kubeadm file's defaults, or one of its own).
#[test]
fn the_shipped_overlay_adds_no_threshold_to_the_kubelets() {
    if !on_the_host("the_shipped_overlay_adds_no_threshold_to_the_kubelets") {
        return;
    }
    use monitor::engine::eviction_config::{ConfigLayer, EvictionConfig};
    let configmap: Value = serde_norway::from_str(
        &fs::read_to_string(deploy_dir().join("base/configmap.yaml")).unwrap(),
    )
    .unwrap();
    let overlay_text = configmap["data"]["config.yaml"]
        .as_str()
        .expect("config.yaml");
    let overlay = ConfigLayer::parse(overlay_text).expect("the shipped overlay decodes");
    assert!(
        overlay.unknown_fields().is_empty(),
        "{:?}",
        overlay.unknown_fields()
    );
    for kubelet in [
        KUBEADM_KUBELET_CONFIG.to_string(),
        format!("{KUBEADM_KUBELET_CONFIG}evictionHard:\n  memory.available: 500Mi\n"),
    ] {
        let kubelet = ConfigLayer::parse(&kubelet).unwrap();
        let (alone, _) = EvictionConfig::from_layers(&kubelet, None).unwrap();
        let (overlaid, written) = EvictionConfig::from_layers(&kubelet, Some(&overlay)).unwrap();
        assert_eq!(overlaid.thresholds, alone.thresholds, "{overlay_text}");
        assert!(
            written
                .overridden
                .iter()
                .all(|name| name.starts_with("monitor.")),
            "the overlay writes only the agent's settings: {:?}",
            written.overridden
        );
    }
}

/// The DaemonSet reads the node's kubelet configuration, one file of the host mounted
/// read-only (not /var/lib/kubelet, which holds the pods' secrets), and lays the ConfigMap
/// over it from the whole volume (a subPath mount never sees the ConfigMap's updates).
#[test]
fn the_daemonset_reads_the_kubelets_file_and_the_overlay_as_the_kubelet_updates_it() {
    if !on_the_host(
        "the_daemonset_reads_the_kubelets_file_and_the_overlay_as_the_kubelet_updates_it",
    ) {
        return;
    }
    let daemonset: Value = serde_norway::from_str(
        &fs::read_to_string(deploy_dir().join("base/daemonset.yaml")).unwrap(),
    )
    .unwrap();
    let pod = &daemonset["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let flag = |name: &str| {
        container["args"]
            .as_sequence()
            .unwrap()
            .iter()
            .find_map(|a| a.as_str().unwrap().strip_prefix(&format!("--{name}=")))
            .unwrap_or_else(|| panic!("--{name} is passed"))
            .to_string()
    };
    let mount_of = |path: &str| {
        container["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|m| path.starts_with(m["mountPath"].as_str().unwrap()))
            .unwrap_or_else(|| panic!("{path} is mounted"))
            .clone()
    };
    let volume = |name: &Value| {
        pod["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|v| &v["name"] == name)
            .unwrap()
            .clone()
    };
    let kubelet_mount = mount_of(&flag("kubelet-config"));
    assert_eq!(kubelet_mount["readOnly"], true);
    let kubelet_volume = volume(&kubelet_mount["name"]);
    assert_eq!(
        kubelet_volume["hostPath"]["path"],
        "/var/lib/kubelet/config.yaml"
    );
    assert_eq!(kubelet_volume["hostPath"]["type"], "File");

    let overlay_mount = mount_of(&flag("config"));
    assert_eq!(overlay_mount["readOnly"], true);
    assert!(overlay_mount["subPath"].is_null(), "{overlay_mount:?}");
    assert_eq!(
        volume(&overlay_mount["name"])["configMap"]["name"],
        "monitor-config"
    );
}

#[test]
fn no_rendered_manifest_pins_an_architecture() {
    if !on_the_host("no_rendered_manifest_pins_an_architecture") {
        return;
    }
    // The image is an index of linux/amd64 and linux/arm64: a node of either pulls its own,
    // so no selector, affinity or image tag may name one.
    for (dir, kind) in kustomizations() {
        if kind != "Kustomization" {
            continue;
        }
        let Some(objects) = rendered(&dir) else {
            return;
        };
        for object in objects {
            let text = serde_norway::to_string(&object).unwrap();
            for pin in ["kubernetes.io/arch", "amd64", "arm64", "x86_64", "aarch64"] {
                assert!(
                    !text.contains(pin),
                    "deploy/{dir}: {} {} names {pin}",
                    object["kind"].as_str().unwrap_or("?"),
                    object["metadata"]["name"].as_str().unwrap_or("?")
                );
            }
        }
    }
}
