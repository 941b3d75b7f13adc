//! What the agent takes in: kernel records, the pod set and cgroupfs reads, applied to the
//! core's working sets and rankings; and the kernel's wake-up level, set after each input.
use std::collections::HashSet;

use super::{
    components::Agent,
    event_source::{Batch, KernelEvents},
    wake_levels::{ForkArming, memory_wake_after},
};
use crate::{
    engine::{
        eviction_machine::ReadScope,
        ids::CgroupRel,
        pod_facts::{PodFacts, PodRef},
        rank_report::left_out_lines,
        working_set::StatChange,
    },
    node::machine_reader::{observe_pid_available, read_all, recount_processes},
    pods::{Loaded, NodePod, PodCgroup, find_cgroup, node_pod::split_by_standing},
    source::psi_wake::PsiWake,
    source::{ebpf::TaskCgroups, event::KernelEvent},
};

/// Most records held in the agent while it reads cgroupfs, four ring-fulls: a full read at
/// 10,000 pods takes a few hundred milliseconds, and the kernel sends about 50,000 records a
/// second when a tenth of them churn. Beyond it the rest wait in the ring.
const HELD_RECORDS_MAX: usize = 4 * monitor_common::MAX_RECORDS;

/// What a long cgroupfs read runs between its chunks: the kernel's waiting records taken into
/// `held` (up to [`HELD_RECORDS_MAX`]), so the ring does not overflow meanwhile.
fn holding<'a>(
    mut kernel: Option<&'a mut (dyn KernelEvents + 'static)>,
    held: &'a mut Batch,
) -> impl FnMut() + 'a {
    move || {
        if let Some(kernel) = kernel.as_deref_mut() {
            kernel.hold_pending(held, HELD_RECORDS_MAX);
        }
    }
}

impl Agent {
    pub(super) fn apply_batch(&mut self, batch: &mut Batch) {
        let newest = self.apply_events(batch);
        self.evaluate(newest);
    }

