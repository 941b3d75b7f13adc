//! The monitoring shipped in `deploy/monitoring/`, checked with Debian's Prometheus (its
//! files' structure is `monitoring_manifests.rs`'s): the rules pass `promtool check rules`
//! and their unit tests (which must bite: a weakened copy fails), and a real Prometheus server scraping a live `--metrics-auth kube` agent
//! on a real kubepods tree from another address with the shipped job (its token reviewed by
//! a MOCK API server) finds it up, evaluates every rule and answers every dashboard query
//! with data, while the same scrape without a token is refused.
use std::{
    fs,
    io::{Read as _, Write as _},
    net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use tests::{
    AgentScene, TempDir, TestPod, add_loopback_alias,
    deploy_files::{monitoring_dir, yaml},
    in_own_network_namespace,
    kube_api::MockKubeApi,
    metrics_addr, on_the_host, running_as_root, set_memory_limit,
};

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
    let dir = monitoring_dir();
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
    let text = fs::read_to_string(monitoring_dir().join("dashboard.json")).unwrap();
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
/// shipped relabelling runs for real, and the service account token it sends read from
/// `token` instead. Beside it, the same scrape without a token, as a stranger's.
fn prometheus_config(agent: SocketAddr, rules: &Path, token: &Path) -> String {
    let job = &yaml(&monitoring_dir().join("scrape-job.yaml"))["scrape_configs"][0];
    let relabel = serde_norway::to_string(&job["relabel_configs"]).unwrap();
    let relabel: String = relabel.lines().map(|l| format!("    {l}\n")).collect();
    let mut authorization = job["authorization"].clone();
    assert_eq!(
        authorization["credentials_file"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    authorization["credentials_file"] = token.display().to_string().into();
    let authorization = serde_norway::to_string(&authorization).unwrap();
    let authorization: String = authorization
        .lines()
        .map(|l| format!("    {l}\n"))
        .collect();
    let target = format!(
        "  static_configs:\n  - targets: ['{agent}']\n    labels:\n      \
         __meta_kubernetes_pod_label_app_kubernetes_io_name: monitor\n      \
         __meta_kubernetes_pod_container_port_name: metrics\n      \
         __meta_kubernetes_pod_node_name: node-a\n  relabel_configs:\n{relabel}"
    );
    format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n- {}\n\
         scrape_configs:\n- job_name: {}\n  authorization:\n{authorization}{target}\
         - job_name: no-token\n{target}",
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
        // As in the DaemonSet: the pods from the API server (a MOCK one here, serving the
        // token reviews too), the agent on every address with --metrics-auth kube, and
        // Prometheus scraping it from another address with its service account's token.
        let elsewhere = Ipv4Addr::new(10, 200, 0, 1);
        add_loopback_alias(elsewhere);
        let api = MockKubeApi::start("node-a");
        api.apply_pod(&over);
        let prometheus_user = "system:serviceaccount:monitoring:prometheus-k8s";
        api.accept_token("a-service-account-token", prometheus_user);
        api.grant_get(prometheus_user, "/metrics");
        let (_kube_files, kubeconfig) = api.kubeconfig_in("monitoring-stack-kubeconfig");
        let token = files.join("token");
        fs::write(&token, "a-service-account-token\n").unwrap();
        let mut agent = scene.start_agent_in(
            &[
                "--dry-run",
                "--kube",
                "--node-name",
                "node-a",
                "--kubeconfig",
                kubeconfig.to_str().expect("a UTF-8 path"),
                "--metrics-addr",
                "0.0.0.0:0",
                "--metrics-auth",
                "kube",
                "--resync-interval",
                "1s",
            ],
            &own,
        );
        let agent_addr = SocketAddr::from((elsewhere, metrics_addr(&agent).port()));
        let config = files.join("prometheus.yml");
        fs::write(
            &config,
            prometheus_config(agent_addr, &monitoring_dir().join("rules.yaml"), &token),
        )
        .unwrap();
        let server = PrometheusServer::start(&prometheus, &config, &files.join("data"));

        // Scraped before the decision, so the eviction counter is seen rising from 0; the
        // scrape without a token is refused.
        let targets = server.wait_for("/api/v1/targets", "the agent scraped and up", |v| {
            let targets = v["data"]["activeTargets"].as_array();
            let up = targets.is_some_and(|targets| {
                targets.iter().any(|t| {
                    t["health"] == "up"
                        && t["labels"]["job"] == "monitor"
                        && t["labels"]["node"] == "node-a"
                })
            });
            let refused = targets.is_some_and(|targets| {
                targets.iter().any(|t| {
                    t["health"] == "down"
                        && t["labels"]["job"] == "no-token"
                        && t["lastError"].as_str().is_some_and(|e| e.contains("401"))
                })
            });
            up && refused
        });
        eprintln!("{targets}");
        let up = server.query("up{job=\"monitor\"}");
        assert_eq!(up.len(), 1, "{up:?}");
        assert_eq!(up[0]["value"][1], "1", "{up:?}");
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
        // The scrape with the shipped token works: the agent is not reported down.
        let alerts = server.api("/api/v1/alerts");
        assert!(
            !alerts["data"]["alerts"]
                .as_array()
                .expect("alerts")
                .iter()
                .any(|a| a["labels"]["alertname"] == "MonitorAgentDown"),
            "{alerts}"
        );
        let rules = server.api("/api/v1/rules");
        let mut evaluated = 0;
        for group in rules["data"]["groups"].as_array().expect("groups") {
            for rule in group["rules"].as_array().expect("rules") {
                assert_eq!(rule["health"], "ok", "{rule}");
                evaluated += 1;
            }
        }
        let shipped = yaml(&monitoring_dir().join("rules.yaml"));
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
