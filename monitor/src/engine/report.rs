//! The eviction order of a set of pods, explained: the engine side of `monitor rank`.
//!
//! Input is what kubectl prints (a Pod, a PodList or a List, as JSON or YAML) and the
//! kubelet's Summary API JSON. Only the kubelet's active pods are ranked: pods that have
//! finished (phase Succeeded or Failed), pods not scheduled yet (no `spec.nodeName`) and pods
//! bound to a node other than the one the summary comes from are left out. Static pods are
//! matched to their stats by the kubelet's uid (see `pods::kubelet_view`).
use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

use super::pod_facts::{PodFacts, PodFactsError};
use super::quantity::Quantity;
use super::rank::{
    Candidate, FsLayout, Measured, RankPolicy, RankReason, decided_by, kubelet_chain,
};
use super::rank_index::RankIndex;
use super::signal::Signal;
use super::summary::{PodUsage, Summary};
use super::threshold::SignalObservation;
use crate::pods::kubelet_view::{Standing, standing};

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
        why
    }
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
    let active = |pod: &&Pod| standing(pod, known_node) == Standing::Active;
    for pod in pods.iter().filter(active) {
        let facts = PodFacts::from_pod(pod)?;
        let usage = stats
            .get(facts.pod.uid.as_str())
            .map(|s| PodUsage::from_summary(s, &facts));
        let uid = facts.pod.uid.clone();
        index.upsert_pod(facts.into());
        index.update_usage(&uid, usage);
    }
    let ranked = explained_head(&index, usize::MAX);
    Ok(Report {
        signal,
        policy,
        node_name: node.to_string(),
        observation: summary.observations().get(&signal).copied(),
        pods: ranked,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skips_finished_pods_and_pods_on_other_nodes() {
        let pods = crate::pods::manifests::parse_file(
            std::path::Path::new("pods.json"),
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
