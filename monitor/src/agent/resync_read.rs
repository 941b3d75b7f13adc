//! The timed resync's read. With the stat records keeping every working set current, the
//! node is read at once (the signals) and the pods a chunk at a time between the loop's other
//! inputs ([`PacedRead`]), then, every few resyncs, the hierarchy walked for the kernel map's
//! sweep the same way: a crossing is decided on after one chunk at most, and the read leaves
//! most of a CPU limit to the records and the decision. Polling, every number is read at
//! once: the read is where the signals come from.
use std::time::Duration;

use tokio::time::Instant;

use super::{
    components::Agent,
    resync::{MapSweep, PacedRead},
};
use crate::{
    cgroupfs::paths::CgroupWalk,
    engine::{
        eviction_machine::ReadScope,
        ids::CgroupRel,
        pod_facts::PodRef,
        resync::{CHUNK_DIRS, pause_after},
    },
    node::machine_reader::{observe_pid_available, read_node, read_pods},
    system_clock::thread_cpu_ns,
};

/// What a turn of the paced read did.
enum Step {
    /// Read a chunk of pods, or walked a part of the hierarchy; more is to come.
    More,
    /// Read the last pods: the read of every pod ends.
    PodsRead {
        scope: ReadScope,
        marked: Option<Vec<(PodRef, CgroupRel)>>,
    },
    /// Walked the last directories: the sweep deletes what it found gone.
    Walked(MapSweep),
}

impl Agent {
    /// Reads the node's and the kubepods cgroup's working sets into the core; false when a
    /// read failed (the last values stand).
    pub(super) fn read_node(&mut self) -> bool {
        read_node(
            self.reader.as_ref(),
            &mut self.core,
            self.kubepods.rel.as_str(),
            &mut self.read_failures,
        )
    }

    /// A timed resync: every number read now when polling; with the stat records, the node
    /// now and the pods paced. One still reading its pods when the next is due lets that one
    /// go (the records keep the numbers current meanwhile).
    pub(super) fn resync_now(&mut self) {
        if !self.source.has_stat_programs() {
            self.resync.cadence.tick(false);
            self.read_unprompted();
            return;
        }
        if self.resync.paced.is_some() {
            tracing::debug!("the last resync is still reading: this one is left out");
            return;
        }
        self.resync.cadence.tick(self.source.memory_from_kernel());
        let scope = self.resync.take_scope(false);
        // Taken before the read, so a task created or ending during it is marked again.
        let marked = self.marked_pods();
        self.read_node();
        let pods = self.core.pods_to_read(scope);
        self.resync.paced = Some(PacedRead::new(pods, scope, marked));
    }

    /// What the node has after a kill, before the next decision: polling, every number is
    /// read, as at each poll; with the stat records keeping every other pod's working set
    /// current, the node, the kubepods cgroup, `pid.available` and the victim's pod only. A
    /// read of every pod here held the loop for 0.4 s of CPU at 10,000 pods after each
    /// eviction (4 s under a 100m CPU limit), in which a crossing waited.
    pub(super) fn read_after_kill(&mut self, uid: &str) {
        if !self.source.memory_from_kernel() {
            self.read_cgroupfs(false);
            return;
        }
        self.read_node();
        let victim: Vec<(PodRef, CgroupRel)> = self
            .core
            .pod(uid)
            .and_then(|row| Some((row.facts.pod.clone(), row.cgroup.as_ref()?.rel.clone())))
            .into_iter()
            .collect();
        self.visibility.metrics.pod_process_counts += read_pods(
            self.reader.as_ref(),
            &mut self.core,
            &victim,
            &mut self.read_failures,
            &mut || {},
        );
        observe_pid_available(self.reader.as_ref(), &mut self.core);
    }

