//! The ClusterRole `deploy/` ships grants exactly what the shipped DaemonSet's agent uses:
//! from its code (every API call in monitor/src, less those only a person's command or a flag
//! the DaemonSet does not pass can reach) and from its requests (the real agent, run with the
//! rendered DaemonSet's flags on real cgroups, against a MOCK API server since no real one runs
//! here). The opt-in overlay adds delete on pods, for --ignore-disruption-budgets.
use std::{
    collections::BTreeSet,
    fs,
    path::{Path, PathBuf},
    time::Duration,
};

use serde_norway::Value;
use tests::{
    KubeScene,
    deploy_files::{agent_args, deploy_dir, kustomize, object_of},
    kube_api::Request,
    on_the_host, running_as_root,
};

/// One RBAC permission: API group, resource (with subresource), verb.
type Rule = (String, String, String);

fn rule(group: &str, resource: &str, verb: &str) -> Rule {
    (group.into(), resource.into(), verb.into())
}

fn workspace() -> PathBuf {
    deploy_dir().parent().unwrap().to_path_buf()
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
                if source.contains(".create(") {
                    rules.push(rule(group, "events", "create"));
                }
                // A repeated Event is counted on the first one, as the kubelet's recorder does.
                if source.contains(".patch(") {
                    rules.push(rule(group, "events", "patch"));
                }
                // A dry run watches the kubelet's Evicted Events (the shadow scorecard).
                if source.contains("watcher(") {
                    rules.extend([
                        rule(group, "events", "list"),
                        rule(group, "events", "watch"),
                    ]);
                }
                if source.contains(".list(") {
                    rules.push(rule(group, "events", "list"));
                }
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

/// monitor/src's Rust files, by their path below it, with their text.
fn sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
        for entry in fs::read_dir(dir).unwrap().map(Result::unwrap) {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, root, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(root).unwrap().display().to_string();
                out.push((relative, fs::read_to_string(&path).unwrap()));
            }
        }
    }
    let root = workspace().join("monitor/src");
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out
}

/// Calls in the code that the shipped DaemonSet's agent never makes: (file, permission, what
/// makes it). Each is checked by [`check_not_the_agents`].
const NOT_THE_AGENTS: [(&str, (&str, &str, &str), &str); 3] = [
    (
        "pods/kube_query.rs",
        ("", "pods", "list"),
        "`rank --kube`, `trace --kube`",
    ),
    (
        "pods/kube_query.rs",
        ("", "nodes/proxy", "get"),
        "`rank --kube`",
    ),
    (
        "action/kube_evict.rs",
        ("", "pods", "delete"),
        "--ignore-disruption-budgets",
    ),
];

/// What makes [`NOT_THE_AGENTS`] true of the code: the one-shot reads are named only by the
/// commands a person runs (which the agent's code never names), and the evictor deletes only
/// when --ignore-disruption-budgets says so.
fn check_not_the_agents(sources: &[(String, String)]) {
    for (file, text) in sources {
        let declares = file == "pods/mod.rs" || file == "pods/kube_query.rs";
        if text.contains("kube_query") && !declares {
            assert!(
                file.starts_with("commands/"),
                "{file}: the one-shot reads are for a person's commands only"
            );
        }
        if file.starts_with("agent/") {
            assert!(
                !text.contains("commands::"),
                "{file}: the agent runs no command"
            );
        }
    }
    // Each line that turns deleting on, with the line before it.
    let mut deleting = Vec::new();
    for (file, text) in sources {
        let lines: Vec<&str> = text.lines().collect();
        for pair in lines.windows(2) {
            if pair[1].contains(".deleting()") {
                deleting.push((file, pair[0]));
            }
        }
    }
    assert_eq!(
        deleting.len(),
        1,
        "one place turns deleting on: {deleting:?}"
    );
    assert!(
        deleting[0].1.contains("if args.ignore_disruption_budgets"),
        "deleting is turned on by --ignore-disruption-budgets alone: {deleting:?}"
    );
}

/// The rules of the ClusterRole among rendered objects.
fn granted(objects: &[Value]) -> BTreeSet<Rule> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_sequence()
            .expect("a list")
            .iter()
            .map(|s| s.as_str().expect("a string").to_string())
            .collect()
    };
    let mut granted = BTreeSet::new();
    let role = object_of(objects, "ClusterRole");
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

/// The rendered objects of deploy/`dir`, `None` without kubectl.
fn rendered(dir: &str) -> Option<Vec<Value>> {
    kustomize(&deploy_dir().join(dir))
}

