//! The agent's event loop: the thin shell around
//! [`AgentCore`](crate::engine::eviction_machine::AgentCore) that reads the machine and acts.
//!
//! Inputs are kernel ring-buffer batches, cgroupfs reads (every poll interval when polling,
//! every resync interval with eBPF, and at once when PSI reports memory stalls while
//! polling), manifest changes and finished kills. After each input
//! that can move a signal or the ranking, the decision step runs at once; there is no
//! decision timer. Kernel records wake the agent only once working sets may have grown by
//! the distance to the nearest memory threshold (see the engine's `headroom`); the rest
//! wait in the ring and are read every second. The kernel's fork counter wakes it likewise
//! once enough tasks were created to meet a pid threshold, and `pid.available` is read then.
//! A change of the configuration files, like SIGHUP, puts the new configuration in force.
use std::{process::ExitCode, time::Duration};

use anyhow::{Context as _, bail};
use tokio::{
    signal::unix::{SignalKind, signal},
    time::{Instant, MissedTickBehavior, interval},
};

use super::{
    args::AgentArgs,
    components::Agent,
    input::{Input, Next},
    run_options::{PodSourceOptions, RunOptions},
};
use crate::{
    action::{KubeEvictor, reclaim_first::ReclaimFirst},
    config_file::LoadedConfig,
    config_watch::ConfigWatcher,
    engine::{
        reclaim_ladder::{Step, StepResult},
        shadow::KubeletEviction,
    },
    own_process::{realtime, self_protect},
    pods::{
        KubeWatcher, Loaded, ManifestWatcher, NodePod, PodSource, kube_watch,
        kubelet_evictions::KubeletEvictions,
        manifest_dir::{self, MANIFEST_DIR_HELP},
    },
    source::psi_wake::PsiWake,
    system_clock::monotonic_ns,
};

/// How often stat records the kernel sent without a wake-up (far from every threshold) are
/// read, so rankings, metrics and status stay this fresh.
const WAITING_RECORDS_READ_EVERY: Duration = Duration::from_secs(1);
/// The event loop turns at least this often, idle or not, so `/healthz` can tell a stuck
/// loop from a quiet node, and what readers see stays this fresh.
const TURN_AT_LEAST_EVERY: Duration = Duration::from_secs(1);

/// Runs the agent until SIGINT, SIGTERM or `--duration`.
pub(crate) fn run(args: AgentArgs) -> anyhow::Result<ExitCode> {
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
        // Before the configuration is first read: no change between the two is lost.
        let config_watch = ConfigWatcher::start(&args.config_sources());
        let options = RunOptions::split(&args);
        let (watcher, first, evictor) = open_pods(&options.pod_source).await?;
        let kubelet_evictions = watch_kubelet_evictions(&args).await;
        let mut agent = Agent::start(&args, options, evictor).await?;
        agent.take_pods(first);
        agent.restore_stopped_pods();
        agent.resume_pending_eviction();
        // Before the first snapshot is published: `/metrics` has the charge from its start.
        agent.check_own_memory();
        agent.evaluate(None);
        agent.run(watcher, config_watch, kubelet_evictions).await
    })
}

/// A dry run with --kube watches the kubelet's evictions on its node for the shadow
/// scorecard. A watch that cannot start costs the scorecard its kubelet half, not the agent
/// its run: said, and the agent goes on.
async fn watch_kubelet_evictions(args: &AgentArgs) -> Option<KubeletEvictions> {
    let node = args
        .node_name
        .as_deref()
        .filter(|_| args.dry_run && args.kube)?;
    let started = async {
        let config = kube_watch::api_config(args.kubeconfig.as_deref()).await?;
        anyhow::Ok(KubeletEvictions::start(config, node)?)
    };
    match started.await {
        Ok(watch) => Some(watch),
        Err(e) => {
            tracing::warn!(
                "the shadow scorecard will not see the kubelet's evictions: watching its \
                 Events: {e:#}"
            );
            None
        }
    }
}

/// The kubelet's next eviction, or never without the watch.
async fn next_kubelet_eviction(watch: &mut Option<KubeletEvictions>) -> KubeletEviction {
    match watch {
        Some(watch) => watch.next().await,
        None => std::future::pending().await,
    }
}

/// The pod source the flags name and its first pod set; with --kube also the evictor.
async fn open_pods(
    options: &PodSourceOptions,
) -> anyhow::Result<(PodSource, Loaded<NodePod>, Option<KubeEvictor>)> {
    if options.kube {
        let node = options
            .node_name
            .as_deref()
            .context("--kube needs --node-name or NODE_NAME")?;
        let config = kube_watch::api_config(options.kubeconfig.as_deref()).await?;
        let (watcher, first) = KubeWatcher::start(config.clone(), node).await?;
        tracing::info!(
            "{} pods on node {node} from the Kubernetes API",
            first.pods.len()
        );
        let evictor = KubeEvictor::new(config).context("Kubernetes API client for evictions")?;
        return Ok((PodSource::Kube(watcher), first, Some(evictor)));
    }
    let Some(pods_dir) = &options.pods_dir else {
        bail!(
            "the agent needs the pods on this node: --pods DIR or --kube (see `monitor --help`); \
             {MANIFEST_DIR_HELP}"
        );
    };
    manifest_dir::check(pods_dir)?;
    let (watcher, first) = ManifestWatcher::start(pods_dir)
        .with_context(|| format!("watching pod manifests in {}", pods_dir.display()))?;
    Ok((PodSource::Dir(watcher), first, None))
}

