//! The agent's event loop: the thin shell around
//! [`AgentCore`](crate::engine::eviction_machine::AgentCore) that reads the machine and acts.
//!
//! Inputs are kernel ring-buffer batches, cgroupfs reads (every poll interval when polling,
//! every resync interval with eBPF, and at once when PSI reports memory stalls while
//! polling), manifest changes and finished kills. After each input
//! that can move a signal or the ranking, the decision step runs at once; there is no
//! decision timer. Kernel records wake the agent only once working sets may have grown by
//! the distance to the nearest memory threshold (see [`crate::engine::headroom`]); the rest
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
    args::AgentArgs, components::Agent, event_source::Batch, psi_wake::PsiWake, realtime,
    reload::Trigger, self_protect,
};
use crate::{
    action::KubeEvictor,
    config_file::LoadedConfig,
    config_watch::ConfigWatcher,
    pods::{
        KubeWatcher, Loaded, ManifestWatcher, NodePod, PodSource, kube_watch,
        manifest_dir::{self, MANIFEST_DIR_HELP},
    },
    system_clock::monotonic_ns,
};

/// How often stat records the kernel sent without a wake-up (far from every threshold) are
/// read, so rankings, metrics and status stay this fresh.
const WAITING_RECORDS_READ_EVERY: Duration = Duration::from_secs(1);
/// The event loop turns at least this often, idle or not, so `/healthz` can tell a stuck
/// loop from a quiet node, and what readers see stays this fresh.
const TURN_AT_LEAST_EVERY: Duration = Duration::from_secs(1);
/// How many times in a row the waiting records are read because the lowered wake-up level
/// was already reached, before the loop takes its other inputs again.
pub(super) const REARM_ROUNDS: usize = 8;
/// How long to wait before opening the pod source again after it failed.
const POD_SOURCE_RETRY: Duration = Duration::from_secs(5);

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
        let (watcher, first, evictor) = open_pods(&args).await?;
        let mut agent = Agent::start(args, evictor).await?;
        agent.take_pods(first);
        agent.restore_stopped_pods();
        agent.resume_pending_eviction();
        // Before the first snapshot is published: `/metrics` has the charge from its start.
        agent.check_own_memory();
        agent.evaluate(None);
        agent.run(watcher, config_watch).await
    })
}

/// The pod source the flags name and its first pod set; with --kube also the evictor.
async fn open_pods(
    args: &AgentArgs,
) -> anyhow::Result<(PodSource, Loaded<NodePod>, Option<KubeEvictor>)> {
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
    ) -> anyhow::Result<ExitCode> {
        let read_every = if self.source.has_stat_programs() {
            self.args.resync_interval
        } else {
            self.args.poll_interval
        };
        let mut reads = interval(read_every);
        reads.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut status = interval(self.args.status_interval.max(Duration::from_millis(100)));
        let show_status = !self.args.status_interval.is_zero();
        let stop_at = self.args.duration.map(|d| Instant::now() + d);
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
                    self.check_own_memory();
                    self.refresh_capacity();
                    self.resync_now();
                    self.sweep_kernel_map();
                    self.take_losses();
                    self.evaluate(None);
                    self.move_stat_gate();
                    self.save_counters();
                }
                () = sleep_until(self.resync.paced_due()), if self.resync.paced.is_some() => {
                    self.read_resync_chunk();
                }
                () = sleep_until(guard_at), if guard_at.is_some() => {
                    self.read_guard();
                    self.move_stat_gate();
                    self.evaluate(None);
                }
                change = next_change(&mut watcher) => match change {
                    Ok(loaded) => {
                        self.take_pods(loaded);
                        self.evaluate(None);
                    }
                    Err(e) => {
                        tracing::error!(
                            "pod source failed: {e}; deciding on the {} pods known, opening it \
                             again in {POD_SOURCE_RETRY:?}",
                            self.pods.handed_out.len()
                        );
                        self.pods.source_down = Some(format!("pod source failed: {e}"));
                        watcher = None;
                        reopen_at = Some(Instant::now() + POD_SOURCE_RETRY);
                    }
                },
                () = sleep_until(reopen_at), if reopen_at.is_some() => {
                    reopen_at = None;
                    match open_pods(&self.args).await {
                        Ok((reopened, loaded, _)) => {
                            tracing::info!("pod source open again");
                            self.pods.source_down = None;
                            watcher = Some(reopened);
                            self.take_pods(loaded);
                            self.evaluate(None);
                        }
                        Err(e) => {
                            tracing::warn!("opening the pod source again: {e:#}");
                            reopen_at = Some(Instant::now() + POD_SOURCE_RETRY);
                        }
                    }
                }
                done = self.actions.next_done(), if self.actions.running() => {
                    if let Some(done) = done {
                        self.step_done(done);
                    }
                    self.evaluate(None);
                }
                () = sleep_until(decide_again), if decide_again.is_some() => {
                    self.actions.decide_again = None;
                    self.evaluate(None);
                }
                () = sleep_until(self.checkpoint.retry_at()), if self.checkpoint.retry_at().is_some() => {
                    self.checkpoint.retry(Instant::now());
                }
                _ = status.tick(), if show_status => self.print_status(),
                // Refreshes what readers see (the checkpoint's failing time, the heartbeat).
                _ = turn.tick() => {
                    self.update_metrics(None, None);
                    // A held brake's bound passes on a quiet node too.
                    self.step_brake(monotonic_ns());
                }
                _ = sigint.recv() => break,
                _ = sigterm.recv() => break,
                change = next_config(&mut config_watch) => {
                    self.apply_config(Trigger::FilesChanged, change);
                }
                _ = sighup.recv() => {
                    self.reload_config();
                    // The pods are listed anew: the source is opened again at once.
                    tracing::info!("SIGHUP: listing the pods again");
                    watcher = None;
                    reopen_at = Some(Instant::now());
                }
                () = sleep_until(stop_at) => break,
            }
            self.end_turn(&mut batch);
        }
        self.save_counters();
        Ok(ExitCode::SUCCESS)
    }

    /// What follows every input: the records held during a read are applied, the kernel's
    /// wake-up levels are set again, and the heartbeat beats.
    /// When the guard reads the node's memory next, while the stat programs are detached.
    fn guard_deadline(&self) -> Instant {
        let wait = self
            .stat_programs
            .guard_due_ns()
            .saturating_sub(monotonic_ns());
        Instant::now() + Duration::from_nanos(wait)
    }

    pub(super) fn end_turn(&mut self, batch: &mut Batch) {
        if !self.intake.held.is_empty() {
            self.read_waiting(batch);
        }
        // Every input can move the signals, and with them the growth that must wake us.
        // Bounded: under a flood of records the loop must still get to signals and
        // finished actions; what is left is read at the next wake-up or tick.
        for _ in 0..REARM_ROUNDS {
            if !self.rearm_wake() {
                break;
            }
            self.read_waiting(batch);
        }
        if self.rearm_fork_wake() {
            self.read_pids_now(None);
            self.rearm_fork_wake();
        }
        let now = monotonic_ns();
        self.stat_programs.observe(now, self.core.memory_headroom());
        self.visibility.publisher.heartbeat.beat(now);
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
