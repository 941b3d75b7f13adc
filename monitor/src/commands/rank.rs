//! `monitor rank`: the kubelet's eviction order for a set of pods and their stats, for
//! postmortems. Reads the files here; parsing and ranking live in `engine::report`.
use crate::cli::OutputFormat;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::engine::quantity::Quantity;
use crate::engine::rank::{DiskMeasure, FsLayout, RankPolicy};
use crate::engine::report::{RankedPod, Report, build_report};
use crate::engine::signal::Signal;
use crate::engine::summary::Summary;
use crate::pods::manifests::parse_file;
use crate::printable::printable;

/// Exit status for input that cannot be read or understood.
const BAD_INPUT: u8 = 2;

#[derive(clap::Args, Debug)]
#[command(after_long_help = "\
Inputs:
  --pods     The pods on the node, as kubectl prints them (a Pod, a PodList or a List; JSON or
             YAML). Take them from the node in question, for example:
               kubectl get pods -A -o json --field-selector spec.nodeName=NODE > pods.json
  --summary  The kubelet's Summary API for that node (working set, process counts, disk use):
               kubectl get --raw /api/v1/nodes/NODE/proxy/stats/summary > summary.json

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

With --output json, quantities are exact numbers: whole units as integers, a fractional
request (500m of ephemeral-storage) with its decimals.

Exit status: 0 on success, 2 when an input file cannot be read or parsed, or is not what its
flag takes (an API error, a PodList or {} given as --summary); the message names the file.")]
pub struct RankArgs {
    /// Pods file: `kubectl get pods -o json` (or -o yaml) output, or a single Pod.
    #[arg(long, value_name = "FILE")]
    pods: PathBuf,
    /// Summary API JSON from `kubectl get --raw /api/v1/nodes/NODE/proxy/stats/summary`.
    #[arg(long, value_name = "FILE")]
    summary: PathBuf,
    /// Signal to rank for: memory.available, allocatableMemory.available, pid.available,
    /// nodefs.available, nodefs.inodesFree, imagefs.available or imagefs.inodesFree.
    #[arg(long, value_name = "SIGNAL", default_value = "memory.available", value_parser = parse_signal)]
    signal: Signal,
    /// Output format: aligned text, or a JSON array in eviction order.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    output: OutputFormat,
    /// The runtime keeps images and writable layers on a dedicated image filesystem, so
    /// nodefs counts only logs and local volumes and imagefs only writable layers.
    #[arg(long)]
    dedicated_imagefs: bool,
}

fn parse_signal(text: &str) -> Result<Signal, String> {
    text.parse()
        .map_err(|err: crate::engine::signal::UnknownSignal| err.to_string())
}

pub fn run(args: RankArgs) -> anyhow::Result<ExitCode> {
    match rank(&args) {
        Ok(report) => {
            let output = match args.output {
                OutputFormat::Text => render_text(&report),
                OutputFormat::Json => serde_json::to_string_pretty(&report.pods)? + "\n",
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

/// Reads both files and ranks; the error names the file at fault.
fn rank(args: &RankArgs) -> Result<Report, String> {
    let in_file =
        |path: &Path, problem: &dyn std::fmt::Display| format!("{}: {problem}", path.display());
    let pods_text = fs::read_to_string(&args.pods).map_err(|e| in_file(&args.pods, &e))?;
    // The error already names the file.
    let pods = parse_file(&args.pods, &pods_text).map_err(|e| e.to_string())?;
    let summary_text = fs::read_to_string(&args.summary).map_err(|e| in_file(&args.summary, &e))?;
    let summary = Summary::from_json(&summary_text).map_err(|e| in_file(&args.summary, &e))?;
    let layout = if args.dedicated_imagefs {
        FsLayout::DedicatedImageFs
    } else {
        FsLayout::Shared
    };
    build_report(&pods, &summary, args.signal, layout).map_err(|e| in_file(&args.pods, &e))
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
    if report.pods.is_empty() {
        return out + "no pods to rank\n";
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
    out
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
