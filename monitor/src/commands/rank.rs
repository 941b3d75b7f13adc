//! `monitor rank`: the kubelet's eviction order for a set of pods and their stats, for
//! postmortems, or live with `--kube`. Reads the files (or asks the API server) here; parsing
//! and ranking live in `engine::rank_report`.
use crate::flags::OutputFormat;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::engine::eviction_config::{EvictionConfig, MAX_CONFIG_BYTES};
use crate::engine::eviction_order::{DiskMeasure, FsLayout, RankPolicy};
use crate::engine::kubelet_summary::Summary;
use crate::engine::printable::printable;
use crate::engine::quantity::Quantity;
use crate::engine::rank_report::{
    LeftOut, RankedPod, Report, build_report, left_out_lines, threshold_verdicts,
};
use crate::engine::signal::Signal;
use crate::engine::threshold::{Threshold, ThresholdKind};
use crate::file_kind::read_text;
use crate::pods::{kube_query, kube_watch::api_config, manifests::parse_file};

/// Exit status for input that cannot be read or understood.
const BAD_INPUT: u8 = 2;
/// The largest `--pods` or `--summary` file read: a node's pods and its Summary take a few
/// MiB (the pods of a whole cluster may not fit: select the node's).
const MAX_INPUT_BYTES: u64 = 64 << 20;

#[derive(clap::Args, Debug)]
#[command(after_long_help = "\
Inputs:
  --pods     The pods on the node, as kubectl prints them (a Pod, a PodList or a List; JSON or
             YAML). Take them from the node in question, for example:
               kubectl get pods -A -o json --field-selector spec.nodeName=NODE > pods.json
  --summary  The kubelet's Summary API for that node (working set, process counts, disk use):
               kubectl get --raw /api/v1/nodes/NODE/proxy/stats/summary > summary.json
  --kube     Instead of both files, ask the API server now (--node-name NODE): the same pod
             list and the same Summary, read through the node proxy.

Pods are matched to their stats by the kubelet's uid, as the kubelet does: metadata.uid, or for
a static pod's mirror its kubernetes.io/config.mirror annotation. Only the kubelet's active
pods are ranked: finished pods (Succeeded, Failed), pods not scheduled yet (no spec.nodeName)
and pods bound to another node than the summary's are left out.

How the order is made (first line = evicted first), exactly as the kubelet's eviction manager:
  memory signals  pods whose working set exceeds their memory request (strictly), then lower
                  priority, then more working set above the request;
  pid.available   lower priority, then more processes;
  disk signals    over the ephemeral-storage request, priority, usage above the request.
Pods without stats rank before pods with stats. Full ties go by namespace, name, uid.
Critical pods (static, mirror, priority >= 2000000000) are listed but never evicted: the
kubelet moves on to the next pod.

Quantities in JSON are exact numbers: whole units as integers, a fractional
request (500m of ephemeral-storage) with its decimals.

Pods left out are named after the order, one line per reason with their count; a pod without
spec.nodeName that the node's Summary lists runs there and is ranked, noted. A pod whose
in-place resize is pending (status.resize, or the PodResizePending condition) ranks on what
the kubelet allocated (status.containerStatuses[].allocatedResources, or while no allocation
is published the status's resources), as the kubelet's eviction manager does.

With --output json, one object: signal, nodeName, observation, pods (in eviction order) and
leftOut (namespace, name, reason: notScheduled, finished or otherNode, node).

Exit status: 0 on success, 2 when an input file cannot be read or parsed, or is not what its
flag takes (an API error, a PodList or {} given as --summary); the message names the file.")]
pub(crate) struct RankArgs {
    /// Pods file: `kubectl get pods -o json` (or -o yaml) output, or a single Pod.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "kube",
        requires = "summary"
    )]
    pods: Option<PathBuf>,
    /// Summary API JSON from `kubectl get --raw /api/v1/nodes/NODE/proxy/stats/summary`.
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "kube",
        requires = "pods"
    )]
    summary: Option<PathBuf>,
    /// Rank live: the node's active pods from the API server (instead of --pods) and its
    /// Summary API through the API server's node proxy (instead of --summary). Needs RBAC
    /// list on pods and get on nodes/proxy.
    #[arg(long, conflicts_with_all = ["pods", "summary"], requires = "node_name")]
    kube: bool,
    /// With --kube: the node to rank (default: NODE_NAME).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    node_name: Option<String>,
    /// With --kube: the kubeconfig to connect with (default: KUBECONFIG, ~/.kube/config, or
    /// the pod's service account).
    #[arg(long, value_name = "FILE", requires = "kube")]
    kubeconfig: Option<PathBuf>,
    /// Signal to rank for: memory.available, allocatableMemory.available, pid.available,
    /// nodefs.available, nodefs.inodesFree, imagefs.available or imagefs.inodesFree.
    #[arg(long, value_name = "SIGNAL", default_value = "memory.available", value_parser = parse_signal)]
    signal: Signal,
    /// Output format: aligned text, or one JSON object (the pods in eviction order, those left out).
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
    /// The node's kubelet configuration: a KubeletConfiguration file, or the node's configz
    /// answer (`kubectl get --raw /api/v1/nodes/NODE/proxy/configz`, its effective
    /// configuration). The output then says which thresholds of the signal the summary's
    /// node stats meet.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The runtime keeps images and writable layers on a dedicated image filesystem, so
    /// nodefs counts only logs and local volumes and imagefs only writable layers.
    #[arg(long)]
    dedicated_imagefs: bool,
}