impl Agent {
    pub(super) async fn run(
        mut self,
        watcher: PodSource,
        mut config_watch: Option<ConfigWatcher>,
        mut kubelet_evictions: Option<KubeletEvictions>,
    ) -> anyhow::Result<ExitCode> {
        let read_every = if self.source.has_stat_programs() {
            self.timers.resync_interval
        } else {
            self.timers.poll_interval
        };
        let mut reads = interval(read_every);
        reads.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut status = interval(self.timers.status_interval.max(Duration::from_millis(100)));
        let show_status = !self.timers.status_interval.is_zero();
        let stop_at = self.timers.stop_after.map(|d| Instant::now() + d);
        // Registered once, before the loop: a signal that arrives while a turn is busy waits
        // in its stream. A `ctrl_c()` future made anew at each turn missed such a SIGINT.
        let mut sigint = signal(SignalKind::interrupt())?;
        let mut sigterm = signal(SignalKind::terminate())?;
        let mut sighup = signal(SignalKind::hangup())?;
        // Sized for a full ring at start: no allocation when records pour in under pressure.
        let mut batch = match self.source.kernel {
            None => Vec::new(),
            Some(_) => Vec::with_capacity(monitor_common::MAX_RECORDS),
        };
        let mut waiting = interval(WAITING_RECORDS_READ_EVERY);
        waiting.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let wakes_on_growth = self.source.has_stat_programs();
        let mut psi = self.install_psi_wake();
        // None while the pod source is being opened again after it failed.
        let mut watcher = Some(watcher);
        let mut reopen_at = None;
        let mut turn = interval(TURN_AT_LEAST_EVERY);
        turn.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // Records held while start-up read cgroupfs.
        self.read_waiting(&mut batch);
        self.move_stat_gate();
        loop {
            let guard_at = self.stats_detached().then(|| self.guard_deadline());
            let decide_again = self.actions.decide_again;
            let input = tokio::select! {
                read = self.source.next_batch(&mut batch) => match read {
                    Ok(()) => Input::Records,
                    Err(e) => Input::RingFailed(e),
                },
                _ = waiting.tick(), if wakes_on_growth => Input::WaitingRecords,
                signal = next_pressure(&mut psi) => Input::Pressure(signal),
                _ = reads.tick() => Input::Resync,
                () = sleep_until(self.resync.paced_due()), if self.resync.paced.is_some() => {
                    Input::ResyncChunk
                }
                () = sleep_until(guard_at), if guard_at.is_some() => Input::Guard,
                change = next_change(&mut watcher) => match change {
                    Ok(loaded) => Input::Pods(loaded),
                    Err(e) => Input::PodSourceFailed(e),
                },
                () = sleep_until(reopen_at), if reopen_at.is_some() => {
                    reopen_at = None;
                    match open_pods(&self.pod_source).await {
                        Ok((reopened, loaded, _)) => {
                            watcher = Some(reopened);
                            Input::PodSourceReopened(loaded)
                        }
                        Err(e) => Input::PodSourceStillDown(e),
                    }
                }
                done = self.actions.next_done(), if self.actions.running() => {
                    Input::ActionDone(done)
                }
                (step, result) = next_reclaim_step(&mut self.reclaim_first) => {
                    Input::ReclaimStepDone(step, result)
                }
                () = sleep_until(decide_again), if decide_again.is_some() => Input::DecideAgain,
                () = sleep_until(self.checkpoint.retry_at()), if self.checkpoint.retry_at().is_some() => {
                    Input::CheckpointRetry
                }
                _ = status.tick(), if show_status => Input::Status,
                _ = turn.tick() => Input::Turn,
                change = next_config(&mut config_watch) => Input::Config(change),
                eviction = next_kubelet_eviction(&mut kubelet_evictions) => {
                    Input::KubeletEvicted(eviction)
                }
                _ = sighup.recv() => Input::Hangup,
                _ = sigint.recv() => break,
                _ = sigterm.recv() => break,
                () = sleep_until(stop_at) => break,
            };
            if let Next::ReopenPodSource(at) = self.handle(input, &mut batch) {
                watcher = None;
                reopen_at = Some(at);
            }
        }
        self.save_counters();
        Ok(ExitCode::SUCCESS)
    }

    /// When the guard reads the node's memory next, while the stat programs are detached.
    fn guard_deadline(&self) -> Instant {
        let wait = self
            .stat_programs
            .guard_due_ns()
            .saturating_sub(monotonic_ns());
        Instant::now() + Duration::from_nanos(wait)
    }
}

async fn next_pressure(psi: &mut Option<PsiWake>) -> crate::source::pressure::PressureSignal {
    match psi {
        Some(psi) => psi.next().await,
        None => std::future::pending().await,
    }
}

async fn next_reclaim_step(reclaim: &mut Option<ReclaimFirst>) -> (Step, StepResult) {
    match reclaim {
        Some(reclaim) if reclaim.running() => reclaim.next_done().await,
        _ => std::future::pending().await,
    }
}

async fn next_change(
    watcher: &mut Option<PodSource>,
) -> Result<Loaded<NodePod>, crate::pods::PodSourceError> {
    match watcher {
        Some(watcher) => watcher.next_change().await,
        None => std::future::pending().await,
    }
}

async fn next_config(watch: &mut Option<ConfigWatcher>) -> anyhow::Result<LoadedConfig> {
    match watch {
        Some(watch) => watch.next_change().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
