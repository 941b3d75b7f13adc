//! The eviction order of a set of pods, explained: the engine side of `monitor rank`.
//!
//! Input is what kubectl prints (a Pod, a PodList or a List, as JSON or YAML) and the
//! kubelet's Summary API JSON. Pods that have finished (phase Succeeded or Failed) are left
//! out, as the kubelet only ranks active pods, and so are pods scheduled to a node other
//! than the one the summary comes from.
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;
use serde_json::Value;

use super::pod_facts::{PodFacts, PodFactsError};
use super::rank::{
    Candidate, FsLayout, Measured, RankPolicy, RankReason, decided_by, kubelet_chain,
};
use super::rank_index::RankIndex;
use super::signal::Signal;
use super::summary::{PodUsage, Summary};
use super::threshold::SignalObservation;

/// Why a pods document was refused.
#[derive(Debug, thiserror::Error)]
pub enum PodsInputError {
    /// Neither JSON nor YAML.
    #[error("not JSON or YAML: {0}")]
    Syntax(String),
    /// The top-level object is not a Pod, PodList or List.
    #[error("expected kind Pod, PodList or List, found {0}")]
    UnexpectedKind(String),
    /// An item of a list is not a Pod.
    #[error("item {index}: expected kind Pod, found {kind}")]
    NotAPod {
        /// Position in `items`, from 0.
        index: usize,
        /// Its kind.
        kind: String,
    },
    /// An item does not have the shape of a Pod.
    #[error("item {index}: not a valid Pod: {reason}")]
    InvalidPod {
        /// Position in `items`, from 0.
        index: usize,
        /// What serde reported.
        reason: String,
    },
    /// A Pod's fields cannot be used for ranking.
    #[error(transparent)]
    Facts(#[from] PodFactsError),
}

/// Parses `kubectl get pods -o json|yaml` output (or a single Pod).
pub fn parse_pods(text: &str) -> Result<Vec<Pod>, PodsInputError> {
    let trimmed = text.trim_start();
    let document: Value = if trimmed.starts_with('{') || trimmed.starts_with('[') {
        serde_json::from_str(text).map_err(|e| PodsInputError::Syntax(e.to_string()))?
    } else {
        serde_yaml::from_str(text).map_err(|e| PodsInputError::Syntax(e.to_string()))?
    };
    let items = match kind_of(&document) {
        Some("Pod") => vec![document],
        Some("PodList" | "List") => match document.get("items") {
            Some(Value::Array(items)) => items.clone(),
            None | Some(Value::Null) => Vec::new(),
            Some(_) => {
                return Err(PodsInputError::UnexpectedKind(
                    "a list whose items is not an array".into(),
                ));
            }
        },
        Some(other) => return Err(PodsInputError::UnexpectedKind(other.to_string())),
        None => {
            return Err(PodsInputError::UnexpectedKind(
                "an object without kind".into(),
            ));
        }
    };
    items
        .into_iter()
        .enumerate()
        .map(|(index, mut item)| {
            match kind_of(&item) {
                Some("Pod") => {}
                // Items of a PodList straight from the API server carry no kind.
                None if item.is_object() => {
                    item["kind"] = Value::from("Pod");
                    item["apiVersion"] = Value::from("v1");
                }
                other => {
                    let kind = other.unwrap_or("(none)").to_string();
                    return Err(PodsInputError::NotAPod { index, kind });
                }
            }
            serde_json::from_value(item).map_err(|e| PodsInputError::InvalidPod {
                index,
                reason: e.to_string(),
            })
        })
        .collect()
}

fn kind_of(value: &Value) -> Option<&str> {
    value.get("kind").and_then(Value::as_str)
}

/// One pod's line in the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RankedPod {
    /// Position in the eviction order, 1 = evicted first.
    pub rank: usize,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Uid.
    pub uid: String,
    /// `spec.priority` (0 when unset).
    pub priority: i32,
    /// Critical pods are ranked but never evicted; the evictor takes the next one.
    pub critical: bool,
    /// Whether the summary has stats for the pod (pods without rank first).
    pub has_stats: bool,
    /// The compared numbers, when the pod has stats.
    #[serde(flatten)]
    pub measured: Option<Measured>,
    /// Which key placed this pod after the previous one (`None` for the first).
    pub after_previous_by: Option<RankReason>,
}

/// The ranked pods and the context they were ranked in.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The signal ranked for.
    pub signal: Signal,
    /// The ranking policy used for it.
    #[serde(skip)]
    pub policy: RankPolicy,
    /// The node the summary comes from.
    pub node_name: String,
    /// The node-level observation of the signal, if the summary has it.
    pub observation: Option<SignalObservation>,
    /// Pods in eviction order.
    pub pods: Vec<RankedPod>,
}

