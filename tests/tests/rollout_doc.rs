//! docs/rollout.md works as written: every command in its code blocks that needs no cluster
//! runs here, as written and in order, and succeeds (`kubectl kustomize` on the repository's
//! deploy/, `monitor rank` on the captures); the captures (`kubectl get --raw`) and `monitor
//! rank --kube` run against a MOCK API server, since no real one runs here, serving the node
//! the page names. Every other command is recognized as needing the cluster or the registry;
//! a command of no known kind fails the test, so a new one is run or said to need elsewhere.
use std::{
    fs,
    os::unix::fs::symlink,
    path::Path,
    process::{Command, Output},
};

use tests::{
    TempDir, TestPod,
    deploy_files::{deploy_dir, kubectl_version},
    kube_api::{MockKubeApi, summary_json},
    monitor_bin, on_the_host,
};

/// The commands of a Markdown page's indented code blocks, a `\` continuation joined.
fn commands(page: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut previous_blank = true;
    let mut in_block = false;
    let mut pending = String::new();
    for line in page.lines() {
        let code = line.strip_prefix("    ");
        in_block = code.is_some() && (in_block || previous_blank);
        previous_blank = line.trim().is_empty();
        let Some(code) = code.filter(|_| in_block) else {
            continue;
        };
        pending.push_str(code.trim());
        match pending.strip_suffix('\\') {
            Some(joined) => pending = format!("{} ", joined.trim_end()),
            None => commands.push(std::mem::take(&mut pending)),
        }
    }
    commands
}

/// Where a command of the page runs.
#[derive(Debug, PartialEq)]
enum Place {
    /// Here, with the repository and kubectl.
    Here,
    /// Against the API server: the mock serves it.
    Mock,
    /// Needs what no test has: a real cluster or registry (or, for the image, the build
    /// `cargo xtask test` does before the tests).
    Elsewhere(&'static str),
}

/// A shell variable set: `NAME=value`, nothing else on the line.
fn is_assignment(command: &str) -> bool {
    command.split_once('=').is_some_and(|(name, value)| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_uppercase() || c == '_')
            && !value.contains(char::is_whitespace)
    })
}

fn place(command: &str) -> Place {
    let words: Vec<&str> = command.split_whitespace().collect();
    let served = |path: &str| path.contains("/api/v1/pods?") || path.contains("/stats/summary");
    match words.as_slice() {
        _ if is_assignment(command) => Place::Here,
        ["kubectl", "kustomize", ..] => Place::Here,
        ["kubectl", "get", "--raw", path, ..] if served(path) => Place::Mock,
        ["kubectl", ..] => Place::Elsewhere("a cluster"),
        ["monitor", ..] if words.contains(&"--kube") => Place::Mock,
        ["monitor", ..] => Place::Here,
        ["skopeo", ..] => Place::Elsewhere("a registry"),
        ["cargo", "xtask", "image"] => Place::Elsewhere("the image build of cargo xtask test"),
        _ => panic!("docs/rollout.md: {command:?} is of no kind this test knows"),
    }
}

#[test]
fn commands_are_read_and_placed() {
    let page = "Intro:\n\n    A=1\n    kubectl get --raw \"/api/v1/pods?x\" \\\n      > pods.json\n\
                \n1. a list\n    not code, a list's continuation\n\ntext\n\n    monitor rank --kube\n";
    let found = commands(page);
    assert_eq!(
        found,
        [
            "A=1",
            "kubectl get --raw \"/api/v1/pods?x\" > pods.json",
            "monitor rank --kube"
        ]
    );
    let places: Vec<Place> = found.iter().map(|c| place(c)).collect();
    assert_eq!(places, [Place::Here, Place::Mock, Place::Mock]);
    assert_eq!(
        place("kubectl apply -k deploy/"),
        Place::Elsewhere("a cluster")
    );
    assert_eq!(
        place("kubectl get --raw /api/v1/nodes/n/proxy/configz"),
        Place::Elsewhere("a cluster")
    );
}

