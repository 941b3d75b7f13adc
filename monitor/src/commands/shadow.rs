//! `monitor shadow`: the shadow scorecard, the evidence for switching from observing to
//! acting. From a running dry-run agent's `/debug/shadow` (its decisions against the
//! kubelet's evictions and the kernel's OOM kills, kept across its restarts), or for the
//! fleet from the cluster's Events (the agents' `EvictionDryRun` against the kubelets'
//! `Evicted`, node by node; Events say nothing of OOM kills and expire after an hour).
use std::{collections::BTreeMap, process::ExitCode, time::Duration};

use k8s_openapi::api::core::v1::Event;
use kube::{Api, api::ListParams};

use crate::{
    action::kube_event::COMPONENT,
    checkpoint::wall_time::rfc3339,
    engine::{
        printable::printable,
        shadow::{KubeletEviction, MATCH_WINDOW_NS, Named, ShadowReport, replay},
    },
    flags::{HostPort, OutputFormat, host_port},
    http_get,
    pods::{
        kube_query,
        kube_watch::api_config,
        kubelet_evictions::{FIELD_SELECTOR, eviction_anywhere, pod_and_time},
    },
    system_clock::unix_ns_now,
};

#[derive(clap::Args, Debug)]
#[command(after_help = "\
Examples:
  monitor shadow                        # the dry-run agent at 127.0.0.1:9753 (its --metrics-addr)
  kubectl -n monitor-system exec POD -- /monitor shadow
  monitor shadow --kube                 # every node, from the cluster's Events
Outcomes: the kubelet evicted the pod the agent named first (same pod, with the lead time),
another pod (different: why, from both messages and both pods' ranking keys), a pod the agent
named only after (late) or not at all (missed); the kernel's OOM killer killed a process an
episode of decisions foresaw (with the lead time), that the agent named only after, or that
nobody foresaw; a kill at a pod's own limit is counted aside; decisions nobody acted on
(nothing happened). docs/rollout.md says which numbers make the case for acting.")]
pub(crate) struct ShadowArgs {
    /// Ask the dry-run agent at ADDR (its --metrics-addr) for its scorecard. The default
    /// without --kube.
    #[arg(
        long,
        value_name = "ADDR",
        num_args = 0..=1,
        default_missing_value = "127.0.0.1:9753",
        value_parser = host_port,
        conflicts_with = "kube"
    )]
    agent: Option<HostPort>,
    /// Rebuild each node's scorecard from the cluster's Events instead (needs list on
    /// events, cluster-wide; connects with --kubeconfig, else KUBECONFIG or ~/.kube/config,
    /// else in-cluster).
    #[arg(long)]
    kube: bool,
    /// With --kube: the kubeconfig to connect with.
    #[arg(long, value_name = "FILE", requires = "kube")]
    kubeconfig: Option<std::path::PathBuf>,
    /// `text`, or `json`: the agent's `/debug/shadow` (with --kube: one per node, by name).
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
}

/// How long asking the agent may take.
const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest answer read: the scorecard keeps at most 64 lines.
const MAX_VIEW_BYTES: usize = 4 << 20;

pub(crate) fn run(args: &ShadowArgs) -> anyhow::Result<ExitCode> {
    let reports = if args.kube {
        from_events(args)?
    } else {
        let default = || host_port("127.0.0.1:9753").expect("a valid address");
        let addr = args.agent.clone().unwrap_or_else(default);
        let report = from_agent(&addr)?;
        BTreeMap::from([(
            report.node.clone().unwrap_or_else(|| addr.to_string()),
            report,
        )])
    };
    let out = match args.output {
        OutputFormat::Json if args.kube => serde_json::to_string_pretty(&reports)? + "\n",
        OutputFormat::Json => {
            let report = reports.values().next().expect("one report");
            serde_json::to_string_pretty(report)? + "\n"
        }
        OutputFormat::Text => render(&reports, args.kube),
    };
    print!("{out}");
    Ok(ExitCode::SUCCESS)
}

