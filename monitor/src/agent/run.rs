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
    time::Duration,
};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Pod;
use tokio::{
    signal::unix::{SignalKind, signal},
    task::JoinSet,
    time::{Instant, MissedTickBehavior, interval},
};
use tracing::Instrument as _;

use super::{
    actuator::{ActionDone, ActionOutcome, ActionRequest, Actuator, CgroupKiller, DryRun, KubeApi},
    args::AgentArgs,
    cause::CauseLog,
    checkpoint_writer::{CheckpointHealth, CheckpointWriter},
    core::{AgentCore, NodeCapacity},
    decision_log,
    event_source::{Batch, Source},
    local_first::LocalFirst,
    node_status::NodeStatusPublisher,
    persist,
    psi_wake::PsiWake,
    publish::{self, RecentDecisions},
    reader::{Cgroupfs, MachineReader as _, ReadFailures, read_all},
    realtime,
    report::{DecisionContext, DecisionReport},
    resync::ResyncSchedule,
    self_protect::{self, OwnPod},
    usage::StatChange,
};
use crate::{
    action::{KubeEvictor, kube_event::EventPoster},
    cgroupfs::{MemoryHierarchy, procs::subtree_pids},
    checkpoint::{IfUnusable, StateManager, read_now},
    engine::{
        checkpoint::AgentState,
        config::EvictionConfig,
        decide::{Eviction, EvictionState},
        instant::{Clock as _, ManualClock},
        pod_facts::{PodFacts, PodRef},
        signal::NodeCondition,
        signal::Signal,
        threshold::ThresholdKind,
    },
    flags::OutputFormat,
    metrics::{
        Metrics, server,
        snapshot::{self, DebugRanking, DecisionView, Publisher, Readiness, Snapshot, SourceView},
    },
    node::{
        memory::allocatable_bytes,
        read::{read_mem_total, read_memory_limit},
    },
    pods::{
        KubeWatcher, KubepodsCgroup, LoadedPods, ManifestWatcher, PodSource, find_pod_cgroup,
        kube_watch, kubelet_view, resolve_pod_cgroups,
    },
    source::event::KernelEvent,
    system_clock::{BootClock, monotonic_ns},
    units::bytes,
};

/// How often stat records the kernel sent without a wake-up (far from every threshold) are
/// read, so rankings, metrics and status stay this fresh.
const WAITING_RECORDS_READ_EVERY: Duration = Duration::from_secs(1);
/// The last records (of `--step` bytes each) before a threshold could be met wake the agent
/// too, so it is already running when the crossing record comes: a wake-up from idle costs
/// about a millisecond on a virtual machine's halted vCPU.
const WAKE_MARGIN_STEPS: u64 = 4;
/// How many resyncs pass between sweeps of the kernel's per-cgroup map (a full hierarchy
/// walk, so not at every resync).
const SWEEP_EVERY_RESYNCS: u32 = 6;
/// The event loop turns at least this often, idle or not, so `/healthz` can tell a stuck
/// loop from a quiet node, and what readers see stays this fresh.
const TURN_AT_LEAST_EVERY: Duration = Duration::from_secs(1);
/// How long to wait before opening the pod source again after it failed.
const POD_SOURCE_RETRY: Duration = Duration::from_secs(5);

