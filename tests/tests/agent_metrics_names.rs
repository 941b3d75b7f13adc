//! `/metrics` of the real agent read as the Prometheus text format by a strict parser (root
//! only): every family has HELP and TYPE before its samples, every sample belongs to a declared
//! family, and the names follow Prometheus' conventions and the kubelet's where they mean the
//! same (`monitor_evictions_total{eviction_signal=...}` like `kubelet_evictions`; a dry run's
//! decisions in `monitor_dry_run_decisions_total`, never among the evictions).
use std::{collections::BTreeMap, time::Duration};

use tests::{
    AgentScene, TestPod, http_get, in_own_network_namespace, metrics_addr, running_as_root,
};

/// One metric family as declared and sampled.
#[derive(Debug, Default)]
struct Family {
    help: Option<String>,
    kind: Option<String>,
    /// Sample name, its labels, its value.
    samples: Vec<(String, BTreeMap<String, String>, f64)>,
}

/// Parses the text exposition format (version 0.0.4) strictly: any line that is not a HELP,
/// a TYPE or a sample of a family declared before it is an error.
fn parse(text: &str) -> Result<BTreeMap<String, Family>, String> {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let at = |what: &str| format!("line {}: {what}: {line:?}", n + 1);
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest
                .split_once(' ')
                .ok_or_else(|| at("HELP without text"))?;
            check_name(name).map_err(|e| at(&e))?;
            let family = families.entry(name.into()).or_default();
            if family.help.replace(help.into()).is_some() || !family.samples.is_empty() {
                return Err(at("HELP repeated or after samples"));
            }
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .ok_or_else(|| at("TYPE without type"))?;
            check_name(name).map_err(|e| at(&e))?;
            if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                return Err(at("unknown type"));
            }
            let family = families.entry(name.into()).or_default();
            if family.kind.replace(kind.into()).is_some() || !family.samples.is_empty() {
                return Err(at("TYPE repeated or after samples"));
            }
        } else if line.starts_with('#') || line.is_empty() {
            return Err(at("stray comment or blank line"));
        } else {
            let (name, labels, value) = sample(line).map_err(|e| at(&e))?;
            let family = family_of(&families, &name).ok_or_else(|| at("undeclared family"))?;
            families
                .get_mut(&family)
                .expect("found above")
                .samples
                .push((name, labels, value));
        }
    }
    Ok(families)
}

fn check_name(name: &str) -> Result<(), String> {
    let ok = name.chars().enumerate().all(|(i, c)| {
        c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
    });
    if ok && !name.is_empty() {
        Ok(())
    } else {
        Err(format!("bad metric or label name {name:?}"))
    }
}

/// `name{label="value",...} value`.
fn sample(line: &str) -> Result<(String, BTreeMap<String, String>, f64), String> {
    let (head, value) = line.rsplit_once(' ').ok_or("no value")?;
    let value: f64 = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().map_err(|_| format!("bad value {v:?}"))?,
    };
    let (name, mut rest) = match head.split_once('{') {
        None => (head, ""),
        Some((name, rest)) => (name, rest.strip_suffix('}').ok_or("unclosed labels")?),
    };
    check_name(name)?;
    let mut labels = BTreeMap::new();
    while !rest.is_empty() {
        let (label, after) = rest.split_once("=\"").ok_or("label without quoted value")?;
        check_name(label)?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next().ok_or("unterminated label value")? {
                (_, '\\') => match chars.next().ok_or("dangling escape")?.1 {
                    'n' => value.push('\n'),
                    c @ ('\\' | '"') => value.push(c),
                    c => return Err(format!("bad escape \\{c}")),
                },
                (i, '"') => break i,
                (_, c) => value.push(c),
            }
        };
        if labels.insert(label.to_owned(), value).is_some() {
            return Err(format!("label {label} repeated"));
        }
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
    Ok((name.to_owned(), labels, value))
}

/// The declared family a sample name belongs to (histograms add `_bucket`, `_sum`, `_count`).
fn family_of(families: &BTreeMap<String, Family>, name: &str) -> Option<String> {
    if families.contains_key(name) {
        return Some(name.into());
    }
    ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
        let base = name.strip_suffix(suffix)?;
        (families.get(base)?.kind.as_deref() == Some("histogram")).then(|| base.to_owned())
    })
}