#[test]
#[should_panic(expected = "is of no kind this test knows")]
fn an_unknown_command_fails() {
    place("curl http://example.invalid/");
}

/// The value the page's `NAME=value` line gives.
fn assigned<'a>(commands: &'a [String], name: &str) -> &'a str {
    commands
        .iter()
        .find_map(|c| c.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("the page sets {name}"))
}

fn run(command: &str, prelude: &str, dir: &Path, bin: &Path, kubeconfig: &Path) -> Output {
    Command::new("bash")
        .args(["-euo", "pipefail", "-c", &format!("{prelude}{command}")])
        .current_dir(dir)
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("KUBECONFIG", kubeconfig)
        .env("HOME", dir)
        .output()
        .expect("running bash")
}

#[test]
fn the_rollout_page_works_as_written() {
    if !on_the_host("the_rollout_page_works_as_written") {
        return;
    }
    if let Err(why) = kubectl_version() {
        tests::cannot_run(tests::Reason::Kubectl, &why);
        return;
    }
    let page = deploy_dir().join("../docs/rollout.md");
    let commands = commands(&fs::read_to_string(page).unwrap());

    // The node the page names, with three pods the kubelet ranks: over its request first.
    let node = assigned(&commands, "NODE");
    let api = MockKubeApi::start(node);
    let pods = [
        (TestPod::new("within").request_mib(300), 100),
        (TestPod::new("over").request_mib(20), 60),
        (
            TestPod::new("important").request_mib(10).priority(1000),
            200,
        ),
    ];
    for (pod, _) in &pods {
        api.apply_pod(pod);
    }
    let measured: Vec<(&TestPod, u64)> = pods.iter().map(|(p, mib)| (p, *mib)).collect();
    api.serve_summary(&summary_json(node, &measured));
    // The kubelet evicted `over` a minute ago, and no agent named it: the scorecard waits.
    let a_minute_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        - 60;
    api.post_kubelet_eviction(
        &pods[1].0,
        node,
        a_minute_ago,
        "The node was low on resource: memory. ",
    );

    // A fresh directory with the repository's deploy/ and `monitor` on PATH.
    let dir = TempDir::new("rollout");
    symlink(deploy_dir(), dir.join("deploy")).unwrap();
    let bin = dir.join("bin");
    fs::create_dir(&bin).unwrap();
    symlink(monitor_bin(), bin.join("monitor")).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    api.write_kubeconfig(&kubeconfig);

    let mut prelude = String::new();
    let mut ranked = Vec::new();
    let mut shadowed = false;
    for command in &commands {
        let place = place(command);
        if let Place::Elsewhere(what) = place {
            println!("needs {what}: {command}");
            continue;
        }
        if is_assignment(command) {
            prelude.push_str(&format!("{command}\n"));
            continue;
        }
        let out = run(command, &prelude, &dir.path, &bin, &kubeconfig);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        println!("ran ({place:?}): {command}\n{stdout}{stderr}");
        assert!(
            out.status.success(),
            "{command}: {}\n{stdout}{stderr}",
            out.status
        );
        assert!(
            !stdout.trim().is_empty() || command.contains('>'),
            "{command}: no output"
        );
        if command.starts_with("monitor shadow") {
            shadowed = true;
            assert!(
                stdout.contains(&format!("shadow scorecard of {node} since"))
                    && stdout.contains("1 waiting for a naming"),
                "{stdout}"
            );
        }
        if command.starts_with("monitor rank") {
            ranked.push(stdout.into_owned());
        }
    }
    // From the captures and live, the same order: the pod over its request first.
    assert!(shadowed, "the page reads the fleet's scorecard");
    assert_eq!(ranked.len(), 2, "the page ranks from captures and live");
    assert_eq!(ranked[0], ranked[1], "the captures rank as the live API");
    let at = |name: &str| ranked[0].find(&format!("default/{name}")).expect(name);
    assert!(at("over") < at("important") && at("important") < at("within"));
}
