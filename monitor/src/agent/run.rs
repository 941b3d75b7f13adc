//! The agent's event loop: the thin shell around [`AgentCore`] that reads the machine and acts.
//!
//! Inputs are kernel ring-buffer batches, cgroupfs reads (every poll interval when polling,
//! every resync interval with eBPF, and at once when PSI reports memory stalls while
//! polling), manifest changes and finished kills. After each input
//! that can move a signal or the ranking, the decision step runs at once; there is no
//! decision timer. Kernel records wake the agent only once working sets may have grown by
//! the distance to the nearest memory threshold (see [`crate::engine::headroom`]); the rest
//! wait in the ring and are read every second.
use std::{
    collections::HashSet,
    io::{self, Write as _},
    process::ExitCode,
    sync::Arc,
    time::Duration,
};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Pod;
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::Mutex,
    task::JoinSet,
    time::{Instant, MissedTickBehavior, interval},
};

use super::{
    args::{AgentArgs, SourceMode},
    cause::CauseLog,
    core::{AgentCore, NodeCapacity},
    persist,
    psi_wake::PsiWake,
    report::{DecisionContext, DecisionReport},
    self_protect::{self, OwnPod},
    usage::StatChange,
};
use crate::{
    action::{KillTimings, KubeEvictor, kill_cgroup_tree},
    cgroupfs::{CgroupPaths, MemoryHierarchy, StatsError, procs::subtree_pids, stats},
    checkpoint::{IfUnusable, StateManager, read_now},
    cli::OutputFormat,
    clock::{BootClock, monotonic_ns},
    engine::{
        checkpoint::AgentState,
        clock::{Clock as _, ManualClock},
        config::EvictionConfig,
        decide::{Eviction, EvictionState},
        pod_facts::PodFacts,
        signal::NodeCondition,
        signal::Signal,
    },
    metrics::{Metrics, server},
    node::{
        memory::allocatable_bytes,
        read::{node_working_set, read_mem_total, read_memory_limit, read_pid_available},
    },
    pods::{
        KubeWatcher, KubepodsCgroup, LoadedPods, ManifestWatcher, PodSource, find_pod_cgroup,
        kube_watch, resolve_pod_cgroups,
    },
    source::{
        ebpf::{IncidentOptions, KernelSource, LoadOptions, MemcgHook},
        event::KernelEvent,
    },
    trace::record::bytes,
};

/// How often stat records the kernel sent without a wake-up (far from every threshold) are
/// read, so rankings, metrics and status stay this fresh.
const WAITING_RECORDS_READ_EVERY: Duration = Duration::from_secs(1);
/// The last records (of `--step` bytes each) before a threshold could be met wake the agent
/// too, so it is already running when the crossing record comes: a wake-up from idle costs
/// about a millisecond on a virtual machine's halted vCPU.
const WAKE_MARGIN_STEPS: u64 = 4;

/// Runs the agent until SIGINT, SIGTERM or `--duration`.
pub fn run(args: AgentArgs) -> anyhow::Result<ExitCode> {
    self_protect::protect_process(args.oom_score_adj, !args.no_mlock);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let (watcher, first, evictor) = open_pods(&args).await?;
        for error in &first.errors {
            log::warn!("skipped: {error}");
        }
        let mut agent = Agent::start(args, evictor).await?;
        agent.apply_pods(first.pods);
        agent.restore_stopped_pods();
        agent.evaluate(None)?;
        agent.run(watcher).await
    })
}

