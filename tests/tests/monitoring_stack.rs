//! The monitoring shipped in `deploy/monitoring/`, checked with Debian's Prometheus: the rules
//! pass `promtool check rules` and their unit tests (which must bite: a weakened copy fails),
//! the PrometheusRule holds the rules file's groups, every alert has a runbook line and a rule
//! test that fires it, the scrape selects the DaemonSet's pods, and a real Prometheus server
//! scraping a live agent on a real kubepods tree evaluates every rule and answers every
//! dashboard query with data.
use std::{
    collections::BTreeSet,
    fs,
    io::{Read as _, Write as _},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use tests::{
    AgentScene, TempDir, TestPod, in_own_network_namespace, metrics_addr, on_the_host,
    running_as_root, set_memory_limit,
};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests lives in the workspace")
        .join("deploy")
}

fn monitoring() -> PathBuf {
    deploy().join("monitoring")
}

fn yaml(path: &Path) -> serde_norway::Value {
    let text =
        fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_norway::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// Debian's `prometheus` and `promtool`: from the package `cargo xtask test` unpacks
/// (`MONITOR_PROMETHEUS_DIR`), else the installed package.
fn prometheus_binary(name: &str, test: &str) -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("MONITOR_PROMETHEUS_DIR")
            .map(|d| PathBuf::from(d).join("usr/bin").join(name)),
        Some(Path::new("/usr/bin").join(name)),
    ];
    let found = candidates.into_iter().flatten().find(|p| p.is_file());
    if found.is_none() {
        tests::cannot_run(
            tests::Reason::Prometheus,
            &format!("{test}: no {name} (cargo xtask test unpacks Debian's prometheus package)"),
        );
    }
    found
}

/// The alert names of a rules file's groups.
fn alerts(groups: &serde_norway::Value) -> BTreeSet<String> {
    groups
        .as_sequence()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().expect("rules").iter())
        .filter_map(|r| r["alert"].as_str().map(String::from))
        .collect()
}

#[test]
fn the_prometheus_rule_holds_the_rules_file_groups() {
    if !on_the_host("the_prometheus_rule_holds_the_rules_file_groups") {
        return;
    }
    let rules = yaml(&monitoring().join("rules.yaml"));
    let operator = yaml(&monitoring().join("prometheusrule.yaml"));
    assert_eq!(operator["kind"], "PrometheusRule");
    assert_eq!(operator["spec"]["groups"], rules["groups"]);
    assert!(alerts(&rules["groups"]).len() >= 10);
}

#[test]
fn every_alert_has_a_runbook_line_and_a_rule_test_that_fires_it() {
    if !on_the_host("every_alert_has_a_runbook_line_and_a_rule_test_that_fires_it") {
        return;
    }
    let rules = yaml(&monitoring().join("rules.yaml"));
    let runbook = fs::read_to_string(deploy().join("../docs/monitoring.md")).unwrap();
    let tests = yaml(&monitoring().join("rules_test.yaml"));
    let fired: BTreeSet<String> = tests["tests"]
        .as_sequence()
        .expect("tests")
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_sequence().into_iter().flatten())
        .filter(|c| c["exp_alerts"].as_sequence().is_some_and(|a| !a.is_empty()))
        .map(|c| c["alertname"].as_str().expect("alertname").to_string())
        .collect();
    for alert in alerts(&rules["groups"]) {
        assert!(
            runbook.contains(&format!("| `{alert}` |")),
            "{alert}: no runbook row in docs/monitoring.md"
        );
        assert!(fired.contains(&alert), "{alert}: no rule test fires it");
    }
}

#[test]
fn the_scrape_job_and_the_pod_monitor_select_the_daemonset_pods() {
    if !on_the_host("the_scrape_job_and_the_pod_monitor_select_the_daemonset_pods") {
        return;
    }
    let daemonset = yaml(&deploy().join("base/daemonset.yaml"));
    let template = &daemonset["spec"]["template"];
    let name = template["metadata"]["labels"]["app.kubernetes.io/name"]
        .as_str()
        .expect("the pods' name label");
    let port = template["spec"]["containers"][0]["ports"][0]["name"]
        .as_str()
        .expect("the metrics port's name");
    let namespace = yaml(&deploy().join("base/kustomization.yaml"))["namespace"].clone();

    let job = &yaml(&monitoring().join("scrape-job.yaml"))["scrape_configs"][0];
    assert_eq!(
        job["job_name"], "monitor",
        "the rules expect job=\"monitor\""
    );
    assert_eq!(
        job["kubernetes_sd_configs"][0]["namespaces"]["names"][0],
        namespace
    );
    let keep = &job["relabel_configs"][0];
    assert_eq!(keep["action"], "keep");
    assert_eq!(
        keep["regex"].as_str(),
        Some(format!("{name};{port}").as_str())
    );

    let pod_monitor = yaml(&monitoring().join("podmonitor.yaml"));
    assert_eq!(pod_monitor["metadata"]["namespace"], namespace);
    let spec = &pod_monitor["spec"];
    assert_eq!(
        spec["selector"]["matchLabels"]["app.kubernetes.io/name"],
        name
    );
    // The job is named after that label, so it is "monitor" as the rules expect.
    assert_eq!(spec["jobLabel"], "app.kubernetes.io/name");
    assert_eq!(name, "monitor");
    assert_eq!(spec["podMetricsEndpoints"][0]["port"], port);
}

