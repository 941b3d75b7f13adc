//! The agent's command-line flags: `monitor [FLAGS]` with no subcommand runs the agent.
use std::{path::PathBuf, time::Duration};

use clap::{Args, ValueEnum};

use crate::{
    action::hard_action::HardActionFlag,
    checkpoint::DEFAULT_CHECKPOINT_DIR,
    config_file::ConfigSources,
    engine::{attach_distance::AttachWithin, ids::CgroupRel},
    flags::{
        HostPort, OutputFormat, attach_within, duration, host_port, positive_bytes,
        positive_duration,
    },
    own_process::{
        realtime::parse_realtime_priority,
        self_protect::{DEFAULT_OOM_SCORE_ADJ, parse_oom_score_adj},
    },
    source::ebpf::MemcgHook,
};

/// Where memory numbers come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum SourceMode {
    /// Kernel programs where this kernel has them, cgroupfs polling for the rest.
    Auto,
    /// Kernel programs; fail if they cannot load.
    Ebpf,
    /// Read cgroupfs every --poll-interval, like the kubelet's housekeeping.
    Poll,
}

/// Whether a hard threshold's grace period is cut to what the node can afford.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum GraceProjection {
    /// Cut it when the OOM point is nearer than the grace period.
    On,
    /// Always the whole grace period, as the kubelet gives it.
    Off,
}

/// Whether, and where, the pods' growth is held back while a victim drains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum MemoryBrake {
    /// Set the kubepods cgroup's `memory.high` at its usage on a hard memory eviction
    /// (cgroup v2 only): every pod held together, a pod started meanwhile too.
    #[value(alias = "on")]
    Kubepods,
    /// Set each pod's `memory.high` at its own usage instead: a pod cannot take what the
    /// victim frees, and the agent's own pod is left out; a pod started meanwhile is not held.
    Pods,
    /// Never touch `memory.high`.
    Off,
}

/// Who off this host may read the endpoints' pod data (`--metrics-auth`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum MetricsAuth {
    /// No one: loopback clients only.
    Loopback,
    /// Clients whose bearer token RBAC allows to get the path (TokenReview and
    /// SubjectAccessReview through the API server).
    Kube,
}

