//! The eviction order of a set of pods, explained: the engine side of `monitor rank`.
//!
//! Input is what kubectl prints (a Pod, a PodList or a List, as JSON or YAML) and the
//! kubelet's Summary API JSON. Only the kubelet's active pods are ranked: pods that have
//! finished (phase Succeeded or Failed), pods not scheduled yet (no `spec.nodeName`) and pods
//! bound to a node other than the one the summary comes from are left out, each named in the
//! report with the reason. A pod without `spec.nodeName` that the node's own Summary lists is
//! running there whatever its file lacks: it is ranked, with the missing field noted. Static
//! pods are matched to their stats by the kubelet's uid (see `pods::kubelet_view`). Requests
//! are the kubelet's allocation (see `engine::allocation`).
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

use super::eviction_order::{
    Candidate, FsLayout, Measured, RankPolicy, RankReason, decided_by, kubelet_chain,
};
use super::kubelet_summary::{PodUsage, Summary};
use super::pod_facts::{PodFacts, PodFactsError, ResizeNote, kubelet_uid};
use super::quantity::Quantity;
use super::rank_index::RankIndex;
use super::signal::Signal;
use super::threshold::{SignalObservation, Threshold, ThresholdKind};
use crate::kubelet_view::{Standing, standing};
use crate::printable::printable;

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
    /// The kubelet's uid: `metadata.uid`, or a mirror pod's `kubernetes.io/config.mirror`.
    pub(crate) uid: String,
    /// `spec.priority` (0 when unset).
    pub priority: i32,
    /// Critical pods are ranked but never evicted; the evictor takes the next one.
    pub(crate) critical: bool,
    /// Whether the summary has stats for the pod (pods without rank first).
    pub(crate) has_stats: bool,
    /// The compared numbers, when the pod has stats.
    #[serde(flatten)]
    pub measured: Option<Measured>,
    /// Which key placed this pod after the previous one (`None` for the first).
    pub(crate) after_previous_by: Option<RankReason>,
    /// An in-place resize: the request above is the kubelet's allocation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) resize: Option<ResizeNote>,
    /// Ranked although its pod object has no `spec.nodeName`: the node's Summary lists it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) missing_node_name: bool,
}

impl RankedPod {
    /// Why the pod is where it is, in words: its standing against its request, the key
    /// that placed it after the previous pod, and whether it is critical. `amount` formats
    /// a usage in the signal's unit.
    pub fn why(&self, policy: RankPolicy, amount: &dyn Fn(Quantity) -> String) -> String {
        let mut why = match self.measured {
            Some(m) if policy == RankPolicy::Pid => format!("{} processes", amount(m.usage)),
            Some(m) if m.exceeds_request => "exceeds its request".to_string(),
            Some(_) => "within its request".to_string(),
            None => "no stats".to_string(),
        };
        if let Some(reason) = self.after_previous_by {
            why += &format!("; after #{}: {}", self.rank - 1, reason.explain(policy));
        }
        if self.critical {
            why += "; critical: never evicted, the next pod is taken";
        }
        if let Some(resize) = self.resize
            && (resize.source.is_some() || resize.state.is_some())
        {
            why += &resize_words(resize);
        }
        if self.missing_node_name {
            why += "; no spec.nodeName in its pod object, but the node's Summary lists it";
        }
        why
    }
}

/// What a resize note adds to the reason, in words.
fn resize_words(resize: ResizeNote) -> String {
    let state = resize
        .state
        .map(|state| format!(" {state:?}"))
        .unwrap_or_default();
    match resize.source {
        Some(_) => format!(
            "; resize{state}: ranked on the kubelet's allocation, the spec asks {}",
            resize.desired_memory_request
        ),
        None => format!("; resize{state}: the spec is allocated"),
    }
}

/// A pod not ranked, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeftOut {
    /// Namespace (`default` when absent).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Why the kubelet would not rank it.
    pub reason: LeftOutReason,
    /// The node it is bound to, when another one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// Why a pod is not one of the node's active pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum LeftOutReason {
    /// No `spec.nodeName`, and the node's Summary does not list it.
    NotScheduled,
    /// Phase Succeeded or Failed.
    Finished,
    /// Bound to another node than the summary's.
    OtherNode,
}

impl LeftOutReason {
    /// The reason in words, as the text output and the agent's log print it.
    pub(crate) fn explain(self) -> &'static str {
        match self {
            LeftOutReason::NotScheduled => "not scheduled (no spec.nodeName)",
            LeftOutReason::Finished => "finished (phase Succeeded or Failed)",
            LeftOutReason::OtherNode => "bound to another node",
        }
    }
}

