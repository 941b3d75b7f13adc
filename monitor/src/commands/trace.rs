//! `monitor trace`: live kernel memory events per cgroup or pod, for incidents: stat changes,
//! cgroup lifecycle, reclaim stalls, kswapd, OOM kills, growth bursts and PSI pressure, with a
//! summary on exit.
use crate::flags::{OutputFormat, byte_rate, positive_bytes, positive_duration};
use std::{
    io::{self, Write as _},
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use monitor_common::Stat;
use tokio::sync::mpsc;

use crate::{
    cgroupfs::{CgroupPaths, MemoryHierarchy, procs::memory_cgroup_in_proc, stats},
    engine::ids::CgroupRel,
    pods::{
        KubepodsCgroup, kube_query, kube_watch::api_config, load_dir, manifest_dir,
        resolve_pod_cgroups,
    },
    source::{
        ebpf::{IncidentOptions, KernelSource, LoadOptions, MemcgHook},
        pressure::{self, PressureSignal},
        probe::{KernelFeatures, NODE_PSI},
    },
    system_clock::monotonic_ns,
    trace::{
        TraceRecord, TraceView,
        attribution::{PodCgroups, PodIdentity, PodLookup},
        filter::{Filter, parse_pod},
        view::{BurstSettings, Lookups},
    },
};

/// Window over which `--burst-rate` is measured.
const BURST_WINDOW: Duration = Duration::from_secs(1);
/// At most this many cgroup pressure files are watched (one descriptor each).
const MAX_PSI_WATCHES: usize = 256;

/// Print live memory events from the kernel, attributed to pods (with --pods or --kube) or
/// cgroups:
/// stat changes larger than the step, cgroup creation and removal, reclaim stalls longer than
/// --min-stall, kswapd wake/sleep, OOM kills, growth bursts and PSI pressure. On exit (duration
/// or Ctrl-C) prints a summary: most stall time, most reclaim caused, OOM kills.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("pod_source").args(["pods", "kube"])))]
pub(crate) struct TraceArgs {
    /// `text`: aligned columns; `json`: one object per line with a `type` field, the
    /// summary last.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// Stop after this long (Go duration: 30s, 10m; default: run until Ctrl-C).
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    pub duration: Option<Duration>,
    /// Only show this cgroup and the cgroups below it: a path below the memory hierarchy's
    /// root (`/kubepods/burstable`) or the full cgroupfs path.
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<String>,
    /// Report a stat when it moved by at least this many bytes since its last report.
    #[arg(long, value_name = "QUANTITY", default_value = "1Mi", value_parser = positive_bytes)]
    pub step: u64,
    /// Directory of pod manifests (YAML or JSON) to attribute cgroups to pods by uid.
    #[arg(long, value_name = "DIR")]
    pub pods: Option<PathBuf>,
    /// Attribute cgroups to the pods the API server lists on --node-name (instead of
    /// --pods), read once at start. Needs RBAC list on pods.
    #[arg(long, requires = "node_name")]
    pub kube: bool,
    /// With --kube: the node whose pods to attribute (default: NODE_NAME).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node_name: Option<String>,
    /// With --kube: the kubeconfig to connect with (default: KUBECONFIG, ~/.kube/config, or
    /// the pod's service account).
    #[arg(long, value_name = "FILE", requires = "kube")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubelet's pod cgroup root below the memory hierarchy (default: detect `kubepods`
    /// or `kubepods.slice`).
    #[arg(long, value_name = "PATH", value_parser = CgroupRel::new, requires = "pod_source")]
    pub kubepods_cgroup: Option<CgroupRel>,
    /// Only show events of this pod (needs --pods or --kube).
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = parse_pod, requires = "pod_source")]
    pub pod: Option<(String, String)>,
    /// Only show events of pods in this namespace (needs --pods or --kube).
    #[arg(long, value_name = "NAMESPACE", requires = "pod_source")]
    pub namespace: Option<String>,
    /// Report reclaim stalls lasting at least this long (Go syntax: 500us, 5ms, 1s). 1ms by
    /// default: shorter direct reclaims are routine on a busy node, longer ones are latency a
    /// request notices.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, default_value = "1ms")]
    pub min_stall: Duration,
    /// Report a growth burst when a cgroup's memory grows faster than this many bytes per
    /// second over 1 s (Kubernetes quantity, optionally with `/s`: 100Mi, 1Gi/s).
    #[arg(long, value_name = "BYTES/S", value_parser = byte_rate, default_value = "100Mi")]
    pub burst_rate: u64,
    /// Report PSI pressure when tasks stalled on memory at least this long within 2 s.
    #[arg(long, value_name = "DURATION", value_parser = positive_duration, default_value = "200ms")]
    pub psi_stall: Duration,
}