fn parse_signal(text: &str) -> Result<Signal, String> {
    text.parse()
        .map_err(|err: crate::engine::signal::UnknownSignal| err.to_string())
}

pub(crate) fn run(args: RankArgs) -> anyhow::Result<ExitCode> {
    let thresholds = match read_config(&args) {
        Ok(thresholds) => thresholds,
        Err(message) => {
            eprintln!("monitor rank: {message}");
            return Ok(ExitCode::from(BAD_INPUT));
        }
    };
    let ranked = if args.kube {
        rank_live(&args)?
    } else {
        rank(&args)
    };
    let ranked = ranked.map(|mut report| {
        report.thresholds = threshold_verdicts(&thresholds, report.signal, report.observation);
        report
    });
    match ranked {
        Ok(report) => {
            let output = match args.output {
                OutputFormat::Text => render_text(&report),
                OutputFormat::Json => serde_json::to_string_pretty(&report)? + "\n",
            };
            print!("{output}");
            Ok(ExitCode::SUCCESS)
        }
        Err(message) => {
            eprintln!("monitor rank: {message}");
            Ok(ExitCode::from(BAD_INPUT))
        }
    }
}

/// The thresholds of `--config` (none without it); the error names the file.
fn read_config(args: &RankArgs) -> Result<Vec<Threshold>, String> {
    let Some(path) = &args.config else {
        return Ok(Vec::new());
    };
    let in_file = |problem: &dyn std::fmt::Display| format!("{}: {problem}", path.display());
    let text = read_text(path, MAX_CONFIG_BYTES).map_err(|e| in_file(&e))?;
    let (config, _) = EvictionConfig::decode(&text).map_err(|e| in_file(&e))?;
    Ok(config.thresholds)
}

/// Reads both files and ranks; the error names the file at fault.
fn rank(args: &RankArgs) -> Result<Report, String> {
    let (Some(pods_path), Some(summary_path)) = (&args.pods, &args.summary) else {
        return Err("--pods FILE and --summary FILE, or --kube, are needed".into());
    };
    let in_file =
        |path: &Path, problem: &dyn std::fmt::Display| format!("{}: {problem}", path.display());
    let pods_text = read_text(pods_path, MAX_INPUT_BYTES).map_err(|e| in_file(pods_path, &e))?;
    // The error already names the file.
    let pods = parse_file(pods_path, &pods_text).map_err(|e| e.to_string())?;
    let summary_text =
        read_text(summary_path, MAX_INPUT_BYTES).map_err(|e| in_file(summary_path, &e))?;
    let summary = Summary::from_json(&summary_text).map_err(|e| in_file(summary_path, &e))?;
    build_report(&pods, &summary, args.signal, layout(args)).map_err(|e| in_file(pods_path, &e))
}