/// The pod source the flags name and its first pod set; with --kube also the evictor.
async fn open_pods(
    args: &AgentArgs,
) -> anyhow::Result<(PodSource, LoadedPods, Option<KubeEvictor>)> {
    if args.kube {
        let node = args
            .node_name
            .as_deref()
            .context("--kube needs --node-name or NODE_NAME")?;
        let config = kube_watch::api_config(args.kubeconfig.as_deref()).await?;
        let (watcher, first) = KubeWatcher::start(config.clone(), node).await?;
        log::info!(
            "{} pods on node {node} from the Kubernetes API",
            first.pods.len()
        );
        let evictor = KubeEvictor::new(config).context("Kubernetes API client for evictions")?;
        return Ok((PodSource::Kube(watcher), first, Some(evictor)));
    }
    let Some(pods_dir) = &args.pods else {
        bail!("the agent needs the pods on this node: --pods DIR or --kube (see `monitor --help`)");
    };
    let (watcher, first) = ManifestWatcher::start(pods_dir)
        .with_context(|| format!("watching pod manifests in {}", pods_dir.display()))?;
    Ok((PodSource::Dir(watcher), first, None))
}

/// Kernel source plus how memory numbers are obtained.
enum Source {
    /// Stat events between resyncs.
    Kernel(KernelSource),
    /// Lifecycle events from the kernel, memory numbers by polling.
    KernelLifecycle(KernelSource),
    Poll,
}

impl Source {
    fn kernel(&mut self) -> Option<&mut KernelSource> {
        match self {
            Source::Kernel(k) | Source::KernelLifecycle(k) => Some(k),
            Source::Poll => None,
        }
    }

    fn describe(&self, poll: Duration) -> String {
        let programs = |k: &KernelSource| {
            format!(
                "{}/{} kernel programs",
                k.attached().len(),
                k.attached().len() + k.skipped().len()
            )
        };
        match self {
            Source::Kernel(k) => format!("ebpf ({})", programs(k)),
            Source::KernelLifecycle(k) => {
                format!("ebpf+poll ({}; memory polled every {poll:?})", programs(k))
            }
            Source::Poll => format!("poll (cgroupfs every {poll:?})"),
        }
    }
}

struct Agent {
    args: AgentArgs,
    hierarchy: MemoryHierarchy,
    kubepods: KubepodsCgroup,
    core: AgentCore,
    source: Source,
    manager: StateManager,
    saved: AgentState,
    metrics: Arc<Mutex<Metrics>>,
    pods: Vec<Pod>,
    kills: JoinSet<KillDone>,
    /// With --kube, evictions go through the API and the kubelet stops the pod.
    evictor: Option<KubeEvictor>,
    /// Events counted since they were last added to the checkpoint's counters.
    unsaved_events: u64,
    /// Stalls and bursts, to say what led to a decision.
    causes: CauseLog,
    /// Decision state and node conditions as last written to the checkpoint.
    persisted: Option<(EvictionState, Vec<NodeCondition>)>,
    /// The pod that runs this agent, never a candidate.
    own_pod: OwnPod,
}

/// A finished kill of an evicted pod.
struct KillDone {
    pod: crate::engine::pod_facts::PodRef,
    working_set_before: Option<u64>,
    result: Result<crate::action::KillReport, crate::action::KillError>,
}

