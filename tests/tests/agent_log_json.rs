//! `--log-format json` end to end (root only): the real agent evicts a real allocating pod on a
//! real kubepods tree, and every record of that decision on stderr carries the same span (pod,
//! signal, observed value, threshold, the triggering kernel event), whose close record holds
//! the outcome.
use std::time::Duration;

use serde_json::Value;
use tests::{AgentScene, TestPod, running_as_root};

const MIB: i64 = 1 << 20;

/// The span fields that must be the same on every record of the decision.
const SHARED: [&str; 6] = [
    "pod.namespace",
    "pod.name",
    "pod.uid",
    "signal",
    "observed",
    "threshold",
];

#[test]
fn every_record_of_a_decision_carries_its_span_and_the_close_record_its_outcome() {
    if !running_as_root("every_record_of_a_decision_carries_its_span") {
        return;
    }
    let scene = AgentScene::new("agent-log-json", "10s", "10s");
    let over = TestPod::new("over").request_mib(20);
    let big = TestPod::new("big").request_mib(200);
    let mut agent = scene.start_agent(&["--log-format", "json"]);
    let mut over_proc = scene.start_pod(&over);
    let mut big_proc = scene.start_pod(&big);
    over_proc.alloc(60);
    big_proc.alloc(140);

    let decision = agent.next_decision(Duration::from_secs(20));
    assert_eq!(decision["uid"], over.uid.as_str(), "{decision:#}");
    scene.wait_until_empty(&over, Duration::from_secs(15));
    let close = agent.wait_stderr(Duration::from_secs(10), |l| {
        l.contains(r#""message":"close""#) && l.contains(&over.uid)
    });
    assert!(close.is_some(), "no close record: {}", agent.stderr());
    agent.stop();

    let records: Vec<Value> = agent
        .stderr()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let of_decision: Vec<&Value> = records
        .iter()
        .filter(|r| r["span"]["name"] == "decision" && r["span"]["pod.uid"] == over.uid.as_str())
        .collect();
    let message = |r: &Value| {
        r["fields"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let messages: Vec<String> = of_decision.iter().map(|r| message(r)).collect();
    for (what, wanted) in [
        ("the decision", "evicting default/over"),
        ("the action's start", "eviction of default/over started"),
        ("the pod stopped", "pod default/over stopped after"),
        ("the span's close", "close"),
    ] {
        assert!(
            messages.iter().any(|m| m.starts_with(wanted)),
            "{what}: no record {wanted:?} in the decision's span; its records: {messages:#?}"
        );
    }

    let first = &of_decision[0]["span"];
    assert_eq!(first["pod.namespace"], "default", "{first:#}");
    assert_eq!(first["pod.name"], "over", "{first:#}");
    assert_eq!(first["signal"], "allocatableMemory.available", "{first:#}");
    assert_eq!(first["threshold"], 100 * MIB, "{first:#}");
    assert_eq!(first["observed"], decision["observed"], "{first:#}");
    assert!(first["observed"].as_i64().unwrap() < 100 * MIB, "{first:#}");
    // The kernel event the decision names on stdout is the span's trigger.
    if decision["event_monotonic_ns"].is_u64() {
        assert_eq!(
            first["trigger_event_ns"], decision["event_monotonic_ns"],
            "{first:#}"
        );
    }
    for record in &of_decision {
        for field in SHARED {
            assert_eq!(record["span"][field], first[field], "{field}: {record:#}");
        }
    }
    let close = of_decision
        .iter()
        .find(|r| message(r) == "close")
        .expect("a close record");
    assert_eq!(close["span"]["outcome"], "killed", "{close:#}");
    let stopped = of_decision
        .iter()
        .find(|r| message(r).starts_with("pod default/over stopped"))
        .expect("the stop record");
    assert_eq!(stopped["level"], "INFO", "{stopped:#}");
}
