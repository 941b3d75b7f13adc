//! The monitoring shipped in `deploy/monitoring/`, read as files: the PrometheusRule holds
//! the rules file's groups, every alert has a runbook line and a rule test that fires it, the
//! scrapes select the DaemonSet's pods, and both send a bearer token that RBAC allows to get
//! /metrics, which the DaemonSet's agent asks for. Debian's Prometheus runs them in
//! `monitoring_stack.rs`.
use std::{collections::BTreeSet, fs};

use tests::{
    deploy_files::{deploy_dir, monitoring_dir, yaml, yaml_documents},
    on_the_host,
};

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
    let rules = yaml(&monitoring_dir().join("rules.yaml"));
    let operator = yaml(&monitoring_dir().join("prometheusrule.yaml"));
    assert_eq!(operator["kind"], "PrometheusRule");
    assert_eq!(operator["spec"]["groups"], rules["groups"]);
    assert!(alerts(&rules["groups"]).len() >= 10);
}

#[test]
fn every_alert_has_a_runbook_line_and_a_rule_test_that_fires_it() {
    if !on_the_host("every_alert_has_a_runbook_line_and_a_rule_test_that_fires_it") {
        return;
    }
    let rules = yaml(&monitoring_dir().join("rules.yaml"));
    let runbook = fs::read_to_string(deploy_dir().join("../docs/monitoring.md")).unwrap();
    let tests = yaml(&monitoring_dir().join("rules_test.yaml"));
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
    let daemonset = yaml(&deploy_dir().join("base/daemonset.yaml"));
    let template = &daemonset["spec"]["template"];
    let name = template["metadata"]["labels"]["app.kubernetes.io/name"]
        .as_str()
        .expect("the pods' name label");
    let port = template["spec"]["containers"][0]["ports"][0]["name"]
        .as_str()
        .expect("the metrics port's name");
    let namespace = yaml(&deploy_dir().join("base/kustomization.yaml"))["namespace"].clone();

    let job = &yaml(&monitoring_dir().join("scrape-job.yaml"))["scrape_configs"][0];
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

    let pod_monitor = yaml(&monitoring_dir().join("podmonitor.yaml"));
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

#[test]
fn both_scrapes_send_a_token_that_rbac_allows_to_get_metrics_and_the_agent_asks_for_one() {
    if !on_the_host("both_scrapes_send_a_token_that_rbac_allows_to_get_metrics") {
        return;
    }
    let daemonset = yaml(&deploy_dir().join("base/daemonset.yaml"));
    let args: Vec<&str> = daemonset["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_sequence()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("an arg"))
        .collect();
    for arg in [
        "--kube",
        "--metrics-auth=kube",
        "--metrics-addr=0.0.0.0:9753",
    ] {
        assert!(
            args.contains(&arg),
            "the DaemonSet runs without {arg}: {args:?}"
        );
    }
    let reader = yaml(&monitoring_dir().join("metrics-reader.yaml"));
    assert_eq!(reader["kind"], "ClusterRole");
    assert_eq!(
        reader["rules"],
        serde_norway::from_str::<serde_norway::Value>(
            "[{nonResourceURLs: [/metrics], verbs: [get]}]"
        )
        .unwrap(),
        "get on /metrics, nothing else"
    );
    let role = reader["metadata"]["name"].clone();

    // The Operator's scrape: the token of a service account bound to that role.
    let pod_monitor = yaml(&monitoring_dir().join("podmonitor.yaml"));
    let authorization = &pod_monitor["spec"]["podMetricsEndpoints"][0]["authorization"];
    assert_eq!(authorization["type"], "Bearer");
    let scraper = yaml_documents(&monitoring_dir().join("scraper.yaml"));
    let of_kind = |kind: &str| {
        scraper
            .iter()
            .find(|d| d["kind"] == kind)
            .unwrap_or_else(|| panic!("scraper.yaml has no {kind}"))
    };
    let secret = of_kind("Secret");
    assert_eq!(
        secret["metadata"]["name"],
        authorization["credentials"]["name"]
    );
    assert_eq!(authorization["credentials"]["key"], "token");
    assert_eq!(secret["type"], "kubernetes.io/service-account-token");
    assert_eq!(
        secret["metadata"]["namespace"],
        pod_monitor["metadata"]["namespace"]
    );
    let account = of_kind("ServiceAccount");
    let account_name = &account["metadata"]["name"];
    assert_eq!(
        secret["metadata"]["annotations"]["kubernetes.io/service-account.name"],
        *account_name
    );
    let binding = of_kind("ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["name"], role);
    assert_eq!(binding["subjects"][0]["kind"], "ServiceAccount");
    assert_eq!(binding["subjects"][0]["name"], *account_name);
    assert_eq!(
        binding["subjects"][0]["namespace"],
        account["metadata"]["namespace"]
    );
    let kustomization = yaml(&monitoring_dir().join("kustomization.yaml"));
    for file in ["metrics-reader.yaml", "scraper.yaml", "podmonitor.yaml"] {
        assert!(
            kustomization["resources"]
                .as_sequence()
                .unwrap()
                .iter()
                .any(|r| r == file),
            "kubectl apply -k deploy/monitoring leaves out {file}"
        );
    }

    // The plain job: Prometheus' own service account token.
    let job = &yaml(&monitoring_dir().join("scrape-job.yaml"))["scrape_configs"][0];
    assert_eq!(
        job["authorization"]["credentials_file"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
}