impl Agent {
    async fn start(args: AgentArgs, evictor: Option<KubeEvictor>) -> anyhow::Result<Self> {
        let config = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                EvictionConfig::from_yaml(&text).with_context(|| format!("{}", path.display()))?
            }
            None => EvictionConfig::default(),
        };
        let hierarchy = MemoryHierarchy::discover()?;
        let kubepods = match &args.kubepods_cgroup {
            Some(rel) => KubepodsCgroup::from_path(rel),
            None => KubepodsCgroup::detect(&hierarchy.mount)?,
        };
        let kubepods_dir = hierarchy.dir(&kubepods.rel);
        if !kubepods_dir.is_dir() {
            bail!("kubepods cgroup {} does not exist", kubepods_dir.display());
        }
        let memory = read_mem_total()?;
        let capacity = NodeCapacity {
            memory_bytes: memory,
            allocatable_memory_bytes: allocatable_bytes(
                args.allocatable_memory,
                read_memory_limit(&kubepods_dir, hierarchy.version)?,
                memory,
            ),
        };
        let if_unusable = if args.reset_state {
            IfUnusable::Reset
        } else {
            IfUnusable::Refuse
        };
        let (manager, saved, startup) =
            StateManager::load_or_init(&args.checkpoint_dir, if_unusable)?;
        log::info!("checkpoint {}: {startup:?}", manager.path().display());
        let state = persist::restore(&saved, &read_now()?);
        let source = open_source(&args, &hierarchy)?;
        let thresholds: Vec<String> = config
            .thresholds
            .iter()
            .map(|t| format!("{}<{} ({:?})", t.signal.as_str(), t.value, t.kind()))
            .collect();
        log::info!(
            "kubepods {} ({:?} driver, cgroup {}), memory {} (allocatable {}), source {}, thresholds {}{}",
            kubepods.rel,
            kubepods.driver,
            hierarchy.version,
            bytes(memory as i64),
            bytes(capacity.allocatable_memory_bytes as i64),
            source.describe(args.poll_interval),
            thresholds.join(", "),
            if args.dry_run {
                "; dry-run: no process will be signalled"
            } else {
                ""
            }
        );
        let metrics = Arc::new(Mutex::new(Metrics::default()));
        if !args.no_metrics {
            let (addr, _task) = server::serve(args.metrics_addr, metrics.clone())
                .await
                .with_context(|| format!("serving metrics on {}", args.metrics_addr))?;
            log::info!("metrics at http://{addr}/metrics");
        }
        let core = AgentCore::new(config, capacity, &kubepods.rel, state);
        let own_pod = OwnPod::detect(hierarchy.version);
        Ok(Self {
            args,
            hierarchy,
            kubepods,
            core,
            source,
            manager,
            saved,
            metrics,
            pods: Vec::new(),
            kills: JoinSet::new(),
            evictor,
            unsaved_events: 0,
            causes: CauseLog::default(),
            persisted: None,
            own_pod,
        })
    }

    async fn run(mut self, mut watcher: PodSource) -> anyhow::Result<ExitCode> {
        let read_every = match self.source {
            Source::Kernel(_) => self.args.resync_interval,
            Source::KernelLifecycle(_) | Source::Poll => self.args.poll_interval,
        };
        let mut reads = interval(read_every);
        reads.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut status = interval(self.args.status_interval.max(Duration::from_millis(100)));
        let show_status = !self.args.status_interval.is_zero();
        let stop_at = self.args.duration.map(|d| Instant::now() + d);
        let mut sigterm = signal(SignalKind::terminate())?;
        // Sized for a full ring at start: no allocation when records pour in under pressure.
        let mut batch = match self.source {
            Source::Poll => Vec::new(),
            _ => Vec::with_capacity(monitor_common::MAX_RECORDS),
        };
        let mut waiting = interval(WAITING_RECORDS_READ_EVERY);
        waiting.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let wakes_on_growth = matches!(self.source, Source::Kernel(_));
        let mut psi = self.install_psi_wake();
        loop {
            tokio::select! {
                read = next_batch(&mut self.source, &mut batch) => {
                    read.context("reading the kernel ring buffer")?;
                    self.apply_batch(&mut batch)?;
                }
                _ = waiting.tick(), if wakes_on_growth => self.read_waiting(&mut batch)?,
                signal = next_pressure(&mut psi) => {
                    log::debug!("memory pressure {signal:?}: reading cgroupfs now");
                    self.read_unprompted();
                    self.evaluate(None)?;
                }
                _ = reads.tick() => {
                    self.read_unprompted();
                    self.evaluate(None)?;
                    self.save_counters()?;
                }
                change = watcher.next_change() => {
                    let loaded = change?;
                    for error in &loaded.errors {
                        log::warn!("skipped: {error}");
                    }
                    self.apply_pods(loaded.pods);
                    self.evaluate(None)?;
                }
                Some(done) = self.kills.join_next(), if !self.kills.is_empty() => {
                    self.finish_kill(done.context("kill task")?)?;
                    self.evaluate(None)?;
                }
                _ = status.tick(), if show_status => self.print_status(),
                _ = tokio::signal::ctrl_c() => break,
                _ = sigterm.recv() => break,
                _ = sleep_until(stop_at) => break,
            }
            // Every input can move the signals, and with them the growth that must wake us.
            while self.rearm_wake()? {
                self.read_waiting(&mut batch)?;
            }
        }
        self.save_counters()?;
        Ok(ExitCode::SUCCESS)
    }

    fn apply_batch(
        &mut self,
        batch: &mut Vec<Result<KernelEvent, crate::source::event::DecodeError>>,
    ) -> anyhow::Result<()> {
        let newest = self.apply_events(batch)?;
        self.evaluate(newest)
    }

    /// PSI triggers that make a polling agent read at once when memory stalls; none with the
    /// stat programs, whose records already wake it.
    fn install_psi_wake(&self) -> Option<PsiWake> {
        if matches!(self.source, Source::Kernel(_)) || self.args.psi_stall.is_zero() {
            return None;
        }
        let psi = PsiWake::install(&self.hierarchy, &self.kubepods.rel, self.args.psi_stall);
        if psi.watched.is_empty() {
            log::info!("no PSI on this kernel: memory is read every poll interval only");
            return None;
        }
        let files: Vec<String> = psi
            .watched
            .iter()
            .map(|f| f.display().to_string())
            .collect();
        log::info!(
            "between polls, memory is read at once when tasks stall on it for {:?} within {:?} ({})",
            self.args.psi_stall,
            crate::source::pressure::WINDOW,
            files.join(", ")
        );
        Some(psi)
    }

    /// Reads and applies the records the kernel sent without waking us.
    fn read_waiting(
        &mut self,
        batch: &mut Vec<Result<KernelEvent, crate::source::event::DecodeError>>,
    ) -> anyhow::Result<()> {
        let read = self.source.kernel().map_or(0, |k| k.read_pending(batch));
        if read > 0 {
            self.apply_batch(batch)?;
        }
        Ok(())
    }

    /// Tells the kernel how far working sets may grow before a memory threshold could be met,
    /// so records below that send no wake-up. True when that growth was already counted and
    /// the waiting records must be read now.
    fn rearm_wake(&mut self) -> anyhow::Result<bool> {
        let Source::Kernel(kernel) = &mut self.source else {
            return Ok(false);
        };
        let margin = self.args.step.saturating_mul(WAKE_MARGIN_STEPS);
        let headroom = self
            .core
            .memory_headroom()
            .map(|h| h.saturating_sub(margin));
        kernel
            .wake_after_growth(headroom)
            .context("setting the kernel's wake-up level")
    }

    /// Applies decoded kernel records; returns the newest stat event's timestamp.
    fn apply_events(
        &mut self,
        batch: &mut Vec<Result<KernelEvent, crate::source::event::DecodeError>>,
    ) -> anyhow::Result<Option<u64>> {
        let mut cgroup_created = false;
        let received = batch.len() as u64;
        let mut stats = Vec::with_capacity(batch.len());
        for decoded in batch.drain(..) {
            match decoded? {
                KernelEvent::Stat {
                    cgroup_id,
                    stat,
                    ts_ns,
                    delta_bytes,
                    ..
                } => {
                    self.causes.stat(cgroup_id, stat, ts_ns, delta_bytes);
                    stats.push(StatChange {
                        cgroup_id,
                        stat,
                        bytes: delta_bytes,
                        sent_ns: ts_ns,
                    });
                }
                KernelEvent::Mkdir {
                    cgroup_id, path, ..
                } => {
                    self.core.classify(cgroup_id, &path);
                    cgroup_created = true;
                }
                KernelEvent::Rmdir { cgroup_id, .. } => {
                    self.core.forget_cgroup(cgroup_id);
                    self.causes.forget(cgroup_id);
                }
                KernelEvent::Stall {
                    cgroup_id,
                    reclaim,
                    start_ns,
                    duration_ns,
                    ..
                } => {
                    self.causes.stall(cgroup_id, reclaim, start_ns, duration_ns);
                }
                _ => {}
            }
        }
        // After the lifecycle records, so a cgroup created in this batch counts for its pod.
        let newest = self.core.apply_stats(&stats);
        self.unsaved_events += received;
        let mut metrics = self.metrics.try_lock();
        if let Ok(m) = metrics.as_deref_mut() {
            m.events_received += received;
            if let Some(kernel) = self.source.kernel() {
                m.events_lost = kernel.drops().ring_full;
            }
        }
        drop(metrics);
        // A pod whose cgroup did not exist yet may have just got it.
        if cgroup_created && self.waiting_pod_has_its_cgroup() {
            self.apply_pods(self.pods.clone());
        }
        Ok(newest)
    }

    /// Replaces the pod set, finds each pod's cgroup, and reads fresh numbers.
    fn apply_pods(&mut self, pods: Vec<Pod>) {
        let cgroups = resolve_pod_cgroups(&pods, &self.hierarchy, &self.kubepods);
        let mut entries = Vec::with_capacity(pods.len());
        for (pod, cgroup) in pods.iter().zip(cgroups) {
            match PodFacts::from_pod(pod) {
                Ok(facts) => entries.push((facts, cgroup)),
                Err(e) => log::warn!("skipped pod: {e}"),
            }
        }
        let changes = self.core.set_pods(entries);
        self.own_pod.exclude_from(&mut self.core);
        if !changes.added.is_empty() || !changes.removed.is_empty() {
            log::info!(
                "pods: {} added, {} removed, {} known",
                changes.added.len(),
                changes.removed.len(),
                self.core.pod_count()
            );
        }
        self.pods = pods;
        self.read_cgroupfs(true);
    }

    /// A read on the timer or on PSI. With kernel lifecycle events the cgroup classification
    /// is already current. Polling must rewalk the hierarchy, and nothing announces a new
    /// cgroup, so pods still waiting for theirs (the manifest came first, as a pod reaches
    /// the node before its cgroup exists) are looked for here, as on a kernel mkdir event.
    fn read_unprompted(&mut self) {
        let polling = matches!(self.source, Source::Poll);
        if polling && self.waiting_pod_has_its_cgroup() {
            self.apply_pods(self.pods.clone());
        } else {
            self.read_cgroupfs(polling);
        }
    }

    /// Whether a pod known without a cgroup has one now (looked up quietly: its absence was
    /// logged when it came).
    fn waiting_pod_has_its_cgroup(&self) -> bool {
        let waiting: HashSet<&str> = self
            .core
            .pods()
            .filter(|p| p.cgroup.is_none())
            .map(|p| p.facts.pod.uid.as_str())
            .collect();
        !waiting.is_empty()
            && self
                .pods
                .iter()
                .filter(|pod| {
                    pod.metadata
                        .uid
                        .as_deref()
                        .is_some_and(|uid| waiting.contains(uid))
                })
                .any(|pod| find_pod_cgroup(pod, &self.hierarchy, &self.kubepods).is_ok())
    }

    /// Reads every number from cgroupfs; `classify` also rewalks the hierarchy so every
    /// cgroup is attributed to its pod.
    fn read_cgroupfs(&mut self, classify: bool) {
        if classify {
            match CgroupPaths::scan(&self.hierarchy.mount) {
                Ok(paths) => {
                    self.core.clear_cgroups();
                    for (id, path) in paths.iter() {
                        self.core.classify(id, path);
                    }
                }
                Err(e) => log::warn!("scanning {}: {e}", self.hierarchy.mount.display()),
            }
        }
        let version = self.hierarchy.version;
        // Taken before each read: kernel records sent earlier are contained in it.
        let read_ns = monotonic_ns();
        let kubepods = stats::read(&self.hierarchy.dir(&self.kubepods.rel), version);
        match (node_working_set(&self.hierarchy), kubepods) {
            (Ok(node), Ok(kubepods)) => {
                self.core
                    .set_node_reading(node, kubepods.working_set(), read_ns)
            }
            (node, kubepods) => log::warn!(
                "reading node memory: {:?} / {:?}",
                node.err().map(|e| e.to_string()),
                kubepods.err().map(|e| e.to_string())
            ),
        }
        let pods: Vec<(String, Option<String>)> = self
            .core
            .pods()
            .map(|p| {
                (
                    p.facts.pod.uid.clone(),
                    p.cgroup.as_ref().map(|c| c.rel.clone()),
                )
            })
            .collect();
        // Listing every pod's tasks is the larger part of a resync; skip it when no ranking
        // uses the counts.
        let count_processes = self.core.counts_processes();
        for (uid, rel) in pods {
            let Some(rel) = rel else { continue };
            let dir = self.hierarchy.dir(&rel);
            let read_ns = monotonic_ns();
            let working_set = match stats::read(&dir, version) {
                Ok(s) => Some(s.working_set()),
                Err(StatsError::Gone(_)) => None,
                Err(e) => {
                    log::warn!("{e}");
                    None
                }
            };
            let processes = if count_processes {
                subtree_pids(&dir).map_or(0, |p| p.len() as u64)
            } else {
                0
            };
            self.core
                .set_pod_reading(&uid, working_set, processes, read_ns);
        }
        self.core
            .set_pid_reading(read_pid_available().ok().flatten());
    }

    /// Runs the decision step and acts on it; `trigger_ns` is the kernel event that led here.
    fn evaluate(&mut self, trigger_ns: Option<u64>) -> anyhow::Result<()> {
        // Both clocks are read back to back before deciding, so the report's monotonic stamp
        // is the instant the interval and grace rules saw, however long the rest takes.
        let decided_ns = monotonic_ns();
        let decision = self.core.decide(&ManualClock::new(BootClock.now()));
        if let Some(eviction) = decision.eviction() {
            self.report(eviction, decided_ns, trigger_ns)?;
            self.act(eviction);
        }
        self.update_metrics(decision.eviction(), trigger_ns);
        // Most evaluations change nothing worth keeping; skip building the checkpoint then.
        let snapshot = (self.core.state.clone(), decision.node_conditions.clone());
        if decision.eviction().is_none() && self.persisted.as_ref() == Some(&snapshot) {
            return Ok(());
        }
        self.persisted = Some(snapshot);
        let now = read_now()?;
        persist::save(
            &self.core.state,
            &decision.node_conditions,
            &mut self.saved,
            &now,
        );
        if let Some(eviction) = decision.eviction() {
            self.saved.record_eviction(
                persist::saved_pod(&eviction.pod),
                eviction.signal.as_str(),
                0,
                &now,
            );
        }
        self.manager.save_if_changed(&self.saved)?;
        Ok(())
    }

    fn report(
        &mut self,
        eviction: &Eviction,
        decided_ns: u64,
        trigger_ns: Option<u64>,
    ) -> anyhow::Result<()> {
        let Some(entry) = self.core.pod(&eviction.pod.uid) else {
            return Ok(());
        };
        let Some((policy, usage)) = self.core.rank_inputs(&eviction.pod.uid, eviction.signal)
        else {
            return Ok(());
        };
        let threshold = self
            .core
            .config()
            .thresholds
            .iter()
            .find(|t| t.id() == eviction.threshold)
            .map(|t| t.value.resolve(eviction.observed.capacity))
            .unwrap_or_default();
        let report = DecisionReport::new(
            eviction,
            DecisionContext {
                dry_run: self.args.dry_run,
                monotonic_ns: decided_ns,
                wall_unix_ms: crate::clock::unix_ms_now(),
                event_monotonic_ns: trigger_ns,
                threshold,
                facts: &entry.facts,
                usage,
                policy,
                cause: self
                    .causes
                    .explain(&self.core.cgroups_of(&eviction.pod.uid), monotonic_ns()),
            },
        );
        let line = match self.args.output {
            OutputFormat::Text => report.text(),
            OutputFormat::Json => serde_json::to_string(&report)?,
        };
        let mut out = io::stdout().lock();
        writeln!(out, "{line}")?;
        out.flush()?;
        Ok(())
    }

    /// After a restart: pods the checkpoint lists among the recent evictions that are still
    /// in the pod set but have no process left (or no cgroup) are taken as stopped by this
    /// agent, as they were before the restart, so they are not chosen again. A listed pod
    /// that runs (a dry-run decision, or started again) ranks as usual.
    fn restore_stopped_pods(&mut self) {
        let evicted: HashSet<&str> = self
            .saved
            .v1
            .recent_evictions
            .iter()
            .map(|r| r.pod.uid.as_str())
            .collect();
        let stopped: Vec<_> = self
            .core
            .pods()
            .filter(|p| evicted.contains(p.facts.pod.uid.as_str()))
            .filter(|p| match &p.cgroup {
                Some(c) => subtree_pids(&self.hierarchy.dir(&c.rel)).is_ok_and(|p| p.is_empty()),
                None => true,
            })
            .map(|p| p.facts.pod.clone())
            .collect();
        for pod in stopped {
            log::info!(
                "pod {pod} was evicted before the restart and has not run since: not a candidate"
            );
            self.core.mark_evicted(&pod.uid);
        }
    }

    /// Kills the evicted pod's cgroup in the background, or with --kube asks the API server
    /// to evict it; nothing in dry-run.
    fn act(&mut self, eviction: &Eviction) {
        if self.args.dry_run {
            return;
        }
        if let Some(evictor) = &self.evictor {
            // The pod leaving the watch ends the wait for it (AgentCore::set_pods).
            evictor.spawn(eviction.pod.clone(), eviction.grace_period_seconds);
            return;
        }
        let pod = eviction.pod.clone();
        // Stopped for good, like a pod the kubelet evicted: never chosen again while it is
        // listed (a manifest outlives its processes).
        self.core.mark_evicted(&pod.uid);
        let Some(rel) = self
            .core
            .pod(&pod.uid)
            .and_then(|p| p.cgroup.as_ref())
            .map(|c| c.rel.clone())
        else {
            log::warn!(
                "{}: no cgroup to act on; waiting for the cleanup timeout",
                eviction.pod
            );
            return;
        };
        let timings = KillTimings {
            grace: Duration::from_secs(u64::try_from(eviction.grace_period_seconds).unwrap_or(0)),
            cleanup_timeout: self.core.config().monitor.pod_cleanup_timeout,
        };
        let hierarchy = self.hierarchy.clone();
        let working_set_before = self.core.pod_working_set(&pod.uid);
        self.kills.spawn(async move {
            let result = kill_cgroup_tree(&hierarchy, &rel, timings).await;
            KillDone {
                pod,
                working_set_before,
                result,
            }
        });
    }

    /// Re-reads fresh numbers after a kill and records what it freed.
    fn finish_kill(&mut self, done: KillDone) -> anyhow::Result<()> {
        self.read_cgroupfs(false);
        let uid = &done.pod.uid;
        let after = self.core.pod_working_set(uid).unwrap_or(0);
        let freed = done.working_set_before.unwrap_or(0).saturating_sub(after);
        match &done.result {
            Ok(report) => log::info!(
                "pod {} stopped: {:?} after {:?} ({} processes signalled{}), {} freed",
                done.pod,
                report.outcome,
                report.elapsed,
                report.terminated,
                if report.forced { ", forced" } else { "" },
                bytes(freed as i64)
            ),
            Err(e) => log::warn!("killing pod {}: {e}", done.pod),
        }
        self.core.state.pod_cleaned_up(uid);
        persist::record_freed(&mut self.saved, uid, freed);
        self.manager.save_if_changed(&self.saved)?;
        Ok(())
    }

    fn update_metrics(&self, eviction: Option<&Eviction>, trigger_ns: Option<u64>) {
        let Ok(mut m) = self.metrics.try_lock() else {
            return;
        };
        for (signal, observed) in self.core.observations() {
            m.signal_observations
                .insert(signal.as_str(), observed.available as f64);
        }
        m.threshold_met.clear();
        for threshold in &self.core.config().thresholds {
            let met = self
                .core
                .state
                .thresholds_first_observed
                .iter()
                .any(|o| o.threshold == threshold.id());
            *m.threshold_met
                .entry(threshold.signal.as_str())
                .or_default() |= met;
        }
        m.pods_ranked = self.core.pod_count() as u64;
        if let Some(eviction) = eviction {
            *m.evictions_by_signal
                .entry(eviction.signal.as_str())
                .or_default() += 1;
            if let Some(ts) = trigger_ns {
                m.decision_latency_seconds
                    .observe(monotonic_ns().saturating_sub(ts) as f64 / 1e9);
            }
        }
    }

    fn print_status(&self) {
        let observed = self.core.observations();
        let signals: Vec<String> = observed
            .iter()
            .map(|(s, o)| match s {
                Signal::PidAvailable => format!("{} {}", s.as_str(), o.available),
                _ => format!("{} {}", s.as_str(), bytes(o.available)),
            })
            .collect();
        eprintln!("status: {}", signals.join(", "));
        let ranking = self.core.ranking(Signal::AllocatableMemoryAvailable);
        for (i, (facts, usage)) in ranking.iter().take(5).enumerate() {
            let ws = usage.map_or("no stats".to_string(), |u| {
                bytes(u.memory_working_set_bytes as i64)
            });
            eprintln!(
                "  {:>2}. {:<40} ws {:>9}  request {:>9}  priority {}{}",
                i + 1,
                facts.pod.to_string(),
                ws,
                bytes(facts.memory_request.ceil_units()),
                facts.priority,
                if facts.critical { "  (critical)" } else { "" }
            );
        }
    }

    /// Adds the events seen since the last call to the checkpoint's counters.
    fn save_counters(&mut self) -> anyhow::Result<()> {
        let lost = self.source.kernel().map_or(0, |k| k.drops().ring_full);
        let already_lost = self.saved.v1.counters.events_lost;
        self.saved
            .count_events(self.unsaved_events, lost.saturating_sub(already_lost));
        self.unsaved_events = 0;
        self.manager.save_if_changed(&self.saved)?;
        Ok(())
    }
}