/// Runs the agent until SIGINT, SIGTERM or `--duration`.
pub fn run(args: AgentArgs) -> anyhow::Result<ExitCode> {
    self_protect::protect_process(args.oom_score_adj, !args.no_mlock);
    if let Some(priority) = args.realtime_priority {
        // This thread runs the current-thread runtime below, the event loop.
        realtime::make_current_thread_realtime(priority)?;
        tracing::info!("event thread under SCHED_FIFO priority {priority}");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let (watcher, first, evictor) = open_pods(&args).await?;
        for error in &first.errors {
            tracing::warn!("skipped: {error}");
        }
        let mut agent = Agent::start(args, evictor).await?;
        agent.apply_pods(first.pods);
        agent.restore_stopped_pods();
        agent.resume_pending_eviction();
        agent.evaluate(None);
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
        tracing::info!(
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

struct Agent {
    args: AgentArgs,
    hierarchy: MemoryHierarchy,
    kubepods: KubepodsCgroup,
    core: AgentCore,
    source: Source,
    reader: Cgroupfs,
    read_failures: ReadFailures,
    writer: CheckpointWriter<StateManager>,
    saved: AgentState,
    /// Owned by the loop; readers get a copy in each published snapshot.
    metrics: Metrics,
    publisher: Publisher,
    decisions: RecentDecisions,
    /// Why the pod source is not open, while it is being opened again.
    pod_source_down: Option<String>,
    pods: Vec<Pod>,
    /// Dry-run, a cgroup kill, or the Eviction API (`--kube`: the kubelet stops the pod).
    actuator: Box<dyn Actuator>,
    actions: JoinSet<ActionDone>,
    /// Whether an undecodable kernel record was logged (the kernel source counts them).
    undecodable_logged: bool,
    /// Kernel records lost (ring full) since they were last added to the checkpoint.
    lost_unsaved: u64,
    /// Resyncs since the kernel's per-cgroup map was last swept of removed cgroups.
    resyncs_since_sweep: u32,
    /// Which pods each timed resync reads.
    resync: ResyncSchedule,
    /// Actions that failed or were refused.
    action_failures: u64,
    /// Events counted since they were last added to the checkpoint's counters.
    unsaved_events: u64,
    /// Stalls and bursts, to say what led to a decision.
    causes: CauseLog,
    /// Decision state and node conditions as last written to the checkpoint.
    persisted: Option<(EvictionState, Vec<NodeCondition>)>,
    /// The pod that runs this agent, never a candidate.
    own_pod: OwnPod,
    /// With --kube: the agent's own node conditions, published on the Node.
    node_status: Option<NodeStatusPublisher>,
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
        let opened = StateManager::open(&args.checkpoint_dir, if_unusable)?;
        let (saved, startup) = (opened.state, opened.startup);
        tracing::info!("checkpoint {}: {startup}", opened.manager.path().display());
        let writer = match &opened.write_problem {
            None => CheckpointWriter::new(opened.manager),
            Some(problem) => {
                CheckpointWriter::failing_since_start(opened.manager, problem, Instant::now())
            }
        };
        let state = persist::restore(&saved, &read_now()?);
        let source = Source::open(&args, &hierarchy)?;
        let thresholds: Vec<String> = config
            .thresholds
            .iter()
            .map(|t| format!("{}<{} ({:?})", t.signal.as_str(), t.value, t.kind()))
            .collect();
        tracing::info!(
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
        let (publisher, view) = snapshot::channel();
        if !args.no_metrics {
            let (addr, _task) = server::serve(args.metrics_addr, view)
                .await
                .with_context(|| format!("serving metrics on {}", args.metrics_addr))?;
            tracing::info!("metrics at http://{addr}/metrics");
            tracing::info!("health at /healthz and /readyz, the ranking at /debug/ranking");
        }
        let core = AgentCore::new(config, capacity, &kubepods.rel, state);
        let unobserved = core.unobserved_signals();
        if !unobserved.is_empty() {
            let names: Vec<String> = unobserved.iter().map(ToString::to_string).collect();
            tracing::warn!(
                "thresholds on {} are not acted on: the agent observes only memory.available, \
                 allocatableMemory.available and pid.available (the kubelet enforces the rest)",
                names.join(", ")
            );
        }
        let node = args.node_name.as_deref().unwrap_or_default();
        let events = evictor
            .as_ref()
            .map(|evictor| EventPoster::new(evictor.client(), node));
        // A dry run writes nothing to the cluster unless asked to.
        let node_status = evictor
            .as_ref()
            .filter(|_| !args.dry_run || args.dry_run_events)
            .map(|evictor| NodeStatusPublisher::spawn(evictor.client(), node));
        let actuator: Box<dyn Actuator> = match (evictor, events) {
            (_, events) if args.dry_run => Box::new(DryRun {
                events: events.filter(|_| args.dry_run_events),
            }),
            (Some(evictor), Some(events)) => Box::new(LocalFirst {
                killer: CgroupKiller {
                    hierarchy: hierarchy.clone(),
                },
                api: KubeApi {
                    evictor: if args.ignore_disruption_budgets {
                        evictor.deleting()
                    } else {
                        evictor
                    },
                    events,
                },
                hard_action: args.hard_action.kube_hard_action,
            }),
            _ => Box::new(CgroupKiller {
                hierarchy: hierarchy.clone(),
            }),
        };
        let own_pod = OwnPod::detect(hierarchy.version);
        Ok(Self {
            args,
            reader: Cgroupfs {
                hierarchy: hierarchy.clone(),
            },
            hierarchy,
            kubepods,
            core,
            source,
            read_failures: ReadFailures::default(),
            writer,
            saved,
            metrics: Metrics::default(),
            publisher,
            decisions: RecentDecisions::default(),
            pod_source_down: None,
            pods: Vec::new(),
            actuator,
            actions: JoinSet::new(),
            undecodable_logged: false,
            lost_unsaved: 0,
            resyncs_since_sweep: 0,
            resync: ResyncSchedule::default(),
            action_failures: 0,
            unsaved_events: 0,
            causes: CauseLog::default(),
            persisted: None,
            own_pod,
            node_status,
        })
    }

    async fn run(mut self, watcher: PodSource) -> anyhow::Result<ExitCode> {
        let read_every = if self.source.memory_from_kernel() {
            self.args.resync_interval
        } else {
            self.args.poll_interval
        };
        let mut reads = interval(read_every);
        reads.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut status = interval(self.args.status_interval.max(Duration::from_millis(100)));
        let show_status = !self.args.status_interval.is_zero();
        let stop_at = self.args.duration.map(|d| Instant::now() + d);
        let mut sigterm = signal(SignalKind::terminate())?;
        // Sized for a full ring at start: no allocation when records pour in under pressure.
        let mut batch = match self.source.kernel {
            None => Vec::new(),
            Some(_) => Vec::with_capacity(monitor_common::MAX_RECORDS),
        };
        let mut waiting = interval(WAITING_RECORDS_READ_EVERY);
        waiting.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let wakes_on_growth = self.source.memory_from_kernel();
        let mut psi = self.install_psi_wake();
        // None while the pod source is being opened again after it failed.
        let mut watcher = Some(watcher);
        let mut reopen_at = None;
        let mut turn = interval(TURN_AT_LEAST_EVERY);
        turn.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                read = self.source.next_batch(&mut batch) => match read {
                    Ok(()) => self.apply_batch(&mut batch),
                    Err(e) => {
                        tracing::warn!("reading the kernel ring buffer: {e}; reading cgroupfs instead");
                        self.read_unprompted();
                        self.evaluate(None);
                    }
                },
                _ = waiting.tick(), if wakes_on_growth => {
                    self.read_waiting(&mut batch);
                    self.take_losses();
                }
                signal = next_pressure(&mut psi) => {
                    tracing::debug!("memory pressure {signal:?}: reading cgroupfs now");
                    self.read_unprompted();
                    self.evaluate(None);
                }
                _ = reads.tick() => {
                    self.resync.tick(self.source.memory_from_kernel());
                    self.read_unprompted();
                    self.sweep_kernel_map();
                    self.take_losses();
                    self.evaluate(None);
                    self.save_counters();
                }
                change = next_change(&mut watcher) => match change {
                    Ok(loaded) => {
                        for error in &loaded.errors {
                            tracing::warn!("skipped: {error}");
                        }
                        self.apply_pods(loaded.pods);
                        self.evaluate(None);
                    }
                    Err(e) => {
                        tracing::error!(
                            "pod source failed: {e}; deciding on the {} pods known, opening it \
                             again in {POD_SOURCE_RETRY:?}",
                            self.pods.len()
                        );
                        self.pod_source_down = Some(format!("pod source failed: {e}"));
                        watcher = None;
                        reopen_at = Some(Instant::now() + POD_SOURCE_RETRY);
                    }
                },
                _ = sleep_until(reopen_at), if reopen_at.is_some() => {
                    reopen_at = None;
                    match open_pods(&self.args).await {
                        Ok((reopened, loaded, _)) => {
                            tracing::info!("pod source open again");
                            self.pod_source_down = None;
                            watcher = Some(reopened);
                            self.apply_pods(loaded.pods);
                            self.evaluate(None);
                        }
                        Err(e) => {
                            tracing::warn!("opening the pod source again: {e:#}");
                            reopen_at = Some(Instant::now() + POD_SOURCE_RETRY);
                        }
                    }
                }
                Some(done) = self.actions.join_next(), if !self.actions.is_empty() => {
                    match done {
                        Ok(done) => self.step_done(done),
                        Err(e) => tracing::error!("eviction task failed: {e}"),
                    }
                    self.evaluate(None);
                }
                _ = sleep_until(self.writer.retry_at()), if self.writer.retry_at().is_some() => {
                    self.writer.retry(&self.saved, Instant::now());
                }
                _ = status.tick(), if show_status => self.print_status(),
                // Refreshes what readers see (the checkpoint's failing time, the heartbeat).
                _ = turn.tick() => self.update_metrics(None, None),
                _ = tokio::signal::ctrl_c() => break,
                _ = sigterm.recv() => break,
                _ = sleep_until(stop_at) => break,
            }
            // Every input can move the signals, and with them the growth that must wake us.
            while self.rearm_wake() {
                self.read_waiting(&mut batch);
            }
            self.publisher.heartbeat.beat(monotonic_ns());
        }
        self.save_counters();
        Ok(ExitCode::SUCCESS)
    }

    fn apply_batch(&mut self, batch: &mut Batch) {
        let newest = self.apply_events(batch);
        self.evaluate(newest);
    }

    /// PSI triggers that make a polling agent read at once when memory stalls; none with the
    /// stat programs, whose records already wake it.
    fn install_psi_wake(&self) -> Option<PsiWake> {
        if self.source.memory_from_kernel() || self.args.psi_stall.is_zero() {
            return None;
        }
        let psi = PsiWake::install(&self.hierarchy, &self.kubepods.rel, self.args.psi_stall);
        if psi.watched.is_empty() {
            tracing::info!("no PSI on this kernel: memory is read every poll interval only");
            return None;
        }
        let files: Vec<String> = psi
            .watched
            .iter()
            .map(|f| f.display().to_string())
            .collect();
        tracing::info!(
            "between polls, memory is read at once when tasks stall on it for {:?} within {:?} ({})",
            self.args.psi_stall,
            crate::source::pressure::WINDOW,
            files.join(", ")
        );
        Some(psi)
    }

    /// Reads and applies the records the kernel sent without waking us.
    fn read_waiting(&mut self, batch: &mut Batch) {
        let read = self
            .source
            .kernel
            .as_mut()
            .map_or(0, |k| k.read_pending(batch));
        if read > 0 {
            self.apply_batch(batch);
        }
    }

    /// Tells the kernel how far working sets may grow before a memory threshold could be met,
    /// so records below that send no wake-up. True when that growth was already counted and
    /// the waiting records must be read now. A failure to set it leaves records waking the
    /// agent as before, which costs CPU but no decision.
    fn rearm_wake(&mut self) -> bool {
        let Some(kernel) = self.source.memory_kernel() else {
            return false;
        };
        let margin = self.args.step.saturating_mul(WAKE_MARGIN_STEPS);
        let headroom = self
            .core
            .memory_headroom()
            .map(|h| h.saturating_sub(margin));
        kernel.wake_after_growth(headroom).unwrap_or_else(|e| {
            tracing::warn!("setting the kernel's wake-up level: {e}");
            false
        })
    }

    /// Applies decoded kernel records; returns the newest stat event's timestamp. A record
    /// that does not decode is counted and skipped.
    fn apply_events(&mut self, batch: &mut Batch) -> Option<u64> {
        let mut cgroup_created = false;
        let received = batch.len() as u64;
        let mut stats = Vec::with_capacity(batch.len());
        for decoded in batch.drain(..) {
            let event = match decoded {
                Ok(event) => event,
                Err(e) => {
                    if !self.undecodable_logged {
                        tracing::warn!(
                            "skipping a kernel record that does not decode: {e} (counted in \
                             monitor_events_undecodable_total; logged once)"
                        );
                        self.undecodable_logged = true;
                    }
                    continue;
                }
            };
            match event {
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
        let stopped_pod_moved = stats
            .iter()
            .any(|c| self.core.belongs_to_stopped_pod(c.cgroup_id));
        self.unsaved_events += received;
        self.metrics.events_received += received;
        // A pod whose cgroup did not exist yet may have just got it; a restarted container
        // of a stopped pod gets a new cgroup, or at least moves memory in the old one.
        if cgroup_created && self.waiting_pod_has_its_cgroup() {
            self.apply_pods(self.pods.clone());
        }
        if cgroup_created || stopped_pod_moved {
            self.revive_restarted_pods();
        }
        newest
    }

    /// Replaces the pod set, finds each pod's cgroup, and reads fresh numbers.
    fn apply_pods(&mut self, mut pods: Vec<Pod>) {
        pods.retain(|pod| kubelet_view::runs_here(pod, self.args.node_name.as_deref()));
        let cgroups = resolve_pod_cgroups(&pods, &self.hierarchy, &self.kubepods);
        let mut entries = Vec::with_capacity(pods.len());
        for (pod, cgroup) in pods.iter().zip(cgroups) {
            match PodFacts::from_pod(pod) {
                Ok(facts) => entries.push((facts, cgroup)),
                Err(e) => tracing::warn!("skipped pod: {e}"),
            }
        }
        let changes = self.core.set_pods(entries);
        self.own_pod.exclude_from(&mut self.core);
        if !changes.added.is_empty() || !changes.removed.is_empty() {
            tracing::info!(
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
        if self.source.kernel.is_none() {
            self.rediscover();
        } else {
            self.read_cgroupfs(false);
        }
        self.revive_restarted_pods();
    }

    /// Rewalks the hierarchy and reads every number, first finding the cgroups of pods that
    /// were waiting for theirs.
    fn rediscover(&mut self) {
        if self.waiting_pod_has_its_cgroup() {
            self.apply_pods(self.pods.clone());
        } else {
            self.read_cgroupfs(true);
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
                    crate::engine::pod_facts::kubelet_uid(pod)
                        .is_some_and(|uid| waiting.contains(uid))
                })
                .any(|pod| find_pod_cgroup(pod, &self.hierarchy, &self.kubepods).is_ok())
    }

    /// Reads every number from cgroupfs; `classify` also rewalks the hierarchy so every
    /// cgroup is attributed to its pod.
    fn read_cgroupfs(&mut self, classify: bool) {
        read_all(
            &self.reader,
            &mut self.core,
            &self.kubepods.rel,
            classify,
            self.resync.take_scope(classify),
            &mut self.read_failures,
        );
    }

    /// Runs the decision step and acts on it; `trigger_ns` is the kernel event that led here.
    /// Nothing here can stop the agent: a report that cannot be printed or a checkpoint that
    /// cannot be written is logged, and the action goes ahead.
    fn evaluate(&mut self, trigger_ns: Option<u64>) {
        // Both clocks are read back to back before deciding, so the report's monotonic stamp
        // is the instant the interval and grace rules saw, however long the rest takes.
        let decided_ns = monotonic_ns();
        let decision = self.core.decide(&ManualClock::new(BootClock.now()));
        if self.args.dry_run
            && decision.eviction().is_some()
            && let Some(pending) = &mut self.core.state.awaiting_cleanup
        {
            // Nothing is signalled in a dry run: there is no grace period to wait out, only
            // the cleanup timeout, as for a pod that does not go.
            pending.grace_period_seconds = 0;
        }
        if let Some(eviction) = decision.eviction() {
            let span = decision_log::open(eviction, trigger_ns);
            let _in_decision = span.enter();
            if let Err(e) = self.report(eviction, decided_ns, trigger_ns) {
                tracing::error!("printing the decision for {}: {e}", eviction.pod);
            }
            let grace = Duration::from_secs(grace_secs(eviction.grace_period_seconds));
            self.act(
                eviction.pod.clone(),
                grace,
                eviction.grace_period_seconds,
                eviction.reason.clone(),
                eviction.threshold.kind == ThresholdKind::Hard,
                span.clone(),
            );
        }
        if let Some(node_status) = &self.node_status {
            node_status.set(&decision.node_conditions);
        }
        self.update_metrics(decision.eviction(), trigger_ns);
        // Most evaluations change nothing worth keeping; skip building the checkpoint then.
        let snapshot = (self.core.state.clone(), decision.node_conditions.clone());
        if decision.eviction().is_none() && self.persisted.as_ref() == Some(&snapshot) {
            return;
        }
        self.persisted = Some(snapshot);
        let now = match read_now() {
            Ok(now) => now,
            Err(e) => {
                tracing::warn!("reading the clocks for the checkpoint: {e}");
                return;
            }
        };
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
            self.saved
                .record_grace_period(eviction.grace_period_seconds);
        }
        self.writer.save(&self.saved, Instant::now());
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
                wall_unix_ms: crate::system_clock::unix_ms_now(),
                event_monotonic_ns: trigger_ns,
                threshold,
                facts: &entry.facts,
                usage,
                policy,
                cause: self
                    .causes
                    .explain(&self.core.cgroups_of(&eviction.pod.uid), monotonic_ns()),
                route: self
                    .actuator
                    .route(eviction.threshold.kind == ThresholdKind::Hard),
            },
        );
        decision_log::decided(&report);
        let text = report.text();
        let line = match self.args.output {
            OutputFormat::Text => text.clone(),
            OutputFormat::Json => serde_json::to_string(&report)?,
        };
        self.decisions.push(DecisionView {
            report,
            text,
            outcome: self.args.dry_run.then(|| "dry-run: nothing done".into()),
        });
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
            tracing::info!(
                pod.uid = %pod.uid,
                "pod {pod} was evicted before the restart and has not run since: not a candidate"
            );
            self.core.mark_evicted(&pod.uid);
            self.core.mark_stopped(&pod.uid);
        }
    }

    /// Stopped pods whose cgroup holds processes again (the kubelet restarted their
    /// containers, per their restartPolicy) rank again by the kubelet's order.
    fn revive_restarted_pods(&mut self) {
        for (uid, rel) in self.core.stopped_pods() {
            if self.reader.process_count(&rel).is_ok_and(|n| n > 0) {
                tracing::info!(
                    pod.uid = %uid,
                    "pod {uid} runs again after its eviction (containers restarted): a \
                     candidate again"
                );
                self.core.runs_again(&uid);
            }
        }
    }

    /// Starts the eviction's action in the background: a kill of the pod's cgroup, or with
    /// --kube an Eviction through the API; nothing in dry-run. `grace` is the time left
    /// before force; `message` the decision's, for the pod's Event; `hard` whether a hard
    /// threshold decided it (with --kube the pod is then stopped on the node first).
    fn act(
        &mut self,
        pod: PodRef,
        grace: Duration,
        grace_period_seconds: i64,
        message: String,
        hard: bool,
        span: tracing::Span,
    ) {
        let request = ActionRequest {
            cgroup: self
                .core
                .pod(&pod.uid)
                .and_then(|p| p.cgroup.as_ref())
                .map(|c| c.rel.clone()),
            working_set_before: self.core.pod_working_set(&pod.uid),
            grace,
            grace_period_seconds,
            pod,
            message,
            hard,
            span: span.clone(),
        };
        let local = self.actuator.route(hard).is_some_and(|r| r.kills());
        let uid = request.pod.uid.clone();
        let pod = request.pod.to_string();
        if let Some(task) = self.actuator.start(request) {
            // Stopped for good, like a pod the kubelet evicted: never chosen again while it
            // is listed (a manifest outlives its processes). With --kube the pod leaves the
            // watch instead.
            if local {
                self.core.mark_evicted(&uid);
            }
            tracing::info!(grace_s = grace.as_secs(), "eviction of {pod} started");
            self.actions.spawn(task.instrument(span));
        } else {
            decision_log::dry_run(&span);
        }
    }

    /// After a restart: an eviction whose pod still runs is finished on its original
    /// deadline (SIGTERM again, force once its grace period from the decision is over),
    /// instead of being waited out for the cleanup timeout and started over.
    fn resume_pending_eviction(&mut self) {
        let Some(pending) = self.core.state.awaiting_cleanup.clone() else {
            return;
        };
        let pod = pending.pod.clone();
        let running = self
            .core
            .pod(&pod.uid)
            .and_then(|p| p.cgroup.as_ref())
            .is_some_and(|c| {
                subtree_pids(&self.hierarchy.dir(&c.rel)).is_ok_and(|pids| !pids.is_empty())
            });
        if !running || !self.evictor_is_local() {
            return;
        }
        let Some(grace_period_seconds) = self.saved.pending_grace_period_seconds() else {
            tracing::warn!(
                "pod {pod} was being evicted before the restart, but the checkpoint does not \
                 say its grace period (an older version wrote it): it is decided on again once \
                 the cleanup timeout has passed"
            );
            return;
        };
        let deadline = pending
            .evicted_at
            .saturating_add(Duration::from_secs(grace_secs(grace_period_seconds)));
        let left = deadline.saturating_since(BootClock.now());
        tracing::info!(
            "resuming the eviction of {pod} begun before the restart: force in {left:?}, at the \
             end of its {grace_period_seconds}s grace period"
        );
        // Only a --pods eviction is resumed; the flag is not read on that route.
        let span = decision_log::resumed(&pod);
        let _in_decision = span.enter();
        self.act(
            pod,
            left,
            grace_period_seconds,
            "resumed after a restart".into(),
            true,
            span.clone(),
        );
    }

    /// Whether evictions are carried out on this node (a cgroup kill), not through the API.
    fn evictor_is_local(&self) -> bool {
        !self.args.dry_run && !self.args.kube
    }

    /// Hands a finished step to the actuator's action path, which says what the decision
    /// state learns of it and which step runs next.
    fn step_done(&mut self, done: ActionDone) {
        let after = self.actuator.finished(done);
        if let Some(task) = after.next {
            self.actions.spawn(task);
        }
        if let Some(done) = after.decided {
            self.finish_action(done);
        }
        if let Some(recorded) = after.recorded {
            self.action_failures += u64::from(recorded.failed);
            self.decisions.amend(&recorded.pod.uid, &recorded.text);
        }
    }

    /// Takes an action's report back into the decision state: a pod known stopped lifts the
    /// wait for its cleanup at once; a failed action lifts it too, so the next decision is
    /// not held back by a pod that is not going.
    fn finish_action(&mut self, done: ActionDone) {
        let _in_decision = decision_log::reported(&done);
        let pod = &done.request.pod;
        let uid = pod.uid.clone();
        let stopped = done.outcome.pod_stopped();
        match &done.outcome {
            ActionOutcome::Killed(report) => {
                self.read_cgroupfs(false);
                let after = self.core.pod_working_set(&uid).unwrap_or(0);
                let freed = done
                    .request
                    .working_set_before
                    .unwrap_or(0)
                    .saturating_sub(after);
                if stopped {
                    tracing::info!(
                        "pod {pod} stopped after {:?} ({} processes signalled{}), {} freed",
                        report.elapsed,
                        report.terminated,
                        if report.forced { ", forced" } else { "" },
                        bytes(freed as i64)
                    );
                } else {
                    tracing::warn!(
                        "pod {pod}: processes survived force: {:?} after {:?}",
                        report.outcome,
                        report.elapsed
                    );
                }
                persist::record_freed(&mut self.saved, &uid, freed);
                self.core.state.pod_cleaned_up(&uid);
                if stopped {
                    self.core.mark_stopped(&uid);
                }
            }
            ActionOutcome::Accepted => tracing::info!(
                "eviction of {pod} accepted (grace period {}s); waiting for the kubelet",
                done.request.grace_period_seconds
            ),
            ActionOutcome::Gone => {
                tracing::info!("pod {pod} was already gone");
                persist::record_freed(&mut self.saved, &uid, 0);
                self.core.state.pod_cleaned_up(&uid);
            }
            ActionOutcome::Refused(reason) => {
                self.action_failures += 1;
                tracing::warn!(
                    "{reason}; passed over for {:?}, the next candidate goes at once",
                    self.core
                        .config()
                        .monitor
                        .eviction_interval
                        .max(super::refusals::MIN_HOLD)
                );
                self.core.eviction_refused(&uid, BootClock.now());
            }
            ActionOutcome::Failed(reason) | ActionOutcome::TimedOut(reason) => {
                self.action_failures += 1;
                tracing::warn!(
                    "evicting {pod} failed: {reason}; the next decision is not held back"
                );
                self.core.state.pod_cleaned_up(&uid);
            }
        }
        self.decisions.settle(&uid, done.outcome.describe());
        self.writer.save(&self.saved, Instant::now());
    }

    /// Brings the metrics up to date and publishes a snapshot for readers.
    fn update_metrics(&mut self, eviction: Option<&Eviction>, trigger_ns: Option<u64>) {
        let m = &mut self.metrics;
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
        m.pod_read_failures = self.core.read_failures();
        m.action_failures = self.action_failures;
        m.checkpoint_write_failures = self.writer.failures_total();
        m.checkpoint_writable = self.writer.health(Instant::now()) == CheckpointHealth::Writable;
        if let Some(eviction) = eviction {
            *m.evictions_by_signal
                .entry(eviction.signal.as_str())
                .or_default() += 1;
            if let Some(ts) = trigger_ns {
                m.decision_latency_seconds
                    .observe(monotonic_ns().saturating_sub(ts) as f64 / 1e9);
            }
        }
        self.publish();
    }

    /// Publishes what readers see; never waits for them.
    fn publish(&self) {
        let description = self.source.describe(self.args.poll_interval);
        let snapshot = Snapshot {
            metrics: self.metrics.clone(),
            readiness: Readiness {
                source: Some(description.clone()),
                pods: match &self.pod_source_down {
                    None => Ok(self.core.pod_count()),
                    Some(why) => Err(why.clone()),
                },
                checkpoint: Some(self.writer.health(Instant::now())),
            },
            ranking: DebugRanking {
                signals: publish::signals(&self.core),
                rankings: publish::rankings(&self.core),
                decisions: self.decisions.to_vec(),
                source: SourceView {
                    description,
                    events_received: self.metrics.events_received,
                    events_lost: self.metrics.events_lost,
                    events_undecodable: self.metrics.events_undecodable,
                },
            },
        };
        self.publisher.publish(snapshot);
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

    /// Adds the events seen and lost since the last call to the checkpoint's counters.
    fn save_counters(&mut self) {
        self.saved
            .count_events(self.unsaved_events, self.lost_unsaved);
        self.unsaved_events = 0;
        self.lost_unsaved = 0;
        self.writer.save(&self.saved, Instant::now());
    }

    /// Takes in what the kernel lost since the last call: counted in the metrics, and after
    /// records were lost to a full ring (any of them may have been a cgroup's creation or
    /// removal, or a working-set change) the hierarchy is rescanned and every number read
    /// anew, so no cgroup stays unknown and no estimate stays wrong until the next resync.
    fn take_losses(&mut self) {
        let Some(kernel) = self.source.kernel.as_mut() else {
            return;
        };
        let new = kernel.new_drops();
        self.metrics.events_lost += new.ring_full;
        self.metrics.events_undecodable += new.undecodable;
        self.metrics.cgroup_map_full += new.map_full;
        if new.map_full > 0 {
            self.resync.changes_uncounted();
            tracing::warn!(
                "{} kernel stat updates not counted: the per-cgroup map is full; those cgroups \
                 are read at each resync only",
                new.map_full
            );
        }
        if new.ring_full > 0 {
            self.lost_unsaved += new.ring_full;
            tracing::warn!(
                "{} kernel records lost (ring buffer full): rescanning cgroups and reading \
                 memory anew",
                new.ring_full
            );
            self.rediscover();
        }
    }

    /// Every few resyncs, deletes the kernel's aggregates of cgroups that no longer exist
    /// (the kernel keeps most out itself; this catches the rest), so the map never fills
    /// with dead cgroups.
    fn sweep_kernel_map(&mut self) {
        let Some(kernel) = self.source.memory_kernel() else {
            return;
        };
        self.resyncs_since_sweep += 1;
        if self.resyncs_since_sweep < SWEEP_EVERY_RESYNCS {
            return;
        }
        self.resyncs_since_sweep = 0;
        match kernel.sweep_stale(&self.hierarchy.mount) {
            Ok((_, 0)) => {}
            Ok((_, deleted)) => {
                tracing::debug!(
                    "removed {deleted} aggregates of removed cgroups from the kernel map"
                )
            }
            Err(e) => tracing::warn!("sweeping the kernel's per-cgroup map: {e}"),
        }
    }
}

async fn next_pressure(psi: &mut Option<PsiWake>) -> crate::source::pressure::PressureSignal {
    match psi {
        Some(psi) => psi.next().await,
        None => std::future::pending().await,
    }
}

async fn next_change(
    watcher: &mut Option<PodSource>,
) -> Result<LoadedPods, crate::pods::PodSourceError> {
    match watcher {
        Some(watcher) => watcher.next_change().await,
        None => std::future::pending().await,
    }
}

/// A decision's grace period as a duration (negative: none).
fn grace_secs(seconds: i64) -> u64 {
    u64::try_from(seconds).unwrap_or(0)
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