#[test]
fn metrics_parse_strictly_and_follow_the_naming_conventions() {
    if !running_as_root("metrics_parse_strictly_and_follow_the_naming_conventions") {
        return;
    }
    let scene = AgentScene::new("agent-metric-names", "10s", "5s");
    let over = TestPod::new("over").request_mib(20);
    in_own_network_namespace(|| {
        let mut agent = scene.start_agent(&["--dry-run", "--metrics-addr", "127.0.0.1:0"]);
        let addr = metrics_addr(&agent);
        let mut over_proc = scene.start_pod(&over);
        over_proc.alloc(230);
        let decision = agent.next_decision(Duration::from_secs(20));
        assert_eq!(decision["uid"], over.uid.as_str(), "{decision:#}");

        let answer = http_get(addr, "/metrics");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let body = answer.split_once("\r\n\r\n").expect("a body").1;
        let families = parse(body).unwrap_or_else(|e| panic!("{e}\n{body}"));
        agent.stop();

        for (name, family) in &families {
            let kind = family
                .kind
                .as_deref()
                .unwrap_or_else(|| panic!("{name}: no TYPE"));
            let help = family
                .help
                .as_deref()
                .unwrap_or_else(|| panic!("{name}: no HELP"));
            assert!(
                help.ends_with('.') && help.len() > 10,
                "{name}: HELP {help:?}"
            );
            assert!(
                name.starts_with("monitor_"),
                "{name}: not in the monitor_ namespace"
            );
            assert_eq!(
                name.ends_with("_total"),
                kind == "counter",
                "{name} ({kind}): `_total` on counters and only there"
            );
            for (sample, labels, _) in &family.samples {
                assert!(
                    !labels.contains_key("signal"),
                    "{sample}: the signal label is `eviction_signal`, as the kubelet's"
                );
            }
        }
        let value = |name: &str, label: Option<(&str, &str)>| -> f64 {
            let family = family_of(&families, name).unwrap_or_else(|| panic!("no {name}"));
            families[&family]
                .samples
                .iter()
                .find(|(n, labels, _)| {
                    n == name
                        && label.is_none_or(|(k, v)| labels.get(k).map(String::as_str) == Some(v))
                })
                .unwrap_or_else(|| panic!("no sample {name} {label:?}"))
                .2
        };
        let signal = |s| Some(("eviction_signal", s));
        // A dry run's decision is counted apart from evictions, both families from 0.
        assert!(
            value(
                "monitor_dry_run_decisions_total",
                signal("allocatableMemory.available")
            ) >= 1.0
        );
        assert_eq!(
            value(
                "monitor_evictions_total",
                signal("allocatableMemory.available")
            ),
            0.0
        );
        for counter in ["monitor_evictions_total", "monitor_dry_run_decisions_total"] {
            assert_eq!(
                families[counter].kind.as_deref(),
                Some("counter"),
                "{counter}"
            );
        }
        // Bytes and counts in families of their own, the unit in the name.
        let bytes = &families["monitor_eviction_signal_available_bytes"];
        assert_eq!(bytes.kind.as_deref(), Some("gauge"));
        assert!(
            value(
                "monitor_eviction_signal_available_bytes",
                signal("memory.available")
            ) > 0.0
        );
        assert!(
            bytes
                .samples
                .iter()
                .all(|(_, l, _)| l["eviction_signal"] != "pid.available"),
            "a count among bytes: {:?}",
            bytes.samples
        );
        assert!(
            value(
                "monitor_eviction_signal_available_pids",
                signal("pid.available")
            ) > 0.0
        );
        assert_eq!(
            value(
                "monitor_eviction_threshold_met",
                signal("allocatableMemory.available")
            ),
            1.0
        );
        // The level in force beside the signal, so a rule can say how near a node is.
        let hard = families["monitor_eviction_threshold_bytes"]
            .samples
            .iter()
            .find(|(_, l, _)| {
                l["eviction_signal"] == "allocatableMemory.available"
                    && l["threshold_kind"] == "hard"
            })
            .map(|s| s.2);
        assert_eq!(hard, Some(100.0 * 1024.0 * 1024.0), "{body}");
        assert_eq!(
            families["monitor_event_to_decision_seconds"]
                .kind
                .as_deref(),
            Some("histogram")
        );
        let build = &families["monitor_build_info"].samples;
        assert_eq!(build.len(), 1, "{build:?}");
        assert_eq!(
            build[0].1.get("version").map(String::as_str),
            Some(env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(build[0].2, 1.0);
    });
}

#[test]
fn the_parser_refuses_what_prometheus_would() {
    let cases = [
        ("a sample before its TYPE", "monitor_x 1\n"),
        (
            "a bad escape",
            "# HELP m_x A.\n# TYPE m_x gauge\nm_x{a=\"\\t\"} 1\n",
        ),
        (
            "an unterminated value",
            "# HELP m_x A.\n# TYPE m_x gauge\nm_x{a=\"b} 1\n",
        ),
        (
            "TYPE after samples",
            "# TYPE m_x gauge\nm_x 1\n# TYPE m_x gauge\n",
        ),
        ("a bad number", "# TYPE m_x gauge\nm_x one\n"),
        ("a bad name", "# TYPE 1m gauge\n"),
    ];
    for (name, text) in cases {
        assert!(parse(text).is_err(), "{name}: accepted {text:?}");
    }
    let good = "# HELP m_h H.\n# TYPE m_h histogram\nm_h_bucket{le=\"+Inf\"} 2\nm_h_sum 0.5\n\
                m_h_count 2\n# HELP m_g G.\n# TYPE m_g gauge\nm_g{a=\"x\\\"y\",b=\"\"} 3\n";
    let families = parse(good).expect("a valid exposition");
    assert_eq!(families["m_h"].samples.len(), 3);
    assert_eq!(families["m_g"].samples[0].1["a"], "x\"y");
}