    /// PSI triggers that make a polling agent read at once when memory stalls; none with the
    /// stat programs, whose records already wake it.
    pub(super) fn install_psi_wake(&self) -> Option<PsiWake> {
        if self.source.has_stat_programs() || self.intake_options.psi_stall.is_zero() {
            return None;
        }
        let psi = PsiWake::install(
            &self.hierarchy,
            &self.kubepods.rel,
            self.intake_options.psi_stall,
        );
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
            self.intake_options.psi_stall,
            crate::source::pressure::WINDOW,
            files.join(", ")
        );
        Some(psi)
    }

    /// Reads and applies the records the kernel sent without waking us, after those held
    /// during a cgroupfs read.
    pub(super) fn read_waiting(&mut self, batch: &mut Batch) {
        batch.append(&mut self.intake.held);
        if let Some(kernel) = self.source.kernel.as_mut() {
            kernel.read_pending(batch);
        }
        if !batch.is_empty() {
            self.apply_batch(batch);
        }
    }

    /// Tells the kernel how far working sets may grow before a memory threshold could be met,
    /// so records below that send no wake-up. True when that growth was already counted and
    /// the waiting records must be read now. A failure to set it leaves records waking the
    /// agent as before, which costs CPU but no decision.
    pub(super) fn rearm_wake(&mut self) -> bool {
        let Some(kernel) = self.source.memory_kernel() else {
            return false;
        };
        let level = memory_wake_after(
            self.core.memory_headroom(),
            self.intake_options.step_bytes,
            self.intake_options.predicting,
        );
        kernel.wake_after_growth(level).unwrap_or_else(|e| {
            tracing::warn!("setting the kernel's wake-up level: {e}");
            false
        })
    }

    /// Arms the kernel's fork counter at the distance of `pid.available` from its nearest
    /// threshold, when that changed or the counter's record came. True when the tasks were
    /// created before it was armed: read now. A failure to arm leaves pid.available to the
    /// resync, as without the program.
    pub(super) fn rearm_fork_wake(&mut self) -> bool {
        let Some(kernel) = self.source.kernel.as_mut() else {
            return false;
        };
        // Marks of the cgroups whose tasks changed are wanted while pods rank by process
        // count; a repeat of the last request costs nothing.
        if let Err(e) = kernel.watch_task_cgroups(self.core.counts_processes()) {
            tracing::warn!("asking the kernel to mark task cgroups: {e}");
        }
        let headroom = self.core.pid_headroom();
        if !self.intake.fork_arming.rearm(headroom) {
            return false;
        }
        kernel.wake_after_forks(headroom).unwrap_or_else(|e| {
            tracing::warn!("arming the kernel's fork counter: {e}");
            false
        })
    }

    /// The kernel counted enough new tasks to meet a pid threshold: every pod is read (its
    /// process count with it) and `pid.available` too, so the decision rests on this moment
    /// and not on the last resync. `trigger_ns`: the fork record's time.
    pub(super) fn read_pids_now(&mut self, trigger_ns: Option<u64>) {
        self.read_for_pids();
        self.evaluate(trigger_ns);
    }

    /// The read of [`Self::read_pids_now`], without its decision step: `pid.available`, and
    /// the process counts of the pods the kernel marked (their working sets are the stat
    /// records'); every pod is read when the kernel cannot tell which changed.
    fn read_for_pids(&mut self) {
        // The kernel disarmed the counter when it sent its record.
        self.intake.fork_arming = ForkArming::Unknown;
        let Some(pods) = self.marked_pods() else {
            tracing::debug!("the kernel counted tasks enough to meet a pid threshold: reading all");
            self.read_unprompted();
            return;
        };
        tracing::debug!(
            "the kernel counted tasks enough to meet a pid threshold: counting the {} of {} pods \
             whose processes changed",
            pods.len(),
            self.core.pod_count()
        );
        self.recount(pods);
        observe_pid_available(self.reader.as_ref(), &mut self.core);
        self.revive_restarted_pods();
        self.settle_evictions();
    }

    /// The pods whose cgroups the kernel marked since the last take (a task created or
    /// ending there); `None` when it cannot tell, or no pid threshold wants the counts.
    pub(super) fn marked_pods(&mut self) -> Option<Vec<(PodRef, CgroupRel)>> {
        let kernel = self.source.kernel.as_mut()?;
        match kernel.take_task_cgroups() {
            TaskCgroups::Marked(ids) => self.core.pods_holding(&ids),
            TaskCgroups::Unknown => None,
        }
    }

    /// Counts the processes of `pods` anew, taking kernel records between chunks.
    pub(super) fn recount(&mut self, pods: Vec<(PodRef, CgroupRel)>) {
        let mut hold = holding(self.source.kernel.as_deref_mut(), &mut self.intake.held);
        self.visibility.metrics.pod_process_counts +=
            recount_processes(self.reader.as_ref(), &mut self.core, pods, &mut hold);
    }

    /// Applies decoded kernel records; returns the newest stat or fork record's timestamp,
    /// the trigger of the decision step that follows. A record that does not decode is
    /// counted and skipped. A fork record is taken after the others, by the read of
    /// [`Self::read_pids_now`]; the caller's decision step decides on it.
    pub(super) fn apply_events(&mut self, batch: &mut Batch) -> Option<u64> {
        let mut forks_at = None;
        let mut cgroup_created = false;
        let mut oom_kills = Vec::new();
        let received = batch.len() as u64;
        let mut stats = Vec::with_capacity(batch.len());
        for decoded in batch.drain(..) {
            let event = match decoded {
                Ok(event) => event,
                Err(e) => {
                    if !self.intake.undecodable_logged {
                        tracing::warn!(
                            "skipping a kernel record that does not decode: {e} (counted in \
                             monitor_events_undecodable_total; logged once)"
                        );
                        self.intake.undecodable_logged = true;
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
                KernelEvent::Forks { ts_ns, .. } => forks_at = Some(ts_ns),
                KernelEvent::OomKill {
                    pid, comm, ts_ns, ..
                } => oom_kills.push((pid, comm, ts_ns)),
                KernelEvent::Kswapd { .. } => {}
            }
        }
        // After the lifecycle records, so a cgroup created in this batch counts for its pod.
        let newest = self.core.apply_stats(&stats);
        for (pid, comm, ts_ns) in oom_kills {
            self.score_oom_kill(pid, comm, ts_ns);
        }
        let stopped_pod_moved = stats
            .iter()
            .any(|c| self.core.belongs_to_stopped_pod(c.cgroup_id));
        self.checkpoint.count_received(received);
        self.visibility.metrics.events_received += received;
        // A pod whose cgroup did not exist yet may have just got it; a restarted container
        // of a stopped pod gets a new cgroup, or at least moves memory in the old one.
        if cgroup_created && self.waiting_pod_has_its_cgroup() {
            let pods = std::mem::take(&mut self.pods.handed_out);
            self.apply_pods(pods);
        }
        if cgroup_created || stopped_pod_moved {
            self.revive_restarted_pods();
        }
        if forks_at.is_some() {
            self.read_for_pids();
        }
        newest.max(forks_at)
    }

    /// Takes a pod set from the source: the pods this node's kubelet runs (a manifest
    /// without `spec.nodeName` counts as this node's with `--pods`, never with `--kube`),
    /// and a log line for each reason pods are left out, when that changes.
    pub(super) fn take_pods(&mut self, loaded: Loaded<NodePod>) {
        for error in &loaded.errors {
            tracing::warn!("skipped: {error}");
        }
        let node = self.pod_source.node_name.as_deref();
        let (pods, mut left_out) = split_by_standing(loaded.pods, node, !self.pod_source.kube);
        left_out.extend(loaded.left_out);
        let lines = left_out_lines(&left_out);
        if lines != self.pods.left_out_logged {
            if lines.is_empty() && !self.pods.left_out_logged.is_empty() {
                tracing::info!("no pod left out any more");
            }
            for line in &lines {
                tracing::info!("pods {line}");
            }
            self.pods.left_out_logged = lines;
        }
        self.apply_pods(pods);
    }

    /// Replaces the pod set, finds each pod's cgroup, and reads fresh numbers.
    pub(super) fn apply_pods(&mut self, pods: Vec<NodePod>) {
        let mut entries = Vec::with_capacity(pods.len());
        for pod in &pods {
            match &pod.facts {
                Ok(facts) => {
                    let cgroup = self
                        .find_cgroup(pod, facts)
                        .map_err(|reason| {
                            tracing::warn!(
                                "{reason}; not a candidate until its cgroup appears (nothing of \
                                 it on this node to reclaim)"
                            );
                        })
                        .ok();
                    entries.push((facts.clone(), cgroup));
                }
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
        self.pods.handed_out = pods;
        self.read_cgroupfs(true);
        self.settle_evictions();
    }

    /// A read on the timer or on PSI. With kernel lifecycle events the cgroup classification
    /// is already current. Polling must rewalk the hierarchy, and nothing announces a new
    /// cgroup, so pods still waiting for theirs (the manifest came first, as a pod reaches
    /// the node before its cgroup exists) are looked for here, as on a kernel mkdir event.
    pub(super) fn read_unprompted(&mut self) {
        if self.source.kernel.is_none() {
            self.rediscover();
        } else {
            self.read_cgroupfs(false);
        }
        self.revive_restarted_pods();
        self.settle_evictions();
    }

    /// Rewalks the hierarchy and reads every number, first finding the cgroups of pods that
    /// were waiting for theirs.
    pub(super) fn rediscover(&mut self) {
        if self.waiting_pod_has_its_cgroup() {
            let pods = std::mem::take(&mut self.pods.handed_out);
            self.apply_pods(pods);
        } else {
            self.read_cgroupfs(true);
        }
    }

    /// Whether a pod known without a cgroup has one now (looked up quietly: its absence was
    /// logged when it came).
    pub(super) fn waiting_pod_has_its_cgroup(&self) -> bool {
        let waiting: HashSet<&str> = self
            .core
            .pods()
            .filter(|p| p.cgroup.is_none())
            .map(|p| p.facts.pod.uid.as_str())
            .collect();
        !waiting.is_empty()
            && self.pods.handed_out.iter().any(|pod| {
                pod.facts.as_ref().is_ok_and(|facts| {
                    waiting.contains(facts.pod.uid.as_str()) && self.find_cgroup(pod, facts).is_ok()
                })
            })
    }

    /// The cgroup of `pod`, whose facts are `facts`, or why it is not there.
    fn find_cgroup(&self, pod: &NodePod, facts: &PodFacts) -> Result<PodCgroup, String> {
        find_cgroup(
            &facts.pod.name,
            &facts.pod.uid,
            pod.qos.as_ref().copied(),
            &self.hierarchy,
            &self.kubepods,
        )
    }

    /// Reads every number from cgroupfs; `classify` also rewalks the hierarchy so every
    /// cgroup is attributed to its pod. The kernel's records are taken out of the ring as
    /// the read goes and held for the loop to apply after it (those sent before a pod's read
    /// are contained in it), so a long read does not overflow the ring and force another.
    pub(super) fn read_cgroupfs(&mut self, classify: bool) {
        let scope = self.resync.take_scope(classify);
        if scope == ReadScope::All {
            // A paced resync under way would read them again.
            self.resync.pods_read_elsewhere();
        }
        // Taken before the read, so a task created or ending during it is marked again.
        let marked = self.marked_pods();
        let mut hold = holding(self.source.kernel.as_deref_mut(), &mut self.intake.held);
        let started = std::time::Instant::now();
        self.visibility.metrics.pod_process_counts += read_all(
            self.reader.as_ref(),
            &mut self.core,
            self.kubepods.rel.as_str(),
            classify,
            scope,
            &mut self.read_failures,
            &mut hold,
        );
        drop(hold);
        if scope == ReadScope::All {
            self.stat_programs.read_all_took(started.elapsed());
        }
        // A read of the changed pods counts the processes of those whose memory moved; the
        // ones whose tasks changed without it are counted here, every pod's when the kernel
        // could not tell which.
        if scope == ReadScope::Changed && self.core.counts_processes() {
            let pods = marked.unwrap_or_else(|| self.core.pods_to_read(ReadScope::All));
            self.recount(pods);
        }
    }

    /// Takes in what the kernel lost since the last call: counted in the metrics, and after
    /// records were lost to a full ring (any of them may have been a cgroup's creation or
    /// removal, or a working-set change) the hierarchy is rescanned and every number read
    /// anew, so no cgroup stays unknown and no estimate stays wrong until the next resync.
    pub(super) fn take_losses(&mut self) {
        let Some(kernel) = self.source.kernel.as_mut() else {
            return;
        };
        let new = kernel.new_drops();
        self.visibility.metrics.events_lost += new.ring_full;
        self.visibility.metrics.events_undecodable += new.undecodable;
        self.visibility.metrics.cgroup_map_full += new.map_full;
        if new.map_full > 0 {
            self.resync.changes_uncounted();
            tracing::warn!(
                "{} kernel stat updates not counted: the per-cgroup map is full; those cgroups \
                 are read at each resync only",
                new.map_full
            );
        }
        if new.ring_full > 0 {
            self.checkpoint.count_lost(new.ring_full);
            tracing::warn!(
                "{} kernel records lost (ring buffer full): rescanning cgroups and reading \
                 memory anew",
                new.ring_full
            );
            self.rediscover();
        }
    }
}