/// The scorecard of the agent at `addr`.
fn from_agent(addr: &HostPort) -> anyhow::Result<ShadowReport> {
    let asked = |e: String| anyhow::anyhow!("asking the agent at {addr} (its --metrics-addr): {e}");
    let reply = http_get::get_first(addr.addrs(), "/debug/shadow", READ_TIMEOUT, MAX_VIEW_BYTES)
        .map_err(|e| asked(e.to_string()))?;
    match reply.status {
        200 => serde_json::from_slice(&reply.body)
            .map_err(|e| anyhow::anyhow!("the agent at {addr} answered no scorecard: {e}")),
        404 => Err(asked(
            "it keeps no scorecard: it acts (only a dry run, --dry-run, keeps one)".into(),
        )),
        status => Err(asked(format!(
            "it answered {status}: {}",
            printable(String::from_utf8_lossy(&reply.body).trim())
        ))),
    }
}

/// Each node's scorecard from the cluster's Events.
fn from_events(args: &ShadowArgs) -> anyhow::Result<BTreeMap<String, ShadowReport>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (kubelet, agents) = runtime.block_on(async {
        let config = api_config(args.kubeconfig.as_deref()).await?;
        let events = Api::<Event>::all(kube_query::client(config)?);
        let list = |selector: &str| {
            let params = ListParams::default().fields(selector);
            let events = events.clone();
            async move { events.list(&params).await }
        };
        let need = "this needs RBAC list on events, cluster-wide";
        let kubelet = list(FIELD_SELECTOR)
            .await
            .map_err(|e| anyhow::anyhow!("listing the kubelet's Evicted Events: {e} ({need})"))?;
        let selector = format!("reason=EvictionDryRun,source={COMPONENT}");
        let agents = list(&selector).await.map_err(|e| {
            anyhow::anyhow!("listing the agents' EvictionDryRun Events: {e} ({need})")
        })?;
        anyhow::Ok((kubelet.items, agents.items))
    })?;
    Ok(fleet(&kubelet, &agents, unix_ns_now()))
}

/// The scorecards the Events make, by node.
fn fleet(kubelet: &[Event], agents: &[Event], now_ns: u64) -> BTreeMap<String, ShadowReport> {
    let mut decisions: BTreeMap<String, Vec<Named>> = BTreeMap::new();
    for event in agents {
        if let Some((node, named)) = decisions_of(event) {
            decisions.entry(node).or_default().extend(named);
        }
    }
    let mut evictions: BTreeMap<String, Vec<KubeletEviction>> = BTreeMap::new();
    for (node, eviction) in kubelet.iter().filter_map(eviction_anywhere) {
        evictions.entry(node).or_default().push(eviction);
    }
    let nodes: Vec<String> = decisions.keys().chain(evictions.keys()).cloned().collect();
    nodes
        .into_iter()
        .map(|node| {
            let shadow = replay(
                decisions.remove(&node).unwrap_or_default(),
                evictions.remove(&node).unwrap_or_default(),
                now_ns,
                MATCH_WINDOW_NS,
            );
            let report = shadow.report(Some(&node), now_ns);
            (node, report)
        })
        // A node with nothing at all is not listed.
        .filter(|(_, report)| {
            report.scorecard.counts.values().sum::<u64>() > 0
                || report.episode_open
                || report.waiting > 0
        })
        .collect()
}

/// The decisions an agent's `EvictionDryRun` Event stands for: its first and its last.
fn decisions_of(event: &Event) -> Option<(String, Vec<Named>)> {
    let source = event.source.as_ref()?;
    if event.reason.as_deref() != Some("EvictionDryRun")
        || source.component.as_deref() != Some(COMPONENT)
    {
        return None;
    }
    let node = source.host.clone()?;
    let (pod, first) = pod_and_time(event, event.first_timestamp.as_ref().map(|t| t.0))?;
    let (_, last) = pod_and_time(event, event.last_timestamp.as_ref().map(|t| t.0))?;
    let named = |at_ns| Named {
        pod: pod.clone(),
        at_ns,
        message: event.message.clone().unwrap_or_default(),
        keys: "not in the Event".into(),
    };
    Some((node, vec![named(first), named(last.max(first))]))
}

