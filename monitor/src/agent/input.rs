//! The loop's inputs and the steps each one runs. [`super::run`] only waits for the next
//! input; [`Agent::handle`] carries it out and ends the turn, the one entry the loop runs and
//! `loop_policy_tests` drives, so a step added to an input is tested with it.
use std::{io, time::Duration};

use tokio::time::Instant;

use super::{components::Agent, event_source::Batch, reload::Trigger, wake_levels::REARM_ROUNDS};
use crate::action::actuator::ActionDone;
use crate::{
    config_file::LoadedConfig,
    engine::{
        instant::Clock as _,
        reclaim_ladder::{Step, StepResult},
        shadow::KubeletEviction,
    },
    pods::{Loaded, NodePod, PodSourceError},
    source::pressure::PressureSignal,
    system_clock::{BootClock, monotonic_ns},
};

/// How long to wait before opening the pod source again after it failed.
const POD_SOURCE_RETRY: Duration = Duration::from_secs(5);

/// What the loop waited for.
pub(super) enum Input {
    /// Kernel records were read into the batch.
    Records,
    /// The kernel's ring buffer could not be read.
    RingFailed(io::Error),
    /// The stat records that did not wake the agent are due to be read.
    WaitingRecords,
    /// PSI reported memory stalls (while polling).
    Pressure(PressureSignal),
    /// The timed resync (the poll, when polling).
    Resync,
    /// The paced read's next chunk is due.
    ResyncChunk,
    /// The guard's read is due while the stat programs are detached.
    Guard,
    /// The pod source handed out a new pod set.
    Pods(Loaded<NodePod>),
    /// The pod source failed: it is closed.
    PodSourceFailed(PodSourceError),
    /// The pod source was opened again, with its first pod set.
    PodSourceReopened(Loaded<NodePod>),
    /// Opening the pod source again failed.
    PodSourceStillDown(anyhow::Error),
    /// An action finished (`None`: its task failed).
    ActionDone(Option<ActionDone>),
    /// A reclaim step (`--reclaim-first`) ended, with what it took.
    ReclaimStepDone(Step, StepResult),
    /// The wait after an eviction ended: decide again.
    DecideAgain,
    /// A checkpoint write that failed is due to be retried.
    CheckpointRetry,
    /// The status line is due (`--status-interval`).
    Status,
    /// The loop's turn at least every second, idle or not.
    Turn,
    /// The kubelet evicted a pod on this node (a dry run with --kube: its Events are watched
    /// for the shadow scorecard).
    KubeletEvicted(KubeletEviction),
    /// The configuration files changed.
    Config(anyhow::Result<LoadedConfig>),
    /// SIGHUP: the configuration read again and the pods listed anew.
    Hangup,
}

/// What the loop does with its pod source after an input.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub(super) enum Next {
    Go,
    /// Close the pod source (if open) and open it again at this time.
    ReopenPodSource(Instant),
}

impl Agent {
    /// Carries out one input, then what follows every input ([`Self::end_turn`]). `batch`
    /// holds the kernel records read for [`Input::Records`]; it is reused across turns.
    pub(super) fn handle(&mut self, input: Input, batch: &mut Batch) -> Next {
        let next = self.step(input, batch);
        self.end_turn(batch);
        next
    }

    fn step(&mut self, input: Input, batch: &mut Batch) -> Next {
        match input {
            Input::Records => self.apply_batch(batch),
            Input::RingFailed(e) => {
                tracing::warn!("reading the kernel ring buffer: {e}; reading cgroupfs instead");
                self.read_unprompted();
                self.evaluate(None);
            }
            Input::WaitingRecords => {
                self.read_waiting(batch);
                self.take_losses();
            }
            Input::Pressure(signal) => {
                tracing::debug!("memory pressure {signal:?}: reading cgroupfs now");
                self.read_unprompted();
                self.evaluate(None);
            }
            Input::Resync => {
                self.check_own_memory();
                self.refresh_capacity();
                self.resync_now();
                self.sweep_kernel_map();
                self.take_losses();
                self.evaluate(None);
                self.move_stat_gate();
                self.save_counters();
            }
            Input::ResyncChunk => self.read_resync_chunk(),
            Input::Guard => {
                self.read_guard();
                self.move_stat_gate();
                self.evaluate(None);
            }
            Input::Pods(loaded) => {
                self.take_pods(loaded);
                self.evaluate(None);
            }
            Input::PodSourceFailed(e) => {
                tracing::error!(
                    "pod source failed: {e}; deciding on the {} pods known, opening it again \
                     in {POD_SOURCE_RETRY:?}",
                    self.pods.handed_out.len()
                );
                self.pods.source_down = Some(format!("pod source failed: {e}"));
                return Next::ReopenPodSource(Instant::now() + POD_SOURCE_RETRY);
            }
            Input::PodSourceReopened(loaded) => {
                tracing::info!("pod source open again");
                self.pods.source_down = None;
                self.take_pods(loaded);
                self.evaluate(None);
            }
            Input::PodSourceStillDown(e) => {
                tracing::warn!("opening the pod source again: {e:#}");
                return Next::ReopenPodSource(Instant::now() + POD_SOURCE_RETRY);
            }
            Input::ActionDone(done) => {
                if let Some(done) = done {
                    self.step_done(done);
                }
                self.evaluate(None);
            }
            Input::ReclaimStepDone(step, result) => {
                self.reclaim_step_done(&step, result, BootClock.now());
                self.read_unprompted();
                self.evaluate(None);
            }
            Input::DecideAgain => {
                self.actions.decide_again = None;
                self.evaluate(None);
            }
            Input::CheckpointRetry => self.checkpoint.retry(Instant::now()),
            Input::Status => self.print_status(),
            Input::Turn => {
                // The shadow scorecard's outcomes whose window is over become final.
                self.score_time();
                // Refreshes what readers see (the checkpoint's failing time, the heartbeat).
                self.update_metrics(None, None);
                // A held brake's bound passes on a quiet node too.
                self.step_brake(monotonic_ns());
            }
            Input::KubeletEvicted(eviction) => {
                self.score_kubelet_eviction(eviction);
                self.update_metrics(None, None);
            }
            Input::Config(change) => self.apply_config(Trigger::FilesChanged, change),
            Input::Hangup => {
                self.reload_config();
                // The pods are listed anew: the source is opened again at once.
                tracing::info!("SIGHUP: listing the pods again");
                return Next::ReopenPodSource(Instant::now());
            }
        }
        Next::Go
    }

    /// What follows every input: the records held during a read are applied, the kernel's
    /// wake-up levels are set again, and the heartbeat beats.
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