/// One line per reason (`left out, <reason>: <count> (<names>)`), for `monitor rank` and
/// the agent's log; names escaped.
pub fn left_out_lines(left_out: &[LeftOut]) -> Vec<String> {
    [
        LeftOutReason::NotScheduled,
        LeftOutReason::Finished,
        LeftOutReason::OtherNode,
    ]
    .into_iter()
    .filter_map(|reason| {
        let pods: Vec<String> = left_out
            .iter()
            .filter(|pod| pod.reason == reason)
            .map(|pod| {
                let name = format!("{}/{}", printable(&pod.namespace), printable(&pod.name));
                match &pod.node {
                    Some(node) => format!("{name} (on {})", printable(node)),
                    None => name,
                }
            })
            .collect();
        (!pods.is_empty()).then(|| {
            format!(
                "left out, {}: {} ({})",
                reason.explain(),
                pods.len(),
                pods.join(", ")
            )
        })
    })
    .collect()
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
    /// Pods in the input that are not ranked, in input order.
    pub left_out: Vec<LeftOut>,
    /// With a configuration: each threshold of the signal, and whether the summary's node
    /// stats meet it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub thresholds: Vec<ThresholdVerdict>,
}

/// One threshold of the ranked signal against the summary's observation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ThresholdVerdict {
    /// Hard or soft.
    pub kind: ThresholdKind,
    /// The value as configured (`100Mi`, `10%`).
    pub value: String,
    /// The value in the signal's unit against the observed capacity; `None` without an
    /// observation.
    pub level: Option<Quantity>,
    /// Whether the observation meets it (the kubelet's `thresholdsMet`, minimum reclaim
    /// not counted); `None` without an observation.
    pub met: Option<bool>,
}

/// The thresholds of `signal` in `thresholds`, each checked against `observation`.
pub fn threshold_verdicts(
    thresholds: &[Threshold],
    signal: Signal,
    observation: Option<SignalObservation>,
) -> Vec<ThresholdVerdict> {
    thresholds
        .iter()
        .filter(|t| t.signal == signal)
        .map(|t| ThresholdVerdict {
            kind: t.kind(),
            value: t.value.to_string(),
            level: observation.map(|o| t.value.resolve(o.capacity)),
            met: observation.map(|o| t.is_met(o, false)),
        })
        .collect()
}

/// The first `limit` pods of `index` in eviction order, each with its keys and the key that
/// placed it after the one before.
pub fn explained_head(index: &RankIndex, limit: usize) -> Vec<RankedPod> {
    let policy = index.policy();
    let chain = kubelet_chain(policy);
    let candidate = |facts| Candidate {
        facts,
        usage: index.usage(&facts.pod.uid),
    };
    let mut previous: Option<Candidate<'_>> = None;
    let mut ranked = Vec::with_capacity(index.len().min(limit));
    for (position, facts) in index.iter().take(limit).enumerate() {
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
            resize: facts.resize,
            missing_node_name: false,
        });
        previous = Some(current);
    }
    ranked
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
    let known_node = Some(node).filter(|n| !n.is_empty());
    let mut left_out = Vec::new();
    let mut without_node_name = Vec::new();
    for pod in pods {
        let reason = match standing(pod, known_node) {
            Standing::Active => None,
            Standing::Unscheduled
                if kubelet_uid(pod).is_some_and(|uid| stats.contains_key(uid)) =>
            {
                without_node_name.push(kubelet_uid(pod).unwrap_or_default().to_string());
                None
            }
            Standing::Unscheduled => Some(LeftOutReason::NotScheduled),
            Standing::Finished => Some(LeftOutReason::Finished),
            Standing::OtherNode => Some(LeftOutReason::OtherNode),
        };
        if let Some(reason) = reason {
            left_out.push(LeftOut {
                namespace: pod
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into()),
                name: pod.metadata.name.clone().unwrap_or_default(),
                reason,
                node: pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .filter(|_| reason == LeftOutReason::OtherNode),
            });
            continue;
        }
        let facts = PodFacts::from_pod(pod)?;
        let usage = stats
            .get(facts.pod.uid.as_str())
            .map(|s| PodUsage::from_summary(s, &facts));
        let uid = facts.pod.uid.clone();
        index.upsert_pod(facts.into());
        index.update_usage(&uid, usage);
    }
    let mut ranked = explained_head(&index, usize::MAX);
    for pod in &mut ranked {
        pod.missing_node_name = without_node_name.contains(&pod.uid);
    }
    Ok(Report {
        signal,
        policy,
        node_name: node.to_string(),
        observation: summary.observations().get(&signal).copied(),
        pods: ranked,
        left_out,
        thresholds: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_finished_pods_and_pods_on_other_nodes() {
        let pods: Vec<Pod> = serde_json::from_str(
            r#"[
              {"apiVersion":"v1","kind":"Pod","metadata":{"name":"here","uid":"1"},"spec":{"nodeName":"n1","containers":[]}},
              {"apiVersion":"v1","kind":"Pod","metadata":{"name":"there","uid":"2"},"spec":{"nodeName":"n2","containers":[]}},
              {"apiVersion":"v1","kind":"Pod","metadata":{"name":"done","uid":"3"},"spec":{"nodeName":"n1","containers":[]},"status":{"phase":"Succeeded"}}
            ]"#,
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