/// Run the node agent: watch memory through the kernel and evict the pod the kubelet would
/// evict, as soon as a threshold is crossed. With --dry-run it only reports what it would do.
#[derive(Args, Debug, Clone)]
pub(crate) struct AgentArgs {
    /// Report each decision but never signal any process. Nothing being carried out, the
    /// same pod is decided on again at each interval: --output text and the log say it once,
    /// then once a minute with how many times; --output json prints each, numbered
    /// (`repeat`); /metrics counts them in monitor_dry_run_decisions_total, never among the
    /// evictions.
    #[arg(long, help_heading = "Observing")]
    pub dry_run: bool,
    /// With --kube --dry-run: record each decision as an Event on the pod (type Warning,
    /// reason EvictionDryRun) and publish the node conditions, so a trial run shows in
    /// `kubectl get events` and `kubectl describe node`. The same decision again at each
    /// interval is counted on one Event, as the kubelet's recorder counts its own. Without it
    /// a dry run writes nothing to the cluster.
    #[arg(long, requires_all = ["kube", "dry_run"], help_heading = "Observing")]
    pub dry_run_events: bool,
    /// With --dry-run: how long after the last of a series of decisions the kubelet's
    /// eviction (--kube) or the kernel's OOM kill still counts as its outcome in the shadow
    /// scorecard (`monitor shadow`, /debug/shadow), and how long one that came first waits for
    /// the agent to name it late. The kubelet decides every 10 s on stats up to 15 s old.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "2m",
        value_parser = duration,
        requires = "dry_run",
        help_heading = "Observing"
    )]
    pub shadow_window: Duration,
    /// `text`: one line per decision; `json`: one object per decision with monotonic and
    /// wall-clock timestamps.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text, help_heading = "Observing")]
    pub output: OutputFormat,
    /// Print the signals and the head of the eviction ranking to stderr this often (0: never).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "0s",
        value_parser = duration,
        help_heading = "Observing"
    )]
    pub status_interval: Duration,
    /// Stop after this long (default: run until SIGINT or SIGTERM).
    #[arg(
        long,
        value_name = "DURATION",
        value_parser = positive_duration,
        help_heading = "Observing"
    )]
    pub duration: Option<Duration>,
    #[command(flatten, next_help_heading = "Acting")]
    pub hard_action: HardActionFlag,
    /// With --kube: delete the chosen pod with the decision's grace period instead of asking
    /// for an Eviction, so PodDisruptionBudgets do not hold it, as the kubelet's own
    /// node-pressure eviction ignores them.
    #[arg(long, requires = "kube", help_heading = "Acting")]
    pub ignore_disruption_budgets: bool,
    /// On a hard threshold, project when the kernel's OOM point (the kubepods cgroup's memory
    /// limit, or the node's memory) is reached at the growth of the last 50ms, and cut the
    /// victim's grace period to that time less 100ms for the kill, down to force at once; an
    /// eviction already in its grace period is forced when the projection falls below what is
    /// left of it. A victim that handles SIGTERM and keeps allocating would otherwise let the
    /// OOM killer fire first. `off`: the whole grace period always.
    #[arg(
        long,
        value_enum,
        value_name = "ON|OFF",
        default_value_t = GraceProjection::On,
        help_heading = "Acting"
    )]
    pub grace_projection: GraceProjection,
    /// cgroup v2: when a hard memory threshold evicts a pod, set the kubepods cgroup's
    /// memory.high at its usage (plus 4Mi), so the pods' growth is throttled by reclaim
    /// while the victim drains, and the victim keeps its whole grace period. memory.high
    /// never calls the OOM killer (a limit would). `pods` sets each pod's instead, at its own
    /// usage. Lifted once no eviction is in flight and no memory threshold is met, after 30s
    /// at most, and when the agent stops; a value found there (the kubelet's MemoryQoS) is
    /// restored exactly. The values are recorded in the checkpoint directory first, so an
    /// agent killed while braking lifts it at its next start. cgroup v1 has no memory.high:
    /// there the grace projection alone protects the node. `on` is `kubepods`.
    #[arg(
        long,
        value_enum,
        value_name = "KUBEPODS|PODS|OFF",
        default_value_t = MemoryBrake::Kubepods,
        help_heading = "Acting"
    )]
    pub memory_brake: MemoryBrake,
    /// Opt-in, off by default (the defaults stay kubelet-exact). cgroup v2, Linux 5.19+: when
    /// a memory threshold is met, first take page cache back from the pods in the kubelet's
    /// eviction order, head first (never from Guaranteed or critical pods), through their
    /// memory.reclaim, 32Mi a write; leave a pod once more than half of what was taken comes
    /// straight back (its cache is in use); read the signal again after each write, and evict
    /// only if the threshold is still met, exactly as without the flag. At most 1Gi and 1s a
    /// pressure episode; skipped when the OOM point is projected nearer than that second. In a
    /// dry run the decision says what it would reclaim; with --kube a spared eviction is
    /// posted as a ReclaimedBeforeEviction Event on the pods reclaimed from. Refused, with the reason at start and
    /// in `monitor doctor`, on cgroup v1 and on kernels without memory.reclaim: the agent then
    /// evicts as without it.
    #[arg(long, help_heading = "Acting")]
    pub reclaim_first: bool,
    /// Opt-in, off by default: act on a hard memory threshold before it is met, when the
    /// growth of the last 50ms (as the grace projection measures it) would cross it within
    /// this lead. Set it to the time from a decision to the victim's memory being back on
    /// the node (`cargo xtask bench oom-race` measures it) for fewer kernel OOM kills, at the
    /// cost of the kubelet's exact timing: a pod that would have stopped just short of the
    /// threshold is evicted too. The decision says it was predicted, with the figures. The
    /// kernel then wakes the agent at every 16Mi of growth, however far the thresholds are.
    /// 1ms to 10s.
    #[arg(long, value_name = "DURATION", value_parser = predict_lead, help_heading = "Acting")]
    pub predict: Option<Duration>,
    /// Directory of Pod manifests (YAML or JSON; Pod, PodList or List) for the pods on this
    /// node; reloaded when files change. Every pod needs metadata.uid. Finished pods (phase
    /// Succeeded or Failed) are left out, and with --node-name pods bound to another node; a
    /// manifest without spec.nodeName counts as this node's, like a static pod's.
    #[arg(long, value_name = "DIR", help_heading = "Pods")]
    pub pods: Option<PathBuf>,
    /// Use the Kubernetes API: watch the pods bound to this node (instead of --pods) and
    /// evict through the Eviction API (instead of killing cgroups).
    ///
    /// Pods come from a list+watch of pods with the field selector spec.nodeName=NODE (see
    /// --node-name); finished pods are left out. An eviction is a policy/v1 Eviction with the
    /// decision's grace period, checked against PodDisruptionBudgets; the kubelet then stops
    /// the pod. On a hard threshold the agent first kills the pod's cgroup itself, as the
    /// kubelet would (see --kube-hard-action). A pod whose budget refuses (429) before
    /// anything was stopped is passed over for one eviction interval and the next candidate
    /// is evicted at once: a refusal freed nothing, so it neither waits for cleanup nor
    /// starts an interval.
    ///
    /// Each accepted eviction posts an Event on the pod (type Warning, reason Evicted, the
    /// kubelet's message), and the agent's pressure state is published as the node
    /// conditions MonitorMemoryPressure and MonitorPIDPressure (patched on change and every
    /// minute; the kubelet's own conditions are left alone).
    ///
    /// Connects with --kubeconfig, else KUBECONFIG or ~/.kube/config, else the pod's service
    /// account. RBAC the account needs (a ClusterRole: the node's pods are in every
    /// namespace): list and watch on pods, create on pods/eviction (delete on pods with
    /// --ignore-disruption-budgets), create and patch on events, patch on nodes/status.
    #[arg(
        long,
        conflicts_with = "pods",
        requires = "node_name",
        help_heading = "Pods"
    )]
    pub kube: bool,
    /// This node's name, as in the spec.nodeName of its pods (required with --kube; with
    /// --pods, pods bound to other nodes are left out). In a DaemonSet,
    /// set NODE_NAME from the downward API (valueFrom.fieldRef.fieldPath: spec.nodeName).
    #[arg(long, env = "NODE_NAME", value_name = "NAME", help_heading = "Pods")]
    pub node_name: Option<String>,
    /// With --kube: the kubeconfig to connect with, when not running in the cluster.
    #[arg(long, value_name = "FILE", requires = "kube", help_heading = "Pods")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubepods cgroup below the memory hierarchy's root (`/kubepods`,
    /// `/kubepods.slice`); detected when absent. Its name picks the cgroupfs or systemd naming.
    /// Relative to the hierarchy's root, not its mount point; `.` and `..` are refused.
    #[arg(long, value_name = "PATH", value_parser = CgroupRel::new, help_heading = "Pods")]
    pub kubepods_cgroup: Option<CgroupRel>,
    /// The node's kubelet configuration, read-only: the kubelet's own `--config` file
    /// (kubeadm, kind: /var/lib/kubelet/config.yaml; EKS: /etc/kubernetes/kubelet/config.json;
    /// GKE: /home/kubernetes/kubelet-config.yaml) or a configz answer saved to a file. Its
    /// eviction thresholds are the kubelet's; thresholds given on the kubelet's command line
    /// (--eviction-hard) or in its --config-dir are not in it: lay them over it with --config.
    #[arg(long, value_name = "FILE", help_heading = "Thresholds")]
    pub kubelet_config: Option<PathBuf>,
    /// KubeletConfiguration YAML (evictionHard, evictionSoft, evictionSoftGracePeriod,
    /// evictionMinimumReclaim, ..., and the agent's `monitor:` settings). With
    /// --kubelet-config, laid over the kubelet's as a kubelet drop-in: only what differs
    /// (absent: the kubelet's alone). Alone, the whole configuration; without either, the
    /// kubelet's defaults. Both files are watched: a change is put in force within a second
    /// and logged with what changed; an invalid one is refused and the one in force kept.
    #[arg(long, value_name = "FILE", help_heading = "Thresholds")]
    pub config: Option<PathBuf>,
    /// Allocatable memory (kubelet quantity, e.g. 6Gi); default: the kubepods cgroup's memory
    /// limit, or the node's memory when it has none.
    #[arg(
        long,
        value_name = "QUANTITY",
        value_parser = positive_bytes,
        help_heading = "Thresholds"
    )]
    pub allocatable_memory: Option<u64>,
    /// Event source.
    #[arg(long, value_enum, default_value_t = SourceMode::Auto, help_heading = "Kernel")]
    pub source: SourceMode,
    /// How the kernel programs count per-cgroup memory with the eBPF source: `auto` takes the
    /// memcg tracepoints (6.13+) in their raw form (cheapest per page fault), else as classic
    /// tracepoints, else fentry on the functions they were placed in (5.11+); `tracepoint`
    /// forces the classic form, `fentry` the latter.
    #[arg(
        long,
        value_enum,
        value_name = "HOOK",
        default_value_t = MemcgHook::Auto,
        help_heading = "Kernel"
    )]
    pub memcg_hook: MemcgHook,
    /// Run the memcg stat programs only while a memory threshold is within this much
    /// working-set growth. Farther away they are detached, so page faults run none of the
    /// agent's code; the node's and the kubepods cgroup's memory is read every 100ms instead,
    /// and the pods' at each --resync-interval. They are attached again at this distance,
    /// after which every pod is read, and detached beyond twice it. `auto` derives it from
    /// how fast memory can grow while the agent does not see the pods: the node's CPUs at
    /// 2Gi/s each (or the fastest growth seen in the last hour or two, when faster) over the
    /// 100ms read plus the time a read of every pod took (2 CPUs, 150ms: 1Gi). The distance
    /// in force is logged and in /metrics. A quantity (kubelet syntax, e.g. 4Gi) fixes it;
    /// `always` keeps the programs attached.
    #[arg(
        long,
        value_name = "auto|always|QUANTITY",
        default_value = "auto",
        value_parser = attach_within,
        help_heading = "Kernel"
    )]
    pub attach_within: AttachWithin,
    /// Kernel programs report a cgroup's stat after it moved by this much (kubelet quantity).
    #[arg(
        long,
        value_name = "QUANTITY",
        default_value = "256Ki",
        value_parser = positive_bytes,
        help_heading = "Kernel"
    )]
    pub step: u64,
    /// Pages of a cgroup's stat each CPU sums on its own before the kernel programs add them
    /// to the cgroup's total and check the step: a page fault then touches no shared kernel
    /// memory. All CPUs together hold back less than PAGES times the CPUs, so a step is seen
    /// that much late at most. Default: the step / (4 x CPUs), at least 1; 1 adds every
    /// update at once.
    #[arg(
        long,
        value_name = "PAGES",
        value_parser = clap::value_parser!(u32).range(1..),
        help_heading = "Kernel"
    )]
    pub per_cpu_budget: Option<u32>,
    /// How often cgroupfs is read when polling (Go duration: 100ms, 1s, 10s).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "1s",
        value_parser = positive_duration,
        help_heading = "Kernel"
    )]
    pub poll_interval: Duration,
    /// How often the eBPF source's working sets are re-read from cgroupfs, correcting drift
    /// and lost events; the node's memory and the kubepods cgroup's limit are read again then
    /// too.
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "10s",
        value_parser = positive_duration,
        help_heading = "Kernel"
    )]
    pub resync_interval: Duration,
    /// While memory is polled (no memcg tracepoints, or --source poll), read cgroupfs at once
    /// when tasks stalled on memory at least this long within 2 s, not at the next poll: PSI
    /// triggers on the node and, on cgroup v2, on the kubepods cgroup (0s: off).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "100ms",
        value_parser = duration,
        help_heading = "Kernel"
    )]
    pub psi_stall: Duration,
    /// Serve Prometheus metrics at http://ADDR/metrics, with /healthz, /readyz and
    /// /debug/ranking beside them. HOST:PORT, the host an IP address or a name
    /// (localhost:9753); a name is bound at the first of its addresses that can be.
    #[arg(
        long,
        value_name = "ADDR",
        default_value = "127.0.0.1:9753",
        value_parser = host_port,
        help_heading = "Endpoints"
    )]
    pub metrics_addr: HostPort,
    /// Do not serve metrics.
    #[arg(long, help_heading = "Endpoints")]
    pub no_metrics: bool,
    /// Who off this host may read /metrics and /debug/*, which name every pod on the node
    /// with its memory (loopback clients always may; /healthz and /readyz answer anyone).
    /// `loopback`: no one. `kube`: a client sending `Authorization: Bearer TOKEN` when a
    /// TokenReview authenticates the token and a SubjectAccessReview allows its user to
    /// `get` the path as a nonResourceURL (as kube-rbac-proxy checks; answers kept 60s,
    /// refusals 10s; needs --kube and RBAC create on tokenreviews and
    /// subjectaccessreviews). Refused: 401 without a token the API server knows, 403
    /// without the permission, 503 when the API server does not answer.
    #[arg(
        long,
        value_enum,
        value_name = "MODE",
        default_value_t = MetricsAuth::Loopback,
        requires_if("kube", "kube"),
        help_heading = "Endpoints"
    )]
    pub metrics_auth: MetricsAuth,
    /// Serve /metrics and /debug/* to anyone who reaches the port, unauthenticated. Limit
    /// who can reach it first (a NetworkPolicy); --metrics-auth kube is the safer way.
    #[arg(long, conflicts_with = "metrics_auth", help_heading = "Endpoints")]
    pub metrics_allow_remote: bool,
    /// Also answer /healthz and /readyz on a Unix socket at PATH (replacing a socket an
    /// ended agent left there), readable by the agent's user only: probes through it
    /// (`monitor probe healthz --socket PATH`) reach this agent whoever holds the metrics
    /// port, and no slow client on the network can crowd them out. Its /readyz also fails
    /// while the metrics address cannot be bound.
    #[arg(long, value_name = "PATH", help_heading = "Endpoints")]
    pub probe_socket: Option<PathBuf>,
    /// A name accepted in the Host header of requests to the endpoints, besides IP addresses
    /// and localhost (others are refused, so a rebound DNS name cannot reach them; may be
    /// repeated).
    #[arg(long, value_name = "NAME", help_heading = "Endpoints")]
    pub metrics_allowed_host: Vec<String>,
    /// Where the agent keeps its state across restarts.
    #[arg(
        long,
        value_name = "DIR",
        default_value = DEFAULT_CHECKPOINT_DIR,
        help_heading = "Advanced"
    )]
    pub checkpoint_dir: PathBuf,
    /// Move the checkpoint aside even when it is valid (renamed agent_state.reset-TIME, never
    /// deleted) and start with an empty state. Not needed for a damaged one: the agent always
    /// sets that aside (agent_state.corrupt-TIME, at most 5 kept), says so and starts empty.
    #[arg(long, help_heading = "Advanced")]
    pub reset_state: bool,
    /// The agent's own oom_score_adj, -1000 (never OOM-killed) to 1000 (killed first). The
    /// default keeps the OOM killer off the agent while leaving -1000 to what the node
    /// cannot lose at all (as systemd's own critical daemons do).
    #[arg(
        long,
        value_name = "N",
        default_value_t = DEFAULT_OOM_SCORE_ADJ,
        allow_negative_numbers = true,
        value_parser = parse_oom_score_adj,
        help_heading = "Advanced"
    )]
    pub oom_score_adj: i32,
    /// Do not lock the agent's memory. By default it is locked (mlockall: the binary whole at
    /// start, later pages as they are touched), so reclaim cannot page it out when the node
    /// is short of memory; this needs CAP_IPC_LOCK (root has it) or a RLIMIT_MEMLOCK larger
    /// than the agent.
    #[arg(long, help_heading = "Advanced")]
    pub no_mlock: bool,
    /// Run the event thread (kernel records -> decision) under SCHED_FIFO at this priority
    /// (1-99), so a busy CPU does not delay a decision behind ordinary tasks; threads it
    /// starts stay at the normal policy. Off by default. Needs CAP_SYS_NICE or an
    /// RLIMIT_RTPRIO of at least N; the agent refuses to start when the kernel says no.
    #[arg(
        long,
        value_name = "N",
        value_parser = parse_realtime_priority,
        help_heading = "Advanced"
    )]
    pub realtime_priority: Option<u8>,
}