#[test]
fn the_cluster_role_grants_exactly_the_api_calls_the_shipped_agent_makes() {
    if !on_the_host("the_cluster_role_grants_exactly_the_api_calls_the_shipped_agent_makes") {
        return;
    }
    let sources = sources();
    check_not_the_agents(&sources);
    let mut needed = BTreeSet::new();
    let mut elsewhere = BTreeSet::new();
    for (file, text) in &sources {
        for call in calls_in(Path::new(file), text) {
            let by = NOT_THE_AGENTS
                .iter()
                .find(|(f, r, _)| f == file && rule(r.0, r.1, r.2) == call);
            match by {
                Some((_, _, who)) => elsewhere.insert((call, *who)),
                None => needed.insert(call),
            };
        }
    }
    // Each exception is still made where the table says (else it must go).
    assert_eq!(elsewhere.len(), NOT_THE_AGENTS.len(), "{elsewhere:?}");
    assert!(
        needed.contains(&rule("", "pods/eviction", "create")),
        "the scan found the eviction call: {needed:?}"
    );
    let Some(deploy) = rendered("") else { return };
    let Some(ignoring) = rendered("overlays/enforce-ignore-disruption-budgets") else {
        return;
    };
    let granted = granted(&deploy);
    let missing: Vec<_> = needed.difference(&granted).collect();
    let unused: Vec<_> = granted.difference(&needed).collect();
    assert!(
        missing.is_empty() && unused.is_empty(),
        "deploy/base/clusterrole.yaml: missing {missing:?} (called by the code), unused {unused:?}"
    );
    let mut with_delete = needed.clone();
    with_delete.insert(rule("", "pods", "delete"));
    assert_eq!(self::granted(&ignoring), with_delete);
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
            "token reviews",
            "Api::<TokenReview>::all(c).create(..); Api::<SubjectAccessReview>::all(c).create(..)",
            vec![
                rule("authorization.k8s.io", "subjectaccessreviews", "create"),
                rule("authentication.k8s.io", "tokenreviews", "create"),
            ],
        ),
        (
            "the kubelet's events watched",
            "let e = Api::<Event>::all(c); watcher(e, cfg)",
            vec![rule("", "events", "list"), rule("", "events", "watch")],
        ),
        (
            "a core/v1 event counted again",
            "let e: Api<Event> = x; e.create(..); e.patch(&name, ..)",
            vec![rule("", "events", "create"), rule("", "events", "patch")],
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

#[test]
#[should_panic(expected = "deleting is turned on by --ignore-disruption-budgets alone")]
fn deleting_without_the_flag_fails() {
    let evictor = "if dry_run {\n    evictor.deleting()\n}\n".to_string();
    check_not_the_agents(&[("agent/startup.rs".into(), evictor)]);
}

/// The permission a request to the API server needs, as the API server reads its path:
/// `/api/v1` or `/apis/GROUP/VERSION`, then `namespaces/NS`, the resource, a name and a
/// subresource (the rest of a proxy path is the proxy's).
fn needed_by(request: &Request) -> Rule {
    let path = request.path();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _, rest @ ..] => ("", rest),
        ["apis", group, _, rest @ ..] => (*group, rest),
        _ => panic!("not a resource path: {path}"),
    };
    let rest = match rest {
        ["namespaces", _, rest @ ..] if !rest.is_empty() => rest,
        rest => rest,
    };
    let (resource, named) = match rest {
        [resource] => (resource.to_string(), false),
        [resource, _] => (resource.to_string(), true),
        [resource, _, sub, ..] => (format!("{resource}/{sub}"), true),
        _ => panic!("not a resource path: {path}"),
    };
    let verb = match (request.method.as_str(), named) {
        ("GET", false) if request.is_watch() => "watch",
        ("GET", false) => "list",
        ("GET", true) => "get",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        (method, _) => panic!("{method} {path}: not a verb of the agent's"),
    };
    rule(group, &resource, verb)
}

#[test]
fn requests_are_read_as_the_api_server_does() {
    let request = |method: &str, target: &str| Request {
        method: method.into(),
        target: target.into(),
        content_type: String::new(),
        body: String::new(),
    };
    let cases = [
        (
            "GET",
            "/api/v1/pods?fieldSelector=x",
            rule("", "pods", "list"),
        ),
        (
            "GET",
            "/api/v1/pods?watch=true&x=1",
            rule("", "pods", "watch"),
        ),
        (
            "POST",
            "/api/v1/namespaces/a/pods/b/eviction",
            rule("", "pods/eviction", "create"),
        ),
        (
            "DELETE",
            "/api/v1/namespaces/a/pods/b",
            rule("", "pods", "delete"),
        ),
        (
            "POST",
            "/api/v1/namespaces/a/events",
            rule("", "events", "create"),
        ),
        (
            "POST",
            "/apis/events.k8s.io/v1/namespaces/a/events",
            rule("events.k8s.io", "events", "create"),
        ),
        (
            "PATCH",
            "/api/v1/namespaces/a/events/b.1",
            rule("", "events", "patch"),
        ),
        (
            "GET",
            "/api/v1/events?fieldSelector=reason%3DEvicted&watch=true",
            rule("", "events", "watch"),
        ),
        (
            "PATCH",
            "/api/v1/nodes/n/status",
            rule("", "nodes/status", "patch"),
        ),
        (
            "GET",
            "/api/v1/nodes/n/proxy/stats/summary",
            rule("", "nodes/proxy", "get"),
        ),
        ("GET", "/api/v1/namespaces/a", rule("", "namespaces", "get")),
    ];
    for (method, target, expected) in cases {
        assert_eq!(needed_by(&request(method, target)), expected, "{target}");
    }
}