fn promtool(promtool: &Path, args: &[&str], dir: &Path) -> (bool, String) {
    let out = Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn promtool_checks_the_rules_and_passes_their_unit_tests_which_bite() {
    let test = "promtool_checks_the_rules_and_passes_their_unit_tests_which_bite";
    if !on_the_host(test) {
        return;
    }
    let Some(promtool_bin) = prometheus_binary("promtool", test) else {
        return;
    };
    let dir = monitoring();
    let (ok, out) = promtool(&promtool_bin, &["check", "rules", "rules.yaml"], &dir);
    assert!(ok, "{out}");
    let (ok, out) = promtool(&promtool_bin, &["test", "rules", "rules_test.yaml"], &dir);
    assert!(ok && out.contains("SUCCESS"), "{out}");

    // The same tests against rules that warn later than shipped must fail.
    let weak = TempDir::new("promtool-weak");
    let rules = fs::read_to_string(dir.join("rules.yaml")).unwrap();
    let weakened = rules.replace("1.25 *", "1.1 *").replace("> 0.8", "> 0.9");
    assert_ne!(weakened, rules);
    fs::write(weak.join("rules.yaml"), weakened).unwrap();
    fs::copy(dir.join("rules_test.yaml"), weak.join("rules_test.yaml")).unwrap();
    let (ok, out) = promtool(
        &promtool_bin,
        &["test", "rules", "rules_test.yaml"],
        weak.join(".").as_path(),
    );
    assert!(!ok, "weakened rules passed:\n{out}");
    assert!(out.contains("MonitorNodeNearEvictionThreshold"), "{out}");
    assert!(out.contains("MonitorMemoryNearLimit"), "{out}");
}

/// A Prometheus server on loopback, stopped (by its pid) when dropped.
struct PrometheusServer {
    child: Child,
    addr: SocketAddr,
}

impl PrometheusServer {
    fn start(binary: &Path, config: &Path, data: &Path) -> Self {
        // A free port: this network namespace holds no one else.
        let addr = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting prometheus");
        Self { child, addr }
    }

    /// `GET path` as HTTP/1.0, so the answer is not chunked: its body as JSON, or `Null`.
    fn get(&self, path: &str) -> (Value, String) {
        let mut answer = String::new();
        let sent = TcpStream::connect(self.addr).and_then(|mut stream| {
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            write!(stream, "GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.addr)?;
            stream.read_to_string(&mut answer)
        });
        if let Err(e) = sent {
            return (Value::Null, format!("GET {path}: {e}"));
        }
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        (serde_json::from_str(body).unwrap_or(Value::Null), answer)
    }

    /// `GET path` answered with JSON whose status is success.
    fn api(&self, path: &str) -> Value {
        let (value, answer) = self.get(path);
        assert_eq!(value["status"], "success", "{path}: {answer}");
        value
    }

    fn query(&self, expr: &str) -> Vec<Value> {
        let value = self.api(&format!("/api/v1/query?query={}", url_encoded(expr)));
        value["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Waits for `ready` on what `path` answers, or panics with the last answer.
    fn wait_for(&self, path: &str, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (value, answer) = self.get(path);
            if ready(&value) {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: never; last {path}: {answer}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn url_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Every query of the shipped dashboard, Grafana's variables given values a test can use.
fn dashboard_queries() -> Vec<(String, String)> {
    let text = fs::read_to_string(monitoring().join("dashboard.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            queries.push((
                format!("{} / {}", panel["title"], target["legendFormat"]),
                expr.replace("$__rate_interval", "1m")
                    .replace("$node", ".+"),
            ));
        }
    }
    queries
}

/// The scrape job of `scrape-job.yaml` pointed at `agent`: its Kubernetes discovery replaced by
/// a static target that carries the labels discovery would give the DaemonSet's pod, so the
/// shipped relabelling runs for real.
fn prometheus_config(agent: SocketAddr, rules: &Path) -> String {
    let job = &yaml(&monitoring().join("scrape-job.yaml"))["scrape_configs"][0];
    let relabel = serde_norway::to_string(&job["relabel_configs"]).unwrap();
    let relabel: String = relabel.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n- {}\n\
         scrape_configs:\n- job_name: {}\n  static_configs:\n  - targets: ['{agent}']\n    labels:\n      \
         __meta_kubernetes_pod_label_app_kubernetes_io_name: monitor\n      \
         __meta_kubernetes_pod_container_port_name: metrics\n      \
         __meta_kubernetes_pod_node_name: node-a\n  relabel_configs:\n{relabel}",
        rules.display(),
        job["job_name"].as_str().expect("job_name"),
    )
}

#[test]
fn a_real_prometheus_scrapes_a_live_agent_and_every_rule_and_dashboard_query_works() {
    let test = "a_real_prometheus_scrapes_a_live_agent_and_every_rule_and_dashboard_query_works";
    if !on_the_host(test) || !running_as_root(test) {
        return;
    }
    let Some(prometheus) = prometheus_binary("prometheus", test) else {
        return;
    };
    // A memory and a PID threshold, so both families of the dashboard have series; one
    // decision in the test's time (a long interval), so an eviction counter that is not
    // exported at 0 before it cannot fire the rule.
    let scene = AgentScene::with_config(
        "monitoring-stack",
        &format!(
            "evictionHard:\n  allocatableMemory.available: {}\n  pid.available: \"10\"\n\
             monitor:\n  evictionInterval: 5m\n  podCleanupTimeout: 5s\n",
            AgentScene::THRESHOLD
        ),
    );
    // The agent in a cgroup of its own with a limit, as in the DaemonSet: its own memory
    // and limit are exported.
    let own = scene.cgroup.child("agent");
    set_memory_limit(&own, 256 << 20).unwrap();
    let files = TempDir::new("monitoring-stack");
    let over = TestPod::new("over").request_mib(20);
    in_own_network_namespace(|| {
        let mut agent = scene.start_agent_in(
            &[
                "--dry-run",
                "--metrics-addr",
                "127.0.0.1:0",
                "--resync-interval",
                "1s",
            ],
            &own,
        );
        let config = files.join("prometheus.yml");
        fs::write(
            &config,
            prometheus_config(metrics_addr(&agent), &monitoring().join("rules.yaml")),
        )
        .unwrap();
        let server = PrometheusServer::start(&prometheus, &config, &files.join("data"));

        // Scraped before the decision, so the eviction counter is seen rising from 0.
        server.wait_for("/api/v1/targets", "the agent scraped and up", |v| {
            v["data"]["activeTargets"]
                .as_array()
                .is_some_and(|targets| {
                    targets.iter().any(|t| {
                        t["health"] == "up"
                            && t["labels"]["job"] == "monitor"
                            && t["labels"]["node"] == "node-a"
                    })
                })
        });
        let mut over_proc = scene.start_pod(&over);
        over_proc.alloc(230);
        let decision = agent.next_decision(Duration::from_secs(20));
        assert_eq!(decision["uid"], over.uid.as_str(), "{decision:#}");

        // The rules evaluate on the live series: the dry run's decision fires
        // MonitorDryRunWouldEvict, and no eviction is counted.
        let alerts = server.wait_for("/api/v1/alerts", "MonitorDryRunWouldEvict firing", |v| {
            v["data"]["alerts"].as_array().is_some_and(|alerts| {
                alerts.iter().any(|a| {
                    a["labels"]["alertname"] == "MonitorDryRunWouldEvict"
                        && a["state"] == "firing"
                        && a["labels"]["eviction_signal"] == "allocatableMemory.available"
                        && a["labels"]["node"] == "node-a"
                })
            })
        });
        assert!(
            !alerts.to_string().contains("\"MonitorEvicting\""),
            "a dry run is no eviction: {alerts}"
        );
        let rules = server.api("/api/v1/rules");
        let mut evaluated = 0;
        for group in rules["data"]["groups"].as_array().expect("groups") {
            for rule in group["rules"].as_array().expect("rules") {
                assert_eq!(rule["health"], "ok", "{rule}");
                evaluated += 1;
            }
        }
        let shipped = yaml(&monitoring().join("rules.yaml"));
        let shipped_count: usize = shipped["groups"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|g| g["rules"].as_sequence().unwrap().len())
            .sum();
        assert_eq!(evaluated, shipped_count, "{rules}");
        // The recorded headroom is the signal less its threshold, from the live series.
        let headroom = server.query(
            "instance_eviction_signal:monitor_eviction_headroom_bytes{eviction_signal=\"allocatableMemory.available\"}",
        );
        assert_eq!(headroom.len(), 1, "{headroom:?}");

        let mut empty = Vec::new();
        let queries = dashboard_queries();
        assert!(queries.len() >= 15, "{queries:?}");
        for (panel, expr) in &queries {
            if server.query(expr).is_empty() {
                empty.push(format!("{panel}: {expr}"));
            }
        }
        drop(server);
        agent.stop();
        assert!(
            empty.is_empty(),
            "dashboard queries without data:\n{}",
            empty.join("\n")
        );
    });
}