/// `--kube`: the same ranking from the API server's answers. An API server that cannot be
/// reached is an error of the command (exit 1); an answer that is not a Summary is bad
/// input (exit 2), as a file would be.
fn rank_live(args: &RankArgs) -> anyhow::Result<Result<Report, String>> {
    let node = args.node_name.as_deref().unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (pods, summary_text) = runtime.block_on(async {
        let config = api_config(args.kubeconfig.as_deref()).await?;
        let client = kube_query::client(config)?;
        let pods = kube_query::node_pods(&client, node).await?;
        let summary = kube_query::node_summary(&client, node).await?;
        anyhow::Ok((pods, summary))
    })?;
    let source = format!("the Summary API of node {node}");
    let summary = match Summary::from_json(&summary_text) {
        Ok(summary) => summary,
        Err(e) => return Ok(Err(format!("{source}: {e}"))),
    };
    Ok(build_report(&pods, &summary, args.signal, layout(args))
        .map_err(|e| format!("the pods of node {node}: {e}")))
}

fn layout(args: &RankArgs) -> FsLayout {
    if args.dedicated_imagefs {
        FsLayout::DedicatedImageFs
    } else {
        FsLayout::Shared
    }
}

/// Aligned columns, first line evicted first, with the key that placed each pod.
fn render_text(report: &Report) -> String {
    let policy = report.policy;
    let counts = matches!(
        policy,
        RankPolicy::Pid | RankPolicy::Disk(_, DiskMeasure::Inodes)
    );
    let amount = |q: Quantity| {
        if counts {
            q.ceil_units().to_string()
        } else {
            q.to_string()
        }
    };
    let mut out = format!("Eviction order for {}", report.signal);
    if !report.node_name.is_empty() {
        out += &format!(" on node {}", printable(&report.node_name));
    }
    if let Some(observed) = report.observation {
        out += &format!(
            " (available {} of {})",
            amount(Quantity::from_units(observed.available)),
            amount(Quantity::from_units(observed.capacity))
        );
    }
    out += "\n";
    for verdict in &report.thresholds {
        let kind = match verdict.kind {
            ThresholdKind::Hard => "hard",
            ThresholdKind::Soft => "soft",
        };
        let standing = match (verdict.met, verdict.level) {
            (Some(true), Some(level)) => format!("met (below {})", amount(level)),
            (Some(false), Some(level)) => format!("not met (at {})", amount(level)),
            _ => "not known: the summary has no node stats for the signal".to_string(),
        };
        out += &format!(
            "{kind} threshold {}<{}: {standing}\n",
            report.signal, verdict.value
        );
    }
    if report.pods.is_empty() {
        out += "no pods to rank\n";
        return out + &render_left_out(&report.left_out);
    }
    let header = [
        "RANK",
        "POD",
        "PRIORITY",
        "REQUEST",
        "USAGE",
        "ABOVE-REQUEST",
        "WHY",
    ]
    .map(String::from);
    let rows: Vec<[String; 7]> = report
        .pods
        .iter()
        .map(|pod| row(pod, policy, &amount))
        .collect();
    let mut widths = header.clone().map(|h| h.len());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for line in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = line
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (cell, width))| {
                if i + 1 == line.len() {
                    cell.clone()
                } else {
                    format!("{cell:<width$}")
                }
            })
            .collect();
        out += cells.join("  ").trim_end();
        out += "\n";
    }
    out + &render_left_out(&report.left_out)
}

fn render_left_out(left_out: &[LeftOut]) -> String {
    left_out_lines(left_out)
        .into_iter()
        .map(|line| line + "\n")
        .collect()
}

fn row(pod: &RankedPod, policy: RankPolicy, amount: &dyn Fn(Quantity) -> String) -> [String; 7] {
    let dash = || "-".to_string();
    let (request, usage, above) = match pod.measured {
        Some(m) if policy == RankPolicy::Pid => (dash(), amount(m.usage), dash()),
        Some(m) => (amount(m.request), amount(m.usage), amount(m.above_request)),
        None => (dash(), dash(), dash()),
    };
    let why = pod.why(policy, amount);
    [
        pod.rank.to_string(),
        // Escaped: a name with a newline must not start a row of its own.
        format!("{}/{}", printable(&pod.namespace), printable(&pod.name)),
        pod.priority.to_string(),
        request,
        usage,
        above,
        why,
    ]
}