/// The flags of the rendered DaemonSet that decide what the agent does; the node, the files
/// and the address are the scene's.
fn behaviour(args: &[String]) -> Vec<String> {
    const THE_SCENES: [&str; 7] = [
        "--kube",
        "--node-name",
        "--config",
        "--kubelet-config",
        "--probe-socket",
        "--checkpoint-dir",
        "--metrics-addr",
    ];
    args.iter()
        .inspect(|a| assert!(a.starts_with("--"), "{a}: flags as --name=value"))
        .filter(|a| !THE_SCENES.contains(&a.split('=').next().unwrap()))
        .cloned()
        .collect()
}

/// The permissions the real agent used, run with the flags of deploy/`dir`'s DaemonSet on a
/// scene that makes it decide (and, when it acts, evict); `None` without kubectl.
fn used_by_the_agent_of(dir: &str) -> Option<(BTreeSet<Rule>, BTreeSet<Rule>)> {
    const WITHIN: Duration = Duration::from_secs(20);
    let objects = rendered(dir)?;
    let flags = behaviour(&agent_args(object_of(&objects, "DaemonSet")));
    let kube = KubeScene::new(&format!("rbac-{}", dir.replace('/', "-")));
    let mut hog = kube.scene.run_pod(&kube.hog);
    let mut calm = kube.scene.run_pod(&kube.calm);
    let extra: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut agent = kube
        .scene
        .start_kube_agent(&kube.kubeconfig, KubeScene::NODE, &extra);
    hog.alloc(60);
    calm.alloc(160);
    let decision = agent.next_decision(WITHIN);
    assert_eq!(decision["name"], "hog", "{decision:#} with {flags:?}");
    // Its writes: the Event, the node's condition and, when it acts, the eviction or deletion.
    let acts = decision["action"] == "evict";
    kube.api
        .wait_until(WITHIN, |api| api.events().into_iter().next())
        .unwrap_or_else(|| panic!("no Event; {}", agent.stderr()));
    kube.api
        .wait_until(WITHIN, |api| api.condition("MonitorMemoryPressure"))
        .unwrap_or_else(|| panic!("no node condition; {}", agent.stderr()));
    if acts {
        kube.api
            .wait_for_request(WITHIN, |r| {
                r.path().ends_with("/pods/hog/eviction") || r.method == "DELETE"
            })
            .unwrap_or_else(|| panic!("neither evicted nor deleted; {}", agent.stderr()));
    }
    agent.terminate();
    agent
        .wait(Duration::from_secs(10))
        .expect("stops on SIGTERM");
    let used = kube.api.requests().iter().map(needed_by).collect();
    Some((used, granted(&objects)))
}

#[test]
fn the_shipped_agents_requests_are_granted_by_its_cluster_role() {
    if !on_the_host("the_shipped_agents_requests_are_granted_by_its_cluster_role")
        || !running_as_root("the_shipped_agents_requests_are_granted_by_its_cluster_role")
    {
        return;
    }
    let both = [
        rule("", "pods", "list"),
        rule("", "pods", "watch"),
        rule("", "events", "create"),
        rule("", "nodes/status", "patch"),
    ];
    // A dry run also watches the kubelet's Evicted Events, for its shadow scorecard.
    let observing = [rule("", "events", "list"), rule("", "events", "watch")];
    let acting = |r: Rule| -> BTreeSet<Rule> { both.iter().cloned().chain([r]).collect() };
    let cases = [
        ("", both.iter().cloned().chain(observing).collect()),
        (
            "overlays/enforce",
            acting(rule("", "pods/eviction", "create")),
        ),
        (
            "overlays/enforce-ignore-disruption-budgets",
            acting(rule("", "pods", "delete")),
        ),
    ];
    for (dir, expected) in cases {
        let Some((used, granted)) = used_by_the_agent_of(dir) else {
            return;
        };
        // A repeated Event is a patch of the first, as the kubelet's recorder writes it:
        // whether the scene lasts long enough for one is timing, not the role's business.
        let mut compared = used.clone();
        compared.remove(&rule("", "events", "patch"));
        assert_eq!(
            compared, expected,
            "deploy/{dir}: the requests' permissions"
        );
        let refused: Vec<_> = used.difference(&granted).collect();
        assert!(
            refused.is_empty(),
            "deploy/{dir} does not grant {refused:?}"
        );
    }
}