/// Ranks `pods` for `signal` with the usage in `summary`.
pub fn build_report(
    pods: &[Pod],
    summary: &Summary,
    signal: Signal,
    layout: FsLayout,
) -> Result<Report, PodFactsError> {
    let node = summary.node.node_name.as_str();
    let policy = RankPolicy::for_signal(signal, layout);
    let stats = summary.pods_by_uid();
    let mut index = RankIndex::new(policy);
    for pod in pods.iter().filter(|pod| is_active_on(pod, node)) {
        let facts = PodFacts::from_pod(pod)?;
        let usage = stats
            .get(facts.pod.uid.as_str())
            .map(|s| PodUsage::from_summary(s, &facts));
        let uid = facts.pod.uid.clone();
        index.upsert_pod(facts.into());
        index.update_usage(&uid, usage);
    }
    let chain = kubelet_chain(policy);
    let candidate = |facts| Candidate {
        facts,
        usage: index.usage(&facts.pod.uid),
    };
    let mut previous: Option<Candidate<'_>> = None;
    let mut ranked = Vec::with_capacity(index.len());
    for (position, facts) in index.iter().enumerate() {
        let current = candidate(facts);
        ranked.push(RankedPod {
            rank: position + 1,
            namespace: facts.pod.namespace.clone(),
            name: facts.pod.name.clone(),
            uid: facts.pod.uid.clone(),
            priority: facts.priority,
            critical: facts.critical,
            has_stats: current.usage.is_some(),
            measured: policy.measure(facts, current.usage),
            after_previous_by: previous
                .as_ref()
                .and_then(|p| decided_by(&chain, p, &current)),
        });
        previous = Some(current);
    }
    Ok(Report {
        signal,
        policy,
        node_name: node.to_string(),
        observation: summary.observations().get(&signal).copied(),
        pods: ranked,
    })
}

/// Not finished, and scheduled to the summary's node (or the node is unknown).
fn is_active_on(pod: &Pod, node: &str) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let pod_node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed"))
        && (node.is_empty() || pod_node.is_none_or(|n| n == node))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_shapes_kubectl_prints() {
        let pod_json = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","uid":"1"},"spec":{"containers":[]}}"#;
        struct Case {
            name: &'static str,
            text: String,
            pods: Result<usize, &'static str>,
        }
        let cases = [
            Case { name: "single pod JSON", text: pod_json.into(), pods: Ok(1) },
            Case { name: "List JSON", text: format!(r#"{{"kind":"List","items":[{pod_json},{pod_json}]}}"#), pods: Ok(2) },
            Case {
                name: "PodList items without kind",
                text: r#"{"kind":"PodList","items":[{"metadata":{"name":"a","uid":"1"},"spec":{"containers":[]}}]}"#.into(),
                pods: Ok(1),
            },
            Case {
                name: "YAML list",
                text: "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a, uid: '1'}\n  spec: {containers: []}\n".into(),
                pods: Ok(1),
            },
            Case { name: "empty list", text: r#"{"kind":"List","items":[]}"#.into(), pods: Ok(0) },
            Case { name: "not a pod", text: r#"{"kind":"Node"}"#.into(), pods: Err("expected kind Pod, PodList or List, found Node") },
            Case {
                name: "list holding a service",
                text: r#"{"kind":"List","items":[{"kind":"Service"}]}"#.into(),
                pods: Err("item 0: expected kind Pod, found Service"),
            },
            Case { name: "broken JSON", text: r#"{"kind":"#.into(), pods: Err("not JSON or YAML") },
            Case {
                name: "wrong field type",
                text: r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":7}}"#.into(),
                pods: Err("item 0: not a valid Pod"),
            },
        ];
        for case in cases {
            match (parse_pods(&case.text), case.pods) {
                (Ok(pods), Ok(count)) => assert_eq!(pods.len(), count, "case {:?}", case.name),
                (Err(error), Err(prefix)) => {
                    assert!(
                        error.to_string().starts_with(prefix),
                        "case {:?}: {error}",
                        case.name
                    )
                }
                (got, expected) => {
                    panic!("case {:?}: got {got:?}, expected {expected:?}", case.name)
                }
            }
        }
    }

    #[test]
    fn skips_finished_pods_and_pods_on_other_nodes() {
        let pods = parse_pods(
            r#"{"kind":"List","items":[
              {"apiVersion":"v1","kind":"Pod","metadata":{"name":"here","uid":"1"},"spec":{"nodeName":"n1","containers":[]}},
              {"apiVersion":"v1","kind":"Pod","metadata":{"name":"there","uid":"2"},"spec":{"nodeName":"n2","containers":[]}},
              {"apiVersion":"v1","kind":"Pod","metadata":{"name":"done","uid":"3"},"spec":{"nodeName":"n1","containers":[]},"status":{"phase":"Succeeded"}}
            ]}"#,
        )
        .expect("pods");
        let summary =
            Summary::from_json(r#"{"node":{"nodeName":"n1"},"pods":[]}"#).expect("summary");
        let report = build_report(&pods, &summary, Signal::MemoryAvailable, FsLayout::Shared)
            .expect("report");
        let names: Vec<&str> = report.pods.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["here"]);
        assert!(!report.pods[0].has_stats);
    }
}