fn render(reports: &BTreeMap<String, ShadowReport>, fleet: bool) -> String {
    let time = |ns: u64| rfc3339(ns / 1_000_000);
    if reports.is_empty() {
        return "no node has a dry-run decision or a kubelet eviction in the cluster's Events \
                (they expire after an hour)\n"
            .into();
    }
    let mut out = String::new();
    if fleet {
        out += "from the cluster's Events (the kubelet's Evicted against the agents' \
                EvictionDryRun; no OOM kills: read each node's agent for those)\n";
    }
    for report in reports.values() {
        out += &report.text(&time);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(
        reason: &str,
        component: &str,
        node: &str,
        pod: &str,
        first: &str,
        last: &str,
    ) -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{pod}.1"), "namespace": "shop"},
            "involvedObject": {"kind": "Pod", "namespace": "shop", "name": pod,
                               "uid": format!("uid-{pod}")},
            "reason": reason,
            "message": "The node was low on resource: memory. Threshold quantity: 100Mi, \
                        available: 50Mi. ",
            "source": {"component": component, "host": node},
            "firstTimestamp": first,
            "lastTimestamp": last,
        }))
        .unwrap()
    }

    #[test]
    fn the_fleet_view_matches_each_nodes_events_apart() {
        let agents = [
            event(
                "EvictionDryRun",
                "monitor",
                "n1",
                "hog",
                "2026-12-06T10:00:00Z",
                "2026-12-06T10:00:30Z",
            ),
            event(
                "EvictionDryRun",
                "monitor",
                "n2",
                "big",
                "2026-12-06T10:00:00Z",
                "2026-12-06T10:00:00Z",
            ),
            // Another component's Event of that reason is not the agent's.
            event(
                "EvictionDryRun",
                "other",
                "n3",
                "x",
                "2026-12-06T10:00:00Z",
                "2026-12-06T10:00:00Z",
            ),
        ];
        let kubelet = [
            event(
                "Evicted",
                "kubelet",
                "n1",
                "hog",
                "2026-12-06T10:00:08Z",
                "2026-12-06T10:00:08Z",
            ),
            // On n2 the kubelet took another pod than the agent named.
            event(
                "Evicted",
                "kubelet",
                "n2",
                "small",
                "2026-12-06T10:00:05Z",
                "2026-12-06T10:00:05Z",
            ),
            // The agent's own acting Evicted Event is not the kubelet's.
            event(
                "Evicted",
                "monitor",
                "n1",
                "calm",
                "2026-12-06T10:00:09Z",
                "2026-12-06T10:00:09Z",
            ),
        ];
        let now = 1_796_554_800_000_000_000; // 11:00
        let reports = fleet(&kubelet, &agents, now);
        assert_eq!(reports.keys().collect::<Vec<_>>(), ["n1", "n2"]);
        let n1 = &reports["n1"].scorecard;
        assert_eq!(
            (n1.kubelet_evictions(), n1.kubelet_leads_ns[0]),
            (1, 8_000_000_000)
        );
        let n2 = &reports["n2"].scorecard;
        assert_eq!(n2.lines[0].outcome.as_str(), "different_pod");
        let text = render(&reports, true);
        assert!(
            text.contains("shadow scorecard of n1 since 2026-12-06T10:00:00Z"),
            "{text}"
        );
        assert!(text.contains("named first 1 (same pod)"), "{text}");
        assert!(
            text.contains("kubelet acted on shop/small, the agent named shop/big"),
            "{text}"
        );
    }
}