impl AgentArgs {
    /// The configuration files the flags name.
    pub(crate) fn config_sources(&self) -> ConfigSources {
        ConfigSources {
            kubelet: self.kubelet_config.clone(),
            overlay: self.config.clone(),
        }
    }
}

/// `--predict`: a lead from 1ms to 10s; beyond that the last 50ms of growth say nothing.
fn predict_lead(text: &str) -> Result<Duration, String> {
    let lead = positive_duration(text)?;
    if lead < Duration::from_millis(1) || lead > Duration::from_secs(10) {
        return Err(format!("{text} is outside 1ms to 10s"));
    }
    Ok(lead)
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use crate::cli::Cli;

    #[test]
    fn kubepods_cgroup_is_checked_when_parsed() {
        let cases = [
            (
                "normalised",
                "kubepods//burstable/",
                Ok("/kubepods/burstable"),
            ),
            (
                "climbing out",
                "/kubepods/../system.slice",
                Err("\"..\" component"),
            ),
            (
                "the mount point",
                "/sys/fs/cgroup/memory/kubepods",
                Err("filesystem path"),
            ),
        ];
        for (name, flag, want) in cases {
            let got = Cli::try_parse_from(["monitor", "--kubepods-cgroup", flag]);
            match (got, want) {
                (Ok(cli), Ok(rel)) => {
                    assert_eq!(cli.agent.kubepods_cgroup.unwrap().as_str(), rel, "{name}");
                }
                (Err(error), Err(why)) => {
                    let error = error.to_string();
                    assert!(error.contains("--kubepods-cgroup"), "{name}: {error}");
                    assert!(error.contains(why), "{name}: {error}");
                }
                (got, want) => panic!("{name}: got {:?}, want {want:?}", got.map(|_| ())),
            }
        }
    }

    #[test]
    fn predict_takes_a_lead_from_1ms_to_10s() {
        let lead = |flag: &str| {
            Cli::try_parse_from(["monitor", "--predict", flag])
                .map(|cli| cli.agent.predict)
                .map_err(|e| e.to_string())
        };
        assert_eq!(
            lead("100ms"),
            Ok(Some(std::time::Duration::from_millis(100)))
        );
        assert_eq!(lead("10s"), Ok(Some(std::time::Duration::from_secs(10))));
        for (name, flag, why) in [
            ("zero", "0s", "longer than zero"),
            ("below a millisecond", "500us", "outside 1ms to 10s"),
            (
                "beyond what 50ms of growth tell",
                "11s",
                "outside 1ms to 10s",
            ),
            ("hostile", "9999999999h", "--predict"),
            ("not a duration", "fast", "--predict"),
        ] {
            let error = lead(flag).expect_err(name);
            assert!(error.contains(why), "{name}: {error}");
        }
        assert_eq!(
            Cli::try_parse_from(["monitor"]).unwrap().agent.predict,
            None,
            "off by default"
        );
    }
}