/// Opens the event source the flags and the kernel allow.
fn open_source(args: &AgentArgs, hierarchy: &MemoryHierarchy) -> anyhow::Result<Source> {
    if args.source == SourceMode::Poll {
        return Ok(Source::Poll);
    }
    let options = LoadOptions {
        step_bytes: args.step,
        hierarchy_id: hierarchy.hierarchy_id,
        memcg_hook: MemcgHook::Auto,
    };
    // Reclaim stalls of at least 1 ms are kept to explain decisions, as `monitor trace` shows them.
    let incidents = IncidentOptions {
        min_stall: Duration::from_millis(1),
    };
    match KernelSource::load_with_incidents(options, incidents) {
        Ok(kernel) => {
            for skipped in kernel.skipped() {
                log::warn!(
                    "not attached: {} ({}); {}",
                    skipped.program.hook(),
                    skipped.reason,
                    skipped.program.fallback
                );
            }
            Ok(if kernel.tracks_memory() {
                Source::Kernel(kernel)
            } else {
                Source::KernelLifecycle(kernel)
            })
        }
        Err(e) if args.source == SourceMode::Auto => {
            log::warn!("kernel programs unavailable, polling cgroupfs instead: {e}");
            Ok(Source::Poll)
        }
        Err(e) => Err(e.into()),
    }
}

async fn next_batch(
    source: &mut Source,
    batch: &mut Vec<Result<KernelEvent, crate::source::event::DecodeError>>,
) -> io::Result<()> {
    match source.kernel() {
        Some(kernel) => kernel.next_batch(batch).await,
        None => std::future::pending().await,
    }
}

async fn next_pressure(psi: &mut Option<PsiWake>) -> crate::source::pressure::PressureSignal {
    match psi {
        Some(psi) => psi.next().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