    /// Every few resyncs, deletes the kernel's aggregates of cgroups that no longer exist
    /// (the kernel keeps most out itself; this catches the rest), so the map never fills
    /// with dead cgroups. The walk it needs is a part of the paced read under way.
    pub(super) fn sweep_kernel_map(&mut self) {
        let Some(kernel) = self.source.memory_kernel() else {
            return;
        };
        if !self.resync.cadence.sweep_due() {
            return;
        }
        // No paced read to walk beside, or a sweep already under way.
        if self.resync.paced.as_ref().is_none_or(|p| p.sweep.is_some()) {
            return;
        }
        self.resync.cadence.sweep_started();
        // The ids are listed before the walk begins, so a cgroup created meanwhile is never
        // taken for a dead one.
        let tracked = match kernel.tracked_cgroups() {
            Ok(tracked) => tracked,
            Err(e) => {
                tracing::warn!("sweeping the kernel's per-cgroup map: {e}");
                return;
            }
        };
        match CgroupWalk::start(&self.hierarchy.mount) {
            Ok(walk) => {
                if let Some(paced) = self.resync.paced.as_mut() {
                    paced.sweep = Some(MapSweep { tracked, walk });
                }
            }
            Err(e) => tracing::warn!("sweeping the kernel's per-cgroup map: walking it: {e}"),
        }
    }

    /// Takes the paced read's next step (a chunk of pods, then a part of the sweep's walk)
    /// and sets when the one after it is due; at the end of each part, what it ends with.
    pub(super) fn read_resync_chunk(&mut self) {
        let Some(paced) = self.resync.paced.as_mut() else {
            return;
        };
        let started = thread_cpu_ns();
        let step = if !paced.pods_read() {
            self.visibility.metrics.pod_process_counts += read_pods(
                self.reader.as_ref(),
                &mut self.core,
                paced.next_chunk(),
                &mut self.read_failures,
                &mut || {},
            );
            if paced.pods_read() {
                Step::PodsRead {
                    scope: paced.scope,
                    marked: paced.marked.take(),
                }
            } else {
                Step::More
            }
        } else if let Some(sweep) = paced.sweep.as_mut() {
            match sweep.walk.step(CHUNK_DIRS) {
                Ok(false) => Step::More,
                Ok(true) => Step::Walked(paced.sweep.take().expect("the sweep under way")),
                Err(e) => {
                    tracing::warn!("sweeping the kernel's per-cgroup map: walking it: {e}");
                    paced.sweep = None;
                    Step::More
                }
            }
        } else {
            Step::More
        };
        let took = Duration::from_nanos(thread_cpu_ns().saturating_sub(started));
        paced.due = Instant::now() + pause_after(took);
        if paced.pods_read() && paced.sweep.is_none() {
            self.resync.paced = None;
        }
        match step {
            Step::More => {}
            Step::PodsRead { scope, marked } => self.pods_read(scope, marked),
            Step::Walked(sweep) => self.remove_stale(sweep),
        }
    }

    /// The end of a paced read of the pods, as of a read of every pod: `pid.available`, the
    /// processes of the pods whose tasks changed, the evicted pods' state, a decision step.
    fn pods_read(&mut self, scope: ReadScope, marked: Option<Vec<(PodRef, CgroupRel)>>) {
        observe_pid_available(self.reader.as_ref(), &mut self.core);
        if scope == ReadScope::Changed && self.core.counts_processes() {
            let pods = marked.unwrap_or_else(|| self.core.pods_to_read(ReadScope::All));
            self.recount(pods);
        }
        self.revive_restarted_pods();
        self.settle_evictions();
        self.evaluate(None);
    }

    /// The end of the sweep's walk: the aggregates of the cgroups it did not find go.
    fn remove_stale(&mut self, sweep: MapSweep) {
        let Some(kernel) = self.source.kernel.as_mut() else {
            return;
        };
        match kernel.remove_stale(sweep.tracked, sweep.walk.paths()) {
            Ok(0) => {}
            Ok(deleted) => {
                tracing::debug!(
                    "removed {deleted} aggregates of removed cgroups from the kernel map"
                );
            }
            Err(e) => tracing::warn!("sweeping the kernel's per-cgroup map: {e}"),
        }
    }
}