pub(crate) fn run(args: TraceArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(trace(args))
}

async fn trace(args: TraceArgs) -> anyhow::Result<ExitCode> {
    let hierarchy = MemoryHierarchy::discover()?;
    let filter = Filter {
        cgroup: args.cgroup.as_deref().map(|c| relative_to(&hierarchy, c)),
        pod: args.pod.clone(),
        namespace: args.namespace.clone(),
    };
    let listed =
        match (&args.pods, args.kube) {
            (Some(dir), _) => {
                manifest_dir::check(dir)?;
                Some(load_dir(dir).map_err(|e| {
                    anyhow::anyhow!("reading pod manifests in {}: {e}", dir.display())
                })?)
            }
            (None, true) => {
                let node = args.node_name.as_deref().unwrap_or_default();
                let config = api_config(args.kubeconfig.as_deref()).await?;
                let pods = kube_query::node_pods(&kube_query::client(config)?, node).await?;
                tracing::info!("{} pods on node {node} from the Kubernetes API", pods.len());
                Some(crate::pods::LoadedPods {
                    pods,
                    ..Default::default()
                })
            }
            (None, false) => None,
        };
    let pods = listed
        .map(|loaded| load_pods(loaded, args.kubepods_cgroup.clone(), &hierarchy))
        .transpose()?;
    let mut source = KernelSource::load_with_incidents(
        LoadOptions {
            step_bytes: args.step,
            hierarchy_id: hierarchy.hierarchy_id,
            memcg_hook: MemcgHook::Auto,
            budget_pages: None,
            cgroup_map_entries: crate::source::ebpf::cgroup_map_entries_at(&hierarchy.mount),
        },
        IncidentOptions {
            min_stall: args.min_stall,
        },
    )?;
    for skipped in source.skipped() {
        tracing::warn!(
            "not attached: {} ({})",
            skipped.program.hook(),
            skipped.reason
        );
    }
    tracing::info!(
        "tracing with {} kernel programs attached",
        source.attached().len()
    );
    // Scan after attaching so that no cgroup created in between is missed.
    let paths = CgroupPaths::scan(&hierarchy.mount)?;
    let (psi_tx, mut psi_rx) = mpsc::unbounded_channel();
    watch_pressure(
        &paths,
        &filter,
        pods.as_ref(),
        &pressure::trigger(args.psi_stall, pressure::WINDOW),
        psi_tx,
    );
    let burst = BurstSettings {
        window_ns: BURST_WINDOW.as_nanos() as u64,
        bytes_per_sec: args.burst_rate,
    };
    let pods = pods.map(|p| Box::new(p) as Box<dyn PodLookup>);
    let mut view = TraceView::new(paths, filter, pods, burst, source.page_size());
    let start_ns = monotonic_ns();
    let mut out = Printer {
        out: io::stdout().lock(),
        output: args.output,
        start_ns,
    };
    if args.output == OutputFormat::Text {
        out.line(TraceRecord::text_header())?;
    }
    let deadline = tokio::time::sleep(args.duration.unwrap_or(Duration::MAX / 4));
    tokio::pin!(deadline);
    // Registered once: a Ctrl-C that arrives while a batch is being printed waits here. A
    // `ctrl_c()` future made at each turn missed it whenever records kept the loop busy.
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut batch = Vec::new();
    loop {
        tokio::select! {
            () = &mut deadline => break,
            _ = interrupt.recv() => break,
            Some(signal) = psi_rx.recv() => {
                if let Some(record) = view.pressure(monotonic_ns(), signal)
                    && !out.record(&record)?
                {
                    return Ok(ExitCode::SUCCESS);
                }
                continue;
            }
            res = source.next_batch(&mut batch) => res?,
        }
        let mut lookups = SystemLookups {
            hierarchy: &hierarchy,
            source: &source,
        };
        for decoded in batch.drain(..) {
            // Counted by the source and summed up at the end; one bad record ends nothing.
            let Ok(event) = decoded else { continue };
            for record in view.apply(event, &mut lookups) {
                if !out.record(&record)? {
                    return Ok(ExitCode::SUCCESS);
                }
            }
        }
        out.out.flush()?;
    }
    out.record(&view.summary(monotonic_ns()))?;
    out.out.flush()?;
    let drops = source.drops();
    if drops.ring_full > 0 || drops.map_full > 0 || drops.undecodable > 0 {
        eprintln!(
            "monitor: the kernel dropped {} events (ring buffer full) and could not count {} stat updates (map full); {} records could not be decoded",
            drops.ring_full, drops.map_full, drops.undecodable
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes records in the chosen format.
struct Printer<W: io::Write> {
    out: W,
    output: OutputFormat,
    start_ns: u64,
}

impl<W: io::Write> Printer<W> {
    /// False when stdout was closed (`monitor trace | head`), which ends the trace quietly.
    fn record(&mut self, record: &TraceRecord) -> anyhow::Result<bool> {
        let line = match self.output {
            OutputFormat::Text => record.text(self.start_ns),
            OutputFormat::Json => serde_json::to_string(record)?,
        };
        self.line(line)
    }

    fn line(&mut self, line: String) -> anyhow::Result<bool> {
        match writeln!(self.out, "{line}") {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

/// The system behind [`Lookups`]: cgroupfs for baselines, the kernel's record and /proc for
/// OOM victims.
struct SystemLookups<'a> {
    hierarchy: &'a MemoryHierarchy,
    source: &'a KernelSource,
}

impl Lookups for SystemLookups<'_> {
    fn baseline(&mut self, cgroup_id: u64, path: &str, stat: Stat) -> Option<i64> {
        let own = stats::read_own(&self.hierarchy.dir(path), self.hierarchy.version, stat).ok()?;
        Some(own as i64 - self.source.running_total(cgroup_id, stat).unwrap_or(0))
    }

    fn victim_cgroup_id(&mut self, pid: u32) -> Option<u64> {
        self.source.oom_victim_cgroup(pid)
    }

    fn cgroup_of_pid(&mut self, pid: u32) -> Option<String> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        memory_cgroup_in_proc(&text, self.hierarchy.version)
    }
}

/// Pods (of the manifests directory or the API) with the cgroups the kubelet gives them.
fn load_pods(
    loaded: crate::pods::LoadedPods,
    kubepods: Option<CgroupRel>,
    hierarchy: &MemoryHierarchy,
) -> anyhow::Result<PodCgroups> {
    for error in &loaded.errors {
        tracing::warn!("{error}");
    }
    let kubepods = match kubepods {
        Some(rel) => KubepodsCgroup::new(rel),
        None => KubepodsCgroup::detect(&hierarchy.mount)?,
    };
    let mut pods = PodCgroups::default();
    for (pod, cgroup) in
        loaded
            .pods
            .iter()
            .zip(resolve_pod_cgroups(&loaded.pods, hierarchy, &kubepods))
    {
        let (Some(cgroup), Some(uid)) = (cgroup, pod.metadata.uid.clone()) else {
            continue;
        };
        let identity = PodIdentity {
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid,
        };
        pods.insert(cgroup.rel.to_string(), identity);
    }
    Ok(pods)
}

/// Installs PSI triggers: the node's, and those of the pods (with --pods) or of the --cgroup
/// cgroup and its children, where the kernel offers per-cgroup PSI.
fn watch_pressure(
    paths: &CgroupPaths,
    filter: &Filter,
    pods: Option<&PodCgroups>,
    trigger: &str,
    tx: mpsc::UnboundedSender<PressureSignal>,
) {
    let psi = KernelFeatures::probe().psi;
    if psi.node
        && let Err(e) = pressure::watch(PathBuf::from(NODE_PSI), None, trigger, tx.clone())
    {
        tracing::warn!("no node pressure events: {NODE_PSI}: {e}");
    }
    let Some(root) = psi.cgroup else {
        tracing::info!(
            "no cgroup2 memory.pressure on this kernel; pressure is reported for the node only"
        );
        return;
    };
    let cgroups: Vec<String> = match (pods, &filter.cgroup) {
        (Some(pods), _) => pods
            .iter()
            .filter(|(path, pod)| filter.admits(Some(path), Some(pod)))
            .map(|(path, _)| path.to_string())
            .collect(),
        (None, Some(top)) => paths
            .subtree(top)
            .into_iter()
            .filter_map(|id| paths.get(id).map(str::to_string))
            .filter(|p| {
                p == top
                    || p.rsplit_once('/')
                        .is_some_and(|(parent, _)| parent == top.as_str())
            })
            .collect(),
        (None, None) => Vec::new(),
    };
    // The v2 cgroup with the same path: the cgroup itself on v2, its twin on hybrid hosts.
    for cgroup in cgroups.into_iter().take(MAX_PSI_WATCHES) {
        let file = root
            .join(cgroup.trim_start_matches('/'))
            .join("memory.pressure");
        if !file.exists() {
            continue;
        }
        if let Err(e) = pressure::watch(file.clone(), Some(cgroup), trigger, tx.clone()) {
            tracing::warn!("no pressure events for {}: {e}", file.display());
        }
    }
}

/// `--cgroup` as a path below the hierarchy root.
fn relative_to(hierarchy: &MemoryHierarchy, cgroup: &str) -> String {
    let rel = Path::new(cgroup)
        .strip_prefix(&hierarchy.mount)
        .map_or_else(|_| cgroup.to_string(), |p| p.to_string_lossy().into_owned());
    format!("/{}", rel.trim_matches('/'))
}
